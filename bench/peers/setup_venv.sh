#!/bin/bash
# Creates the Python virtual environment that bench/peers/ runs the peer
# libraries in: PyTorch, ONNX Runtime (+ onnx), OpenVINO and JAX, all from
# PyPI, plus matplotlib for bench/RESULTS.md's plots. It is never a dependency
# of libattn, of its tests or of .ci/run: only bench/peers/compare.py and
# bench/plot_results.py use it.
#
#   bash bench/peers/setup_venv.sh            # -> $ATTN_PEERS_VENV (default /tmp/attn-peers)
#
# Each peer is installed on its own; one that fails to install is recorded
# as such in $VENV/peers-install.txt (compare.py reports it, never hides it)
# and the others still install.
#
# PyTorch: see python/install_torch.sh (the CUDA wheel without most of its
# CUDA requirements; the CPU-only index is not reachable here).
set -uo pipefail
VENV=${ATTN_PEERS_VENV:-/tmp/attn-peers}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || { echo "setup_venv: cannot create $VENV" >&2; exit 1; }
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip >/dev/null 2>&1 || true
STATUS="$VENV/peers-install.txt"
: > "$STATUS"

# install NAME CHECK_PYTHON PIP_ARGS...: installs, then runs CHECK_PYTHON in
# the venv; records "NAME ok <version>" or "NAME failed <why>".
install() {
  local name=$1 check=$2; shift 2
  echo "setup_venv: installing $name ..." >&2
  local log; log=$(mktemp)
  if ! "${PIP[@]}" install "$@" >"$log" 2>&1; then
    echo "$name failed pip install: $(tail -n 1 "$log")" >> "$STATUS"
    tail -n 5 "$log" >&2; rm -f "$log"; return 0
  fi
  local v
  if v=$("$VENV/bin/python" -c "$check" 2>"$log"); then
    echo "$name ok $v" >> "$STATUS"
  else
    echo "$name failed import: $(tail -n 1 "$log")" >> "$STATUS"
    tail -n 5 "$log" >&2
  fi
  rm -f "$log"
}

install numpy 'import numpy; print(numpy.__version__)' numpy threadpoolctl

# PyTorch, the smallest way that imports (python/install_torch.sh says how).
TORCH_CHECK='import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())'
if bash "$(dirname "$0")/../../python/install_torch.sh" "$VENV" &&
   v=$("$VENV/bin/python" -c "$TORCH_CHECK" 2>/tmp/attn-peers-torch.err); then
  echo "torch ok $v" >> "$STATUS"
else
  echo "torch failed import: $(tail -n 1 /tmp/attn-peers-torch.err 2>/dev/null)" >> "$STATUS"
fi
install onnxruntime 'import onnxruntime, onnx; print(onnxruntime.__version__, "onnx", onnx.__version__)' onnxruntime onnx
install openvino 'import openvino; print(openvino.__version__)' openvino
install jax 'import jax; print(jax.__version__, jax.devices()[0].platform)' 'jax[cpu]'
install matplotlib 'import matplotlib; print(matplotlib.__version__)' matplotlib

echo "setup_venv: $VENV" >&2
cat "$STATUS"
