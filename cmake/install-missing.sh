#!/bin/sh
# Installs the Debian packages named as arguments, only those missing (one
# apt-get update, then one install). Shared by install-deps.sh,
# install-ci-extras.sh and .ci/arm.sh. Run as root (or with sudo).
set -eu
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "attn: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
