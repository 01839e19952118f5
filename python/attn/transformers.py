"""attn as a Hugging Face transformers attention implementation.

    import attn.transformers
    attn.transformers.register()            # once per process
    model = AutoModel.from_pretrained(path, attn_implementation="attn")
    # or, for a model already loaded: model.set_attn_implementation("attn")

Every attention layer of the model then runs attn's CPU kernels through
attn.torch.scaled_dot_product_attention, with the contract of transformers'
own "sdpa" implementation: query, key, value arrive as [B, H, T, d]
(key/value with H_kv <= H heads: grouped-query attention), the output is
returned as [B, T, H, d]; the model's `scaling` is the scale, a causal layer
with no mask uses is_causal, and padding, causal, sliding-window and
KV-cache masks (prefill and every decoding step of `generate`) arrive as
boolean masks, True = attend.

The trap this module exists to avoid
------------------------------------
transformers builds attention masks per implementation name: it looks the
name up in `transformers.masking_utils.AttentionMaskInterface`, and for a
name with no mask function registered there it builds **no mask at all** and
passes attention_mask=None to the attention function (the path meant for
backends that handle padding themselves). So an adapter that registers only
an attention function (AttentionInterface.register) runs without any error
and silently attends to padding tokens: on sentence-transformers'
all-MiniLM-L6-v2 with a padded batch, the padded sentences' embeddings have
cosine similarity about 0.8 to the model's own (0.52 for the shortest; see
python/tests/test_transformers.py). A causal decoder fares no better: with
left padding its real tokens attend to the pads.

register() therefore registers both halves under the same name: the
attention function and transformers' own SDPA mask builder (`sdpa_mask`,
the boolean True = attend mask that attn.torch takes, built with the same
rules as for "sdpa", including its skips to is_causal where no mask is
needed). And attention_forward refuses to run (RuntimeError) when the
model's attention implementation has no mask function registered, rather
than computing unmasked attention: registering attention_forward on its own
under another name fails loudly on the first forward pass.

Score modifiers, computed in the kernels (docs/modifiers.md):
- ``softcap`` (Gemma 2's attn_logit_softcapping, passed by the model as the
  ``softcap`` keyword) becomes attn.torch's softcap=: cap * tanh(s / cap) on
  the scaled scores before the mask, as transformers' eager Gemma 2 does.
- ``s_aux`` (gpt-oss's per-head sinks) becomes sinks=: one logit per query
  head in each row's softmax, with no value, as the eager gpt-oss does.
- ``sliding_window`` (Mistral, Gemma 2 / 3, gpt-oss, Qwen 2 layers...): where
  the mask transformers asks for is exactly causal plus a window of W
  positions (kv_idx > q_idx - W: transformers' own
  sliding_window_causal_mask_function, no padding, no extra mask function,
  keys ending at the last query and Tq == Tk or Tq == 1), mask_function
  builds no mask (returns None) and attention_forward passes
  window=(W - 1, 0) with causality to the kernels, which skip the key tiles
  outside the window. Otherwise (padding, a static cache, another mask
  pattern) the mask is built as for "sdpa" and used as is; softcap and
  sinks still apply. The layer's window is the ``sliding_window`` keyword
  the model passes, else the module's ``sliding_window`` attribute (every
  model of transformers 5.24 that builds sliding-window masks has one or the
  other).

Not supported: attention weights (output_attentions returns None for them,
with a warning, as "sdpa" does). Dropout is passed on to attn.torch as
dropout_p (models pass 0 in eval mode).
"""
import torch
import transformers
from transformers import AttentionInterface

try:
    from transformers.masking_utils import (
        AttentionMaskInterface,
        causal_mask_function,
        sdpa_mask,
        sliding_window_causal_mask_function,
        sliding_window_overlay,
    )
except ImportError as e:  # transformers before its per-implementation mask functions
    raise ImportError(
        "attn.transformers needs a transformers with masking_utils.AttentionMaskInterface "
        f"(tested with 5.24), got transformers {transformers.__version__}: pip install -U transformers"
    ) from e

NAME = "attn"

__all__ = ["NAME", "attention_forward", "mask_function", "register", "sliding_window_of"]


def _mask_registered(name):
    # transformers itself decides by this mapping whether to build a mask
    # (masking_utils._preprocess_mask_arguments); ask it the same way.
    return name in AttentionMaskInterface._global_mapping


