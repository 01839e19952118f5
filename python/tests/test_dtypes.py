"""Element types: q, k, v and out each float32, float16 or bfloat16
(ml_dtypes), independently, against the float64 reference of
test_attention.py computed from the same rounded values."""
import ctypes
import itertools

import numpy as np
import pytest

import attn
from test_attention import KERNELS, reference

try:
    import ml_dtypes
except ImportError:  # optional: bfloat16 cases skip without it
    ml_dtypes = None

NAMES = ["f32", "f16", "bf16"]

# Unit roundoff of each output type: rounding a value x to nearest moves it
# by at most u * |x| (2^-p for p significand bits: float16 11, bfloat16 8).
UNIT_ROUNDOFF = {"f32": 0.0, "f16": 2.0**-11, "bf16": 2.0**-8}


def dtype(name):
    if name == "bf16":
        if ml_dtypes is None:
            pytest.skip("bfloat16 needs ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16}[name])


def rand(rng, shape, name):
    """Standard normal values rounded (to nearest even) to the element type."""
    return rng.standard_normal(shape).astype(np.float32).astype(dtype(name))


def f64(x):
    return np.asarray(x).astype(np.float64)


def dot_path_runs(q, k, v):
    """Whether the kernels may round P to bf16: all-bf16 q, k, v on a bf16
    dot-product path (attn.current_dot_path(), docs/precision.md)."""
    bf16 = ml_dtypes is not None and all(x.dtype == np.dtype(ml_dtypes.bfloat16) for x in (q, k, v))
    return bf16 and attn.current_dot_path() != "widen"


def check(got, want, v, out_name, want_abs_v=None):
    """The bound: the float32 tests' tolerance for float32 accumulation
    (atol 2e-5, rtol 1e-4, as test_attention.check), plus for a 16-bit output
    its one rounding to nearest, u * |out| <= u * max|v| (each output is a
    convex combination of rows of v, so |out| <= max|v|). The reference reads
    the same rounded inputs as the kernels (cast to float64), so rounding the
    inputs adds nothing to the bound. On a bf16 dot-product path
    (want_abs_v: the reference for |v|) each weight is rounded to bf16
    before P.V, at most 2^-9 relative, which moves an output by at most
    2^-9 * sum_j p_j |v_j|; the bound allows twice that, as
    tests/bf16dot_test.cc does."""
    got, want = f64(got), f64(want)
    bound = 2e-5 + 1e-4 * np.abs(want) + UNIT_ROUNDOFF[out_name] * np.abs(f64(v)).max()
    if want_abs_v is not None:
        bound = bound + 2.0**-8 * f64(want_abs_v)
    err = np.abs(got - want)
    assert got.shape == want.shape
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"|out - ref| exceeds the bound at {worst}: got {got[worst]!r}, want {want[worst]!r}, "
        f"error {err[worst]:.3g} > bound {bound[worst]:.3g}")


# Ragged shapes: GQA with causal prefill over more keys than queries, a
# decode step (T_q = 1, the narrow path) over a padded KV cache (strided
# views), and
# sequence-major [B, T, H, d] buffers seen as [B, H, T, d] with top-left
# causality and d_v != d.
SHAPES = ["gqa_causal", "decode", "seq_major_top_left"]


def make(rng, shape, qn, kn, vn):
    """(q, k, v, causal) in the given element types."""
    if shape == "gqa_causal":
        return (rand(rng, (2, 4, 19, 32), qn), rand(rng, (2, 2, 37, 32), kn),
                rand(rng, (2, 2, 37, 24), vn), "bottom_right")
    if shape == "decode":
        q = rand(rng, (1, 8, 1, 36), qn)  # d and d_v not multiples of any SIMD width
        k_cache, v_cache = rand(rng, (1, 2, 64, 36), kn), rand(rng, (1, 2, 64, 20), vn)
        return q, k_cache[:, :, :45], v_cache[:, :, :45], True
    assert shape == "seq_major_top_left"
    q = rand(rng, (1, 13, 3, 16), qn).transpose(0, 2, 1, 3)
    k = rand(rng, (1, 9, 3, 16), kn).transpose(0, 2, 1, 3)
    v = rand(rng, (1, 9, 3, 5), vn).transpose(0, 2, 1, 3)
    return q, k, v, "top_left"


