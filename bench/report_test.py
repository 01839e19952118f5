#!/usr/bin/env python3
"""Tests of bench/report.py on a copy of the committed results (standard library only).

  python3 bench/report_test.py

--check passes on the committed tree, and fails when bench/RESULTS.md or
README.md's headline is edited by hand, when a data file is missing, when
a file is not in its folder's manifest, and when a plot has no data file.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPORT = os.path.join(HERE, "report.py")
sys.path.insert(0, HERE)
import report  # noqa: E402  (its headline markers)


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attn-report-test-")
        os.mkdir(os.path.join(self.tmp, "bench"))
        for d in ("results", "baselines"):
            shutil.copytree(os.path.join(ROOT, "bench", d), os.path.join(self.tmp, "bench", d))
        shutil.copy(os.path.join(ROOT, "bench", "RESULTS.md"), os.path.join(self.tmp, "bench"))
        shutil.copy(os.path.join(ROOT, "README.md"), self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_report(self, *args):
        return subprocess.run([sys.executable, REPORT, "--root", self.tmp] + list(args),
                              capture_output=True, text=True)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def a_kind_with(self, suffix):
        res = self.path("bench", "results")
        for kind in sorted(os.listdir(res)):
            files = json.load(open(os.path.join(res, kind, "manifest.json")))["files"]
            for f in files:
                if f.endswith(suffix):
                    return kind, f
        self.skipTest(f"no committed {suffix} file")

    def test_widen_rows_become_a_table_of_their_counters(self):
        def row(t, r, g, f, w):
            return {"name": f"widen/dtype:{t}/rows:{r}/threads:1", "run_type": "iteration",
                    "Gelem_s": g, "fma_frac": f, "bw_ratio": w}
        meta = {"date": "d", "commit": "c",
                "data": {"benchmarks": [row("f16", 1, 29.6, 0.51, 2.05), row("q8_0", 1, 18.1, 0.31, 0.66),
                                        row("f16", 4, 14.0, 0.96, 0.97)]}}
        text = "\n".join(report.widen_pivot("x.json", meta))
        self.assertIn("| type | rows:1 | rows:4 |", text)
        self.assertIn("| f16 | 29.6, 0.51, 2.05 | 14.0, 0.96, 0.97 |", text)
        self.assertIn("| q8_0 | 18.1, 0.31, 0.66 | - |", text)
        self.assertEqual(report.widen_pivot("x.json", {"data": {"benchmarks": []}}), [])

    def test_committed_results_match_the_data(self):
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_hand_edit_of_results_fails(self):
        p = self.path("bench", "RESULTS.md")
        text = open(p).read()
        i = text.index("| / PyTorch")      # first ratio table: change one figure
        j = text.index("\n|", text.index("\n|---", i) + 1) + 1
        row = text[j:text.index("\n", j)]
        cells = row.split("|")
        cells[-2] = " 9.99 "
        open(p, "w").write(text.replace(row, "|".join(cells), 1))
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("9.99", r.stderr)

    def test_a_hand_edit_of_the_readme_headline_fails(self):
        p = self.path("README.md")
        text = open(p).read()
        # A cell of the generated table: README.md says "not measured" in
        # prose too (the kernel list), which the check rightly ignores.
        begin = text.index(report.HEAD_BEGIN)
        at = text.index("not measured", begin)
        self.assertLess(at, text.index(report.HEAD_END, begin))
        open(p, "w").write(text[:at] + "1.50×" + text[at + len("not measured"):])
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)

    def test_a_missing_data_file_fails(self):
        kind, f = self.a_kind_with(".json")
        os.remove(self.path("bench", "results", kind, f))
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{f}: named in the manifest but missing", r.stderr)
        r = self.run_report()      # writing refuses too
        self.assertEqual(r.returncode, 1)

    def test_a_plot_without_its_data_fails(self):
        kind, png = self.a_kind_with(".png")
        m = self.path("bench", "results", kind, "manifest.json")
        man = json.load(open(m))
        os.remove(self.path("bench", "results", kind, man["files"][png]["plot"]))
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{png}: its data file", r.stderr)
        del man["files"][png]["plot"]
        json.dump(man, open(m, "w"))
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no data file behind it", r.stderr)

    def test_a_file_not_in_the_manifest_fails(self):
        kind, _ = self.a_kind_with(".json")
        open(self.path("bench", "results", kind, "probe.cc"), "w").write("int main() {}\n")
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn("probe.cc: not in the manifest", r.stderr)

    def test_a_figure_pointing_at_a_missing_file_fails(self):
        p = self.path("bench", "RESULTS.md")
        open(p, "a").write("\n![made up](results/nowhere.png)\n")
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn("results/nowhere.png: no such file", r.stderr)

    def test_regenerating_gives_what_check_accepts(self):
        os.remove(self.path("bench", "RESULTS.md"))
        self.assertEqual(self.run_report().returncode, 0)
        r = self.run_report("--check")
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
