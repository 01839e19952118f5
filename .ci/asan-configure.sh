#!/bin/bash
# Configures build-asan, the ASan + UBSan build (clang-14) that
# .ci/reliability.sh tests and .ci/fuzz-long.sh fuzzes, so that both use one
# configuration and either reuses the other's build. Extra arguments go to
# cmake. Prints the Highway targets it compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
# -O1: sanitizer builds of Highway's per-target kernels compile ~30% faster
# than at -O2 (3 min at -O1 with cmake/Sanitizers.cmake's UBSan check set,
# 13.5 min at -O2 with the full -fsanitize=undefined, on a shared 2-core VM).
# The targets: those this CPU runs, less SSSE3 and EMU128, and no more; the
# build's time is the kernels' once per target, and a target that cannot run
# here would be compiled for nothing (AVX3 on an AVX2 CPU).
# - SSE4 is the baseline (-msse4.2 -mpclmul -maes make it Highway's static
#   target), so EMU128 and SSSE3 are not compiled. The ASan tests never ran
#   EMU128 (its loads and stores are SSE4's lane for lane, and its scalar
#   lane loops under ASan took four fifths of the suite's time: 268 s with
#   it, 75 s without, on the 2-core AMD EPYC Zen 4 VM); SSSE3 is SSE4's
#   128-bit code with a few instructions fewer (the same 4 float lanes, tails
#   and full-vector MaskedLoad). The Release build compiles and tests both.
# - AVX3 only where the CPU has AVX-512 (the flags of Highway's AVX3 target).
# On a 2-core AMD EPYC Zen 3 (AVX2) that is 2 targets instead of 4.
disabled=0x100  # HWY_AVX3
targets="SSE4 AVX2"
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo \
    && grep -qw avx512dq /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  disabled=0 targets="SSE4 AVX2 AVX3"
fi
echo "asan-configure: build-asan compiles the Highway targets $targets"
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-msse4.2 -mpclmul -maes -DHWY_DISABLED_TARGETS=$disabled" \
  -DATTN_SANITIZE=address,undefined -DATTN_BUILD_FUZZ=ON -DATTN_BUILD_BENCH=OFF "$@" >/dev/null
