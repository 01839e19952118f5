"""Score modifiers through attn.attention (window=, softcap=, sinks=,
alibi_slopes=; attn.h "Score modifiers", FlashAttention's conventions),
against a float64 NumPy reference written here from those conventions."""
import numpy as np
import pytest

import attn
from test_attention import rand


def modified_reference(q, k, v, causal, window=None, softcap=0.0, sinks=None, alibi=None):
    """Float64: s = scale·q·k, then cap·tanh(s/cap), - slope·|diag - j|,
    window and causal masks, softmax with a sink key of value 0."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, h, tq, d = q.shape
    tk = k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(d)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    diag = i + (0 if causal == "top_left" else tk - tq)
    if alibi is not None:
        slopes = np.broadcast_to(np.asarray(alibi, np.float64).reshape(-1 if np.ndim(alibi) == 1 else b, h), (b, h))
        s = s - slopes[:, :, None, None] * np.abs(diag - j)[None, None]
    visible = np.ones((tq, tk), bool)
    if causal:
        visible &= j <= diag
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= diag - left
        if right >= 0:
            visible &= j <= diag + right
    s = np.where(visible, s, -np.inf)
    sink = np.full((h,), -np.inf) if sinks is None else np.asarray(sinks, np.float64)
    m = np.maximum(s.max(axis=-1), sink[None, :, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe[..., None])
    total = p.sum(axis=-1) + np.exp(sink[None, :, None] - m_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total[..., None] > 0, (p @ v) / np.where(total > 0, total, 1)[..., None], 0.0)
        lse = np.where(total > 0, m_safe + np.log(total), -np.inf)
    return out, lse


CASES = {
    "window": dict(window=(6, -1)),
    "window_both": dict(window=(4, 3)),
    "softcap": dict(softcap=1.5),
    "sinks": dict(sinks=np.array([0.5, -1.0, 2.0, -np.inf], np.float32)),
    "alibi": dict(alibi=np.array([0.5, 0.25, 0.125, 0.0625], np.float32)),
    "alibi_per_batch": dict(alibi=np.array([[0.5, 0.25, 0.125, 0.06], [0.1, 0.2, 0.3, 0.4]],
                                           np.float32)),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("causal", [False, "bottom_right", "top_left"])
@pytest.mark.parametrize("kernel", ["auto", "naive", "streaming", "parallel"])
@pytest.mark.parametrize("tq", [1, 29])
def test_modifier_matches_float64(name, causal, kernel, tq):
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, 2, 4, tq, 32), rand(rng, 2, 4, 41, 32), rand(rng, 2, 4, 41, 16)
    m = CASES[name]
    got, lse = attn.attention(q, k, v, causal=causal, kernel=kernel, return_lse=True,
                              window=m.get("window"), softcap=m.get("softcap", 0.0),
                              sinks=m.get("sinks"), alibi_slopes=m.get("alibi"))
    want, want_lse = modified_reference(q, k, v, causal, **m)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5, rtol=1e-4)
    # A window shifted by one, or the modifier dropped, is far outside the
    # tolerance (a single query row may see too few keys to tell: tq > 1).
    if tq > 1:
        wrong = dict(m, window=(m["window"][0] + 1, m["window"][1])) if "window" in m else {}
        bad, _ = modified_reference(q, k, v, causal, **wrong)
        assert np.abs(bad - want).max() > 1e-3


def test_bad_values_name_the_field():
    rng = np.random.default_rng(6)
    q, k, v = rand(rng, 1, 2, 4, 8), rand(rng, 1, 2, 5, 8), rand(rng, 1, 2, 5, 8)
    with pytest.raises(attn.Error, match="window.left"):
        attn.attention(q, k, v, window=(-3, -1))
    with pytest.raises(attn.Error, match="softcap"):
        attn.attention(q, k, v, softcap=float("nan"))
    with pytest.raises(attn.Error, match="sinks.size"):
        attn.attention(q, k, v, sinks=np.zeros(3, np.float32))
    with pytest.raises(attn.Error, match="alibi_slopes"):
        attn.attention(q, k, v, alibi_slopes=np.zeros((1, 3), np.float32))
