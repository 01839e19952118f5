"""attn.varlen_attention and attn.kvcache_attention (FlashAttention's
flash_attn_varlen_func / flash_attn_with_kvcache conventions) against a loop
of dense attn.attention calls and against a NumPy float64 reference written
here (test_modifiers' for the score modifiers), on NumPy arrays and on
DLPack-only objects (and torch tensors where torch is installed)."""
import numpy as np
import pytest

import attn
from test_modifiers import modified_reference

KERNELS = ["auto"] + attn.kernels()


def reference(q, k, v, causal=False, scale=None):
    """Float64 attention of one sequence: q (Tq, H, d), k/v (Tk, Hkv, d);
    returns out (Tq, H, dv), lse (H, Tq)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    tq, hq, d = q.shape
    tk, hkv = k.shape[0], k.shape[1]
    if tk == 0:
        return np.zeros((tq, hq, v.shape[2])), np.full((hq, tq), -np.inf)
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    s = np.einsum("ihd,jhd->hij", q, k) * (1 / np.sqrt(d) if scale is None else scale)
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
        out = np.where(total > 0, np.einsum("hij,jhd->hid", p, v) / np.where(total > 0, total, 1), 0.0)
        lse = np.where(total[..., 0] > 0, m_safe[..., 0] + np.log(total[..., 0]), -np.inf)
    return out.transpose(1, 0, 2), lse


def dense_call(q, k, v, causal, kernel="auto"):
    """One sequence through attn.attention: (T, H, d) arrays seen as (H, T, d) views."""
    tq, hq = q.shape[0], q.shape[1]
    if tq == 0:
        return np.zeros((0, hq, v.shape[2]), np.float32), np.zeros((hq, 0), np.float32)
    if k.shape[0] == 0:
        return np.zeros((tq, hq, v.shape[2]), np.float32), np.full((hq, tq), -np.inf, np.float32)
    out, lse = attn.attention(q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2),
                              causal=causal, kernel=kernel, return_lse=True)
    return out.transpose(1, 0, 2), lse


@pytest.fixture
def rng():
    return np.random.default_rng(26)


def ragged(rng, tq, tk, hq=4, hkv=2, d=16, dv=8):
    cu_q = np.concatenate([[0], np.cumsum(tq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(tk)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], hkv, dv)).astype(np.float32)
    return q, k, v, cu_q, cu_k


def close(got, want, atol=3e-6, rtol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True, "top_left"])
def test_varlen_equals_dense_calls_and_float64(rng, kernel, causal):
    tq = [5, 0, 1, 37, 3, 10]
    tk = [9, 4, 0, 37, 100, 4]  # an empty sequence, one without keys, T_q > T_k
    q, k, v, cu_q, cu_k = ragged(rng, tq, tk)
    out, lse = attn.varlen_attention(q, k, v, cu_q, cu_k, max(tq), max(tk), causal=causal,
                                     kernel=kernel, threads=2, return_softmax_lse=True)
    assert out.shape == (sum(tq), 4, 8) and lse.shape == (4, sum(tq))
    for b in range(len(tq)):
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = slice(cu_k[b], cu_k[b + 1])
        want, want_lse = reference(q[rows], k[keys], v[keys], causal)
        close(out[rows], want)
        close(lse[:, rows], want_lse)
        got, got_lse = dense_call(q[rows], k[keys], v[keys], causal, kernel)
        close(out[rows], got, atol=1e-6)
        close(lse[:, rows], got_lse, atol=1e-6)


def test_varlen_float16_and_out(rng):
    q, k, v, cu_q, cu_k = ragged(rng, [3, 20], [30, 20])
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    out = np.empty((23, 4, 8), np.float32)
    got = attn.varlen_attention(q16, k16, v16, cu_q, cu_k, 20, 30, causal=True, out=out)
    assert got is out
    for b in range(2):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want, _ = reference(q16[rows], k16[keys], v16[keys], True)
        close(out[rows], want, atol=1e-5)


class DLPackOnly:
    """Exports an array through DLPack and nothing else (as torch tensors do)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def paged_setup(rng, cached, fresh, block_size, hq=4, hkv=2, d=16, dtype=np.float32):
    """A shuffled page pool holding each sequence's cached keys, its block
    table (-1 past the pages a sequence uses), and the dense keys per sequence."""
    batch = len(cached)
    pages = [-(-(c + f) // block_size) for c, f in zip(cached, fresh)]
    num_blocks = sum(pages) + 2
    max_blocks = max(pages) + 1
    order = rng.permutation(num_blocks).astype(np.int32)
    table = np.full((batch, max_blocks), -1, np.int32)
    k_pool = np.full((num_blocks, block_size, hkv, d), np.nan, dtype)
    v_pool = np.full((num_blocks, block_size, hkv, d), np.nan, dtype)
    keys, values, n = [], [], 0
    for b in range(batch):
        table[b, :pages[b]] = order[n:n + pages[b]]
        n += pages[b]
        kb = rng.standard_normal((cached[b], hkv, d)).astype(dtype)
        vb = rng.standard_normal((cached[b], hkv, d)).astype(dtype)
        for t in range(cached[b]):
            k_pool[table[b, t // block_size], t % block_size] = kb[t]
            v_pool[table[b, t // block_size], t % block_size] = vb[t]
        keys.append(kb)
        values.append(vb)
    return k_pool, v_pool, table, keys, values


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("block_size", [1, 16, 128])
def test_kvcache_paged_append_equals_dense_calls_and_float64(rng, kernel, block_size):
    cached = [37, 0, 130, 15]
    k_pool, v_pool, table, keys, values = paged_setup(rng, cached, [2] * 4, block_size)
    q = rng.standard_normal((4, 2, 4, 16)).astype(np.float32)  # 2 new tokens: chunked decode
    k_new = rng.standard_normal((4, 2, 2, 16)).astype(np.float32)
    v_new = rng.standard_normal((4, 2, 2, 16)).astype(np.float32)
    seqlens = np.array(cached, np.int32)
    out, lse = attn.kvcache_attention(q, k_pool, v_pool, k_new, v_new, cache_seqlens=seqlens,
                                      block_table=table, causal=True, kernel=kernel, threads=2,
                                      return_softmax_lse=True)
    assert out.shape == (4, 2, 4, 16) and lse.shape == (4, 4, 2)
    for b in range(4):
        kb = np.concatenate([keys[b], k_new[b]])
        vb = np.concatenate([values[b], v_new[b]])
        want, want_lse = reference(q[b], kb, vb, True)
        close(out[b], want)
        close(lse[b], want_lse)
        got, got_lse = dense_call(q[b], kb, vb, True, kernel)
        close(out[b], got, atol=1e-6)
        # The append wrote the new tokens into their pages.
        for i in range(2):
            t = cached[b] + i
            np.testing.assert_array_equal(k_pool[table[b, t // block_size], t % block_size], k_new[b, i])
            np.testing.assert_array_equal(v_pool[table[b, t // block_size], t % block_size], v_new[b, i])


def test_kvcache_shared_prefix_pages_and_dlpack(rng):
    k_pool, v_pool, table, keys, values = paged_setup(rng, [48, 40], [0, 0], 16)
    table[1, :2] = table[0, :2]  # prefix caching: sequence 1 reads sequence 0's first pages
    keys[1][:32] = keys[0][:32]
    values[1][:32] = values[0][:32]
    q = rng.standard_normal((2, 1, 4, 16)).astype(np.float32)
    out = attn.kvcache_attention(DLPackOnly(q), DLPackOnly(k_pool), DLPackOnly(v_pool),
                                 cache_seqlens=np.array([48, 40], np.int32),
                                 block_table=DLPackOnly(table), causal=True)
    for b in range(2):
        want, _ = reference(q[b], keys[b], values[b], True)
        close(out[b], want)


def test_kvcache_dense_cache_without_block_table(rng):
    k_cache = rng.standard_normal((3, 64, 2, 16)).astype(np.float32)
    v_cache = rng.standard_normal((3, 64, 2, 16)).astype(np.float32)
    q = rng.standard_normal((3, 1, 4, 16)).astype(np.float32)
    k = rng.standard_normal((3, 1, 2, 16)).astype(np.float32)
    v = rng.standard_normal((3, 1, 2, 16)).astype(np.float32)
    lens = np.array([10, 63, 0], np.int32)
    before = k_cache.copy()
    out = attn.kvcache_attention(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)
    for b in range(3):
        n = lens[b] + 1
        np.testing.assert_array_equal(k_cache[b, lens[b]], k[b, 0])
        np.testing.assert_array_equal(k_cache[b, n:], before[b, n:])  # nothing else written
        want, _ = reference(q[b], k_cache[b, :n], v_cache[b, :n], True)
        close(out[b], want)
    # An int cache_seqlens is every sequence's length.
    out = attn.kvcache_attention(q, k_cache, v_cache, cache_seqlens=5)
    want, _ = reference(q[1], k_cache[1, :5], v_cache[1, :5])
    close(out[1], want)


def test_kvcache_float16_pool_with_float32_queries(rng):
    k_pool, v_pool, table, keys, values = paged_setup(rng, [20, 33], [0, 0], 16, dtype=np.float16)
    q = rng.standard_normal((2, 1, 4, 16)).astype(np.float32)
    out = attn.kvcache_attention(q, k_pool, v_pool, cache_seqlens=np.array([20, 33], np.int32),
                                 block_table=table)
    assert out.dtype == np.float32
    for b in range(2):
        want, _ = reference(q[b], keys[b], values[b])
        close(out[b], want, atol=1e-5)


def test_bad_inputs_name_the_field_and_write_nothing(rng):
    k_pool, v_pool, table, keys, values = paged_setup(rng, [20, 5], [1, 1], 16)
    q = rng.standard_normal((2, 1, 4, 16)).astype(np.float32)
    k_new = rng.standard_normal((2, 1, 2, 16)).astype(np.float32)
    before = k_pool.copy()
    bad = table.copy()
    bad[0, 1] = k_pool.shape[0]
    with pytest.raises(attn.Error, match=r"block_table\[0\]\[1\] must be a block of the pool"):
        attn.kvcache_attention(q, k_pool, v_pool, k_new, k_new, cache_seqlens=np.array([20, 5], np.int32),
                               block_table=bad)
    np.testing.assert_array_equal(k_pool, before)
    shared = table.copy()
    shared[1, 0] = table[0, 1]  # both sequences append into one page
    with pytest.raises(attn.Error, match="two appends into one page"):
        attn.kvcache_attention(q, k_pool, v_pool, k_new, k_new, cache_seqlens=np.array([20, 5], np.int32),
                               block_table=shared)
    np.testing.assert_array_equal(k_pool, before)
    with pytest.raises(attn.Error, match=r"cache_seqlens\[0\]"):
        attn.kvcache_attention(q, k_pool, v_pool, cache_seqlens=np.array([10**6, 5], np.int32),
                               block_table=table)
    with pytest.raises(TypeError, match="block_table must be int32"):
        attn.kvcache_attention(q, k_pool, v_pool, cache_seqlens=3, block_table=table.astype(np.int64))
    qv, kv, vv, cu_q, cu_k = ragged(rng, [3, 2], [4, 5])
    with pytest.raises(attn.Error, match=r"cu_seqlens_k\[2\] must be >= cu_seqlens_k\[1\] \(10\)"):
        attn.varlen_attention(qv, kv, vv, cu_q, np.array([0, 10, 9], np.int32), 3, 5)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\] must equal"):
        attn.varlen_attention(qv, kv, vv, np.array([0, 3, 4], np.int32), cu_k, 3, 5)
    with pytest.raises(attn.Error, match="max_seqlen_k"):
        attn.varlen_attention(qv, kv, vv, cu_q, cu_k, 3, 4)


def sequence_reference(q, k, v, causal, window, softcap, sinks, slopes):
    """One sequence (T, H, d) arrays with the score modifiers, through
    test_modifiers' float64 reference; returns out (Tq, H, dv), lse (H, Tq)."""
    hq, hkv = q.shape[1], k.shape[1]
    if k.shape[0] == 0:  # no keys: output 0, the sink (or -inf) the whole normaliser
        lse = np.full((hq, q.shape[0]), -np.inf) if sinks is None else np.repeat(
            np.asarray(sinks, np.float64)[:, None], q.shape[0], axis=1)
        return np.zeros((q.shape[0], hq, v.shape[2])), lse
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    out, lse = modified_reference(q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None],
                                  v.transpose(1, 0, 2)[None], causal, window, softcap, sinks, slopes)
    return out[0].transpose(1, 0, 2), lse[0]


SINKS = np.array([0.5, -1.0, 2.0, -np.inf], np.float32)  # -inf: head 3 has none


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True, "top_left"])
def test_varlen_score_modifiers_per_sequence(rng, kernel, causal):
    tq = [5, 0, 1, 37, 3, 10]
    tk = [9, 4, 0, 37, 100, 4]
    q, k, v, cu_q, cu_k = ragged(rng, tq, tk)
    slopes = rng.uniform(0.02, 0.5, (len(tq), 4)).astype(np.float32)  # one row per sequence
    out, lse = attn.varlen_attention(q, k, v, cu_q, cu_k, max(tq), max(tk), causal=causal,
                                     window=(6, 2), softcap=1.5, sinks=SINKS, alibi_slopes=slopes,
                                     kernel=kernel, threads=2, return_softmax_lse=True)
    for b in range(len(tq)):
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = slice(cu_k[b], cu_k[b + 1])
        want, want_lse = sequence_reference(q[rows], k[keys], v[keys], causal, (6, 2), 1.5, SINKS,
                                            slopes[b])
        close(out[rows], want)
        close(lse[:, rows], want_lse)
    # Without the modifiers the result moves: the test sees them.
    plain = attn.varlen_attention(q, k, v, cu_q, cu_k, max(tq), max(tk), causal=causal)
    assert np.abs(plain - out).max() > 1e-2


def test_kvcache_sliding_window_sinks_alibi_softcap(rng):
    cached = [100, 3, 40]
    k_pool, v_pool, table, keys, values = paged_setup(rng, cached, [1] * 3, 16)
    q = rng.standard_normal((3, 1, 4, 16)).astype(np.float32)
    k_new = rng.standard_normal((3, 1, 2, 16)).astype(np.float32)
    v_new = rng.standard_normal((3, 1, 2, 16)).astype(np.float32)
    slopes = rng.uniform(0.02, 0.5, 4).astype(np.float32)  # shared by every sequence
    out, lse = attn.kvcache_attention(q, k_pool, v_pool, k_new, v_new,
                                      cache_seqlens=np.array(cached, np.int32), block_table=table,
                                      causal=True, window=(20, 0), softcap=2.0, sinks=SINKS,
                                      alibi_slopes=slopes, threads=2, return_softmax_lse=True)
    for b in range(3):
        kb = np.concatenate([keys[b], k_new[b]])
        vb = np.concatenate([values[b], v_new[b]])
        want, want_lse = sequence_reference(q[b], kb, vb, True, (20, 0), 2.0, SINKS, slopes)
        close(out[b], want)
        close(lse[b], want_lse)


def test_bad_modifiers_are_named(rng):
    q, k, v, cu_q, cu_k = ragged(rng, [3, 2], [4, 5])
    with pytest.raises(attn.Error, match="window.left"):
        attn.varlen_attention(q, k, v, cu_q, cu_k, 3, 5, window=(-2, 0))
    with pytest.raises(attn.Error, match="sinks.size"):
        attn.varlen_attention(q, k, v, cu_q, cu_k, 3, 5, sinks=SINKS[:3])
    with pytest.raises(attn.Error, match="alibi_slopes"):
        attn.varlen_attention(q, k, v, cu_q, cu_k, 3, 5, alibi_slopes=np.ones((3, 4), np.float32))
    k_pool, v_pool, table, _, _ = paged_setup(rng, [20], [0], 16)
    with pytest.raises(attn.Error, match="softcap"):
        attn.kvcache_attention(rng.standard_normal((1, 1, 4, 16)).astype(np.float32), k_pool,
                               v_pool, cache_seqlens=20, block_table=table, softcap=-1.0)


def test_torch_tensors_if_installed(rng):
    torch = pytest.importorskip("torch")
    q, k, v, cu_q, cu_k = ragged(rng, [4, 9], [10, 9])
    out = attn.varlen_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                torch.from_numpy(cu_q), torch.from_numpy(cu_k), 9, 10, causal=True)
    want = attn.varlen_attention(q, k, v, cu_q, cu_k, 9, 10, causal=True)
    np.testing.assert_array_equal(np.asarray(out), want)
