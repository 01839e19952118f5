"""The bf16 dot-product paths (docs/precision.md): naming, forcing, and
all-bf16 attention on each path within its bound against the float64
reference of the same bf16 values, and the bound failing for a wrong result."""
import numpy as np
import pytest

import attn
from test_attention import reference
from test_dtypes import check, dtype, f64, rand


@pytest.fixture
def rng():
    return np.random.default_rng(99)


@pytest.fixture
def restore():
    yield
    attn.force_dot_path("auto")
    attn.force_target("auto")


def test_names_and_the_default(restore):
    assert attn.dot_paths() == ["widen", "avx512bf16", "avx512bf16-emulated", "amx",
                                "amx-emulated", "bfdot", "bfdot-emulated"]
    supported = attn.supported_dot_paths()
    # The emulations run everywhere; each instruction only on its own CPUs.
    assert {"widen", "avx512bf16-emulated", "amx-emulated", "bfdot-emulated"} <= set(supported)
    # The default: the fastest instruction where it runs, never an emulation.
    assert attn.current_dot_path() == ("amx" if "amx" in supported else
                                       "avx512bf16" if "avx512bf16" in supported else
                                       "bfdot" if "bfdot" in supported else "widen")
    attn.force_dot_path("avx512bf16-emulated")
    assert attn.current_dot_path() == "avx512bf16-emulated"
    with pytest.raises(attn.Error, match="dot path must be one of"):
        attn.force_dot_path("sve-bfdot")
    if "amx" not in supported:
        with pytest.raises(attn.Error, match="cannot run here"):
            attn.force_dot_path("amx")
    assert attn.current_dot_path() == "avx512bf16-emulated"


@pytest.mark.parametrize("path", ["widen", "avx512bf16-emulated", "avx512bf16", "amx-emulated",
                                  "amx", "bfdot-emulated", "bfdot"])
@pytest.mark.parametrize("kernel", ["streaming", "parallel", "auto"])
@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
def test_every_path_is_within_its_bound(rng, restore, path, kernel, causal):
    if path not in attn.supported_dot_paths():
        pytest.skip(f"{path} cannot run on this CPU ({attn.current_target()})")
    attn.force_dot_path(path)
    q, k, v = (rand(rng, (2, 4, 37, 40), "bf16"), rand(rng, (2, 2, 53, 40), "bf16"),
               rand(rng, (2, 2, 53, 24), "bf16"))
    got = attn.attention(q, k, v, causal=causal, kernel=kernel, out_dtype=np.float32)
    want = reference(f64(q), f64(k), f64(v), causal=causal)[0]
    abs_v = reference(f64(q), f64(k), np.abs(f64(v)), causal=causal)[0]
    check(got, want, v, "f32", None if path == "widen" else abs_v)
    # A kernel that skipped the first key exceeds the same bound.
    wrong = reference(f64(q), f64(k[:, :, 1:]), f64(v[:, :, 1:]),
                      causal="bottom_right" if causal == "bottom_right" else False)[0]
    if causal is False:
        with pytest.raises(AssertionError, match="exceeds the bound"):
            check(got, wrong, v, "f32", None if path == "widen" else abs_v)


@pytest.mark.parametrize("path", ["avx512bf16-emulated", "amx-emulated", "avx512bf16", "amx",
                                  "bfdot-emulated", "bfdot"])
@pytest.mark.parametrize("name", ["f32", "f16"])
def test_round_inputs_to_bf16_is_the_bf16_problem_of_the_values(rng, restore, path, name):
    """Opting in rounds float32 / float16 inputs to bf16: the result is, bit
    for bit, that of the same call on the values rounded to bf16; without
    the option the inputs stay exact."""
    if path not in attn.supported_dot_paths():
        pytest.skip(f"{path} cannot run on this CPU ({attn.current_target()})")
    attn.force_dot_path(path)
    q, k, v = (rand(rng, (1, 2, 41, 32), name), rand(rng, (1, 2, 45, 32), name),
               rand(rng, (1, 2, 45, 16), name))
    got = attn.attention(q, k, v, causal="bottom_right", out_dtype=np.float32,
                         round_inputs_to_bf16=True)
    bf = [x.astype(np.float32).astype(dtype("bf16")) for x in (q, k, v)]
    want = attn.attention(*bf, causal="bottom_right", out_dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    exact = attn.attention(q, k, v, causal="bottom_right", out_dtype=np.float32)
    assert not np.array_equal(exact, got)  # the default does not round


@pytest.mark.parametrize("path", ["widen", "avx512bf16-emulated", "amx-emulated", "avx512bf16",
                                  "amx", "bfdot-emulated", "bfdot"])
def test_the_dot_path_keyword_chooses_the_path_of_one_call(rng, restore, path):
    """dot_path= is the per-call form of force_dot_path: the same bits as the
    call under the forced path, and the process's path is left as it was."""
    if path not in attn.supported_dot_paths():
        pytest.skip(f"{path} cannot run on this CPU ({attn.current_target()})")
    q, k, v = (rand(rng, (1, 4, 19, 48), "bf16"), rand(rng, (1, 2, 67, 48), "bf16"),
               rand(rng, (1, 2, 67, 32), "bf16"))
    before = attn.current_dot_path()
    got = attn.attention(q, k, v, causal="bottom_right", out_dtype=np.float32, dot_path=path)
    assert attn.current_dot_path() == before
    attn.force_dot_path(path)
    want = attn.attention(q, k, v, causal="bottom_right", out_dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    # widen and the bf16 paths differ (P is rounded to bf16 on the latter), so
    # the keyword really reached the kernels.
    other = "avx512bf16-emulated" if path == "widen" else "widen"
    np.testing.assert_raises(AssertionError, np.testing.assert_array_equal, got,
                             attn.attention(q, k, v, causal="bottom_right",
                                            out_dtype=np.float32, dot_path=other))


def test_a_dot_path_keyword_that_cannot_run_writes_nothing(rng, restore):
    q, k, v = (rand(rng, (1, 1, 8, 16), "bf16") for _ in range(3))
    out = np.full((1, 1, 8, 16), 7.0, np.float32)
    with pytest.raises(attn.Error, match="dot path must be one of"):
        attn.attention(q, k, v, out=out, dot_path="sve-bfdot")
    if "amx" not in attn.supported_dot_paths():
        with pytest.raises(attn.Error, match="cannot run here"):
            attn.attention(q, k, v, out=out, dot_path="amx")
    assert (out == 7.0).all()
