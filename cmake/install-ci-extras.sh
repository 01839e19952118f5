#!/bin/sh
# Installs what the reliability checks of .ci/reliability.sh need on top of
# cmake/install-deps.sh (Debian 12 packages, only those missing): clang-14
# (ASan/UBSan/TSan builds and libFuzzer), its sanitizer and fuzzer runtimes,
# and LLVM's OpenMP runtime with the Archer TSan tool (libomp-14-dev ships
# libomp.so and libarcher.so). Run as root (or with sudo).
set -eu
pkgs="clang-14 libclang-rt-14-dev libomp-14-dev"
# shellcheck disable=SC2086
sh "$(dirname "$0")/install-missing.sh" $pkgs
