#!/bin/bash
# Reliability checks (issue 7), run by .ci/run after the README's test
# command (which builds and tests `build/` in Release, memory_test included):
#   1. the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#      (clang-14, build-asan), with the fuzz harness built alongside;
#   2. a fixed-seed, fixed-length libFuzzer run of tests/fuzz/attn-fuzz;
#   3. the threaded tests (concurrency_test, first_use_test) under
#      ThreadSanitizer with libomp + Archer (clang-14, build-tsan).
# See cmake/Sanitizers.cmake for why clang, libomp and Archer, and
# docs/reliability.md for what each check covers. Usage: .ci/reliability.sh
# [FUZZ_RUNS] (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_runs=${1:-20000}
export OMP_NUM_THREADS=2
start=$SECONDS
step() { echo "reliability: $* (at $((SECONDS - start)) s)"; }

sh cmake/install-ci-extras.sh

step "ASan+UBSan build"
bash .ci/asan-configure.sh
cmake --build build-asan -j2
step "ASan+UBSan tests"
# The per-target tests on every target built above (-EMU128 keeps EMU128 out
# should the build compile it again; tests/test_util.h TestTargets). Llama.*
# is left out as on Arm (a model-sized run, 52 s here, of the kernels the
# shape tests check under ASan).
ATTN_TEST_TARGETS=-EMU128 \
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j2 --output-on-failure --no-tests=error -E '^Llama\.'

step "fuzz: $fuzz_runs runs, seed 1"
rm -rf build-asan/fuzz-corpus build-asan/fuzz-artifacts
mkdir -p build-asan/fuzz-corpus build-asan/fuzz-artifacts
# New inputs go to the first (scratch) directory; the committed seed corpus
# is only read.
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-asan/tests/fuzz/attn-fuzz build-asan/fuzz-corpus tests/fuzz/corpus \
    -seed=1 -runs="$fuzz_runs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix=build-asan/fuzz-artifacts/

step "TSan build"
# Two Highway targets, SSE4 as the baseline (-msse4.2 -mpclmul -maes, as in
# the ASan build) and AVX2 (HWY_DISABLED_TARGETS 0x100: AVX3 off): the
# threads, the first use and the dynamic dispatch under test are the same
# code on every target, while each target adds the whole library's kernels
# to the build (the Release build compiles them all). SSE4 rather than
# EMU128 as the second: clang-14 compiles the kernels' EMU128 copy about 5x
# slower than their SSE4 copy (bf16dot.cc alone at -O1: 57 s against 11 s on
# a 2-core AMD EPYC Zen 3).
CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-msse4.2 -mpclmul -maes -DHWY_DISABLED_TARGETS=0x100" \
  -DATTN_SANITIZE=thread -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >/dev/null
cmake --build build-tsan -j2 --target concurrency_test first_use_test
step "TSan tests"
ctest --test-dir build-tsan -j2 -R '^(Concurrency|FirstUse)\.' --output-on-failure --no-tests=error
step "done"
