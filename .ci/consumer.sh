#!/bin/bash
# Builds and runs the examples as a user's project would (issue 8), against
#  1. the installed CMake package (cmake --install, then find_package),
#  2. the installed pkg-config file (plain cc / c++ command lines),
#  3. the source tree through FetchContent (add_subdirectory underneath).
# Usage: .ci/consumer.sh [BUILD_DIR]   (default: build, already built)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix=${ATTN_CONSUMER_PREFIX:-/tmp/attn-prefix}
work=${ATTN_CONSUMER_WORK:-/tmp/attn-consumer}
rm -rf "$prefix" "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

step() { echo "consumer: [${SECONDS}s] $*"; }

step "install $build to $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null

step "1/3 find_package(attn CONFIG) from $prefix"
cmake -S examples -B "$work/pkg" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/pkg" -j2 >/dev/null
# A real table for the tuning example, when the tuner was built: a tiny
# shape and budget, since only the load path is under test here.
tuning_args=()
if [ -x "$build/tools/attn-tune" ]; then
  "$build/tools/attn-tune" --shapes 64:64:64 --threads "$OMP_NUM_THREADS" --budget 2 \
    --output "$work/tuning.json" --report "$work/tuning.html" >/dev/null
  tuning_args=("$work/tuning.json")
fi
# Run from elsewhere: nothing may depend on the build or source tree.
(cd "$work" && ./pkg/one_head && ./pkg/gqa_decode && ./pkg/tuning_file "${tuning_args[@]}" \
  && ./pkg/c_example)

step "2/3 pkg-config"
if ! command -v pkg-config >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pkgconf >/dev/null
fi
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror -o "$work/c_example_pc" examples/c_example.c $(pkg-config --cflags --libs attn)
# shellcheck disable=SC2046
c++ -std=c++17 -Wall -Werror -o "$work/one_head_pc" examples/one_head.cc $(pkg-config --cflags --libs attn)
"$work/c_example_pc" >/dev/null && "$work/one_head_pc" >/dev/null

step "3/3 FetchContent from the source tree"
# Highway's static target only (HWY_COMPILE_ONLY_STATIC): this step checks
# the CMake integration, and the kernels of every target were built and
# tested in the Release build; each target would add the whole library's
# kernels to this build's time. On x86 the static target is SSE4
# (-msse4.2 -mpclmul -maes) rather than the default flags' EMU128, which g++
# compiles about 5x slower (bf16dot.cc: 105 s against 23 s at -O3 on a
# 2-core AMD EPYC Zen 3).
static_flags=-DHWY_COMPILE_ONLY_STATIC
case $(uname -m) in x86_64) static_flags="$static_flags -msse4.2 -mpclmul -maes" ;; esac
cmake -S examples -B "$work/src" -DATTN_SOURCE_DIR="$PWD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="$static_flags" >/dev/null
cmake --build "$work/src" -j2 --target gqa_decode c_example >/dev/null
"$work/src/gqa_decode" >/dev/null && "$work/src/c_example" >/dev/null

echo "consumer: 3 passed, 0 failed"
