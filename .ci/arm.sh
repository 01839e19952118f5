#!/bin/bash
# Cross-builds attn for 64-bit Arm (aarch64) with Debian's cross g++ and runs
# the test suite under qemu-user (issue 8). Installs what is missing (root).
#   .ci/arm.sh [BUILD_DIR]        (default build-arm)
# Highway's NEON, SVE, SVE2, SVE_256 and SVE2_128 targets are compiled
# (cmake/aarch64-linux-gnu.cmake). qemu's CPU `max` has SVE2 and FEAT_BF16;
# its vector length picks which targets run: SVE_256 needs 256 bits,
# SVE2_128 128 bits, and SVE / SVE2 run at any length.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-arm}
start=$SECONDS

# arm64 multiarch packages provide the aarch64 Highway, GoogleTest and the
# runtime (libc, libstdc++, libgomp) that qemu runs the tests against.
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
pkgs="cmake make g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev \
libhwy-dev:arm64 libgtest-dev:arm64 libgomp1:arm64"
# shellcheck disable=SC2086
sh cmake/install-missing.sh $pkgs

cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >/dev/null
cmake --build "$build" -j2
echo "arm: built in $((SECONDS - start)) s"
# Names the SIMD target the kernels run on at each vector length (bytes):
# SVE2_128 at 16, SVE_256 at 32, SVE2 at 64 (qemu's default).
for vl in 16 32 64; do
  QEMU_CPU=max,sve-default-vector-length=$vl qemu-aarch64 -L / "$build/tests/c_api_test" | tail -1
done
# Left out: TargetsEnv.ForcedSSE4 forces an x86 target by name (no Arm
# meaning); Llama.* (a Llama-sized model: 180 s under qemu on 2 Zen 5
# cores, beside a build) and Memory.ParallelAt65536Squared* (a 65536 x
# 65536 causal problem: not done after 420 s under qemu) are size tests that
# run the same kernels that KernelsTest, Gqa and Merge check shape by
# shape. The other Memory.*65536* tests (the tile caps; 0.5-29 s each)
# run.
# The whole suite at qemu's default length (512 bits): every test on
# NEON, SVE and SVE2, except that the tests that iterate the targets
# (ATTN_TEST_TARGETS narrows them: every kernel and element type against
# the float64 reference, GQA, hostile inputs, score modifiers, paged and
# varlen calls, q8_0) take NEON and SVE2 only. SVE and SVE2 are Highway's
# two length-agnostic targets, the same source with a few SVE2
# instructions more; SVE2 runs them here and at 256 bits, SVE the kernel
# tests at 128 bits below, and both the per-target SIMD blocks here. That
# is a third of those tests' time at 512 bits, where qemu is slowest.
ATTN_TEST_TARGETS=NEON,SVE2 \
QEMU_CPU=${QEMU_CPU:-max} ctest --test-dir "$build" -j2 --output-on-failure --timeout 1200 \
  -E '^(TargetsEnv\.ForcedSSE4|Llama\..*|Memory\.ParallelAt65536Squared.*)$'
echo "arm: the suite at 512 bits done at $((SECONDS - start)) s"
# At 128 and 256 bits, where SVE2_128 and SVE_256 run too: the tests that
# hold every kernel, element type and dot path to the float64 reference,
# less the one 2053 x 2053 shape (110 s under qemu at 512 bits, the others'
# code on smaller shapes) and the all-bf16 GQA decode shapes of 2, 4 and 8
# rows at d = 64 / 128 (T_k 300, 601, 333: they are there for the pair row
# walk, which is compiled for x86's AVX3 only; on Arm they take the tiled
# pair walk that the other decode shapes cover; 16 s under qemu at 512
# bits, where they do run), on the targets whose code depends on the vector
# length (ATTN_TEST_TARGETS, tests/test_util.h TestTargets): the target the
# length adds, and SVE at 128 bits, SVE2 at 256 (each of them also ran at
# 512 above). NEON's code is the same at every length and ran at 512, so it
# is not repeated; that halves these passes. Then every per-target test instance
# (the SIMD blocks, the dot-product layers) of the target that length adds,
# run from the binaries, since ctest knows only the instances it found at
# build time, under qemu's default length.
vl_tests='^(Shapes/KernelsTest|Combos/DTypeKernels|Combos/Q8Kernels|Shapes/Bf16DotKernels)\.'
for vl_target in 16:SVE2_128:SVE 32:SVE_256:SVE2; do
  vl=${vl_target%%:*} rest=${vl_target#*:}
  target=${rest%%:*} also=${rest#*:}
  ATTN_TEST_TARGETS=$target,$also QEMU_CPU=max,sve-default-vector-length=$vl \
    ctest --test-dir "$build" -j2 --output-on-failure \
    --timeout 1200 -R "$vl_tests" -E 'Tq2053_Tk2053|Bf16DotKernels.*_Tq1_Tk(300|601|333)_d(64|128)_'
  for t in "$build"/tests/*_test; do
    case $t in *c_api_test) continue ;; esac  # C programs, not GoogleTest
    QEMU_CPU=max,sve-default-vector-length=$vl qemu-aarch64 -L / "$t" --gtest_brief=1 \
      --gtest_filter="*/$target" | grep -E '^\[  (PASSED|FAILED) ' | sed "s|^|$(basename "$t") $target: |"
  done
  echo "arm: the kernels at $((vl * 8)) bits done at $((SECONDS - start)) s"
done
echo "arm: done in $((SECONDS - start)) s"
