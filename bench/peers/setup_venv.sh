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
# PyTorch: PyPI's Linux wheel (~540 MB) requires the CUDA 13 runtime packages
# (cuda-toolkit, cuDNN, NCCL, cuSPARSELt, NVSHMEM, triton: several GB more),
# and the CPU-only index is not reachable here; see the torch step below.
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

# PyTorch, the smallest way that imports: the wheel without its requirements,
# its pure-Python requirements, then (if the import still fails) only the
# CUDA libraries that libtorch links and that are not already on the machine
# (here: cuFile, cuSPARSELt, NVSHMEM and NCCL, ~520 MB; the CUDA runtime,
# cuBLAS and cuDNN come from the machine's CUDA toolkit), and as a last
# resort the full `pip install torch` (several GB) unless
# ATTN_PEERS_FULL_TORCH=0.
TORCH_CHECK='import torch; torch.nn.functional.scaled_dot_product_attention(*(torch.randn(1,1,8,8) for _ in range(3))); print(torch.__version__, torch.backends.cpu.get_cpu_capability())'
torch_ok() { "$VENV/bin/python" -c "$TORCH_CHECK" 2>/tmp/attn-peers-torch.err; }
echo "setup_venv: installing torch ..." >&2
"${PIP[@]}" install --no-deps torch >/dev/null 2>&1
"${PIP[@]}" install filelock 'typing-extensions>=4.13.0' 'setuptools>=77.0.3' 'sympy>=1.13.3' \
  'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' >/dev/null 2>&1
if ! v=$(torch_ok); then
  mapfile -t libs < <("$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for r in m.requires("torch") or []:
    name = r.split(";")[0].strip()
    if name.startswith(("nvidia-cusparselt", "nvidia-nvshmem", "nvidia-nccl")):
        print(name)
print("nvidia-cufile")
PY
)
  echo "setup_venv: torch needs CUDA libraries to import; installing ${libs[*]}" >&2
  "${PIP[@]}" install --no-deps "${libs[@]}" >/dev/null 2>&1
  if ! v=$(torch_ok) && [ "${ATTN_PEERS_FULL_TORCH:-1}" = 1 ]; then
    echo "setup_venv: still no import ($(tail -n 1 /tmp/attn-peers-torch.err)); full install" >&2
    "${PIP[@]}" install torch >/dev/null 2>&1
  fi
fi
if v=$(torch_ok); then
  echo "torch ok $v" >> "$STATUS"
else
  echo "torch failed import: $(tail -n 1 /tmp/attn-peers-torch.err)" >> "$STATUS"
fi
install onnxruntime 'import onnxruntime, onnx; print(onnxruntime.__version__, "onnx", onnx.__version__)' onnxruntime onnx
install openvino 'import openvino; print(openvino.__version__)' openvino
install jax 'import jax; print(jax.__version__, jax.devices()[0].platform)' 'jax[cpu]'
install matplotlib 'import matplotlib; print(matplotlib.__version__)' matplotlib

echo "setup_venv: $VENV" >&2
cat "$STATUS"