def out_like(q, v, name):
    shape = q.shape[:-1] + (v.shape[-1],)
    return np.full(shape, np.nan, dtype=dtype(name))


@pytest.fixture
def rng():
    return np.random.default_rng(4321)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("qn,kn,vn,on", list(itertools.product(NAMES, repeat=4)))
def test_every_dtype_combination(rng, shape, qn, kn, vn, on):
    q, k, v, causal = make(rng, shape, qn, kn, vn)
    out = out_like(q, v, on)
    got, lse = attn.attention(q, k, v, causal=causal, out=out, return_lse=True)
    assert got is out and out.dtype == dtype(on)  # written in place, in out's type
    want, want_lse = reference(f64(q), f64(k), f64(v), causal=causal)
    abs_v = reference(f64(q), f64(k), np.abs(f64(v)), causal=causal)[0] if dot_path_runs(q, k, v) else None
    check(out, want, v, on, abs_v)
    assert lse.dtype == np.float32
    np.testing.assert_allclose(lse, want_lse, atol=2e-5, rtol=1e-4)


# Every kernel (the panel kernels widen key tiles, the narrow decode path
# widens 16-bit rows in registers) on uniform and mixed types.
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("qn,kn,vn,on", [("bf16",) * 4, ("f16",) * 4,
                                         ("f32", "f16", "f16", "f32"),
                                         ("bf16", "f32", "f16", "f16")])
def test_every_kernel(rng, kernel, shape, qn, kn, vn, on):
    q, k, v, causal = make(rng, shape, qn, kn, vn)
    got = attn.attention(q, k, v, causal=causal, kernel=kernel, out_dtype=dtype(on))
    assert got.dtype == dtype(on)
    abs_v = reference(f64(q), f64(k), np.abs(f64(v)), causal=causal)[0] if dot_path_runs(q, k, v) else None
    check(got, reference(f64(q), f64(k), f64(v), causal=causal)[0], v, on, abs_v)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_supported_target(rng, shape):
    # Each SIMD target has its own widening and narrowing code.
    q, k, v, causal = make(rng, shape, "bf16", "f16", "bf16")
    want = reference(f64(q), f64(k), f64(v), causal=causal)[0]
    try:
        for target in attn.supported_targets():
            attn.force_target(target)
            for kernel in attn.kernels():
                for on in ("f16", "bf16"):
                    got = attn.attention(q, k, v, causal=causal, kernel=kernel, out_dtype=on)
                    check(got, want, v, on)
    finally:
        attn.force_target("auto")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("on", ["f16", "bf16"])
def test_a_16bit_output_is_the_float32_result_rounded_once(rng, kernel, on):
    q, k, v, causal = make(rng, "gqa_causal", "bf16", "f16", "f32")
    as_f32 = attn.attention(q, k, v, causal=causal, kernel=kernel, threads=1, out_dtype="float32")
    assert as_f32.dtype == np.float32  # (by default the output would be bfloat16, like q)
    narrow = attn.attention(q, k, v, causal=causal, kernel=kernel, threads=1, out_dtype=on)
    np.testing.assert_array_equal(narrow, as_f32.astype(dtype(on)))


