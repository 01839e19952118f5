#!/bin/sh
# Builds the API reference (build-docs/html) from include/attn with Debian's
# Doxygen; any Doxygen warning fails the build.
set -eu
cd "$(dirname "$0")/.."
if ! command -v doxygen >/dev/null; then
  echo "docs: installing doxygen" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends doxygen >/dev/null || {
    apt-get update -qq && apt-get install -y -qq --no-install-recommends doxygen >/dev/null; }
fi
rm -rf build-docs
doxygen docs/Doxyfile
echo "docs: build-docs/html/index.html ($(ls build-docs/html | wc -l) files, no warnings)"
