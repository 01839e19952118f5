"""attn.torch.scaled_dot_product_attention against PyTorch's own
torch.nn.functional.scaled_dot_product_attention: same shapes, broadcasting,
masks, causality, GQA, element types and errors.

Accuracy is judged against a float64 result (PyTorch's function on the same
values in double): attn's float32 error must stay within a small multiple of
PyTorch's own float32 error on the same problem (plus a small floor), and a
16-bit output within one rounding of the exact value (plus float32
accumulation).

Needs torch, which the ordinary suite (python/run_tests.sh) does not install:
this module is skipped there and runs in python/run_integration_tests.sh.
"""
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: run python/run_integration_tests.sh")
import torch.nn.functional as F  # noqa: E402

import attn  # noqa: E402
import attn.torch as at  # noqa: E402

sdpa = at.scaled_dot_product_attention

# Unit roundoff of the output type: rounding x to nearest moves it by at most
# u * |x| (2^-p for p significand bits: bfloat16 8, float16 11).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def reference(q, k, v, **kw):
    """PyTorch's result in float64 on the same (already rounded) values: the
    exact answer up to ~1e-16, the yardstick for both implementations."""
    mask = kw.get("attn_mask")
    if mask is not None and mask.dtype != torch.bool:
        kw = dict(kw, attn_mask=mask.double())
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)


def check(q, k, v, **kw):
    """attn's result against float64, with PyTorch's result in q's dtype as
    the measure of what that dtype allows. Returns attn's output."""
    got = sdpa(q, k, v, **kw)
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    exact = reference(q, k, v, **kw)
    assert got.shape == want.shape and got.dtype == want.dtype == q.dtype
    assert torch.isfinite(got).all()
    err = (got.double() - exact).abs()
    scale_v = max(v.double().abs().max().item(), 1.0)
    if q.dtype == torch.float32:
        # Both compute in float32 but in different orders (attn: SIMD dot
        # products, an online softmax with a polynomial exp, GQA without
        # repeating K/V), so their errors differ by small factors, not
        # orders: at most 2.2x PyTorch's worst error on these tests, bounded
        # at 4x. The floor, 2^-22 * max|v| (two float32 ulps of the largest
        # possible output: each output is a convex combination of rows of
        # v), is for problems PyTorch gets exactly right (no error to scale).
        torch_err = (want.double() - exact).abs().max().item()
        bound = 4 * torch_err + 2.0**-22 * scale_v
        assert err.max().item() <= bound, (
            f"attn's float32 error {err.max().item():.3g} > {bound:.3g} "
            f"(PyTorch's own float32 error {torch_err:.3g})")
    else:
        # One rounding of the float32 result y to the output type, which
        # moves it by at most u * |y| (u = 2^-8 bfloat16, 2^-11 float16),
        # plus y's own float32 error d (PyTorch's float32 errors above are
        # ~1e-6 * max|v| at most): |out - exact| <= u * |exact| + (1 + u) d,
        # with d bounded by 1e-5 * max|v| (which also covers float16's
        # subnormals near 0, 2^-24 apart). attn comes within 0.99 of it.
        u = UNIT_ROUNDOFF[q.dtype]
        bound = u * exact.abs() + 1e-5 * scale_v
        if (q.dtype == k.dtype == v.dtype == torch.bfloat16
                and attn.current_dot_path() != "widen"):
            # A bf16 dot-product path (docs/precision.md) also rounds each
            # softmax weight to bf16 before P.V, at most 2^-9 relative: the
            # output moves by at most 2^-9 * sum_j p_j |v_j|, which is the
            # float64 result for |v|; twice that, as tests/bf16dot_test.cc.
            bound = bound + 2.0**-8 * reference(q, k, v.abs(), **kw).abs()
        worst = torch.argmax(err - bound)
        assert (err <= bound).all(), (
            f"{q.dtype} error {err.flatten()[worst].item():.3g} > bound "
            f"{bound.flatten()[worst].item():.3g}")
        # PyTorch's own 16-bit CPU result is not held to this: its kernels
        # round intermediates (the softmax weights) to 16 bits too, and miss
        # the bound by up to ~30x (bfloat16) and ~6x (float16) on these
        # tests, where attn stays within it.
    return got


