#!/usr/bin/env python3
"""Tests of tools/perf_regress.py's choice of baseline by CPU kind, against a
fake attn-bench (so they take seconds and do not depend on this machine's
speed), and of the committed baselines. Standard library only.

  python3 tools/perf_regress_test.py        # also a ctest (tools/CMakeLists.txt)
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_regress  # noqa: E402

TOOL = os.path.join(HERE, "perf_regress.py")

# A fake attn-bench: prints Google Benchmark JSON for the rows its filter
# names, FAKE_TARGET as the SIMD target, and GFLOP/s that are fixed per row
# (a hash of the name) and divided by ATTN_BENCH_SLOWDOWN for every row but
# blas, as the real bench slows its own kernels only; decode rows also carry
# bw_frac, as the real bench's do.
FAKE_BENCH = r'''#!/usr/bin/env python3
import json, os, re, sys, zlib
regex = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark_filter="))
names = re.match(r"^\^\((.*)\)\$$", regex).group(1).split("|")
slow = float(os.environ.get("ATTN_BENCH_SLOWDOWN") or 1)
rows = []
for n in names:
    g = 10.0 + zlib.crc32(n.encode()) % 90
    if not n.startswith("blas/"):
        g /= slow
    for rep in range(3):
        row = {"name": n, "run_name": n, "run_type": "iteration",
               "GFLOPS": g * (1 - 0.01 * rep), "peak_frac": g / 100.0}
        if "/decode/" in n:
            row["bw_frac"] = g / 100.0
        rows.append(row)
print(json.dumps({"context": {"attn_target": os.environ["FAKE_TARGET"]}, "benchmarks": rows}))
'''

AMD_ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx fma avx2

processor\t: 1
vendor_id\t: AuthenticAMD
"""
INTEL_SPR = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu avx2 fma avx512f avx512_bf16 avx512fp16 amx_tile amx_bf16
"""


class Kind(unittest.TestCase):
    def identity(self, text, target):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            return perf_regress.cpu_identity(perf_regress.read_cpuinfo(f.name), target)
        finally:
            os.unlink(f.name)

    def test_vendor_family_and_target_make_the_kind(self):
        amd = self.identity(AMD_ZEN3, "AVX2")
        self.assertEqual(amd["kind"], "AuthenticAMD-family25-AVX2")
        self.assertEqual(amd["model"], "1")
        self.assertEqual(amd["flags"], ["avx2", "fma"])
        intel = self.identity(INTEL_SPR, "AVX3")
        self.assertEqual(intel["kind"], "GenuineIntel-family6-AVX3")
        self.assertIn("amx_tile", intel["flags"])
        # Zen 4 is family 25 as Zen 3 is: its AVX-512 target keeps it apart.
        self.assertNotEqual(self.identity(AMD_ZEN3, "AVX3")["kind"], amd["kind"])


class Flow(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.bench = os.path.join(d, "attn-bench")
        with open(self.bench, "w") as f:
            f.write(FAKE_BENCH)
        os.chmod(self.bench, 0o755)
        self.baselines = os.path.join(d, "baselines")
        os.mkdir(self.baselines)
        self.provisional = os.path.join(d, "provisional")
        for name, text in (("amd", AMD_ZEN3), ("intel", INTEL_SPR)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, cpu, target, slowdown=None, *extra):
        env = dict(os.environ, FAKE_TARGET=target)
        env.pop("ATTN_BENCH_SLOWDOWN", None)
        if slowdown:
            env["ATTN_BENCH_SLOWDOWN"] = slowdown
        cmd = [sys.executable, TOOL, "--bench", self.bench, "--baseline-dir", self.baselines,
               "--provisional-dir", self.provisional,
               "--cpuinfo", os.path.join(self.tmp.name, cpu), "--runs", "2", *extra]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    def test_a_new_kind_writes_its_baseline_loudly_then_is_checked(self):
        first = self.run_tool("amd", "AVX2")
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn("NOTHING COMPARED", first.stdout)
        self.assertNotIn("gated rows within threshold", first.stdout)
        # Written outside the committed baselines, with the commands to commit one.
        self.assertEqual(os.listdir(self.baselines), [])
        path = os.path.join(self.baselines, "AuthenticAMD-family25-AVX2.json")
        provisional = os.path.join(self.provisional, "AuthenticAMD-family25-AVX2.json")
        self.assertIn("--update-baseline && git add", first.stdout)
        self.assertIn("--adopt", first.stdout)
        with open(provisional) as f:
            base = json.load(f)
        self.assertEqual((base["kind"], base["vendor"], base["target"]),
                         ("AuthenticAMD-family25-AVX2", "AuthenticAMD", "AVX2"))
        self.assertEqual(set(base["rows"]), {r[0] for r in perf_regress.subset()})
        self.assertTrue(base["provisional"])
        # A decode row is judged by its fraction of the read bandwidth alone.
        decode = base["rows"][f"streaming/{perf_regress.DECODE}/threads:1"]
        self.assertEqual(set(decode) - {"gated", "GFLOPS"}, {"bw_frac"})
        second = self.run_tool("amd", "AVX2")
        self.assertEqual(second.returncode, 0, second.stdout + second.stderr)
        self.assertNotIn("NOTHING COMPARED", second.stdout)
        self.assertIn("PROVISIONAL BASELINE", second.stdout)  # never silently trusted
        self.assertRegex(second.stdout, r"\b(\d+) gated rows within threshold, 0 regressed")
        # The same kind, twice as slow: every gated row regresses.
        slow = self.run_tool("amd", "AVX2", "2")
        self.assertEqual(slow.returncode, 1, slow.stdout + slow.stderr)
        self.assertIn("REGRESSED (3/3 runs)", slow.stdout)
        self.assertRegex(slow.stdout, r"auto/decode/\S+ .* REGRESSED \(3/3 runs\)")
        # --update-baseline makes it a baseline on purpose: no banner after.
        self.assertEqual(self.run_tool("amd", "AVX2", None, "--update-baseline").returncode, 0)
        with open(path) as f:
            self.assertNotIn("provisional", json.load(f))
        self.assertNotIn("PROVISIONAL", self.run_tool("amd", "AVX2").stdout)

    def test_add_rows_measures_only_the_rows_a_baseline_lacks(self):
        self.assertEqual(self.run_tool("amd", "AVX2", None, "--update-baseline").returncode, 0)
        path = os.path.join(self.baselines, "AuthenticAMD-family25-AVX2.json")
        with open(path) as f:
            base = json.load(f)
        # The baseline as it was before the subset gained the f16 decode rows.
        new = [n for n in base["rows"] if "/kv:f16/" in n]
        self.assertEqual(len(new), 2)
        for n in new:
            del base["rows"][n]
        base["rows_not_measured"] = {n: "added after this baseline" for n in new}
        kept = dict(base["rows"])
        kept["streaming/T:512/d:64/causal:0/threads:1"]["peak_frac"] = 0.123  # marks "untouched"
        with open(path, "w") as f:
            json.dump(base, f)
        # Runs show the missing rows as new, never gated; the rest is checked.
        check = self.run_tool("amd", "AVX2", "2")
        self.assertEqual(check.returncode, 1, check.stdout)
        for n in new:
            self.assertRegex(check.stdout, re.escape(n) + r" .*new \(not yet measured on this kind")
            self.assertNotRegex(check.stdout, re.escape(n) + r" .*REGRESSED")
        add = self.run_tool("amd", "AVX2", None, "--add-rows")
        self.assertEqual(add.returncode, 0, add.stdout + add.stderr)
        with open(path) as f:
            after = json.load(f)
        self.assertEqual(set(after["rows"]), {r[0] for r in perf_regress.subset()})
        self.assertNotIn("rows_not_measured", after)
        self.assertEqual(after["rows_added"][-1]["rows"], new)
        self.assertEqual(after["made"], base["made"])
        for n, figs in kept.items():
            self.assertEqual(after["rows"][n], figs, n)
        # Now gated: a slowed run fails them too.
        slow = self.run_tool("amd", "AVX2", "2")
        for n in new:
            self.assertRegex(slow.stdout, re.escape(n) + r" .*REGRESSED")
        # Nothing left to add: nothing written.
        again = self.run_tool("amd", "AVX2", None, "--add-rows")
        self.assertIn("nothing added", again.stdout)

    def test_adopt_commits_a_provisional_baseline_unmarked(self):
        self.assertEqual(self.run_tool("amd", "AVX2").returncode, 0)
        provisional = os.path.join(self.provisional, "AuthenticAMD-family25-AVX2.json")
        p = self.run_tool("amd", "AVX2", None, "--adopt", provisional)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.baselines, "AuthenticAMD-family25-AVX2.json")) as f:
            base = json.load(f)
        self.assertNotIn("provisional", base)
        self.assertIn("--adopt", base["how"])
        check = self.run_tool("amd", "AVX2")
        self.assertNotIn("PROVISIONAL", check.stdout)
        self.assertRegex(check.stdout, r"\b(\d+) gated rows within threshold, 0 regressed")

    def test_another_kind_is_never_judged_by_this_kinds_baseline(self):
        self.assertEqual(self.run_tool("amd", "AVX2", None, "--update-baseline").returncode, 0)
        intel = self.run_tool("intel", "AVX3")
        self.assertEqual(intel.returncode, 0, intel.stderr)
        self.assertIn("NOTHING COMPARED", intel.stdout)
        self.assertIn("GenuineIntel-family6-AVX3", intel.stdout)
        self.assertIn("AuthenticAMD-family25-AVX2", intel.stdout)  # the committed kinds listed
        self.assertTrue(os.path.exists(os.path.join(self.provisional,
                                                    "GenuineIntel-family6-AVX3.json")))
        # ATTN_TARGET=SSE4 on the AMD machine is another kind too.
        self.assertIn("NOTHING COMPARED", self.run_tool("amd", "SSE4").stdout)

    def test_an_explicit_baseline_of_another_kind_is_refused(self):
        self.assertEqual(self.run_tool("amd", "AVX2").returncode, 0)
        amd = os.path.join(self.provisional, "AuthenticAMD-family25-AVX2.json")
        p = self.run_tool("intel", "AVX3", None, "--baseline", amd)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn("not comparable", p.stderr)

    def test_no_baseline_is_written_from_a_slowed_run(self):
        p = self.run_tool("amd", "AVX2", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("NOTHING COMPARED", p.stdout)
        self.assertEqual(os.listdir(self.baselines), [])
        self.assertFalse(os.path.exists(self.provisional))


def committed_baselines():
    """The baselines the repository ships: the bench/baselines/*.json files
    git tracks, or all of them where the tree is not a git work tree (a
    source tarball). A file a run left there untracked is not one."""
    files = glob.glob(os.path.join(perf_regress.BASELINE_DIR, "*.json"))
    git = subprocess.run(["git", "-C", perf_regress.ROOT, "ls-files", "-z", "--",
                          "bench/baselines"], capture_output=True, text=True)
    if git.returncode != 0:
        return sorted(files)
    tracked = {os.path.join(perf_regress.ROOT, f) for f in git.stdout.split("\0") if f}
    return sorted(f for f in files if f in tracked)


# An identity no committed baseline can have, for runs against the real tree.
UNKNOWN_KIND_CPU = """processor\t: 0
vendor_id\t: NoSuchVendor
cpu family\t: 999
model\t\t: 1
model name\t: a CPU kind with no baseline
flags\t\t: fpu
"""


class Tree(unittest.TestCase):
    def test_a_run_without_a_baseline_leaves_the_tree_alone_and_the_suite_passes(self):
        """What failed CI on every kind with no committed baseline: the run
        wrote bench/baselines/KIND.json into the clone, and the committed-
        baseline check of the suite that ran next found it provisional."""
        before = set(os.listdir(perf_regress.BASELINE_DIR))
        with tempfile.TemporaryDirectory() as d:
            bench = os.path.join(d, "attn-bench")
            with open(bench, "w") as f:
                f.write(FAKE_BENCH)
            os.chmod(bench, 0o755)
            cpu = os.path.join(d, "cpuinfo")
            with open(cpu, "w") as f:
                f.write(UNKNOWN_KIND_CPU)
            env = dict(os.environ, FAKE_TARGET="AVX3")
            env.pop("ATTN_BENCH_SLOWDOWN", None)
            try:
                # The defaults, as .ci/run calls it: no --baseline-dir, no
                # --provisional-dir.
                p = subprocess.run([sys.executable, TOOL, "--bench", bench, "--cpuinfo", cpu,
                                    "--runs", "1"], env=env, capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn("NOTHING COMPARED", p.stdout)
                self.assertEqual(set(os.listdir(perf_regress.BASELINE_DIR)), before,
                                 "the run wrote into bench/baselines")
                self.assertTrue(os.path.exists(os.path.join(
                    d, "perf_regress", "NoSuchVendor-family999-AVX3.json")))
                # The suite's next step: the committed baselines still pass.
                Committed().test_every_committed_baseline_is_named_by_its_kind_and_has_every_row()
            finally:
                for name in set(os.listdir(perf_regress.BASELINE_DIR)) - before:
                    os.unlink(os.path.join(perf_regress.BASELINE_DIR, name))


class Committed(unittest.TestCase):
    def test_every_committed_baseline_is_named_by_its_kind_and_has_every_row(self):
        files = committed_baselines()
        self.assertTrue(files, "no committed baseline in bench/baselines")
        rows = {r[0] for r in perf_regress.subset()}
        for path in files:
            with open(path) as f:
                base = json.load(f)
            name = os.path.basename(path)[:-5]
            self.assertEqual(name, base["kind"], path)
            self.assertEqual(name, f"{base['vendor']}-family{base['family']}-{base['target']}")
            self.assertTrue(re.match(r"\d{4}-\d\d-\d\d", base["made"]), path)
            # A row the subset gained after the baseline was made is either
            # measured on the kind (--add-rows) or listed as not measured
            # with the reason, never silently missing.
            pending = base.get("rows_not_measured", {})
            self.assertEqual(set(base["rows"]) | set(pending), rows, path)
            self.assertFalse(set(base["rows"]) & set(pending), path)
            for name, why in pending.items():
                self.assertTrue(why.strip(), f"{path}: {name} has no reason")
            self.assertFalse(base.get("provisional"), path + " is a provisional baseline")


if __name__ == "__main__":
    unittest.main()
