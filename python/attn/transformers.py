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

Not supported (they raise, as for "sdpa"): softcap, and attention weights
(output_attentions returns None for them, with a warning, as "sdpa" does).
Dropout is passed on to attn.torch as dropout_p (models pass 0 in eval mode).
"""
import transformers
from transformers import AttentionInterface

try:
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError as e:  # transformers before its per-implementation mask functions
    raise ImportError(
        "attn.transformers needs a transformers with masking_utils.AttentionMaskInterface "
        f"(tested with 5.24), got transformers {transformers.__version__}: pip install -U transformers"
    ) from e

NAME = "attn"

__all__ = ["NAME", "attention_forward", "mask_function", "register"]


def _mask_registered(name):
    # transformers itself decides by this mapping whether to build a mask
    # (masking_utils._preprocess_mask_arguments); ask it the same way.
    return name in AttentionMaskInterface._global_mapping


def mask_function(*args, **kwargs):
    """The mask builder registered for "attn": transformers' sdpa_mask.

    A boolean [B, 1, Tq, Tk] mask (True = attend) combining padding, causal,
    sliding-window and cache offsets, or None where is_causal (or no mask)
    says the same (no padding, and Tq == 1 or Tq == Tk).
    """
    return sdpa_mask(*args, **kwargs)


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
    if kwargs.get("softcap") is not None:
        raise ValueError("attn.transformers: softcap is not supported (use attn_implementation='eager')")
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
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_length > 1 and attention_mask is None and is_causal)
    # Prefill into an empty static cache: the keys past Tq are all in the
    # future of every query, and PyTorch's is_causal is top-left aligned.
    if is_causal and key.shape[2] > q_length:
        key = key[:, :, :q_length, :]
        value = value[:, :, :q_length, :]
        if position_bias is not None:
            position_bias = position_bias[:, :, :, :q_length]
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
