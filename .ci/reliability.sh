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
# -O1: sanitizer builds of Highway's per-target kernels compile ~30% faster
# than at -O2. (Measured on the shared 2-core machine: 3 min at -O1 with
# cmake/Sanitizers.cmake's UBSan check set, 13.5 min at -O2 with the full
# -fsanitize=undefined.)
# Every Highway target but SSSE3 (HWY_DISABLED_TARGETS 0x1000): SSSE3 and
# SSE4 are the same 128-bit code (4 float lanes, the same tails, the same
# full-vector MaskedLoad), SSE4 with a few instructions more, so SSE4 stands
# for both here; the Release build compiles and tests SSSE3. One target fewer
# took this build from 610 to 538 s (2-core AMD EPYC Zen 4 VM).
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS="-DHWY_DISABLED_TARGETS=0x1000" \
  -DATTN_SANITIZE=address,undefined -DATTN_BUILD_FUZZ=ON -DATTN_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j2
step "ASan+UBSan tests"
# The per-target tests on every supported target but EMU128
# (ATTN_TEST_TARGETS=-EMU128, tests/test_util.h TestTargets): on x86 EMU128
# is the baseline no CPU of this decade runs, its loads and stores are
# those of SSE4's 128-bit vectors lane for lane (SSE4 keeps its full-vector
# MaskedLoad here), and under ASan its scalar lane loops took four fifths
# of the suite's time (268 s with it, 75 s without, on the 2-core AMD EPYC
# Zen 4 VM); the Release build tests it. Llama.* is left out as
# on Arm (a model-sized run, 52 s here, of the kernels the shape tests
# check under ASan).
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
# Two Highway targets, AVX2 and the EMU128 baseline (HWY_DISABLED_TARGETS:
# AVX3_DL 0x80, AVX3 0x100, SSE4 0x800, SSSE3 0x1000 off): the threads, the
# first use and the dynamic dispatch under test are the same code on every
# target, while each target adds the whole library's kernels to the build
# (the ASan build above, and the Release one, compile them all).
CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS="-DHWY_DISABLED_TARGETS=0x1980" \
  -DATTN_SANITIZE=thread -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >/dev/null
cmake --build build-tsan -j2 --target concurrency_test first_use_test
step "TSan tests"
ctest --test-dir build-tsan -j2 -R '^(Concurrency|FirstUse)\.' --output-on-failure --no-tests=error
step "done"