@pytest.mark.parametrize("on", NAMES)
def test_a_wrong_result_fails_the_bound(rng, on):
    # Attention over all keys but the first: what a kernel that skipped one
    # key would return. The bound must tell it from the right answer.
    q, k, v, causal = rand(rng, (1, 2, 6, 16), "f32"), rand(rng, (1, 2, 8, 16), "f32"), \
        rand(rng, (1, 2, 8, 16), "f32"), False
    got = attn.attention(q, k, v, out_dtype=dtype(on))
    check(got, reference(f64(q), f64(k), f64(v))[0], v, on)
    wrong = reference(f64(q), f64(k[:, :, 1:]), f64(v[:, :, 1:]))[0]
    with pytest.raises(AssertionError, match="exceeds the bound"):
        check(got, wrong, v, on)


def test_default_output_type_is_qs(rng):
    q, k, v, _ = make(rng, "gqa_causal", "f16", "f32", "bf16")
    out, lse = attn.attention(q, k, v, return_lse=True)
    assert out.dtype == np.float16 and lse.dtype == np.float32
    assert attn.attention(q.astype(np.float32), k, v).dtype == np.float32
    assert attn.attention(q.astype(dtype("bf16")), k, v).dtype == dtype("bf16")


@pytest.mark.parametrize("spelling,name", [
    ("float32", "f32"), ("f32", "f32"), (np.float32, "f32"),
    ("float16", "f16"), ("f16", "f16"), (np.float16, "f16"), (np.dtype("float16"), "f16"),
    ("bfloat16", "bf16"), ("bf16", "bf16"), ("ml_dtypes.bfloat16", "bf16")])
def test_out_dtype_spellings(rng, spelling, name):
    if spelling == "ml_dtypes.bfloat16":
        spelling = dtype("bf16").type
    q, k, v, causal = make(rng, "decode", "f32", "f16", "f16")
    out = attn.attention(q, k, v, causal=causal, out_dtype=spelling)
    assert out.dtype == dtype(name)
    check(out, reference(f64(q), f64(k), f64(v), causal=causal)[0], v, name)


def test_out_dtype_must_agree_with_out(rng):
    q, k, v, _ = make(rng, "decode", "f32", "f32", "f32")
    out = out_like(q, v, "f16")
    assert attn.attention(q, k, v, out=out, out_dtype="float16") is out
    with pytest.raises(ValueError, match=r"out_dtype \(float32\) must match out's dtype \(float16\)"):
        attn.attention(q, k, v, out=out, out_dtype=np.float32)


@pytest.mark.parametrize("arg", ["q", "k", "v", "out"])
@pytest.mark.parametrize("bad", [np.float64, np.int32, np.uint16, np.int8])
def test_unsupported_dtypes_name_the_argument_and_dtype(rng, arg, bad):
    arrays = dict(zip("qkv", make(rng, "decode", "f32", "f32", "f32")[:3]))
    arrays["out"] = out_like(arrays["q"], arrays["v"], "f32")
    arrays[arg] = np.zeros_like(arrays[arg], dtype=bad) if arg == "out" else arrays[arg].astype(bad)
    with pytest.raises(TypeError, match=(rf"^attn: {arg} must be float32, float16 or bfloat16, "
                                         rf"got {np.dtype(bad).name} ")):
        attn.attention(arrays["q"], arrays["k"], arrays["v"], out=arrays["out"])
    assert arg == "out" or np.isnan(arrays["out"]).all()  # nothing written


def test_other_ml_dtypes_types_are_named():
    if ml_dtypes is None:
        pytest.skip("needs ml_dtypes")
    q = np.zeros((2, 8), dtype=ml_dtypes.float8_e4m3fn)  # NumPy exports it neither way
    k = v = np.zeros((2, 8), dtype=np.float32)
    with pytest.raises(TypeError, match=r"^attn: q must be float32, float16 or bfloat16, got float8_e4m3fn"):
        attn.attention(q, k, v)


def test_mask_stays_float32(rng):
    q, k, v, _ = make(rng, "decode", "f16", "f16", "f16")
    mask = np.zeros((1, 45), dtype=np.float16)
    with pytest.raises(TypeError, match=r"^attn: mask must be float32, got float16"):
        attn.attention(q, k, v, mask=mask)
    got = attn.attention(q, k, v, mask=mask.astype(np.float32))
    check(got, reference(f64(q), f64(k), f64(v))[0], v, "f16")


