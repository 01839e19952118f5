#!/bin/bash
# The checks of a CPU kind this machine has never met (issue 13), as one
# script for the benchmark host of ../shared/bench-host/README.md (Intel
# Xeon, AVX-512, AMX) or any new machine: the whole test suite on its best
# SIMD target, then the regression baseline of its kind, made as the
# committed ones are (tools/perf_regress.py --update-baseline: 3 runs) but
# pinned to two cores like the CI machines. Everything lands in $RESULTS
# (default results/): lscpu.txt, ctest.txt, baseline-run.txt and
# <kind>.json, to commit as bench/baselines/<kind>.json when the machine was
# quiet (the load averages are in the file).
#
#   on the host:   RESULTS=$OUT bash bench/host/cpu-kind-check.sh
#   here:          ATTN_HOST_BUILD=build bash bench/host/cpu-kind-check.sh   (reuses a build)
#
# ATTN_HOST_BUILD names an existing build directory; without it the tree is
# built with the carried packages (.devdeps/build.sh, from
# ../shared/bench-host/fetch-debs.sh) into build-host/.
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${RESULTS:-results}
mkdir -p "$R"
start=$SECONDS
say() { echo "cpu-kind-check: $* (at $((SECONDS - start)) s)"; }

lscpu > "$R/lscpu.txt"
say "$(grep -m1 'Model name' "$R/lscpu.txt" | sed 's/  */ /g'); flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512fp16|amx_tile|amx_bf16' "$R/lscpu.txt" | sort -u | tr '\n' ' ')"

build=${ATTN_HOST_BUILD:-}
if [ -z "$build" ]; then
  build=build-host
  say "building $build with .devdeps/build.sh"
  bash .devdeps/build.sh > "$R/build.txt" 2>&1 || { tail -20 "$R/build.txt"; say "FAILED: the build"; exit 2; }
  export LD_LIBRARY_PATH=/tmp/devdeps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

say "the whole suite (ctest) on $(nproc) cores"
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure > "$R/ctest.txt" 2>&1
suite=$?
tail -3 "$R/ctest.txt"

say "the regression baseline of this CPU kind, on cores 0-1"
taskset -c 0,1 python3 tools/perf_regress.py --bench "$build/bench/attn-bench" \
  --baseline-dir "$R" --update-baseline > "$R/baseline-run.txt" 2>&1
base=$?
cat "$R/baseline-run.txt" | tail -2
say "done: suite exit $suite, baseline exit $base"
[ "$suite" -eq 0 ] && [ "$base" -eq 0 ]