# (q shape, k shape, v shape): ragged Tq != Tk, odd head dims (17, 80),
# 128, decode (Tq = 1), Ev != E, ranks 2, 3 and 5, leading-dim broadcasting.
SHAPES = {
    "base": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8)),
    "d17_ragged": ((1, 3, 17, 17), (1, 3, 33, 17), (1, 3, 33, 17)),
    "d80": ((2, 2, 9, 80), (2, 2, 9, 80), (2, 2, 9, 80)),
    "d128_long_keys": ((1, 2, 3, 128), (1, 2, 130, 128), (1, 2, 130, 128)),
    "decode": ((3, 4, 1, 64), (3, 4, 100, 64), (3, 4, 100, 64)),
    "more_queries": ((1, 2, 70, 64), (1, 2, 40, 64), (1, 2, 40, 64)),
    "dv_ne_d": ((2, 3, 6, 32), (2, 3, 11, 32), (2, 3, 11, 24)),
    "rank3": ((4, 9, 16), (4, 12, 16), (4, 12, 16)),
    "rank2": ((9, 16), (12, 16), (12, 16)),
    "rank5": ((2, 3, 2, 5, 8), (2, 3, 2, 6, 8), (2, 3, 2, 6, 8)),
    "kv_batch_1": ((3, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8)),
    "q_batch_1": ((1, 2, 5, 8), (3, 2, 6, 8), (3, 2, 6, 8)),
    "mqa_broadcast": ((2, 4, 5, 8), (2, 1, 6, 8), (2, 1, 6, 8)),
    "q_heads_1": ((2, 1, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)),
    "rank_mix": ((2, 4, 5, 8), (4, 6, 8), (6, 8)),
}


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_shapes(gen, name, is_causal):
    qs, ks, vs = SHAPES[name]
    check(randn(gen, *qs), randn(gen, *ks), randn(gen, *vs), is_causal=is_causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_wrong_result_fails_the_bound(gen, dtype, monkeypatch):
    # What a kernel that skipped the last key would return: check() must
    # tell it from the right answer in every dtype.
    q, k, v = (randn(gen, 1, 2, 6, 16, dtype=dtype), randn(gen, 1, 2, 8, 16, dtype=dtype),
               randn(gen, 1, 2, 8, 16, dtype=dtype))
    check(q, k, v)
    right = at.scaled_dot_product_attention
    monkeypatch.setattr(sys.modules[__name__], "sdpa",
                        lambda q, k, v, **kw: right(q, k[:, :, :-1], v[:, :, :-1], **kw))
    with pytest.raises(AssertionError, match="error"):
        check(q, k, v)


@pytest.mark.parametrize("scale", [None, 0.05, 1.0, 2])
def test_scale(gen, scale):
    q, k, v = randn(gen, 2, 3, 7, 20), randn(gen, 2, 3, 9, 20), randn(gen, 2, 3, 9, 20)
    check(q, k, v, scale=scale)


# Mask shapes broadcast to (B, H, L, S) = (2, 3, 5, 7) as PyTorch does.
MASK_SHAPES = [(5, 7), (1, 1, 5, 7), (2, 1, 5, 7), (2, 3, 5, 7), (3, 5, 7), (1, 5, 7),
               (2, 1, 1, 7), (1, 7), (5, 1), (3, 1, 7)]


def make_mask(gen, shape, kind, dtype=torch.float32):
    keep = torch.rand(shape, generator=gen) > 0.3
    # Key 0 always visible, so no row is fully masked (tested separately).
    keep[..., 0] = True
    if kind == "bool":
        return keep
    # Additive: random biases where kept, -inf where not.
    bias = torch.randn(shape, generator=gen)
    return torch.where(keep, bias, torch.tensor(-math.inf)).to(dtype)


@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks(gen, shape, kind):
    q, k, v = randn(gen, 2, 3, 5, 16), randn(gen, 2, 3, 7, 16), randn(gen, 2, 3, 7, 16)
    check(q, k, v, attn_mask=make_mask(gen, shape, kind))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_with_gqa_and_rank3(gen, kind):
    q, k, v = randn(gen, 2, 8, 6, 32), randn(gen, 2, 2, 10, 32), randn(gen, 2, 2, 10, 32)
    check(q, k, v, attn_mask=make_mask(gen, (2, 8, 6, 10), kind), enable_gqa=True)
    q3, k3, v3 = randn(gen, 4, 6, 8), randn(gen, 4, 9, 8), randn(gen, 4, 9, 8)
    check(q3, k3, v3, attn_mask=make_mask(gen, (6, 9), kind))


@pytest.mark.parametrize("tq,tk", [(5, 5), (3, 9), (9, 3), (1, 7), (64, 64)])
def test_causal_is_top_left(gen, tq, tk):
    q, k, v = randn(gen, 1, 2, tq, 16), randn(gen, 1, 2, tk, 16), randn(gen, 1, 2, tk, 16)
    got = check(q, k, v, is_causal=True)
    # Top-left: the first query sees only key 0.
    torch.testing.assert_close(got[:, :, 0], v[:, :, 0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("hq,hk,hv", [(8, 2, 2), (8, 1, 1), (6, 3, 3), (8, 2, 4), (4, 4, 4)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa(gen, hq, hk, hv, is_causal):
    q, k, v = randn(gen, 2, hq, 7, 32), randn(gen, 2, hk, 11, 32), randn(gen, 2, hv, 11, 32)
    check(q, k, v, is_causal=is_causal, enable_gqa=True)


def test_transposed_and_sliced_inputs_are_read_in_place(gen):
    # A model's [B, T, H, d] projections seen as [B, H, T, d], and a KV cache
    # with spare capacity sliced to the filled length.
    q = randn(gen, 2, 13, 4, 64).transpose(1, 2)
    k_cache = randn(gen, 2, 4, 50, 64)
    v_cache = randn(gen, 2, 50, 4, 64).transpose(1, 2)
    k, v = k_cache[:, :, :21], v_cache[:, :, :21]
    assert not q.is_contiguous() and not k.is_contiguous() and not v.is_contiguous()
    for t in (q, k, v):
        assert at._rows_contiguous(t) is t  # no copy before the kernels
    check(q, k, v)
    check(q, k, v, attn_mask=make_mask(gen, (13, 21), "bool"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_views_at_odd_offsets(gen, dtype):
    # Views that start one element into their storage (data pointers only
    # element-aligned) and rows padded to an odd length.
    buf = randn(gen, 2, 3, 40, 19, dtype=dtype)
    q = buf[:, :, :7, 1:18]
    k = buf[:, :, 9:30, :17]
    v = randn(gen, 2 * 3 * 21 * 11 + 1, dtype=dtype)[1:].view(2, 3, 21, 11)
    assert q.storage_offset() % 2 == 1 and at._rows_contiguous(q) is q
    check(q, k, v)
    check(q, k, v, is_causal=True)


def test_layouts_attn_cannot_read_are_copied(gen):
    # A strided last dim, and rows overlapping (an expanded row dim): PyTorch
    # takes them, so attn.torch copies them rather than refusing.
    base = randn(gen, 2, 3, 6, 32)
    q = base[..., ::2]
    k = randn(gen, 2, 3, 1, 16).expand(2, 3, 9, 16)
    v = randn(gen, 2, 3, 16, 9).transpose(-1, -2)
    assert at._rows_contiguous(q) is not q and at._rows_contiguous(v) is not v
    assert at._rows_contiguous(k) is not k
    check(q, k, v)
    check(q.expand(2, 3, 6, 16), k, v, is_causal=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["base", "d17_ragged", "d80", "decode", "dv_ne_d", "rank3"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_16bit(gen, dtype, name, is_causal):
    qs, ks, vs = SHAPES[name]
    got = check(randn(gen, *qs, dtype=dtype), randn(gen, *ks, dtype=dtype),
                randn(gen, *vs, dtype=dtype), is_causal=is_causal)
    assert got.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask_dtype", ["bool", "float32", "same"])
def test_16bit_masks_and_gqa(gen, dtype, mask_dtype):
    q = randn(gen, 2, 13, 4, 64, dtype=dtype).transpose(1, 2)
    k = randn(gen, 2, 2, 17, 64, dtype=dtype)
    v = randn(gen, 2, 2, 17, 64, dtype=dtype)
    if mask_dtype == "bool":
        mask = make_mask(gen, (2, 1, 13, 17), "bool")
    else:
        mask = make_mask(gen, (2, 1, 13, 17), "float", dtype if mask_dtype == "same" else torch.float32)
    check(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_are_zero_like_pytorch(gen, dtype, kind):
    # attn gives a row that sees no key output 0. PyTorch 2.15 (the
    # integration venv's) does too, from its math and CPU flash paths alike;
    # older PyTorch (before 2.5's "safe softmax") could return NaN there,
    # the one difference then. attn's 0 is required either way.
    q, k, v = (randn(gen, 2, 3, 4, 8, dtype=dtype), randn(gen, 2, 3, 6, 8, dtype=dtype),
               randn(gen, 2, 3, 6, 8, dtype=dtype))
    keep = torch.ones(4, 6, dtype=torch.bool)
    keep[1] = False
    mask = keep if kind == "bool" else torch.zeros(4, 6).masked_fill(~keep, -math.inf)
    got = sdpa(q, k, v, attn_mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (got[:, :, 1] == 0).all()
    if torch.isnan(want[:, :, 1]).all():  # an older PyTorch: compare the other rows
        got, want = got[:, :, [0, 2, 3]], want[:, :, [0, 2, 3]]
    else:
        assert (want[:, :, 1] == 0).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("shape", [
    ((2, 4, 0, 8), (2, 4, 7, 8), (2, 4, 7, 8)),  # no queries
    ((2, 4, 5, 8), (2, 4, 0, 8), (2, 4, 0, 8)),  # no keys: every row fully masked, 0
    ((2, 4, 5, 0), (2, 4, 7, 0), (2, 4, 7, 8)),  # E = 0: every score 0, the mean of v
    ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 0)),  # Ev = 0
    ((0, 4, 5, 8), (0, 4, 7, 8), (0, 4, 7, 8)),  # no batch
])
def test_empty_dims_give_pytorch_result(gen, shape):
    qs, ks, vs = shape
    q, k, v = randn(gen, *qs), randn(gen, *ks), randn(gen, *vs)
    got = sdpa(q, k, v)
    want = F.scaled_dot_product_attention(q, k, v)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_empty_e_with_mask(gen):
    # E = 0: the weights are the softmax of the mask alone.
    q, k, v = randn(gen, 1, 2, 5, 0), randn(gen, 1, 2, 7, 0), randn(gen, 1, 2, 7, 4)
    mask = make_mask(gen, (5, 7), "float")
    torch.testing.assert_close(sdpa(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_output_is_new_and_contiguous(gen):
    q, k, v = randn(gen, 2, 4, 5, 8), randn(gen, 2, 4, 7, 8), randn(gen, 2, 4, 7, 8)
    before = [t.clone() for t in (q, k, v)]
    out = sdpa(q, k, v)
    assert out.is_contiguous() and out.data_ptr() not in {t.data_ptr() for t in (q, k, v)}
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)


def test_attn_attention_reads_torch_tensors_directly(gen):
    # The extension takes torch tensors through DLPack, of each element
    # type, writing into a torch out= (what attn.torch builds on).
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, k, v = (randn(gen, 1, 2, 5, 8, dtype=dtype), randn(gen, 1, 2, 7, 8, dtype=dtype),
                   randn(gen, 1, 2, 7, 8, dtype=dtype))
        out = torch.empty(1, 2, 5, 8, dtype=dtype)
        assert attn.attention(q, k, v, out=out) is out
        want = F.scaled_dot_product_attention(q, k, v)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(out, want, atol=tol, rtol=tol)


# ---- autograd, torch.compile, the custom op ---------------------------------

def test_grad_required_is_a_clear_error(gen):
    q = randn(gen, 1, 2, 5, 8).requires_grad_()
    k, v = randn(gen, 1, 2, 7, 8), randn(gen, 1, 2, 7, 8)
    with pytest.raises(NotImplementedError, match=r"no autograd: query require\(s\) grad.*no_grad"):
        sdpa(q, k, v)
    with torch.no_grad():
        out = sdpa(q, k, v)
    assert not out.requires_grad
    with torch.inference_mode():
        torch.testing.assert_close(sdpa(q, k, v), out)


def test_import_attn_does_not_import_torch():
    code = "import sys, attn; assert 'torch' not in sys.modules, 'attn imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_custom_op_is_registered_and_passes_opcheck(gen):
    assert hasattr(torch.ops.attn, "sdpa")
    q, k, v = randn(gen, 2, 4, 5, 8), randn(gen, 2, 2, 7, 8), randn(gen, 2, 2, 7, 8)
    mask = torch.zeros(5, 7).expand(2, 4, 5, 7)
    torch.library.opcheck(torch.ops.attn.sdpa.default, (q, k, v, mask, False, None))
    torch.library.opcheck(torch.ops.attn.sdpa.default, (q, k, v, None, True, 0.3))


# backend="aot_eager": traces the graph with fake tensors (the op's
# register_fake) and functionalizes it as inductor does, then runs the graph
# eagerly. The default backend (inductor) works too, but compiles C++ for
# the ops around attn's (29 s on the 2-core CI machine for a small graph)
# without exercising anything more of attn's op.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_compile_fullgraph(gen, dtype):
    def block(x, wq, wk, wv, mask):
        b, t, _ = x.shape
        q = (x @ wq).view(b, t, 4, 16).transpose(1, 2)
        k = (x @ wk).view(b, t, 2, 16).transpose(1, 2)
        v = (x @ wv).view(b, t, 2, 16).transpose(1, 2)
        out = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, t, 64).relu()

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    x = randn(gen, 2, 10, 64, dtype=dtype)
    ws = [randn(gen, 64, n, dtype=dtype) / 8 for n in (64, 32, 32)]
    mask = torch.tril(torch.ones(10, 10, dtype=torch.bool))
    with torch.no_grad():
        got = compiled(x, *ws, mask)
        eager = block(x, *ws, mask)
        q = (x @ ws[0]).view(2, 10, 4, 16).transpose(1, 2)
        k = (x @ ws[1]).view(2, 10, 2, 16).transpose(1, 2)
        v = (x @ ws[2]).view(2, 10, 2, 16).transpose(1, 2)
        torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    # Same op on the same inputs: identical to the eager call.
    torch.testing.assert_close(got, eager, atol=0, rtol=0)
    want = torch_out.transpose(1, 2).reshape(2, 10, 64).relu()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


def test_torch_compile_dynamic_shapes(gen):
    # One graph for every query length (symbolic sizes through the fake).
    def f(q, k, v, mask):
        return sdpa(q * 2, k, v, attn_mask=mask).sin()

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    k, v = randn(gen, 2, 4, 11, 16), randn(gen, 2, 4, 11, 16)
    for length in (5, 9, 13):
        q = randn(gen, 2, 4, length, 16)
        mask = make_mask(gen, (length, 11), "bool")
        with torch.no_grad():
            got = compiled(q, k, v, mask)
        want = F.scaled_dot_product_attention(q * 2, k, v, attn_mask=mask).sin()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---- errors: each names the argument --------------------------------------

def qkv(gen, hq=4, hk=4, tq=5, tk=7, d=8):
    return randn(gen, 2, hq, tq, d), randn(gen, 2, hk, tk, d), randn(gen, 2, hk, tk, d)


def test_dropout_is_refused(gen):
    q, k, v = qkv(gen)
    with pytest.raises(NotImplementedError, match=r"dropout_p must be 0\.0 \(attn has no dropout\), got 0\.1"):
        sdpa(q, k, v, dropout_p=0.1)
    torch.testing.assert_close(sdpa(q, k, v, dropout_p=0.0), F.scaled_dot_product_attention(q, k, v))


def test_mismatched_heads_need_enable_gqa(gen):
    q, k, v = qkv(gen, hq=4, hk=2)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, v)  # PyTorch refuses too
    with pytest.raises(ValueError, match=r"leading dims of query, key and value must broadcast.*"
                                         r"enable_gqa=True.*key \(2, 2, 7, 8\)"):
        sdpa(q, k, v)
    check(q, k, v, enable_gqa=True)
    q, k, v = qkv(gen, hq=4, hk=3)
    with pytest.raises(ValueError, match=r"key and value heads \(dim -3\) must divide the query "
                                         r"heads, got query 4, key 3, value 3"):
        sdpa(q, k, v, enable_gqa=True)


def test_mask_with_is_causal_is_refused(gen):
    q, k, v = qkv(gen)
    with pytest.raises(RuntimeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool),
                                       is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask must be None when is_causal=True"):
        sdpa(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool), is_causal=True)


def test_wrong_shapes_name_the_argument(gen):
    q, k, v = qkv(gen)
    with pytest.raises(ValueError, match=r"key's last dim must equal query's \(E = 8\)"):
        sdpa(q, k[..., :6], v)
    with pytest.raises(ValueError, match=r"key and value must have the same sequence length.*"
                                         r"value shape \(2, 4, 6, 8\)"):
        sdpa(q, k, v[:, :, :6])
    with pytest.raises(ValueError, match=r"attn_mask must broadcast to \(2, 4, 5, 7\).*got shape \(3, 7\)"):
        sdpa(q, k, v, attn_mask=torch.zeros(3, 7))
    with pytest.raises(ValueError, match=r"attn_mask must broadcast.*got shape \(1, 2, 4, 5, 7\)"):
        sdpa(q, k, v, attn_mask=torch.zeros(1, 2, 4, 5, 7))
    with pytest.raises(ValueError, match=r"attn_mask must have at least 2 dims"):
        sdpa(q, k, v, attn_mask=torch.zeros(7))
    with pytest.raises(ValueError, match=r"query must have at least 2 dims.*got shape \(8,\)"):
        sdpa(q[0, 0, 0], k, v)
    with pytest.raises(ValueError, match=r"leading dims of query, key and value must broadcast"):
        sdpa(q, k[:1, :, :, :].expand(3, 4, 7, 8), v)


def test_wrong_types_name_the_argument(gen):
    q, k, v = qkv(gen)
    with pytest.raises(TypeError, match=r"same dtype, got query torch.float32, key torch.float16"):
        sdpa(q, k.half(), v)
    with pytest.raises(TypeError, match=r"query must be float32, bfloat16 or float16, got torch.float64"):
        sdpa(q.double(), k.double(), v.double())
    with pytest.raises(TypeError, match=r"attn_mask must be bool, float32 or the query's dtype "
                                        r"\(torch.float32\), got torch.float16"):
        sdpa(q, k, v, attn_mask=torch.zeros(5, 7, dtype=torch.float16))
    with pytest.raises(TypeError, match=r"attn_mask must be bool.*got torch.int32"):
        sdpa(q, k, v, attn_mask=torch.zeros(5, 7, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"key must be a torch.Tensor, got ndarray"):
        sdpa(q, k.numpy(), v)


# ---- score modifiers: window=, softcap=, sinks=, alibi_slopes= ------------

def modified_reference(q, k, v, dtype=torch.float64, attn_mask=None, is_causal=False, scale=None,
                       enable_gqa=False, window=None, softcap=None, sinks=None, alibi_slopes=None):
    """The modifiers written out from their definitions (attn.h "Score
    modifiers", FlashAttention's conventions) in `dtype`, independently of
    attn: explicit scores, cap * tanh(s / cap), the ALiBi distance, the
    window and causal limits as index comparisons, and the sink as one more
    logit column whose value row is 0. In float64 it is the exact answer; in
    float32 it is what a plain float32 implementation gets (the yardstick,
    as PyTorch's own float32 result is in check())."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    length, s_len, e = q.size(-2), k.size(-2), q.size(-1)
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
    scale = 1 / math.sqrt(e) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(length)[:, None]
    j = torch.arange(s_len)[None, :]
    diag = i if is_causal else i + (s_len - length)  # top-left with is_causal, else bottom-right
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(dtype)[..., None, None]  # (..., H, 1, 1)
        s = s - slopes * (diag - j).abs().to(dtype)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.to(dtype)
    visible = torch.ones(length, s_len, dtype=torch.bool)
    if is_causal:
        visible &= j <= diag
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= diag - left
        if right >= 0:
            visible &= j <= diag + right
    s = s.masked_fill(~visible, -math.inf)
    sink = torch.full(s.shape[:-1] + (1,), -math.inf, dtype=dtype)  # no sink: exp(-inf) = 0
    if sinks is not None:
        sink = sinks.to(dtype)[:, None, None].expand(sink.shape)  # (H,) over (..., H, L, 1)
    logits = torch.cat([s, sink], dim=-1)
    top = logits.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp(logits - top)
    total = p.sum(dim=-1, keepdim=True)
    weights = p[..., :-1] / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ v  # a row that sees nothing (no sink either) is 0


def check_modified(q, k, v, **kw):
    """attn with modifiers against modified_reference in float64, with the
    bounds of check(): float32 within 4x the plain float32 implementation's
    own error (plus two ulps of max|v|), 16-bit within one rounding of the
    exact value plus float32 accumulation."""
    got = sdpa(q, k, v, **kw)
    exact = modified_reference(q, k, v, **kw)
    assert got.shape == exact.shape and got.dtype == q.dtype
    assert torch.isfinite(got).all()
    err = (got.double() - exact).abs()
    scale_v = max(v.double().abs().max().item(), 1.0)
    if q.dtype == torch.float32:
        # As check(): the same float32 roundings in other orders, plus the
        # soft-cap's tanh (Highway's, 4 ulp, against PyTorch's ~1 ulp: a
        # score error of 3 * 2^-24 * cap, below the score's own rounding).
        # At most 1.9x the plain error seen on these tests.
        plain_err = (modified_reference(q, k, v, dtype=torch.float32, **kw).double() - exact)
        plain_err = plain_err.abs().max().item()
        bound = 4 * plain_err + 2.0**-22 * scale_v
        assert err.max().item() <= bound, (
            f"attn's float32 error {err.max().item():.3g} > {bound:.3g} "
            f"(a plain float32 implementation's error {plain_err:.3g})")
    else:
        # As check(): one rounding to the output type (u * |exact|) plus the
        # float32 result's own error, bounded by 1e-5 * max|v|.
        u = UNIT_ROUNDOFF[q.dtype]
        bound = u * exact.abs() + 1e-5 * scale_v
        if (q.dtype == k.dtype == v.dtype == torch.bfloat16
                and attn.current_dot_path() != "widen"):
            # A bf16 dot-product path, if it took the problem (docs/
            # modifiers.md: today they decline modified problems), rounds
            # the weights to bf16 too: as check().
            bound = bound + 2.0**-8 * modified_reference(q, k, v.abs(), **kw).abs()
        worst = torch.argmax(err - bound)
        assert (err <= bound).all(), (
            f"{q.dtype} error {err.flatten()[worst].item():.3g} > bound "
            f"{bound.flatten()[worst].item():.3g}")
    return got


MODIFIERS = {
    "window_left": dict(window=(5, -1)),
    "window_both": dict(window=(3, 2)),
    "window_right": dict(window=(-1, 1)),
    "softcap": dict(softcap=1.5),
    "sinks": dict(sinks=torch.tensor([0.5, -1.0, 2.0, -math.inf])),
    "alibi": dict(alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625])),
    "alibi_per_batch": dict(alibi_slopes=torch.tensor([[0.5, 0.25, 0.125, 0.0625],
                                                       [0.1, 0.2, 0.3, 0.4]])),
    "all": dict(window=(6, 2), softcap=2.0, sinks=torch.tensor([0.5, -1.0, 2.0, 0.0]),
                alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625])),
}

# (q shape, k shape): 4 query heads (the modifiers' arrays above), 2 batches;
# ragged both ways, decode, GQA (2 kv heads) and a d of 80.
MODIFIER_SHAPES = {
    "ragged": ((2, 4, 23, 32), (2, 4, 37, 32)),
    "more_queries": ((2, 4, 40, 16), (2, 4, 29, 16)),
    "decode": ((2, 4, 1, 64), (2, 4, 50, 64)),
    "gqa_d80": ((2, 4, 19, 80), (2, 2, 19, 80)),
}


@pytest.mark.parametrize("name", MODIFIERS)
@pytest.mark.parametrize("shape", MODIFIER_SHAPES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_modifiers_match_float64(gen, name, shape, is_causal):
    qs, ks = MODIFIER_SHAPES[shape]
    q, k, v = randn(gen, *qs), randn(gen, *ks), randn(gen, *ks)
    check_modified(q, k, v, is_causal=is_causal, enable_gqa=qs[1] != ks[1], **MODIFIERS[name])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["window_both", "softcap", "sinks", "all"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_modifiers_16bit(gen, dtype, name, is_causal):
    q = randn(gen, 2, 4, 23, 32, dtype=dtype)
    k, v = randn(gen, 2, 2, 37, 32, dtype=dtype), randn(gen, 2, 2, 37, 32, dtype=dtype)
    got = check_modified(q, k, v, is_causal=is_causal, enable_gqa=True, **MODIFIERS[name])
    assert got.dtype == dtype


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_modifiers_with_a_mask_and_a_strided_query(gen, kind):
    # The modifiers and attn_mask add up (the mask after the cap and the
    # bias); a [B, T, H, d] query seen as [B, H, T, d].
    q = randn(gen, 2, 21, 4, 32).transpose(1, 2)
    k, v = randn(gen, 2, 4, 30, 32), randn(gen, 2, 4, 30, 32)
    mask = make_mask(gen, (2, 1, 21, 30), kind)
    mask[..., -1] = True if kind == "bool" else 0.0  # the bottom-right diagonal stays visible
    check_modified(q, k, v, attn_mask=mask, **MODIFIERS["all"])


def test_modifiers_with_rank3_and_rank5_inputs(gen):
    # Rank 3: (H, L, E), no batch. Rank 5: two batch dims, flattened for the
    # kernels; per-batch slopes (..., H) broadcast over the first.
    q3, k3, v3 = randn(gen, 4, 9, 16), randn(gen, 4, 12, 16), randn(gen, 4, 12, 16)
    check_modified(q3, k3, v3, is_causal=True, **MODIFIERS["all"])
    q5, k5, v5 = randn(gen, 2, 3, 4, 7, 8), randn(gen, 2, 3, 4, 11, 8), randn(gen, 2, 3, 4, 11, 8)
    slopes = torch.rand(1, 3, 4, generator=gen)
    check_modified(q5, k5, v5, window=(4, 1), alibi_slopes=slopes, sinks=torch.randn(4, generator=gen))


def test_modifiers_reach_the_kernels_without_a_mask(gen, monkeypatch):
    # Passed straight through: no mask is built for a window, and the op
    # hands attn.attention the modifiers as they are.
    calls = []
    real = at._attn.attention

    def recording(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(at._attn, "attention", recording)
    q, k, v = randn(gen, 1, 4, 6, 8), randn(gen, 1, 4, 9, 8), randn(gen, 1, 4, 9, 8)
    sinks = torch.randn(4, generator=gen)
    sdpa(q, k, v, is_causal=True, window=(2, 0), softcap=3.0, sinks=sinks)
    (kw,) = calls
    assert kw["mask"] is None and kw["window"] == (2, 0) and kw["softcap"] == 3.0
    assert kw["causal"] == "top_left" and torch.equal(kw["sinks"], sinks)
    assert kw["alibi_slopes"] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_row_that_sees_no_key_is_zero_with_a_sink(gen, dtype):
    # Every key of row 2 hidden by the mask: the sink alone is left in the
    # softmax, and its value is 0.
    q, k, v = (randn(gen, 1, 4, 5, 8, dtype=dtype), randn(gen, 1, 4, 6, 8, dtype=dtype),
               randn(gen, 1, 4, 6, 8, dtype=dtype))
    keep = torch.ones(5, 6, dtype=torch.bool)
    keep[2] = False
    got = check_modified(q, k, v, attn_mask=keep, sinks=torch.tensor([1.0, 0.0, -2.0, 3.0]))
    assert (got[:, :, 2] == 0).all()


@pytest.mark.parametrize("wrong", ["window_left_plus_one", "window_right_minus_one", "no_softcap",
                                   "no_sinks", "alibi_halved"])
def test_a_wrong_modifier_fails_the_bound(gen, wrong, monkeypatch):
    # What a kernel with an off-by-one window edge, or a dropped modifier,
    # would return: check_modified must tell each from the right answer.
    q, k, v = randn(gen, 2, 4, 23, 32), randn(gen, 2, 4, 37, 32), randn(gen, 2, 4, 37, 32)
    kw = dict(MODIFIERS["all"], is_causal=False)
    check_modified(q, k, v, **kw)
    bad = dict(kw)
    if wrong == "window_left_plus_one":
        bad["window"] = (kw["window"][0] + 1, kw["window"][1])
    elif wrong == "window_right_minus_one":
        bad["window"] = (kw["window"][0], kw["window"][1] - 1)
    elif wrong == "no_softcap":
        bad["softcap"] = None
    elif wrong == "no_sinks":
        bad["sinks"] = None
    else:
        bad["alibi_slopes"] = kw["alibi_slopes"] / 2
    right = at.scaled_dot_product_attention
    monkeypatch.setattr(sys.modules[__name__], "sdpa", lambda q, k, v, **_: right(q, k, v, **bad))
    with pytest.raises(AssertionError, match="error"):
        check_modified(q, k, v, **kw)


def test_custom_op_with_modifiers_passes_opcheck(gen):
    q, k, v = randn(gen, 2, 4, 5, 8), randn(gen, 2, 2, 7, 8), randn(gen, 2, 2, 7, 8)
    sinks, slopes = torch.randn(4, generator=gen), torch.rand(2, 4, generator=gen)
    torch.library.opcheck(torch.ops.attn.sdpa.default,
                          (q, k, v, None, True, None, 3, -1, 2.0, sinks, slopes))
    torch.library.opcheck(torch.ops.attn.sdpa.default,
                          (q, k, v, None, False, 0.5, -1, 1, 0.0, None, slopes[0]))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_with_modifiers(gen, dynamic):
    # A block whose sinks are a parameter-like graph input, with a window and
    # a soft-cap: one graph, the same result as the eager op.
    def block(q, k, v, sinks):
        out = sdpa(q * 2, k, v, is_causal=True, window=(4, 0), softcap=2.5, sinks=sinks,
                   enable_gqa=True)
        return out.sin()

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    sinks = torch.randn(4, generator=gen)
    for length in (9, 13):
        q = randn(gen, 2, 4, length, 16)
        k, v = randn(gen, 2, 2, length, 16), randn(gen, 2, 2, length, 16)
        with torch.no_grad():
            got = compiled(q, k, v, sinks)
            eager = block(q, k, v, sinks)
        torch.testing.assert_close(got, eager, atol=0, rtol=0)
        want = modified_reference(q * 2, k, v, is_causal=True, window=(4, 0), softcap=2.5,
                                  sinks=sinks, enable_gqa=True).sin()
        # float32 attention through sin (1-Lipschitz): the bound of check().
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_bad_modifiers_name_the_argument(gen):
    q, k, v = qkv(gen)
    with pytest.raises(TypeError, match=r"window must be None or a pair \(left, right\) of ints"):
        sdpa(q, k, v, window=3)
    with pytest.raises(TypeError, match=r"window right must be an int.*float 1.5"):
        sdpa(q, k, v, window=(2, 1.5))
    with pytest.raises(ValueError, match=r"window left must be >= 0, or -1 for unbounded, got -2"):
        sdpa(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match=r"softcap must be finite and > 0.*got nan"):
        sdpa(q, k, v, softcap=float("nan"))
    with pytest.raises(ValueError, match=r"softcap must be finite and > 0.*got -1.0"):
        sdpa(q, k, v, softcap=-1.0)
    with pytest.raises(TypeError, match=r"softcap must be None or a float, got str"):
        sdpa(q, k, v, softcap="1")
    with pytest.raises(ValueError, match=r"sinks must have shape \(4,\), one value per query head, "
                                         r"got shape \(3,\)"):
        sdpa(q, k, v, sinks=torch.zeros(3))
    with pytest.raises(TypeError, match=r"sinks must be a torch.Tensor or None, got list"):
        sdpa(q, k, v, sinks=[0.0] * 4)
    with pytest.raises(TypeError, match=r"sinks must be a float tensor, got torch.int64"):
        sdpa(q, k, v, sinks=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape \(4,\) or broadcast to "
                                         r"\(2, 4\).*got shape \(3, 4\)"):
        sdpa(q, k, v, alibi_slopes=torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"alibi_slopes must have shape \(4,\)"):
        sdpa(q, k, v, alibi_slopes=torch.zeros(2))
    with pytest.raises(NotImplementedError, match=r"no autograd: sinks require\(s\) grad"):
        sdpa(q, k, v, sinks=torch.zeros(4, requires_grad=True))
    with torch.no_grad():  # a model's parameter, under no_grad: fine
        sdpa(q, k, v, sinks=torch.zeros(4, requires_grad=True))