@pytest.mark.parametrize("bad,match", [("float64", "got float64"), ("int8", "got int8"),
                                       ("half precision", "got half precision"),
                                       (object(), "out_dtype must be a dtype")])
def test_bad_out_dtype(rng, bad, match):
    q, k, v, _ = make(rng, "decode", "f32", "f32", "f32")
    with pytest.raises(TypeError, match=match):
        attn.attention(q, k, v, out_dtype=bad)


def test_read_only_16bit_inputs_and_a_read_only_out(rng):
    q, k, v, causal = make(rng, "gqa_causal", "bf16", "f16", "bf16")
    for x in (q, k, v):
        x.setflags(write=False)
    check(attn.attention(q, k, v, causal=causal), reference(f64(q), f64(k), f64(v), causal=causal)[0],
          v, "bf16")
    out = out_like(q, v, "bf16")
    out.setflags(write=False)
    with pytest.raises(TypeError, match="writable"):
        attn.attention(q, k, v, out=out)


# ---- DLPack: any producer, not only NumPy (PyTorch, JAX, ...) ----------------

class DLPackOnly:
    """Exposes an array through __dlpack__ alone, as a foreign framework does."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class BFloat16DLPack:
    """A bfloat16 tensor exported the way PyTorch exports torch.bfloat16
    (DLPack code kDLBfloat = 4, 16 bits), over the bit patterns of a uint16
    NumPy array; no ml_dtypes involved. Unversioned capsule, no deleter (the
    producer keeps the memory alive)."""

    def __init__(self, bits):
        assert bits.dtype == np.uint16
        self.bits = bits
        self._shape = (ctypes.c_int64 * bits.ndim)(*bits.shape)
        self._strides = (ctypes.c_int64 * bits.ndim)(*(s // 2 for s in bits.strides))
        self._managed = []

    def __dlpack__(self, **kwargs):
        m = _DLManagedTensor()
        m.dl_tensor = _DLTensor(self.bits.ctypes.data, _DLDevice(1, 0), self.bits.ndim,
                                _DLDataType(4, 16, 1), self._shape, self._strides, 0)
        self._managed.append(m)
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)


def test_dlpack_producers_float16(rng):
    q, k, v, causal = make(rng, "gqa_causal", "f16", "f16", "f32")
    out = out_like(q, v, "f16")
    got = attn.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=causal,
                         out=DLPackOnly(out))
    assert isinstance(got, DLPackOnly) and got.a is out
    check(out, reference(f64(q), f64(k), f64(v), causal=causal)[0], v, "f16")


def test_dlpack_bfloat16_as_pytorch_exports_it(rng):
    q, k, v, causal = make(rng, "gqa_causal", "bf16", "f32", "bf16")
    out_bits = np.full(q.shape[:-1] + (v.shape[-1],), 0x7FC0, dtype=np.uint16)  # NaN
    got = attn.attention(BFloat16DLPack(q.view(np.uint16)), k, BFloat16DLPack(v.view(np.uint16)),
                         causal=causal, out=BFloat16DLPack(out_bits))
    assert isinstance(got, BFloat16DLPack) and got.bits is out_bits
    # The result is bfloat16 bit patterns: widen them exactly (<< 16).
    out = (out_bits.astype(np.uint32) << 16).view(np.float32)
    check(out, reference(f64(q), f64(k), f64(v), causal=causal)[0], v, "bf16")
    # Without out=, a bfloat16 q gives an ml_dtypes.bfloat16 result.
    default = attn.attention(BFloat16DLPack(q.view(np.uint16)), k, v, causal=causal)
    np.testing.assert_array_equal(default.view(np.uint16), out_bits)


def test_plain_uint16_bits_are_not_taken_for_bfloat16(rng):
    q, k, v, _ = make(rng, "decode", "bf16", "bf16", "bf16")
    with pytest.raises(TypeError, match="got uint16"):
        attn.attention(q.view(np.uint16), k, v)


# ---- ggml's q8_0 K / V (k_dtype="q8_0", v_dtype="q8_0") ----------------------

def q8_ggml(x):
    """ggml's quantize_row_q8_0_ref in NumPy, written here from its rule (not
    the library's code): per block of 32, d = max|x| / 127 and id = 1 / d
    (0 when d = 0) in float32, q = roundf(x * id) (halves away from zero:
    floor(|y| + 0.5), exact in float64 for a float32 y), d stored as float16
    (to nearest even). Returns the uint8 bytes (..., n / 32 * 34)."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    d = (np.abs(blocks).max(axis=-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    y = (blocks * inv[..., None]).astype(np.float32).astype(np.float64)
    q = (np.sign(y) * np.floor(np.abs(y) + 0.5)).astype(np.int8)
    scale = d.astype(np.float16).view(np.uint8).reshape(d.shape + (2,))  # little-endian
    out = np.concatenate([scale, q.view(np.uint8)], axis=-1)
    return out.reshape(x.shape[:-1] + (x.shape[-1] // 32 * 34,))


def q8_values(b):
    """The float64 values of q8_0 bytes (..., m): int8 times the block's
    float16 scale, decoded here from the layout."""
    b = np.asarray(b, dtype=np.uint8)
    blocks = b.reshape(b.shape[:-1] + (b.shape[-1] // 34, 34))
    scale = np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0].astype(np.float64)
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).astype(np.float64)
    return (q * scale[..., None]).reshape(b.shape[:-1] + (b.shape[-1] // 34 * 32,))


def q4_ggml(x):
    """ggml's quantize_row_q4_0_ref in NumPy, written here from its rule:
    per block of 32, max = the first value of largest |x|, d = max / -8 and
    id = 1 / d (0 when d = 0) in float32, nibble = min(15, trunc(x * id +
    8.5)) in float32, elements 0-15 in the low nibbles and 16-31 in the high
    ones, d stored as float16. Returns the uint8 bytes (..., n / 32 * 18)."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    first = np.argmax(np.abs(blocks), axis=-1)[..., None]  # the first of ties
    d = (np.take_along_axis(blocks, first, axis=-1)[..., 0] / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    y = (blocks * inv[..., None]).astype(np.float32) + np.float32(8.5)
    n = np.minimum(15, np.trunc(y)).astype(np.uint8)
    packed = n[..., :16] | (n[..., 16:] << 4)
    scale = d.astype(np.float16).view(np.uint8).reshape(d.shape + (2,))
    out = np.concatenate([scale, packed], axis=-1)
    return out.reshape(x.shape[:-1] + (x.shape[-1] // 32 * 18,))


def q4_values(b):
    """The float64 values of q4_0 bytes (..., m): (nibble - 8) times the
    block's float16 scale, decoded here from the layout."""
    b = np.asarray(b, dtype=np.uint8)
    blocks = b.reshape(b.shape[:-1] + (b.shape[-1] // 18, 18))
    scale = np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0].astype(np.float64)
    nibbles = np.concatenate([blocks[..., 2:] & 15, blocks[..., 2:] >> 4], axis=-1)
    return ((nibbles.astype(np.float64) - 8) * scale[..., None]).reshape(
        b.shape[:-1] + (b.shape[-1] // 18 * 32,))


# Each block type: its quantiser, the rule above, the decoder above.
BLOCKS = {"q8_0": (lambda x: attn.quantize_q8_0(x), q8_ggml, q8_values),
          "q4_0": (lambda x: attn.quantize_q4_0(x), q4_ggml, q4_values)}


def test_quantize_q8_0_hand_computed_block():
    # amax 127: d = 1 (float16 0x3c00), q = roundf(x): halves away from zero.
    x = np.zeros(64, np.float32)
    x[:6] = [127.0, -63.5, 0.5, -0.5, 2.5, -126.6]
    # Second block, amax 1: d = 1/127 -> float16 0x2008 (fraction 0.00787 *
    # 1024 = 8.06 -> 8, exponent -7); q = 127 * x: 0.25 -> 31.75 -> 32.
    x[32:35] = [1.0, 0.25, -0.1]
    got = attn.quantize_q8_0(x)
    assert got.dtype == np.uint8 and got.shape == (68,)
    assert list(got[:2]) == [0x00, 0x3C] and list(got[34:36]) == [0x08, 0x20]
    assert list(got[2:8].view(np.int8)) == [127, -64, 1, -1, 3, -127]
    assert list(got[36:39].view(np.int8)) == [127, 32, -13]
    np.testing.assert_array_equal(attn.dequantize_q8_0(got), q8_values(got).astype(np.float32))


@pytest.mark.parametrize("block,row_bytes", [("q8_0", 136), ("q4_0", 72)])
def test_quantize_follows_ggmls_rule(rng, block, row_bytes):
    quantize, ggml, _ = BLOCKS[block]
    x = (rng.standard_normal((3, 5, 128)) * np.array([1e-3, 1.0, 300.0])[:, None, None]).astype(np.float32)
    x[1, 2, :32] = 0.0  # a zero block
    x[2, 0, 32:64] *= 1e-3
    x[2, 0, 40:42] = [-5.0, 5.0]  # a tie of the largest magnitudes (q4_0: the first is max)
    got = quantize(x)
    assert got.shape == (3, 5, row_bytes)
    np.testing.assert_array_equal(got, ggml(x))
    # A strided view of x (rows of a larger array) is read in place.
    wide = np.zeros((5, 256), np.float32)
    wide[:, :128] = x[0]
    np.testing.assert_array_equal(quantize(wide[:, :128]), ggml(x[0]))


def test_quantize_q4_0_hand_computed_block():
    # max 8: d = -1 (float16 0xbc00), id = -1, nibble = trunc(8.5 - x):
    # 8 -> 0, -4 -> 12, 2 -> 6, -7.9 -> 16 -> 15 (saturated); zeros -> 8.
    # Element 16 (-2 -> 10) is the high nibble of byte 0.
    x = np.zeros(64, np.float32)
    x[:4] = [8.0, -4.0, 2.0, -7.9]
    x[16] = -2.0
    # Second block, all zero: d = 0 / -8 = -0 (float16 0x8000), every nibble 8.
    got = attn.quantize_q4_0(x)
    assert got.dtype == np.uint8 and got.shape == (36,)
    assert list(got[:2]) == [0x00, 0xBC] and list(got[18:20]) == [0x00, 0x80]
    assert list(got[2:6]) == [0xA0, 0x8C, 0x86, 0x8F]
    assert list(got[20:22]) == [0x88, 0x88]
    np.testing.assert_array_equal(attn.dequantize_q4_0(got), q4_values(got).astype(np.float32))


@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("bad,match", [(np.zeros(48, np.float32), "n must be a multiple of 32"),
                                       (np.full(32, np.inf, np.float32), r"x\[0\] must be finite"),
                                       (np.full(32, -np.inf, np.float32), r"x\[0\] must be finite"),
                                       (np.zeros(32, np.float64), "x must be float32")])
def test_quantize_errors(block, bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        BLOCKS[block][0](bad)


def q8_case(rng, shape, kq8, vq8, block="q8_0"):
    """(q, k, v, k_values, v_values, causal): k / v as block bytes (uint8;
    q8_0 or q4_0) or float32, with the values the kernels must see (float64)."""
    quantize, _, values = BLOCKS[block]
    def kv(x, as_block):
        if not as_block:
            return x, f64(x)
        b = quantize(np.ascontiguousarray(x))
        return b, values(b)
    if shape == "gqa_causal":
        q = rand(rng, (2, 4, 19, 64), "f32")
        k, kf = kv(rand(rng, (2, 2, 37, 64), "f32"), kq8)
        v, vf = kv(rand(rng, (2, 2, 37, 32), "f32"), vq8)
        return q, k, v, kf, vf, "bottom_right"
    if shape == "decode":
        # A padded cache: the first 45 of 64 rows (strided views of the bytes).
        q = rand(rng, (1, 8, 1, 96), "f32")
        k, kf = kv(rand(rng, (1, 2, 64, 96), "f32"), kq8)
        v, vf = kv(rand(rng, (1, 2, 64, 32), "f32"), vq8)
        return q, k[:, :, :45], v[:, :, :45], kf[:, :, :45], vf[:, :, :45], True
    assert shape == "seq_major_top_left"
    q = rand(rng, (1, 13, 3, 32), "f32").transpose(0, 2, 1, 3)
    k, kf = kv(rand(rng, (1, 9, 3, 32), "f32"), kq8)
    v, vf = kv(rand(rng, (1, 9, 3, 64), "f32"), vq8)
    t = (0, 2, 1, 3)
    return q, k.transpose(t), v.transpose(t), kf.transpose(t), vf.transpose(t), "top_left"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kq8,vq8", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("block", list(BLOCKS))
def test_block_k_and_v_every_kernel(rng, shape, kernel, kq8, vq8, block):
    q, k, v, kf, vf, causal = q8_case(rng, shape, kq8, vq8, block)
    got = attn.attention(q, k, v, causal=causal, kernel=kernel,
                         k_dtype=block if kq8 else None, v_dtype=block if vq8 else None)
    assert got.dtype == np.float32 and got.shape == q.shape[:-1] + (vf.shape[-1],)
    # The reference reads the decoded values: the kernels' own float32 bound.
    check(got, reference(f64(q), kf, vf, causal=causal)[0], vf, "f32")


@pytest.mark.parametrize("block", list(BLOCKS))
def test_block_types_on_every_supported_target(rng, block):
    q, k, v, kf, vf, causal = q8_case(rng, "decode", True, True, block)
    want = reference(f64(q), kf, vf, causal=causal)[0]
    try:
        for target in attn.supported_targets():
            attn.force_target(target)
            for kernel in KERNELS:
                got = attn.attention(q, k, v, causal=causal, kernel=kernel, k_dtype=block,
                                     v_dtype=block, out_dtype="float16")
                check(got, want, vf, "f16")
    finally:
        attn.force_target("auto")


def test_q8_0_errors_name_the_argument(rng):
    q, k, v, _, _, _ = q8_case(rng, "gqa_causal", True, True)
    with pytest.raises(TypeError, match="k must be float32, float16 or bfloat16, got uint8"):
        attn.attention(q, k, v, v_dtype="q8_0")  # k's bytes without k_dtype
    with pytest.raises(TypeError, match="v must be a uint8 array of q8_0 blocks"):
        attn.attention(q, k, q, k_dtype="q8_0", v_dtype="q8_0")
    with pytest.raises(ValueError, match="k_dtype must be None .*, 'q8_0' or 'q4_0', got 'q5_0'"):
        attn.attention(q, k, v, k_dtype="q5_0", v_dtype="q8_0")
    # q8_0 bytes (68 a row) read as q4_0 are 68 / 18 blocks: not whole.
    with pytest.raises(ValueError, match="multiple of 18 bytes"):
        attn.attention(q, k, v, k_dtype="q4_0", v_dtype="q8_0")
    with pytest.raises(ValueError, match="multiple of 34 bytes"):
        attn.attention(q, k[..., :60], v, k_dtype="q8_0", v_dtype="q8_0")
    # Rows 70 bytes apart (not whole blocks), heads and batches whole blocks.
    buf = np.zeros(2 * 2 * 2618, np.uint8)  # 2618 = 77 blocks >= 37 rows of 70 bytes
    rows70 = np.lib.stride_tricks.as_strided(buf, shape=k.shape, strides=(5236, 2618, 70, 1))
    with pytest.raises(ValueError, match=r"k.strides\[-2\] must be a multiple of 34 bytes .*got 70"):
        attn.attention(q, rows70, v, k_dtype="q8_0", v_dtype="q8_0")
    # k's 68 bytes are 64 elements: they must match q's head_dim (here 32).
    with pytest.raises(ValueError, match=r"k.shape\[-1\] \(head_dim\) must equal q.shape\[-1\] \(32\), got 64"):
        attn.attention(q[..., :32], k, v, k_dtype="q8_0", v_dtype="q8_0")


@pytest.mark.parametrize("block", list(BLOCKS))
def test_block_paged_cache_with_append(rng, block):
    """A paged q8_0 or q4_0 pool (uint8 (num_blocks, block_size, kv_heads,
    d/32*34 or *18)) with float32 new tokens quantised into it as
    quantize_q8_0 / quantize_q4_0 do."""
    quantize, ggml, values = BLOCKS[block]
    hq, hkv, d, bs = 4, 2, 64, 16
    cached = np.array([20, 33], np.int32)
    table = np.array([[3, 0, 5], [1, 4, 2]], np.int32)
    k_pool = quantize(rand(rng, (6, bs, hkv, d), "f32"))
    v_pool = quantize(rand(rng, (6, bs, hkv, d), "f32"))
    k_new, v_new = rand(rng, (2, 1, hkv, d), "f32"), rand(rng, (2, 1, hkv, d), "f32")
    q = rand(rng, (2, 1, hq, d), "f32")
    out = attn.kvcache_attention(q, k_pool, v_pool, k_new, v_new, cache_seqlens=cached,
                                 block_table=table, causal=True, cache_dtype=block)
    for b in range(2):
        t = int(cached[b])
        page, slot = table[b, t // bs], t % bs
        np.testing.assert_array_equal(k_pool[page, slot], ggml(k_new[b, 0]))
        np.testing.assert_array_equal(v_pool[page, slot], ggml(v_new[b, 0]))
        keys = np.concatenate([k_pool[table[b, p]] for p in range(3)])[: t + 1]
        vals = np.concatenate([v_pool[table[b, p]] for p in range(3)])[: t + 1]
        want = reference(f64(q[b:b + 1].transpose(0, 2, 1, 3)),
                         values(keys).transpose(1, 0, 2)[None],
                         values(vals).transpose(1, 0, 2)[None], causal=True)[0]
        check(out[b:b + 1].transpose(0, 2, 1, 3), want, values(vals), "f32")


@pytest.mark.parametrize("block", list(BLOCKS))
def test_block_varlen_attention(rng, block):
    """Packed block k / v (total_k, kv_heads, d / 32 * 34 or * 18) in a
    variable-length batch."""
    quantize, _, values = BLOCKS[block]
    cu_q, cu_k = np.array([0, 1, 4], np.int32), np.array([0, 37, 50], np.int32)
    q = rand(rng, (4, 4, 64), "f32")
    kq = quantize(rand(rng, (50, 2, 64), "f32"))
    vq = quantize(rand(rng, (50, 2, 32), "f32"))
    out = attn.varlen_attention(q, kq, vq, cu_q, cu_k, 3, 37, causal=True, k_dtype=block,
                                v_dtype=block)
    for b in range(2):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = reference(f64(q[qs]).transpose(1, 0, 2)[None], values(kq[ks]).transpose(1, 0, 2)[None],
                         values(vq[ks]).transpose(1, 0, 2)[None], causal=True)[0]
        check(out[qs].transpose(1, 0, 2)[None], want, values(vq[ks]), "f32")
