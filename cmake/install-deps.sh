#!/bin/sh
# Installs the Debian 12 packages attn needs, only those that are missing.
# Run as root (or with sudo). Nothing is downloaded at build time.
set -eu
pkgs="cmake make g++ libhwy-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev \
libcli11-dev libfmt-dev libopenblas-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "attn: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