def _free_variables(fn):
    """The closure of fn as {name: value}, or {} (no closure)."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {}
    try:
        return dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    except ValueError:  # an empty cell
        return {}


# The code objects of transformers' own factories: what sliding_window_causal_
# mask_function(W) returns is and_masks(sliding_window_overlay(W),
# causal_mask_function), closures over `mask_functions` and `sliding_window`.
_AND_MASK_CODE = sliding_window_causal_mask_function(1).__code__
_OVERLAY_CODE = sliding_window_overlay(1).__code__


def sliding_window_of(fn):
    """W if fn is transformers' sliding_window_causal_mask_function(W) (keys
    with q_idx - W < kv_idx <= q_idx), else None. Recognised by the code
    objects of transformers' own factories and their closures, so any other
    function (chunked, bidirectional, with an extra and / or function, a
    future transformers that builds it differently) is None, never a guess."""
    if getattr(fn, "__code__", None) is not _AND_MASK_CODE:
        return None
    parts = _free_variables(fn).get("mask_functions")
    if not (isinstance(parts, tuple) and len(parts) == 2 and parts[1] is causal_mask_function):
        return None
    if getattr(parts[0], "__code__", None) is not _OVERLAY_CODE:
        return None
    window = _free_variables(parts[0]).get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return None
    return window


def _window_needs_no_mask(q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
                          allow_is_causal_skip):
    """True where the sliding-window mask transformers asks for is exactly
    causal + window over the given keys, with positions the kernels infer
    from the shapes alone, so that attention_forward can pass the window
    instead of a mask."""
    if not allow_is_causal_skip or sliding_window_of(mask_function) is None:
        return False
    if (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor)):
        return False  # reading the padding or a tensor offset would break the graph
    # The keys end at the last query (so causal and the window count from the
    # same diagonal), and Tq == Tk (prefill: top-left == bottom-right) or
    # Tq == 1 (decoding: attention_forward aligns a single query at the end).
    if q_offset + q_length != kv_offset + kv_length or not (q_length == kv_length or q_length == 1):
        return False
    if attention_mask is not None:
        if attention_mask.shape[-1] < kv_offset + kv_length:
            return False  # keys past the 2-D mask: sdpa_mask pads them as hidden
        if not bool(attention_mask[:, kv_offset:kv_offset + kv_length].all()):
            return False  # padding
    return True


def mask_function(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                  mask_function=causal_mask_function, attention_mask=None, local_size=None,
                  allow_is_causal_skip=True, **kwargs):
    """The mask builder registered for "attn": transformers' sdpa_mask, except
    for a pure sliding window.

    A boolean [B, 1, Tq, Tk] mask (True = attend) combining padding, causal,
    sliding-window and cache offsets, or None where is_causal (or no mask)
    says the same (no padding, and Tq == 1 or Tq == Tk), as sdpa_mask. For
    transformers' causal sliding-window pattern with no padding, keys ending
    at the last query and Tq == Tk or Tq == 1, None as well: the attention
    function then passes the layer's window to the kernels.
    """
    if _window_needs_no_mask(q_length, kv_length, q_offset, kv_offset, mask_function,
                             attention_mask, allow_is_causal_skip):
        return None
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                     q_offset=q_offset, kv_offset=kv_offset, mask_function=mask_function,
                     attention_mask=attention_mask, local_size=local_size,
                     allow_is_causal_skip=allow_is_causal_skip, **kwargs)


def attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    is_causal=None,
    position_bias=None,
    **kwargs,
):
    """An AttentionInterface function: [B, H, Tq, d] in, ([B, Tq, H, dv], None) out."""
    from . import torch as attn_torch  # late, so that it is looked up at call time

    config = getattr(module, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if isinstance(impl, str) and not _mask_registered(impl):
        raise RuntimeError(
            f"attn.transformers: the model's attention implementation {impl!r} has no mask "
            "function registered in transformers.masking_utils.AttentionMaskInterface, so "
            "transformers passes attention_mask=None and padding (and, with padding, causality) "
            "would be silently ignored. Call attn.transformers.register() (it registers both), "
            f"or AttentionMaskInterface.register({impl!r}, attn.transformers.mask_function)."
        )
    if kwargs.get("output_attentions", False):
        transformers.utils.logging.get_logger(__name__).warning_once(
            "attn.transformers does not return attention weights (output_attentions=True): "
            "they are None; use attn_implementation='eager' for them."
        )

    q_length = query.shape[2]
    enable_gqa = key.shape[1] != query.shape[1]
    # As "sdpa": a layer's own is_causal unless the call says otherwise, and
    # is_causal only where no mask came (the mask builder skipped it because
    # Tq == Tk, or Tq == 1 where there is nothing to hide).
    causal_layer = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_length > 1 and attention_mask is None and causal_layer)
    # Prefill into an empty static cache: the keys past Tq are all in the
    # future of every query, and PyTorch's is_causal is top-left aligned.
    if is_causal and key.shape[2] > q_length:
        key = key[:, :, :q_length, :]
        value = value[:, :, :q_length, :]
        if position_bias is not None:
            position_bias = position_bias[:, :, :, :q_length]
    # A causal layer's sliding window, where no mask came: mask_function
    # built none because the pattern was exactly causal + window (a mask,
    # where one came, holds the window itself), or sdpa_mask skipped it
    # because there are fewer keys than W (then the window hides nothing).
    # Tq == Tk or Tq == 1 there, so that top-left (is_causal) and bottom-right
    # (a single query, no causal flag) both put query i at key i + Tk - Tq.
    window = None
    if attention_mask is None and causal_layer:
        sliding = kwargs["sliding_window"] if "sliding_window" in kwargs else getattr(
            module, "sliding_window", None)
        if sliding is not None:
            # transformers' window: kv_idx > q_idx - W, W - 1 keys back.
            window = (int(sliding) - 1, 0)
    if position_bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        attention_mask = create_position_bias_mask(position_bias, attention_mask, is_causal, query, key)
        is_causal = False

    out = attn_torch.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=is_causal,
        scale=scaling,
        enable_gqa=enable_gqa,
        window=window,
        softcap=kwargs.get("softcap"),
        sinks=kwargs.get("s_aux"),
    )
    return out.transpose(1, 2).contiguous(), None


def register(name=NAME):
    """Makes attn_implementation=name (default "attn") run attn's kernels.

    Registers attention_forward in transformers.AttentionInterface and
    mask_function in transformers.masking_utils.AttentionMaskInterface under
    the same name (both are needed: see the module's docstring). Idempotent;
    returns the name.
    """
    AttentionMaskInterface.register(name, mask_function)
    AttentionInterface.register(name, attention_forward)
    return name
