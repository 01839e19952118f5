"""The tuning and target API: what `auto` runs, loading a table, and the
warning (never an exception) for a file that cannot be used."""
import json

import numpy as np
import pytest

import attn


def test_explain_without_a_table_uses_the_default_rule():
    attn.clear_tuning()
    choice = attn.explain(1, 4096, 128)
    assert choice.source == "default"
    assert choice.kernel in attn.kernels()
    assert choice.q_block > 0 and choice.kv_block > 0 and choice.kv_splits > 0
    assert "default rule" in choice.reason


def test_a_missing_file_is_ignored_with_a_warning(tmp_path):
    path = str(tmp_path / "missing.json")
    status = attn.load_tuning_file(path)
    assert not status.loaded and status.entries == 0
    assert path in status.warning
    assert attn.explain(64, 64, 64).source == "default"


def test_a_foreign_file_is_ignored_and_results_do_not_change(tmp_path):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 33, 64), dtype=np.float32) for _ in range(3))
    attn.clear_tuning()
    before = attn.attention(q, k, v, causal=True)
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps({"schema": 1, "cpu": "some other machine", "entries": []}))
    status = attn.load_tuning_file(str(path))
    assert not status.loaded and status.warning
    assert attn.current_tuning().loaded is False
    np.testing.assert_array_equal(attn.attention(q, k, v, causal=True), before)


def test_targets():
    assert attn.current_target() in attn.supported_targets()
    assert set(attn.supported_targets()) <= set(attn.compiled_targets())


def test_version_is_the_library_version():
    assert attn.__version__.count(".") == 2


def test_explain_names_the_decode_walk():
    # One query row of d = 128: a decode view, which takes a walk of the
    # decode walk table; 64 rows take the panel kernels, no walk.
    walks = {"row", "pipelined", "tiled", "pair-row", "pair-tiled", "amx-tiles"}
    assert attn.explain(1, 4096, 128).decode_walk in walks
    assert attn.explain(64, 4096, 128).decode_walk == ""


def test_a_forced_decode_walk_gives_the_same_bits_and_an_unknown_one_raises():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((4, 1, 64), dtype=np.float32)
    k = rng.standard_normal((4, 300, 64), dtype=np.float32)
    v = rng.standard_normal((4, 300, 64), dtype=np.float32)
    # The widened walks keep the tiled walk's order per output column, so
    # at equal tiles their bits agree: 32 keys are one tile for every walk.
    out = {w: attn.attention(q, k[:, :32], v[:, :32], kernel="streaming", decode_walk=w)
           for w in ("tiled", "row", "pipelined", "")}
    for w in ("row", "pipelined", ""):
        assert np.array_equal(out[w], out["tiled"]), w
    with pytest.raises(attn.Error) as e:
        attn.attention(q, k, v, decode_walk="no-such-walk")
    assert "decode_walk" in str(e.value)
