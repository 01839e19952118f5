#!/bin/bash
# Planted-bug check (issue 7): shows that the reliability checks catch an
# off-by-one in a kernel's tail handling. Not run by .ci/run (it builds the
# library once more under ASan); see README.md, "Reliability".
#
# 1. copies the committed tree (git archive HEAD) to a temporary directory;
# 2. applies .ci/planted_bug.patch there: the tail block of ForEachRowBlock
#    (kernels/common/microkernels-inl.h) gets one row too many, so the
#    score and mix micro-kernels read one key / one value column past the
#    end of their tile;
# 3. builds tests/hostile_test with clang-14 under ASan + UBSan, with the
#    flags of .ci/reliability.sh (-O1, the same sanitizers; no fuzzer, bench
#    or tools), and runs it as ctest would.
# Exits 0 only if the planted bug is caught (the test fails, or ASan/UBSan
# reports), printing the evidence; 1 if it went unnoticed; 2 if the check
# could not run (the patch no longer applies, the build failed).
# Usage: .ci/planted_bug.sh [--keep]   (--keep: leave the temporary tree)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
keep=0
[ "${1:-}" = "--keep" ] && keep=1
start=$SECONDS
say() { echo "planted_bug: $* (at $((SECONDS - start)) s)"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-planted.XXXXXX")
trap '[ "$keep" = 1 ] && echo "planted_bug: kept $tmp" || rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
git archive HEAD | tar -x -C "$tmp/src" || { say "cannot copy the tree"; exit 2; }
say "tree of $(git rev-parse --short HEAD) copied to $tmp/src"
( cd "$tmp/src" && git apply "$root/.ci/planted_bug.patch" ) ||
  { say "FAILED: .ci/planted_bug.patch no longer applies"; exit 2; }
grep -rn "PLANTED BUG" "$tmp/src/kernels"

say "ASan+UBSan build of hostile_test"
CC=clang-14 CXX=clang++-14 cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DATTN_SANITIZE=address,undefined \
  -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >"$tmp/configure.log" 2>&1 &&
  cmake --build "$tmp/build" -j2 --target hostile_test >"$tmp/build.log" 2>&1 ||
  { tail -20 "$tmp/configure.log" "$tmp/build.log"; say "FAILED: the build failed"; exit 2; }

say "running hostile_test"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
OMP_NUM_THREADS=2 ATTN_TUNING_FILE= \
  "$tmp/build/tests/hostile_test" >"$tmp/test.log" 2>&1
rc=$?
say "hostile_test exited with $rc"

# The evidence: the test that was running, the first sanitizer report
# lines (with the first frames of its stack) and any failed test.
running=$(grep -F '[ RUN      ]' "$tmp/test.log" | tail -1)
report=$(grep -n -m1 -E 'ERROR: AddressSanitizer|runtime error:' "$tmp/test.log" | cut -d: -f1)
failed=$(grep -F '[  FAILED  ]' "$tmp/test.log" | sort -u | head -5)
if [ "$rc" -ne 0 ] && { [ -n "$report" ] || [ -n "$failed" ]; }; then
  echo "planted_bug: CAUGHT"
  echo "  last test started: ${running:-none}"
  if [ -n "$report" ]; then
    sed -n "${report},$((report + 4))p" "$tmp/test.log" | sed 's/^/  /'
    grep -m1 '^SUMMARY:' "$tmp/test.log" | sed 's/^/  /'
  fi
  [ -n "$failed" ] && echo "$failed" | sed 's/^/  /'
  say "done"
  exit 0
fi
echo "planted_bug: NOT CAUGHT: hostile_test exited with $rc and reported nothing"
tail -5 "$tmp/test.log"
exit 1
