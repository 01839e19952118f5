#!/usr/bin/env python3
"""Tests of compare.py's merging of rounds (--rounds): standard library only.

  python3 bench/peers/compare_test.py        # also a ctest (bench/CMakeLists.txt)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402


class MergeAttn(unittest.TestCase):
    def test_keeps_each_kernels_fastest_sample(self):
        first = {"auto": {"seconds": 2.0}, "blas": {"seconds": 3.0}}
        second = {"auto": {"seconds": 1.5}, "blas": {"seconds": 4.0}}
        merged = compare.merge_attn(first, second)
        self.assertEqual(merged["auto"]["seconds"], 1.5)
        self.assertEqual(merged["blas"]["seconds"], 3.0)
        self.assertEqual(compare.merge_attn(second, first), merged)

    def test_a_time_replaces_an_error_and_an_error_never_replaces_a_time(self):
        failed = {"naive": {"error": "refused"}}
        timed = {"naive": {"seconds": 9.0}}
        self.assertEqual(compare.merge_attn(failed, timed)["naive"], {"seconds": 9.0})
        self.assertEqual(compare.merge_attn(timed, failed)["naive"], {"seconds": 9.0})

    def test_a_failed_attn_bench_round_is_dropped_when_another_ran(self):
        ran = {"auto": {"seconds": 2.0}}
        crashed = {"_error": "attn-bench exited 1"}
        self.assertEqual(compare.merge_attn(crashed, ran), ran)
        self.assertEqual(compare.merge_attn(ran, crashed), ran)
        self.assertEqual(compare.merge_attn(crashed, crashed), crashed)


class ElementTypes(unittest.TestCase):
    def test_rows_and_bytes_follow_the_dtype(self):
        s = {"kind": "single", "H": 1, "Tq": 2048, "Tk": 2048, "d": 128, "causal": 0}
        self.assertEqual(compare.bench_name("streaming", s, 1),
                         "streaming/T:2048/d:128/causal:0/threads:1")  # f32 names unchanged
        self.assertEqual(compare.bench_name("streaming", dict(s, dtype="bf16"), 1),
                         "streaming/T:2048/d:128/causal:0/dtype:bf16/threads:1")
        dec = {"kind": "decode", "H": 16, "Tq": 1, "Tk": 4096, "d": 128, "causal": 0}
        self.assertEqual(compare.kv_bytes(dict(dec, dtype="f16")) * 2, compare.kv_bytes(dec))
        self.assertIn("bf16", compare.label(dict(dec, dtype="bf16")))

    def test_peers_round_to_nearest_even(self):
        try:
            import numpy as np
            import peers
        except ImportError:
            self.skipTest("numpy is not installed (the peers' venv has it)")
        x = np.array([1.00390625, 1.01171875, 1.0 + 2.0 ** -9, -3.0], dtype=np.float32)
        # bf16 keeps 8 significant bits: ties go to the even neighbour.
        self.assertEqual(list(peers.round_to(x, "bf16")), [1.0, 1.015625, 1.0, -3.0])
        self.assertEqual(peers.parse_shape("decode:16:1:4096:128:0:f16")["dtype"], "f16")
        self.assertEqual(peers.parse_shape("single:1:8:8:64:1")["dtype"], "f32")


class DecodeSet(unittest.TestCase):
    def test_kv_cache_rows_bytes_and_labels(self):
        shapes = compare.shapes("decode")
        self.assertEqual({(s["H"], s["Hkv"]) for s in shapes}, {(16, 16), (32, 8)})
        gqa = dict(next(s for s in shapes if s["Hkv"] == 8 and s["Tk"] == 32768), kv="f16")
        self.assertEqual(compare.bench_name("auto", gqa, 2),
                         "auto/decode/Hq:32/Hkv:8/Tk:32768/d:128/kv:f16/threads:2")
        self.assertEqual(compare.bench_name("auto", dict(gqa, kv="f32"), 1),
                         "auto/decode/Hq:32/Hkv:8/Tk:32768/d:128/threads:1")
        # K and V read once per K/V head: 8 heads, 2 bytes an element.
        self.assertEqual(compare.kv_bytes(gqa), 2.0 * 8 * 32768 * 2 * 128)
        # q8_0: 34 bytes per block of 32.
        self.assertEqual(compare.kv_bytes(dict(gqa, kv="q8_0")), 34.0 * 8 * 32768 * 2 * 4)
        self.assertIn("kv:q8_0", compare.label(dict(gqa, kv="q8_0")))
        # The old decode rows keep their names and bytes.
        dec = {"kind": "decode", "H": 16, "Tq": 1, "Tk": 4096, "d": 128, "causal": 0}
        self.assertEqual(compare.bench_name("auto", dec, 1),
                         "auto/decode/Hq:16/Hkv:16/Tk:4096/d:128/threads:1")
        self.assertEqual(compare.kv_bytes(dec), 4.0 * 16 * 4096 * 2 * 128)

    def test_peers_py_peers_skip_what_they_cannot_run(self):
        mha = {"kind": "decode", "H": 16, "Hkv": 16, "Tq": 1, "Tk": 4096, "d": 128,
               "causal": 0, "kv": "f32"}
        self.assertIsNone(compare.peer_runs_shape("torch", mha))
        self.assertIn("GQA", compare.peer_runs_shape("torch", dict(mha, Hkv=8)))
        self.assertIn("not run", compare.peer_runs_shape("jax", dict(mha, kv="q8_0")))
        self.assertIsNone(compare.peer_runs_shape("ggml", dict(mha, Hkv=8, kv="q8_0")))


class Ggml(unittest.TestCase):
    """The ggml worker's own path, where ggml-python is importable (its venv:
    ATTN_GGML_VENV=/tmp/attn-ggml /tmp/attn-ggml/bin/python compare_test.py)."""

    def test_flash_attn_ext_matches_the_float64_reference(self):
        try:
            import ctypes
            import ggml
        except ImportError:
            self.skipTest("ggml-python is not installed (see compare.py --peers ggml)")
        params = ggml.ggml_threadpool_params_default(1)
        tp = ggml.ggml_threadpool_new(ctypes.byref(params))
        for kv in ("f32", "f16", "q8_0"):
            for hq, hkv in ((2, 2), (8, 2)):
                s = {"kind": "decode", "H": hq, "Hkv": hkv, "Tq": 1, "Tk": 301, "d": 64,
                     "causal": 0, "kv": kv}
                g = compare.GgmlDecode(ggml, tp, 1, s, seed=3)
                g()
                err = float(abs(g.result() - g.reference()).max())
                # A wrong head mapping (every query head on K/V head 0) is
                # far outside the bound the worker holds ggml to.
                if hkv > 1:
                    wrong = g.reference()
                    wrong[-1] = wrong[0]
                    self.assertGreater(float(abs(g.result() - wrong).max()),
                                       compare.GGML_CHECK_BOUND[kv], (kv, hq, hkv))
                g.free()
                self.assertLess(err, compare.GGML_CHECK_BOUND[kv], (kv, hq, hkv))
        ggml.ggml_threadpool_free(tp)


class MergePeer(unittest.TestCase):
    def test_keeps_the_faster_run(self):
        slow, fast = {"ok": True, "gflops": 3.0}, {"ok": True, "gflops": 4.0}
        self.assertEqual(compare.merge_peer(slow, fast), fast)
        self.assertEqual(compare.merge_peer(fast, slow), fast)

    def test_a_failure_counts_only_when_no_round_ran(self):
        ok, failed = {"ok": True, "gflops": 3.0}, {"ok": False, "error": "timed out"}
        self.assertEqual(compare.merge_peer(failed, ok), ok)
        self.assertEqual(compare.merge_peer(ok, failed), ok)
        self.assertFalse(compare.merge_peer(failed, failed)["ok"])


if __name__ == "__main__":
    unittest.main()
