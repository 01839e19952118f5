"""attn.attention against a NumPy float64 reference written here (independent
of the library's own C++ reference), on the layouts Python users have."""
import threading

import numpy as np
import pytest

import attn

# Every kernel of the library's table, and auto: a new kernel is tested here
# without an edit.
KERNELS = ["auto"] + attn.kernels()


def test_the_kernel_table_is_listed_once_with_naive_last():
    names = attn.kernels()
    assert len(names) == len(set(names)) and "auto" not in names
    assert names[-1] == "naive"
    assert {"naive", "blocked", "streaming", "parallel"} <= set(names)


def reference(q, k, v, causal="none", scale=None, mask=None):
    """Float64 attention over 4-D [B, H, T, d] arrays; returns (out, lse)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = hq // hkv
    # GQA: query head h reads kv head h // group; a batch of 1 is shared.
    k = np.repeat(np.broadcast_to(k, (b,) + k.shape[1:]), group, axis=1)
    v = np.repeat(np.broadcast_to(v, (b,) + v.shape[1:]), group, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * (1 / np.sqrt(d) if scale is None else scale)
    if mask is not None:
        s = s + np.asarray(mask, dtype=np.float64)
    i = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    if causal in (True, "bottom_right"):
        s = np.where(j <= (tk - tq) + i, s, -np.inf)
    elif causal == "top_left":
        s = np.where(j <= i, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    total = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, (p @ v) / np.where(total > 0, total, 1), 0.0)
        lse = np.where(total[..., 0] > 0, m_safe[..., 0] + np.log(total[..., 0]), -np.inf)
    return out, lse


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def as4d(x):
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def check(got, want, atol=2e-5, rtol=1e-4):
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, "bottom_right", "top_left"])
def test_matches_reference_every_kernel(rng, kernel, causal):
    q, k, v = rand(rng, 2, 4, 19, 32), rand(rng, 2, 4, 37, 32), rand(rng, 2, 4, 37, 24)
    out, lse = attn.attention(q, k, v, causal=causal, kernel=kernel, return_lse=True)
    want, want_lse = reference(q, k, v, causal=causal)
    assert out.shape == (2, 4, 19, 24) and out.dtype == np.float32
    assert lse.shape == (2, 4, 19)
    check(out, want)
    check(lse, want_lse)


@pytest.mark.parametrize("ndim", [2, 3])
def test_fewer_dims_mean_one_batch_and_head(rng, ndim):
    shape = (3, 16, 8)[3 - ndim:]
    q, k, v = rand(rng, *shape), rand(rng, *shape), rand(rng, *shape)
    out = attn.attention(q, k, v, causal=True)
    assert out.shape == shape
    check(out, reference(as4d(q), as4d(k), as4d(v), causal=True)[0].reshape(shape))


@pytest.mark.parametrize("hkv", [1, 2, 8])
def test_grouped_query_heads(rng, hkv):
    q, k, v = rand(rng, 2, 8, 5, 64), rand(rng, 2, hkv, 40, 64), rand(rng, 2, hkv, 40, 64)
    check(attn.attention(q, k, v, causal=True), reference(q, k, v, causal=True)[0])


def test_decode_query_against_padded_kv_cache(rng):
    cache_k, cache_v = rand(rng, 1, 2, 128, 64), rand(rng, 1, 2, 128, 64)
    q = rand(rng, 1, 8, 1, 64)
    for length in (1, 17, 64):
        k, v = cache_k[:, :, :length], cache_v[:, :, :length]  # views, row stride 64
        assert not k.flags.c_contiguous or length == 128
        check(attn.attention(q, k, v, causal=True), reference(q, k, v)[0])


def test_sequence_major_views_are_read_in_place(rng):
    # [B, T, H, d] buffers, as most models keep them, seen as [B, H, T, d].
    qb, kb, vb = rand(rng, 2, 12, 4, 32), rand(rng, 2, 20, 2, 32), rand(rng, 2, 20, 2, 32)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qb, kb, vb))
    out_b = np.full((2, 12, 4, 32), np.nan, dtype=np.float32)
    out = out_b.transpose(0, 2, 1, 3)
    got = attn.attention(q, k, v, causal="bottom_right", out=out)
    assert got is out  # written into the caller's buffer, not a copy
    check(out_b.transpose(0, 2, 1, 3), reference(q, k, v, causal="bottom_right")[0])


def test_batch_of_one_kv_is_shared(rng):
    q, k, v = rand(rng, 3, 2, 6, 16), rand(rng, 1, 2, 9, 16), rand(rng, 1, 2, 9, 16)
    check(attn.attention(q, k, v), reference(q, k, v)[0])


def test_scale(rng):
    q, k, v = rand(rng, 1, 1, 7, 16), rand(rng, 1, 1, 7, 16), rand(rng, 1, 1, 7, 16)
    check(attn.attention(q, k, v, scale=0.7), reference(q, k, v, scale=0.7)[0])


@pytest.mark.parametrize("mask_shape", [(9, 13), (4, 9, 13), (2, 1, 9, 13), (2, 4, 9, 13), (1, 13)])
def test_broadcast_masks(rng, mask_shape):
    q, k, v = rand(rng, 2, 4, 9, 16), rand(rng, 2, 4, 13, 16), rand(rng, 2, 4, 13, 16)
    mask = rand(rng, *mask_shape)
    mask[..., ::5] = -np.inf
    out, lse = attn.attention(q, k, v, mask=mask, return_lse=True)
    want, want_lse = reference(q, k, v, mask=mask)
    check(out, want)
    check(lse, want_lse)


def test_strided_mask_columns(rng):
    q, k, v = rand(rng, 1, 1, 6, 16), rand(rng, 1, 1, 10, 16), rand(rng, 1, 1, 10, 16)
    mask_t = rand(rng, 10, 6)
    check(attn.attention(q, k, v, mask=mask_t.T), reference(q, k, v, mask=mask_t.T)[0])


def test_fully_masked_row_gives_zero_and_minus_inf_lse(rng):
    q, k, v = rand(rng, 1, 1, 3, 8), rand(rng, 1, 1, 4, 8), rand(rng, 1, 1, 4, 8)
    mask = np.zeros((3, 4), dtype=np.float32)
    mask[1] = -np.inf
    out, lse = attn.attention(q, k, v, mask=mask, return_lse=True)
    assert np.all(out[0, 0, 1] == 0) and lse[0, 0, 1] == -np.inf
    check(out, reference(q, k, v, mask=mask)[0])


def test_read_only_inputs_are_accepted(rng):
    q, k, v = rand(rng, 1, 2, 4, 8), rand(rng, 1, 2, 4, 8), rand(rng, 1, 2, 4, 8)
    for x in (q, k, v):
        x.setflags(write=False)
    check(attn.attention(q, k, v), reference(q, k, v)[0])


def test_every_supported_target_agrees(rng):
    q, k, v = rand(rng, 1, 2, 33, 64), rand(rng, 1, 2, 70, 64), rand(rng, 1, 2, 70, 64)
    want = reference(q, k, v, causal=True)[0]
    try:
        for target in attn.supported_targets():
            attn.force_target(target)
            assert attn.current_target() == target
            check(attn.attention(q, k, v, causal=True, kernel="streaming"), want)
    finally:
        attn.force_target("auto")


def test_threads_run_concurrently_without_the_gil(rng):
    q, k, v = rand(rng, 1, 4, 64, 64), rand(rng, 1, 4, 256, 64), rand(rng, 1, 4, 256, 64)
    want = reference(q, k, v)[0]
    results = [None] * 4

    def work(i):
        results[i] = attn.attention(q, k, v, threads=1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        check(r, want)
