#!/bin/bash
# Installs PyTorch (CPU use) into an existing virtual environment the
# smallest way that imports, for the environments that compare with or
# integrate PyTorch: bench/peers/setup_venv.sh and
# python/run_integration_tests.sh. Never a dependency of libattn or its
# test command.
#
#   bash python/install_torch.sh VENV      # exit 0 iff `import torch` works after
#
# PyPI's Linux wheel (~540 MB) requires the CUDA 13 runtime packages
# (cuda-toolkit, cuDNN, NCCL, cuSPARSELt, NVSHMEM, triton: several GB more),
# and the CPU-only index is not reachable here. So: the wheel without its
# requirements, its pure-Python requirements, then (if the import still
# fails) only the CUDA libraries that libtorch links and that are not
# already on the machine (here: cuFile, cuSPARSELt, NVSHMEM and NCCL,
# ~520 MB; the CUDA runtime, cuBLAS and cuDNN come from the machine's CUDA
# toolkit), and as a last resort the full `pip install torch` (several GB)
# unless ATTN_FULL_TORCH=0.
set -uo pipefail
VENV=${1:?usage: install_torch.sh VENV}
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
CHECK='import torch; torch.nn.functional.scaled_dot_product_attention(*(torch.randn(1,1,8,8) for _ in range(3))); print(torch.__version__, torch.backends.cpu.get_cpu_capability())'
err=$(mktemp)
torch_ok() { "$VENV/bin/python" -c "$CHECK" 2>"$err"; }
echo "install_torch: installing torch into $VENV ..." >&2
"${PIP[@]}" install --no-deps torch >/dev/null 2>&1
"${PIP[@]}" install filelock 'typing-extensions>=4.13.0' 'setuptools>=77.0.3' 'sympy>=1.13.3' \
  'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' >/dev/null 2>&1
if ! torch_ok >/dev/null; then
  mapfile -t libs < <("$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for r in m.requires("torch") or []:
    name = r.split(";")[0].strip()
    if name.startswith(("nvidia-cusparselt", "nvidia-nvshmem", "nvidia-nccl")):
        print(name)
print("nvidia-cufile")
PY
)
  echo "install_torch: torch needs CUDA libraries to import; installing ${libs[*]}" >&2
  "${PIP[@]}" install --no-deps "${libs[@]}" >/dev/null 2>&1
  if ! torch_ok >/dev/null && [ "${ATTN_FULL_TORCH:-${ATTN_PEERS_FULL_TORCH:-1}}" = 1 ]; then
    echo "install_torch: still no import ($(tail -n 1 "$err")); full install" >&2
    "${PIP[@]}" install torch >/dev/null 2>&1
  fi
fi
if v=$(torch_ok); then
  echo "install_torch: torch $v" >&2
  rm -f "$err"
  exit 0
fi
echo "install_torch: torch does not import: $(tail -n 1 "$err")" >&2
rm -f "$err"
exit 1
