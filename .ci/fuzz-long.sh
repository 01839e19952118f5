#!/bin/bash
# A long, time-boxed libFuzzer run of tests/fuzz/attn-fuzz with a new seed
# (issue 29): CI's fixed run (.ci/reliability.sh: 20000 runs, seed 1, about
# a minute) always takes the same path, so it finds only what that path
# meets; this draws a fresh seed each time and runs for MINUTES. Not part of
# .ci/run (CI's 45-minute budget has no room for it): run it by hand, e.g.
# before resolving an issue that touches the kernels or the oracle.
#
# Usage: .ci/fuzz-long.sh [MINUTES] [SEED]
#   MINUTES  wall-clock limit of the fuzzing itself (default 30)
#   SEED     libFuzzer -seed (default: from the clock; printed either way,
#            so a run can be repeated)
#
# It configures build-asan as .ci/reliability.sh does (.ci/asan-configure.sh)
# (so an existing build-asan is reused, and its tests stay valid), builds
# only the attn-fuzz target, and fuzzes in one process from the committed
# seed corpus tests/fuzz/corpus (read only) into a scratch corpus,
# build-asan/fuzz-long-corpus (emptied at the start, so that a run depends
# only on its seed and the tree). A finding (an oracle failure, a sanitizer
# report, a timeout, a leak) stops the run and is written to
# build-asan/fuzz-long-artifacts/; the whole log is
# build-asan/fuzz-long-SEED.log. The last lines say the runs, the time and
# the findings. Exit status: 0 clean, 1 a finding, 2 could not run.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
seed=${2:-$(date +%s)}
case "$minutes" in ''|*[!0-9]*) echo "fuzz-long: MINUTES must be a whole number, got '$minutes'"; exit 2;; esac
case "$seed" in ''|*[!0-9]*) echo "fuzz-long: SEED must be a whole number, got '$seed'"; exit 2;; esac
if [ "$minutes" -lt 1 ] || [ "$seed" -lt 1 ] || [ "$seed" -gt 4294967295 ]; then
  echo "fuzz-long: need MINUTES >= 1 and 1 <= SEED <= 4294967295"; exit 2
fi
export OMP_NUM_THREADS=2  # as .ci/reliability.sh: the fuzzer's 2-thread runs
start=$SECONDS
step() { echo "fuzz-long: $* (at $((SECONDS - start)) s)"; }
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
cpu="$cpu (family $(lscpu 2>/dev/null | sed -n 's/^CPU family: *//p' | head -n 1), model $(lscpu 2>/dev/null | sed -n 's/^Model: *//p' | head -n 1))"
echo "fuzz-long: seed $seed, $minutes min, CPU ${cpu:-unknown}, tree $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"

sh cmake/install-ci-extras.sh || { echo "fuzz-long: cmake/install-ci-extras.sh failed"; exit 2; }
step "ASan+UBSan build of attn-fuzz (build-asan, .ci/reliability.sh's configuration)"
bash .ci/asan-configure.sh || { echo "fuzz-long: cmake configure failed"; exit 2; }
cmake --build build-asan -j2 --target attn-fuzz || { echo "fuzz-long: build failed"; exit 2; }

corpus=build-asan/fuzz-long-corpus
artifacts=build-asan/fuzz-long-artifacts
log=build-asan/fuzz-long-$seed.log
rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
before=$(ls "$artifacts" | sort)
step "fuzzing: seed $seed, $minutes min, one process, log $log"
set +e
# New inputs go to the first (scratch) directory; the committed seed corpus
# is only read. Flags as .ci/reliability.sh's, with a time box for -runs.
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-asan/tests/fuzz/attn-fuzz "$corpus" tests/fuzz/corpus \
    -seed="$seed" -max_total_time=$((minutes * 60)) -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
rc=$?
set -e

# Runs: the final stats where libFuzzer printed them, else its last status
# line ("#12345 ..."; after a crash it may stop before the stats).
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
[ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
[ -n "$runs" ] || runs="?"
secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
[ -n "$secs" ] || secs="$((SECONDS - start)) (wall, with the build)"
new=$(comm -13 <(echo "$before") <(ls "$artifacts" | sort) | sed "s|^|$artifacts/|")
inputs=$(ls "$corpus" | wc -l)
if [ "$rc" -eq 0 ] && [ -z "$new" ]; then
  step "CLEAN: $runs runs in $secs s, seed $seed, CPU $cpu, no findings ($inputs new inputs in $corpus)"
  exit 0
fi
step "FINDING: attn-fuzz exited with $rc after $runs runs, seed $seed, CPU $cpu"
grep -E -m 8 'attn-fuzz FAILURE|^  (problem|kernel|dot path)|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$log" \
  | sed 's/^/  /' || true
if [ -n "$new" ]; then
  for f in $new; do echo "  input: $f"; done
  echo "  reproduce: ATTN_FUZZ_DUMP=1 build-asan/tests/fuzz/attn-fuzz $(echo "$new" | head -n 1)"
else
  echo "  (no artifact written; see $log)"
fi
exit 1
