"""Bad input raises a Python exception carrying the library's message (which
names the field and the bad value), and writes nothing."""
import re

import numpy as np
import pytest

import attn


def arrays(hq=4, hkv=2, tq=5, tk=7, d=8):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, hq, tq, d)).astype(np.float32),
            rng.standard_normal((1, hkv, tk, d)).astype(np.float32),
            rng.standard_normal((1, hkv, tk, d)).astype(np.float32))


def test_library_error_is_a_value_error_with_the_field_and_value():
    q, k, v = arrays(hq=4, hkv=3)
    with pytest.raises(attn.Error, match=r"^attn: kv_heads must divide q_heads \(4\), got 3$"):
        attn.attention(q, k, v)
    assert issubclass(attn.Error, ValueError)


def test_nothing_is_written_on_error():
    q, k, v = arrays()
    out = np.full((1, 4, 5, 8), 7.0, dtype=np.float32)
    with pytest.raises(attn.Error, match="kernel"):
        attn.attention(q, k, v, kernel="fastest", out=out)
    assert np.all(out == 7.0)


def test_unknown_kernel_names_the_value():
    q, k, v = arrays()
    with pytest.raises(attn.Error, match="fastest"):
        attn.attention(q, k, v, kernel="fastest")


def test_float64_is_a_type_error_not_a_silent_copy():
    q, k, v = arrays()
    with pytest.raises(TypeError, match=r"attn: k must be float32, float16 or bfloat16, got float64"):
        attn.attention(q, k.astype(np.float64), v)


def test_non_array_is_a_type_error():
    q, k, v = arrays()
    with pytest.raises(TypeError, match=r"attn: q must be a CPU array .*got list"):
        attn.attention(q.tolist(), k, v)


def test_strided_last_dimension_is_refused():
    q, k, v = arrays(d=16)
    with pytest.raises(ValueError, match=r"q's last dimension must be contiguous .*got stride 2"):
        attn.attention(q[..., ::2], k[..., ::2].copy(), v)


def test_negative_strides_are_refused_by_the_library():
    q, k, v = arrays()
    with pytest.raises(attn.Error, match=r"q.head_stride must be >= 0, got -40"):
        attn.attention(q[:, ::-1], k, v)


def test_shape_mismatches_name_both_sides():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"k.shape\[-1\] \(head_dim\) must equal q.shape\[-1\] \(8\), got 6"):
        attn.attention(q, k[..., :6].copy(), v)
    with pytest.raises(ValueError, match=r"v.shape\[-2\] \(kv_len\) must equal k.shape\[-2\] \(7\), got 6"):
        attn.attention(q, k, v[:, :, :6])
    with pytest.raises(ValueError, match=r"mask rows \(shape\[-2\]\) must be 5 or 1, got 3"):
        attn.attention(q, k, v, mask=np.zeros((3, 7), dtype=np.float32))


def test_out_must_fit_and_be_writable():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"out must have shape \(1, 4, 5, 8\), got \(1, 4, 5, 9\)"):
        attn.attention(q, k, v, out=np.empty((1, 4, 5, 9), dtype=np.float32))
    ro = np.empty((1, 4, 5, 8), dtype=np.float32)
    ro.setflags(write=False)
    with pytest.raises(TypeError, match="writable"):
        attn.attention(q, k, v, out=ro)


def test_out_overlapping_an_input_is_refused():
    q, k, v = arrays(hq=2, hkv=2, tq=7)
    with pytest.raises(attn.Error, match="overlap"):
        attn.attention(q, k, v, out=q)


@pytest.mark.parametrize("causal,match", [("upper", "'upper'"), (3, "got int")])
def test_bad_causal(causal, match):
    q, k, v = arrays()
    with pytest.raises(ValueError, match=match):
        attn.attention(q, k, v, causal=causal)


def test_wrong_dimension_count():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"q must have 2 to 4 dimensions, got 5"):
        attn.attention(q[None], k, v)


# Empty arrays: a zero extent anywhere (the last dim included) gets the
# library's size message for that field, not a complaint about the strides
# an empty array happens to report. arrays() is q (1, 4, 5, 8),
# k and v (1, 2, 7, 8); out (1, 4, 5, 8).
EMPTY_FIELDS = {
    "q": ["batch", "q_heads", "q_len", "head_dim"],
    "k": ["batch", "kv_heads", "kv_len", "head_dim"],
    "v": ["batch", "kv_heads", "kv_len", "value_dim"],
}


@pytest.mark.parametrize("arg", ["q", "k", "v"])
@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_a_zero_extent_names_its_field(arg, dim):
    args = dict(zip("qkv", arrays()))
    shape = list(args[arg].shape)
    shape[dim] = 0
    args[arg] = np.zeros(shape, dtype=np.float32)
    field = EMPTY_FIELDS[arg][dim]
    with pytest.raises(attn.Error, match=(rf"^attn: {field} must be >= 1, got 0 \({arg}\.shape"
                                          rf"\[{dim - 4}\]; {arg} has shape ")):
        attn.attention(args["q"], args["k"], args["v"])


def test_an_empty_sequence_is_named_q_len():
    q = np.zeros((4, 0, 16), np.float32)
    with pytest.raises(attn.Error, match=r"^attn: q_len must be >= 1, got 0 \(q.shape\[-2\]; "
                                         r"q has shape \(4, 0, 16\)\)$"):
        attn.attention(q, q, q)
    k = np.zeros((4, 3, 16), np.float32)
    with pytest.raises(attn.Error, match=r"^attn: kv_len must be >= 1, got 0 \(k.shape\[-2\]"):
        attn.attention(k, q, q)
    for dtype in (np.float16, np.float32):  # all-empty, and a zero head dim
        with pytest.raises(attn.Error, match=r"^attn: q_heads must be >= 1, got 0"):
            attn.attention(*(np.zeros((0, 0, 0), dtype),) * 3)
        with pytest.raises(attn.Error, match=r"^attn: head_dim must be >= 1, got 0"):
            attn.attention(*(np.zeros((2, 3, 0), dtype),) * 3)


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_an_empty_out_is_named_by_its_shape(dim):
    q, k, v = arrays()
    shape = [1, 4, 5, 8]
    shape[dim] = 0
    with pytest.raises(ValueError, match=(r"^attn: out must have shape \(1, 4, 5, 8\), got "
                                          + re.escape(str(tuple(shape))) + "$")):
        attn.attention(q, k, v, out=np.zeros(shape, np.float32))


@pytest.mark.parametrize("shape,match", [
    ((0, 7), r"mask rows \(shape\[-2\]\) must be 5 or 1, got 0"),
    ((5, 0), r"mask columns \(shape\[-1\]\) must be 7 or 1, got 0"),
    ((0, 5, 7), r"mask heads \(shape\[-3\]\) must be 4 or 1, got 0"),
    ((0, 4, 5, 7), r"mask batch \(shape\[-4\]\) must be 1, got 0"),
])
def test_an_empty_mask_is_named_by_its_size(shape, match):
    q, k, v = arrays()
    with pytest.raises(ValueError, match=match):
        attn.attention(q, k, v, mask=np.zeros(shape, np.float32))
