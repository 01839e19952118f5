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
