#!/bin/sh
# Installs the Debian 12 packages attn needs, only those that are missing.
# Run as root (or with sudo). Nothing is downloaded at build time. OpenMPI is
# optional (only the ring attention MPI example and test use it).
set -eu
pkgs="cmake make g++ libhwy-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev \
libcli11-dev libfmt-dev libopenblas-dev libopenmpi-dev openmpi-bin"
# shellcheck disable=SC2086
sh "$(dirname "$0")/install-missing.sh" $pkgs
