#!/bin/bash
# Builds the Python package the way a user does (`pip install .` in a fresh
# virtual environment, scikit-build-core + nanobind from PyPI) and runs its
# pytest suite. Needs network access to PyPI; kept out of the core test
# command for that reason.
#   python/run_tests.sh            # venv in /tmp/attn-venv (ATTN_VENV overrides)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ATTN_VENV:-/tmp/attn-venv}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
  # Debian's own python3 ships venv and the headers separately.
  echo "python: installing python3-venv python3-dev" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q ".[test]"
# From outside the source tree, so `import attn` finds the installed package
# (python/attn/ alone has no compiled module).
cd "$venv" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests"
