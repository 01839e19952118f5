"""attn: SIMD CPU kernels for scaled dot-product attention.

    out = attn.attention(q, k, v, causal=True)

runs on NumPy arrays (or any DLPack / buffer-protocol CPU array) of float32,
float16 or bfloat16 (ml_dtypes.bfloat16), each of q, k, v and out its own
type, in place: no copies, any strides with a contiguous last dimension. A
new output has q's dtype unless out_dtype= is given. K and V may also be
ggml's 8-bit q8_0 or 4-bit q4_0 blocks (a llama.cpp KV cache):
attn.quantize_q8_0(k) / attn.quantize_q4_0(k) give the uint8 bytes,
attn.attention(q, kq, vq, k_dtype="q8_0", v_dtype="q8_0") (or "q4_0") reads
them. Errors raise attn.Error (a ValueError) whose message names the
bad field and value.
"""
from importlib.metadata import PackageNotFoundError, version as _version

from ._attn import (
    AutoChoice,
    CAUSAL_MODES,
    Error,
    TuningStatus,
    attention,
    clear_tuning,
    compiled_targets,
    current_dot_path,
    current_target,
    current_tuning,
    default_tuning_path,
    dequantize_q4_0,
    dequantize_q8_0,
    dot_paths,
    explain,
    force_dot_path,
    force_target,
    kernels,
    load_tuning_file,
    quantize_q4_0,
    quantize_q8_0,
    supported_dot_paths,
    supported_targets,
    kvcache_attention,
    varlen_attention,
)

try:
    __version__ = _version("attn")
except PackageNotFoundError:  # imported from a build tree, not installed
    __version__ = "unknown"

__all__ = [
    "AutoChoice",
    "CAUSAL_MODES",
    "Error",
    "TuningStatus",
    "attention",
    "clear_tuning",
    "compiled_targets",
    "current_dot_path",
    "current_target",
    "current_tuning",
    "default_tuning_path",
    "dequantize_q4_0",
    "dequantize_q8_0",
    "dot_paths",
    "explain",
    "force_dot_path",
    "force_target",
    "kernels",
    "load_tuning_file",
    "quantize_q4_0",
    "quantize_q8_0",
    "supported_dot_paths",
    "supported_targets",
    "kvcache_attention",
    "varlen_attention",
]
