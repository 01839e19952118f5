"""attn for PyTorch: a drop-in ``scaled_dot_product_attention``.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)

has the signature and semantics of ``torch.nn.functional.
scaled_dot_product_attention`` on CPU tensors of float32, bfloat16 or
float16: leading dims broadcast as in PyTorch, a bool ``attn_mask`` (True =
attend) or an additive float one broadcast to (..., L, S), ``is_causal``
top-left aligned, ``scale`` (default 1/sqrt(E)), ``enable_gqa`` (fewer key /
value heads, which must divide the query heads). The output has the query's
dtype and shape (..., L, Ev); a fully masked query row gives 0, as PyTorch
2.15 does (older PyTorch could give NaN).

The kernels read q, k, v in place through their strides (a transpose of a
[B, T, H, E] tensor is not copied) as long as the last dim is contiguous;
other layouts are copied once. A bool mask, or a 16-bit float one, becomes a
float32 additive mask of the mask's own shape (broadcast dims stay 0-strided).

Score modifiers, as keyword arguments beyond PyTorch's signature, computed
in the kernels (no mask is built for them; docs/modifiers.md):
``window=(left, right)`` (FlashAttention's ``window_size``: key j is visible
to query i only if diag(i) - left <= j <= diag(i) + right, -1 unbounded;
diag(i) = i with ``is_causal``, top-left as PyTorch's, else i + S - L,
FlashAttention's bottom-right), ``softcap=`` (the scaled score s becomes
softcap * tanh(s / softcap), before the mask), ``sinks=`` (one logit per
query head, a virtual key of value 0 that joins each row's softmax: gpt-oss,
transformers' ``s_aux``) and ``alibi_slopes=`` ((H,) or (..., H) for the
batch dims: bias -slope * |diag(i) - j|). They combine with each other and
with attn_mask, is_causal and GQA.

What it does not do, each a clear error: dropout (``dropout_p`` must be 0),
autograd (inputs that require grad while grad mode is on: use
``torch.no_grad()`` / ``torch.inference_mode()``), float64 and other dtypes,
non-CPU tensors.

The work is the custom operator ``torch.ops.attn.sdpa`` (a
``torch.library.custom_op`` with a fake implementation), so
``torch.compile(fullgraph=True)`` keeps calls in one graph.

Importing this module imports torch; ``import attn`` alone does not.
"""
import math
from typing import Optional

import torch

from . import _attn

__all__ = ["scaled_dot_product_attention"]

_NAME = "attn.torch.scaled_dot_product_attention"
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t itself when attn can read it in place (contiguous last dim, rows not
    overlapping), else a contiguous copy."""
    if t.size(-1) > 1 and t.stride(-1) != 1:
        return t.contiguous()
    if t.size(-2) > 1 and t.stride(-2) < t.size(-1):
        return t.contiguous()
    return t


@torch.library.custom_op("attn::sdpa", mutates_args=(), device_types="cpu")
def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
          is_causal: bool, scale: Optional[float], window_left: int = -1, window_right: int = -1,
          softcap: float = 0.0, sinks: Optional[torch.Tensor] = None,
          alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """attn's attention on 4-D tensors: q (B, Hq, L, E), k (B, Hkv, S, E),
    v (B, Hkv, S, Ev) with Hkv dividing Hq, one dtype; mask None or float32
    of shape (B, Hq, L, S) (any strides, 0 to broadcast). The score
    modifiers as attn.attention takes them: the window's sides (-1
    unbounded), softcap (0 none), sinks None or float32 (Hq,), alibi_slopes
    None or float32 (Hq,) or (B, Hq). Returns a new (B, Hq, L, Ev) tensor of
    q's dtype."""
    b, hq, length, e = q.shape
    s, ev = k.size(2), v.size(3)
    out = torch.empty((b, hq, length, ev), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    if s == 0:  # no keys: every row is fully masked
        return out.zero_()
    if e == 0:
        # Every score is 0 (an empty dot product): the weights are the
        # softmax of the mask alone, which attn computes from 1-dim zeros.
        q = q.new_zeros((b, hq, length, 1))
        k = k.new_zeros((b, k.size(1), s, 1))
        scale = 1.0
    q, k, v = (_rows_contiguous(t.detach()) for t in (q, k, v))
    if mask is not None:
        mask = mask.detach()
    window = None if window_left == -1 and window_right == -1 else (window_left, window_right)
    _attn.attention(q, k, v, causal="top_left" if is_causal else False, scale=scale,
                    mask=mask, out=out, threads=torch.get_num_threads(), window=window,
                    softcap=softcap,
                    sinks=None if sinks is None else sinks.detach(),
                    alibi_slopes=None if alibi_slopes is None else alibi_slopes.detach())
    return out


@_sdpa.register_fake
def _sdpa_fake(q, k, v, mask, is_causal, scale, window_left=-1, window_right=-1, softcap=0.0,
               sinks=None, alibi_slopes=None):
    return q.new_empty((q.size(0), q.size(1), q.size(2), v.size(3)))


def _shape(t):
    return tuple(t.shape)


def _broadcast(query, key, value, tail):
    """The broadcast of the dims before the last `tail` of query, key, value."""
    shapes = [tuple(t.shape[:-tail]) for t in (query, key, value)]
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        raise ValueError(
            f"{_NAME}: the leading dims of query, key and value must broadcast (as in PyTorch; "
            "with enable_gqa=True the key and value heads may divide the query heads), got "
            f"query {_shape(query)}, key {_shape(key)}, value {_shape(value)}") from None


def _flatten_batch(t: torch.Tensor, batch: tuple) -> torch.Tensor:
    """(*batch, H, rows, cols) as (B, H, rows, cols), B = prod(batch): a view
    for one or no batch dim, reshape's view-or-copy for more."""
    if len(batch) == 0:
        return t.unsqueeze(0)
    if len(batch) == 1:
        return t
    return t.reshape((-1,) + tuple(t.shape[-3:]))


def _additive_mask(attn_mask: torch.Tensor, q_dtype: torch.dtype) -> torch.Tensor:
    """A float32 additive mask of attn_mask's shape (PyTorch's dtype rules)."""
    if attn_mask.dtype == torch.bool:
        # True attends (adds 0), False hides the key (adds -inf).
        return torch.zeros(attn_mask.shape, dtype=torch.float32,
                           device=attn_mask.device).masked_fill(~attn_mask, -math.inf)
    if attn_mask.dtype == torch.float32:
        return attn_mask
    if attn_mask.dtype == q_dtype:  # bfloat16 or float16, as the query
        return attn_mask.to(torch.float32)
    raise TypeError(f"{_NAME}: attn_mask must be bool, float32 or the query's dtype ({q_dtype}), "
                    f"got {attn_mask.dtype}")


def _window(window):
    """(left, right) ints >= -1 from window=, or (-1, -1) for None."""
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"{_NAME}: window must be None or a pair (left, right) of ints, -1 for an "
                        f"unbounded side (FlashAttention's window_size), got {window!r}") from None
    for name, side in (("left", left), ("right", right)):
        if isinstance(side, bool) or not isinstance(side, int):
            raise TypeError(f"{_NAME}: window {name} must be an int (-1: unbounded), got "
                            f"{type(side).__name__} {side!r}")
        if side < -1:
            raise ValueError(f"{_NAME}: window {name} must be >= 0, or -1 for unbounded, got {side}")
    return left, right


