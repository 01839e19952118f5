#!/bin/bash
# The checks only an AMX CPU can make, as one short script for the benchmark
# host of ../shared/bench-host/README.md (Intel Xeon, AVX-512, AVX512-BF16,
# AMX), where device time is minutes: run the tests that compare the AMX and
# AVX512-BF16 instructions with their exact emulations (and hold both to the
# float64 bound), then time the bf16 dot-product paths against widening,
# decode against the read-bandwidth probe, and PyTorch's CPU SDPA on the
# same core. Everything lands in $RESULTS/amx-check.tgz (default results/):
# lscpu.txt, test-*.txt / .xml, bench-*.json / .txt, torch-bf16.txt,
# steps.txt.
#
# The binaries are built HERE, not on the host: there (Intel Xeon family 6
# model 207, 16 cores, g++ 13) kernels/bf16dot/bf16dot.cc alone did not
# finish compiling in 400 s even with only the AVX3 and EMU128 targets,
# most of a 15-minute device lease. Here (AMD EPYC Zen 4, 2 cores) the
# script's host part took 177 s with the emulated AMX paths.
#
#   here:          EXTRA_DEBS="nlohmann-json3-dev libcli11-dev" bash ../shared/bench-host/fetch-debs.sh
#                  cp ../shared/bench-host/torch_sdpa.py .devdeps/
#                  bash bench/host/amx-check.sh --prepare [BUILD_DIR]   (default build: a Release build
#                      of the tree; builds the binaries below and packs them with the shared
#                      libraries they need, less the C/C++ runtimes, into .devdeps/amx-check-bin.tar.xz)
#   on the host:   RESULTS=$OUT bash bench/host/amx-check.sh            (device run, carrying .devdeps)
#
# The whole suite on every target and the regression baseline of the kind
# are cpu-kind-check.sh's (longer: it builds there). Each step has its own
# time limit, and the results are packed after each, so that a slow step
# cannot take the others with it.
set -uo pipefail
cd "$(dirname "$0")/../.."

# Test binaries with the gtest filter of their cases that run a bf16
# dot-product path ("*": all of them).
tests="amx_layer_test:* bf16dot_test:* bf16dot_layer_test:* dot_path_tuning_test:*
  paged_test:Paged.AllBf16* modifiers_test:Modifiers.TheBf16* dtype_test:*"
binaries=$(for t in $tests; do printf '%s ' "${t%%:*}"; done)
packed=.devdeps/amx-check-bin.tar.xz

if [ "${1:-}" = "--prepare" ]; then
  set -e
  build=${2:-build}
  # shellcheck disable=SC2086
  cmake --build "$build" -j2 --target attn-bench $binaries
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" .devdeps
  cp "$build/bench/attn-bench" "$stage/bin/"
  for t in $binaries; do cp "$build/tests/$t" "$stage/bin/"; done
  # Every shared library they load except the C and C++ runtimes, which the
  # host's newer ones replace (Highway, Google Benchmark, OpenBLAS and its
  # Fortran runtime, OpenMP).
  for lib in $(ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    case $(basename "$lib") in
      libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | ld-linux*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  tar cJf "$packed" -C "$stage" .
  rm -rf "$stage"
  ls -la "$packed"
  exit 0
fi

out=${RESULTS:-results}
mkdir -p "$out"
R=$(mktemp -d)
start=$SECONDS
say() { echo "amx-check: $* (at $((SECONDS - start)) s)" | tee -a "$R/steps.txt"; }
pack() { tar czf "$out/amx-check.tgz" -C "$R" .; }

lscpu > "$R/lscpu.txt"
say "$(grep -m1 'Model name' "$R/lscpu.txt" | sed 's/  */ /g'); $(nproc) cpus; flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512fp16|amx_tile|amx_bf16' "$R/lscpu.txt" | sort -u | tr '\n' ' ')"
[ -f "$packed" ] || { say "FAILED: no $packed (run --prepare on the development machine)"; pack; exit 2; }
bin=$(mktemp -d)
tar xJf "$packed" -C "$bin"
export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$bin/bin/attn-bench" --benchmark_list_tests > /dev/null || { say "FAILED: attn-bench does not start here"; pack; exit 2; }

# The tests, every binary at once (they are independent; 16 cores).
pids=()
for t in $tests; do
  OMP_NUM_THREADS=2 timeout 150 "$bin/bin/${t%%:*}" --gtest_filter="${t#*:}" --gtest_brief=1 \
    --gtest_output="xml:$R/test-${t%%:*}.xml" > "$R/test-${t%%:*}.txt" 2>&1 &
  pids+=($!)
done
suite=0
for p in "${pids[@]}"; do wait "$p" || suite=1; done
for t in $binaries; do echo "== $t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/test-$t.txt" | tr '\n' ' ')"; done
grep -h -E '^\[  FAILED  \]' "$R"/test-*.txt | head -20
grep -h -o -E 'max_abs_difference[a-z_]*="[^"]*"' "$R"/test-*.xml
say "tests done (exit $suite)"
pack

bench() {  # bench NAME LIMIT_S FILTER: attn-bench rows, one run, repetitions interleaved
  ATTN_TUNING_FILE= timeout "$2" taskset -c 0,1 "$bin/bin/attn-bench" \
    --benchmark_filter="$3" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_out="$R/bench-$1.json" --benchmark_out_format=json > "$R/bench-$1.txt" 2>&1
  say "bench $1 exit $?"
  pack
}
# bf16 dot-product paths against widening and float32 (same shapes).
bench prefill 100 '^(streaming/T:(2048|8192)/d:128/causal:(0|1)/dtype:bf16/(path:(amx|avx512bf16)/)?threads:1|streaming/T:(2048|8192)/d:128/causal:(0|1)/threads:1|auto/mh/H:16/T:(512|2048)/d:(64|128)/causal:(0|1)/dtype:bf16/threads:1)$'
# Decode against the read-bandwidth probe, one and two threads (177 s
# here on the 2-core AMD EPYC Zen 4 beside a build, 57 s for the prefill rows).
bench decode 180 '^(streaming/decode/Hq:(32/Hkv:8|16/Hkv:16)/Tk:32768/d:128/(kv:(bf16|f16|q8_0)/)?threads:1|parallel/decode/Hq:(32/Hkv:8|16/Hkv:16)/Tk:32768/d:128/(kv:(bf16|f16|q8_0)/)?threads:2)$'
# PyTorch's CPU SDPA on the same core (one thread), if the host has it.
if [ -f .devdeps/torch_sdpa.py ]; then
  OMP_NUM_THREADS=1 timeout 60 taskset -c 0 python3 .devdeps/torch_sdpa.py 1 bf16 > "$R/torch-bf16.txt" 2>&1
  say "torch exit $?"
  pack
fi
say "done"
[ "$suite" -eq 0 ]
