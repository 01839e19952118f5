#!/bin/bash
# Cross-builds attn for 64-bit Arm (aarch64) with Debian's cross g++ and runs
# the test suite under qemu-user (issue 8). Installs what is missing (root).
#   .ci/arm.sh [BUILD_DIR]        (default build-arm)
# ATTN_ARM_STEP=packages, build or test runs one part alone (default: all
# three in turn); .ci/run builds in the background while lighter steps run.
# Highway's NEON, SVE, SVE2, SVE_256 and SVE2_128 targets are compiled
# (cmake/aarch64-linux-gnu.cmake). qemu's CPU `max` has SVE2 and FEAT_BF16;
# its vector length picks which targets run: SVE_256 needs 256 bits,
# SVE2_128 128 bits, and SVE / SVE2 run at any length.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-arm}
part=${ATTN_ARM_STEP:-all}
case "$part" in all|packages|build|test) ;; *) echo "arm: ATTN_ARM_STEP=$part: not packages, build, test or all"; exit 2 ;; esac
start=$SECONDS

if [ "$part" = all ] || [ "$part" = packages ]; then
  # arm64 multiarch packages provide the aarch64 Highway, GoogleTest and the
  # runtime (libc, libstdc++, libgomp) that qemu runs the tests against.
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  pkgs="cmake make g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev \
libhwy-dev:arm64 libgtest-dev:arm64 libgomp1:arm64"
  # shellcheck disable=SC2086
  sh cmake/install-missing.sh $pkgs
fi
if [ "$part" = all ] || [ "$part" = build ]; then
  cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$build" -j2
  echo "arm: built in $((SECONDS - start)) s"
fi
[ "$part" = all ] || [ "$part" = test ] || exit 0
# Names the SIMD target the kernels run on at each vector length (bytes):
# SVE2_128 at 16, SVE_256 at 32, SVE2 at 64 (qemu's default).
for vl in 16 32 64; do
  QEMU_CPU=max,sve-default-vector-length=$vl qemu-aarch64 -L / "$build/tests/c_api_test" | tail -1
done
# Where the time goes: qemu-user emulates SVE slower the longer the vector,
# and far more so on some hosts than others. The whole suite at 512 bits
# took 392 s on the 2-core AMD EPYC Zen 4 VM but 1945 s on the 2-core Intel
# Xeon VM (family 6 model 167), where the kernel tests took 136 s at 128
# bits and 589 s at 256 bits for the same two targets a length, and the
# Arm step alone (2867 s) put CI over its 45 minutes. So the whole suite
# runs at 128 bits, and the longer lengths repeat only the kernel tests of
# the targets whose code they change.
# Left out: TargetsEnv.ForcedSSE4 forces an x86 target by name (no Arm
# meaning); Llama.* (a Llama-sized model: 180 s under qemu on 2 Zen 5
# cores, beside a build) and Memory.ParallelAt65536Squared* (a 65536 x
# 65536 causal problem: not done after 420 s under qemu) are size tests that
# run the same kernels that KernelsTest, Gqa and Merge check shape by
# shape. The streaming kernel's tile caps at 65536 keys
# (Memory.Streaming*At65536Keys*: 142 s under qemu on a 2-core AMD EPYC
# Zen 3) are a function of the panel width, the same 8 rows on the 128-bit
# targets here as on x86's SSE4, where the Release build's suite runs them
# (Memory.*.SSE4, tests/CMakeLists.txt) beside the best target's; the
# split-KV decode cap and the allocation-failure tests run here.
# 1. The whole suite at 128 bits: every test on SVE2_128 (the best target
#    there, the one the tests that take no target run on), and the tests
#    that iterate the targets (ATTN_TEST_TARGETS narrows them: every kernel
#    and element type against the float64 reference, GQA, hostile inputs,
#    score modifiers, paged and varlen calls, q8_0) on NEON, SVE2_128 and
#    SVE2 (length-agnostic). NEON's code is the same at every length, so it
#    runs here only. The one 2053 x 2053 shape of KernelsTest (the longest
#    test here: 197 s for the three targets under qemu on a 2-core AMD EPYC
#    Zen 3) runs on SVE2_128 alone: at 128 bits the three targets have the
#    same 4 float lanes, so the same panels, tiles and tails; what that size
#    adds is the tiling of a long causal head, which is not per target, and
#    each target's code runs on the 70 smaller shapes.
big='Shapes/KernelsTest.MatchesReferenceOnEveryTarget/B1_H1x1_Tq2053_Tk2053'
# (From the binary, beside ctest's run of the rest, so that no core waits
# for this one long test at the end.)
ATTN_TEST_TARGETS=SVE2_128 OMP_NUM_THREADS=2 QEMU_CPU=max,sve-default-vector-length=16 \
  qemu-aarch64 -L / "$build/tests/kernels_test" --gtest_filter="$big*" \
  >"$build/big-shape.log" 2>&1 &