def _per_head(name, t, heads):
    """One value per query head (sinks=, a 1-d alibi_slopes=): a float
    tensor of shape (heads,), as contiguous float32."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_NAME}: {name} must be a torch.Tensor or None, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{_NAME}: {name} must be a float tensor, got {t.dtype}")
    if tuple(t.shape) != (heads,):
        raise ValueError(f"{_NAME}: {name} must have shape ({heads},), one value per query head, "
                         f"got shape {_shape(t)}")
    return t.to(torch.float32).contiguous()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, window=None,
                                 softcap=None, sinks=None, alibi_slopes=None):
    """torch.nn.functional.scaled_dot_product_attention, computed by attn.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev),
    where ... broadcast (with enable_gqa=True the key/value heads, dim -3,
    may instead divide the query heads). attn_mask: bool (True = attend) or
    float (added to the scores; float32 or the query's dtype), broadcastable
    to (..., L, S); not together with is_causal. is_causal: query i sees keys
    j <= i. scale: default 1/sqrt(E). dropout_p must be 0.

    Score modifiers (keyword only; attn.h "Score modifiers", FlashAttention's
    conventions), with diag(i) = i under is_causal, else i + S - L:
    window: (left, right), key j visible only if diag(i) - left <= j <=
    diag(i) + right, -1 unbounded. softcap: scores s (after scale) become
    softcap * tanh(s / softcap), before attn_mask; None or 0: none.
    sinks: float tensor (H,), H the query heads (dim -3 of the output): one
    logit per head joining each row's softmax with value 0 (gpt-oss).
    alibi_slopes: float tensor (H,) or (..., H) broadcastable to the output's
    batch dims and H: -slope * |diag(i) - j| added to the (capped) score.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_NAME}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"{_NAME}: attn_mask must be a torch.Tensor or None, got "
                        f"{type(attn_mask).__name__}")
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"{_NAME}: dropout_p must be 0.0 (attn has no dropout), got {dropout_p}; "
            "pass dropout_p=0.0 (dropout is for training, e.g. `dropout if self.training else 0.0`)")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{_NAME}: attn_mask must be None when is_causal=True "
                         "(as in PyTorch: pass one or the other)")
    tensors = [("query", query), ("key", key), ("value", value)]
    if attn_mask is not None:
        tensors.append(("attn_mask", attn_mask))
    modifier_tensors = []
    for name, t in (("sinks", sinks), ("alibi_slopes", alibi_slopes)):
        if t is not None:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_NAME}: {name} must be a torch.Tensor or None, got "
                                f"{type(t).__name__}")
            modifier_tensors.append((name, t))
    window_left, window_right = _window(window)
    if softcap is None:
        softcap = 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"{_NAME}: softcap must be None or a float, got {type(softcap).__name__}")
    softcap = float(softcap)
    if not (math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"{_NAME}: softcap must be finite and > 0 (or None / 0 for none), "
                         f"got {softcap}")
    for name, t in tensors + modifier_tensors:
        if t.device.type != "cpu":
            raise TypeError(f"{_NAME}: {name} must be a CPU tensor, got device {t.device}")
    if torch.is_grad_enabled():
        needs = [name for name, t in tensors + modifier_tensors if t.requires_grad]
        if needs:
            raise NotImplementedError(
                f"{_NAME}: no autograd: {', '.join(needs)} require(s) grad; call it under "
                "torch.no_grad() or torch.inference_mode(), or pass detached tensors")
    if query.dtype not in _DTYPES:
        raise TypeError(f"{_NAME}: query must be float32, bfloat16 or float16, got {query.dtype}")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"{_NAME}: query, key and value must have the same dtype, got "
                        f"query {query.dtype}, key {key.dtype}, value {value.dtype}")
    for name, t in tensors:
        if t.dim() < 2:
            raise ValueError(f"{_NAME}: {name} must have at least 2 dims (..., rows, cols), "
                             f"got shape {_shape(t)}")
    length, e = query.shape[-2:]
    s, ev = value.shape[-2:]
    if key.size(-1) != e:
        raise ValueError(f"{_NAME}: key's last dim must equal query's (E = {e}), got key shape "
                         f"{_shape(key)}, query shape {_shape(query)}")
    if key.size(-2) != s:
        raise ValueError(f"{_NAME}: key and value must have the same sequence length (dim -2), "
                         f"got key shape {_shape(key)}, value shape {_shape(value)}")

    if enable_gqa and min(query.dim(), key.dim(), value.dim()) >= 3:
        # Heads (dim -3): the key's and value's each divide the query's;
        # the dims before them broadcast.
        hq, hk, hv = query.size(-3), key.size(-3), value.size(-3)
        if hq % hk or hq % hv:
            raise ValueError(f"{_NAME}: with enable_gqa=True the key and value heads (dim -3) must "
                             f"divide the query heads, got query {hq}, key {hk}, value {hv}")
        batch = _broadcast(query, key, value, 3)
        heads, hkv = hq, hk
        if hk != hv:
            # attn reads one kv head per group: give both the query's heads.
            key = key.repeat_interleave(hq // hk, dim=-3)
            value = value.repeat_interleave(hq // hv, dim=-3)
            hkv = hq
        out_lead = batch + (heads,)
    else:
        # Every dim before (rows, cols) broadcasts, heads included (a key
        # and value with one head serve every query head, attn's MQA).
        out_lead = _broadcast(query, key, value, 2)
        batch, heads = (out_lead[:-1], out_lead[-1]) if out_lead else ((), 1)
        hk = key.size(-3) if key.dim() >= 3 else 1
        hv = value.size(-3) if value.dim() >= 3 else 1
        hkv = 1 if hk == 1 and hv == 1 else heads
    lead = batch + (heads,)
    q4 = _flatten_batch(query.expand(lead + (length, e)), batch)
    k4 = _flatten_batch(key.expand(batch + (hkv, s, e)), batch)
    v4 = _flatten_batch(value.expand(batch + (hkv, s, ev)), batch)

    mask4 = None
    if attn_mask is not None:
        want = out_lead + (length, s)
        try:
            ok = tuple(torch.broadcast_shapes(attn_mask.shape, want)) == want
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"{_NAME}: attn_mask must broadcast to {want} (..., L, S), got shape "
                             f"{_shape(attn_mask)}")
        # 0-strided where it broadcasts: attn reads the mask through its strides.
        mask4 = _flatten_batch(_additive_mask(attn_mask, query.dtype).expand(lead + (length, s)),
                               batch)

    sinks1 = None if sinks is None else _per_head("sinks", sinks, heads)
    alibi = None
    if alibi_slopes is not None:
        if not alibi_slopes.is_floating_point():
            raise TypeError(f"{_NAME}: alibi_slopes must be a float tensor, got {alibi_slopes.dtype}")
        if alibi_slopes.dim() <= 1:
            alibi = _per_head("alibi_slopes", alibi_slopes, heads)
        else:
            try:
                ok = tuple(torch.broadcast_shapes(alibi_slopes.shape, lead)) == lead
            except RuntimeError:
                ok = False
            if not ok:
                raise ValueError(f"{_NAME}: alibi_slopes must have shape ({heads},) or broadcast to "
                                 f"{lead} (the batch dims and the {heads} query heads), got shape "
                                 f"{_shape(alibi_slopes)}")
            alibi = alibi_slopes.to(torch.float32).expand(lead).reshape(-1, heads).contiguous()

    if scale is not None:
        scale = float(scale)
    out = _sdpa(q4, k4, v4, mask4, bool(is_causal), scale, window_left, window_right, softcap,
                sinks1, alibi)
    return out.reshape(out_lead + (length, ev))
