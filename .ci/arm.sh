#!/bin/bash
# Cross-builds attn for 64-bit Arm (aarch64) with Debian's cross g++ and runs
# the test suite under qemu-user (issue 8). Installs what is missing (root).
#   .ci/arm.sh [BUILD_DIR]        (default build-arm)
# Only Highway's NEON target is compiled: see cmake/aarch64-linux-gnu.cmake
# for why the SVE targets are not.
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
# Names the SIMD target the kernels run on under this emulated CPU.
QEMU_CPU=${QEMU_CPU:-max} qemu-aarch64 -L / "$build/tests/c_api_test"
# Left out: TargetsEnv.ForcedSSE4 forces an x86 target by name (no Arm
# meaning); Llama.* (a Llama-sized model: 180 s under qemu on 2 Zen 5
# cores, beside a build) and Memory.ParallelAt65536Squared* (a 65536 x
# 65536 causal problem: not done after 420 s under qemu) are size tests that
# run the same NEON kernels that KernelsTest, Gqa and Merge check shape by
# shape. The other Memory.*65536* tests (NEON's tile caps; 0.5-29 s each)
# run.
QEMU_CPU=${QEMU_CPU:-max} ctest --test-dir "$build" -j2 --output-on-failure --timeout 1200 \
  -E '^(TargetsEnv\.ForcedSSE4|Llama\..*|Memory\.ParallelAt65536Squared.*)$'
echo "arm: done in $((SECONDS - start)) s"