big_pid=$!
suite_rc=0
ATTN_TEST_TARGETS=NEON,SVE2_128,SVE2 QEMU_CPU=max,sve-default-vector-length=16 \
  ctest --test-dir "$build" -j2 --output-on-failure --timeout 1200 \
  -E "^(TargetsEnv\.ForcedSSE4|Llama\..*|Memory\.(ParallelAt65536Squared|Streaming(WithABF16Cache)?At65536Keys).*|${big//./\\.}.*)\$" \
  || suite_rc=$?
big_rc=0
wait "$big_pid" || big_rc=$?
grep -E '^\[ +(OK|FAILED|PASSED) ' "$build/big-shape.log" | sed 's|^|arm: SVE2_128 alone: |'
if [ "$big_rc" -ne 0 ] || ! grep -q '^\[  PASSED  \] 1 test\.' "$build/big-shape.log"; then
  cat "$build/big-shape.log"
  echo "arm: $big on SVE2_128 FAILED (exit $big_rc)"
  exit 1
fi
[ "$suite_rc" -eq 0 ]
echo "arm: the suite at 128 bits done at $((SECONDS - start)) s"
# 2. At 256 bits SVE_256 (the target that length adds), at 512 bits SVE (the
#    other length-agnostic target, SVE2 without its few SVE2 instructions,
#    at its widest): every kernel on every shape (KernelsTest) and every
#    element type mix (DTypeKernels) against the float64 reference, where the
#    tails of 8 and 16 float lanes differ from 128 bits' 4; the q8_0 and
#    bf16 dot-path kernel tests ran on SVE2_128 and SVE2 above. Less the two
#    largest sizes, 2053 x 2053 and 700 x 700 (on a 2-core AMD EPYC Zen 3,
#    the three 700 x 700 shapes took 76 of the 240 s of tests at 256 bits;
#    on the Intel Xeon VM the 2053 one alone 509 s at 512 bits): what they
#    exercise is there in smaller shapes at these lengths too, the tails of
#    8 and 16 lanes (700 = 43 x 16 + 12, as 300 = 18 x 16 + 12) and the
#    walks across many panels, key tiles and query blocks (1000 x 1, 1 x
#    1000, 129 x 257 and 257 x 129 at the same d = 24, with both causal
#    alignments), while at 128 bits above every target runs 700 x 700 and
#    SVE2_128 runs 2053 x 2053. Then every per-target test instance (the
#    SIMD blocks, the dot-product layers) of that target, run from the
#    binaries, since ctest knows only the instances it found at build time.
vl_tests='^(Shapes/KernelsTest|Combos/DTypeKernels)\.'
for vl_target in 16:SVE2_128 16:SVE2 32:SVE_256 64:SVE; do
  vl=${vl_target%%:*} target=${vl_target#*:}
  if [ "$vl" != 16 ]; then
    ATTN_TEST_TARGETS=$target QEMU_CPU=max,sve-default-vector-length=$vl \
      ctest --test-dir "$build" -j2 --output-on-failure \
      --timeout 1200 -R "$vl_tests" -E '_Tq(2053_Tk2053|700_Tk700)_'
  fi
  for t in "$build"/tests/*_test; do
    case $t in *c_api_test) continue ;; esac  # C programs, not GoogleTest
    QEMU_CPU=max,sve-default-vector-length=$vl qemu-aarch64 -L / "$t" --gtest_brief=1 \
      --gtest_filter="*/$target" | grep -E '^\[  (PASSED|FAILED) ' | sed "s|^|$(basename "$t") $target: |"
  done
  echo "arm: $target at $((vl * 8)) bits done at $((SECONDS - start)) s"
done
echo "arm: done in $((SECONDS - start)) s"
