#!/usr/bin/env python3
"""perf_regress: CI performance regression check for attn.

Runs a fixed, fast subset of attn-bench (about 30 s on 2 cores) and compares
it with the committed baseline of this CPU kind, bench/baselines/KIND.json,
using only figures that do not depend on how fast the machine is:

  peak_frac    the row's GFLOP/s / the FP32 FMA peak measured by attn-bench's
               probe in the same process (per-thread CPU time for threads:1
               rows, so other processes on a shared machine barely move it);
  / blas       the row's GFLOP/s / the OpenBLAS baseline row of the same shape
               and thread count, same run;
  / naive      the row's GFLOP/s / the naive kernel's row of the same shape,
               same run (not for naive itself);
  bw_frac      decode rows only, instead of the three above: the row's GB/s
               of K and V / the memory read bandwidth attn-bench probes in the
               same process. A decode step is bound by memory, not FMAs, so
               its FMA peak fraction moves with the memory system's load and
               the naive kernel's speed (compute-bound) does not.

Never absolute times. Each row is measured --repetitions times (default 5)
and its fastest repetition counts, since load from elsewhere only ever slows
a repetition down; the repetitions of all rows are interleaved in a random
order (Google Benchmark's --benchmark_enable_random_interleaving), so a burst
of load from elsewhere costs several rows one repetition each instead of one
row all of its repetitions. A gated row REGRESSES in a run when the median of its
figures' changes from the baseline (the mean, for rows with two figures) is
a drop of more than --threshold (default 33%): a real slowdown of an attn
kernel lowers all of them together, while noise in one reference row (a
descheduled blas run, say) moves only one. With --retries
(default 2, what CI uses) a run that shows a regression is repeated and the
check fails only for rows that regressed in at least 2 of the 1 + retries
runs. Rows marked "info" (the 2-thread rows, timed by the wall clock and so
at the mercy of the other core's load) are printed but never fail the check.

The threshold: on the unchanged tree, 5 consecutive runs on the shared 2-core
dev machine (load average 3-6) gave row scores down to -26%; a deliberate 2x
slowdown (ATTN_BENCH_SLOWDOWN=2) gave scores from -42% to -62% (ideal: -50%).
33% sits between the two; the majority-of-3 rule absorbs a single noisy run.
bench/README.md ("Performance regression check") has the numbers.

A CPU kind is the vendor and family of /proc/cpuinfo and the SIMD target
the run used, e.g. AuthenticAMD-family25-AVX2 (AMD Zen 3), -AVX3 (Zen 4),
GenuineIntel-family6-AVX3 (Intel Xeon): peak fractions and ratios move with
the core's FMA ports, vector width and caches, so a baseline only ever
judges runs of its own kind. On a kind with no committed baseline the subset
still runs, three times as for --update-baseline, with a loud NOTHING
COMPARED banner, and the baseline it made is written OUTSIDE the source tree
(--provisional-dir, by default a perf_regress/ folder beside the attn-bench
binary, i.e. in the build folder), marked provisional, with the commands to
commit one printed. Later runs on that machine compare against the
provisional file and say so. A run never writes into bench/baselines/
unless asked to (--update-baseline, --adopt, --add-rows): CI checks that a
run leaves its clone's git status clean. When the subset gains a row, a
machine of each kind adds it to its kind's baseline with --add-rows, the
other rows untouched; a committed baseline no machine of its kind has done
that for lists the row in "rows_not_measured", and runs of that kind show it
as new, ungated.

Exit status: 0 no regression, or no baseline for this kind (said loudly, a
provisional baseline written outside the tree); 1 regression; 2 usage or
attn-bench failure, or a --baseline file of another kind.

  tools/perf_regress.py --bench build/bench/attn-bench            # check
  tools/perf_regress.py --bench build/bench/attn-bench --update-baseline
  tools/perf_regress.py --adopt build/bench/perf_regress/KIND.json  # commit a provisional one
  tools/perf_regress.py --bench build/bench/attn-bench --add-rows  # rows new to the subset
  ATTN_BENCH_SLOWDOWN=2 tools/perf_regress.py ...                  # must fail

Standard library only, so CI needs nothing beyond python3.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE_DIR = os.path.join(ROOT, "bench", "baselines")

# The fixed subset. Shapes with their naive and blas reference rows; every
# attn kernel at one thread on each (gated); auto/parallel/blas at two
# threads on the larger ones (info only).
SHAPES = [
    "T:512/d:64/causal:0",
    "T:512/d:64/causal:1",
    "T:2048/d:128/causal:0",
    "T:2048/d:128/causal:1",
]
GATED_KERNELS = ["naive", "blocked", "streaming", "parallel", "auto"]
# A Llama-style GQA decode step over a 32768-key cache: 8 K/V heads x 32768
# keys x 2 x 128 floats = 256 MiB, read from memory on every CPU kind met so
# far (L3: 32 MiB on AMD EPYC Zen 3 and per Zen 4 CCD). The subset used to
# take T_k = 4096, whose 32 MiB is exactly Zen 3's L3: its baseline (made
# 2026-12-01 08:15 on the AMD EPYC Zen 3 VM) ran at 16 GB/s, above the 13.9
# GB/s memory read probe, so partly from L3, while CI's runs of the same
# code that afternoon got 7.6 GB/s whenever the host's other tenants held the
# L3: a 49% "regression" with no code change that failed CI in 2 of 3 runs.
DECODE = "decode/Hq:32/Hkv:8/Tk:32768/d:128"
# The same step over a 16-bit (f16), an 8-bit (q8_0) and a 4-bit (q4_0)
# cache: the widening and the dequantising run inside the kernels' inner
# loops, so a slowdown of either shows only in these rows (128, 68 and 36
# MiB, still from memory).
DECODE_CACHES = ["", "/kv:f16", "/kv:q8_0", "/kv:q4_0"]


def subset():
    """[(row name, gated?, reference shape key, kernel, threads)]"""
    rows = []
    for s in SHAPES:
        for k in GATED_KERNELS + ["blas"]:
            rows.append((f"{k}/{s}/threads:1", k != "blas", s, k, 1))
        if s.startswith("T:2048"):
            for k in ("parallel", "auto", "blas"):
                rows.append((f"{k}/{s}/threads:2", False, s, k, 2))
    for cache in DECODE_CACHES:
        for k in ("streaming", "auto"):
            rows.append((f"{k}/{DECODE}{cache}/threads:1", True, DECODE + cache, k, 1))
    return rows


def run_bench(bench, min_time, slowdown_env, repetitions=5):
    rows = subset()
    regex = "^(" + "|".join(r[0] for r in rows) + ")$"
    env = dict(os.environ)
    # auto must follow its built-in rule, not whatever tuning table the
    # machine's user cache holds (set but empty: no table).
    env["ATTN_TUNING_FILE"] = ""
    if slowdown_env is not None:
        env["ATTN_BENCH_SLOWDOWN"] = slowdown_env
    cmd = [bench, "--benchmark_filter=" + regex,
           f"--benchmark_min_time={min_time}", f"--benchmark_repetitions={repetitions}",
           "--benchmark_report_aggregates_only=false", "--benchmark_format=json",
           "--benchmark_enable_random_interleaving=true"]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"attn-bench exited {p.returncode}: {p.stderr.strip()[-500:]}")
    data = json.loads(p.stdout)
    by_name = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        if b.get("error_occurred"):
            raise RuntimeError(f"{b['name']}: {b.get('error_message')}")
        # The best of the repetitions: a burst of load from elsewhere only
        # ever slows a repetition down.
        name = b.get("run_name", b["name"])
        if name not in by_name or b["GFLOPS"] > by_name[name]["GFLOPS"]:
            by_name[name] = b
    missing = [r[0] for r in rows if r[0] not in by_name]
    if missing:
        raise RuntimeError("attn-bench has no row " + ", ".join(missing[:3]) +
                           (" ..." if len(missing) > 3 else ""))
    figs = {}
    for name, gated, shape, kernel, threads in rows:
        b = by_name[name]
        if shape.startswith(DECODE):
            f = {"gated": gated, "bw_frac": b["bw_frac"], "GFLOPS": b["GFLOPS"]}
            figs[name] = f
            continue
        f = {"gated": gated, "peak_frac": b["peak_frac"]}
        blas = by_name.get(f"blas/{shape}/threads:{threads}")
        naive = by_name.get(f"naive/{shape}/threads:1")
        if kernel != "blas" and blas:
            f["ratio_blas"] = b["GFLOPS"] / blas["GFLOPS"]
        if kernel not in ("naive", "blas") and naive and threads == 1:
            f["ratio_naive"] = b["GFLOPS"] / naive["GFLOPS"]
        f["GFLOPS"] = b["GFLOPS"]  # printed, never compared
        figs[name] = f
    ctx = data.get("context", {})
    return {"rows": figs, "target": ctx.get("attn_target", "?"),
            "seconds": time.time() - t0}


FIGS = ("peak_frac", "ratio_blas", "ratio_naive", "bw_frac")


def compare(run, base, threshold):
    """{row: {fig: relative change}, "regressed": bool}"""
    out = {}
    for name, f in run["rows"].items():
        b = base["rows"].get(name)
        if not b:
            out[name] = {"new": True, "regressed": False, "gated": f["gated"]}
            continue
        ch = {}
        for k in FIGS:
            if k in f and k in b and b[k] > 0:
                ch[k] = f[k] / b[k] - 1.0
        regressed = bool(ch) and statistics.median(ch.values()) < -threshold
        out[name] = {"changes": ch, "regressed": regressed, "gated": f["gated"]}
    return out


def print_table(run, cmp, base, threshold, verdicts=None):
    w = max(len(n) for n in run["rows"])
    print(f"{'row':<{w}}  {'peak_frac':>17}  {'/ blas':>17}  {'/ naive':>17}  "
          f"{'bw_frac':>17}  status")
    for name, f in run["rows"].items():
        c = cmp[name]
        b = base["rows"].get(name, {})
        cells = []
        for k in FIGS:
            if k in f and k in b:
                cells.append(f"{f[k]:7.3f} {c['changes'][k]:+7.1%}  ")
            elif k in f:
                cells.append(f"{f[k]:7.3f}    new  ")
            else:
                cells.append(f"{'-':>17}")
        if c.get("new"):
            status = "new (not in baseline)"
            if name in base.get("rows_not_measured", {}):
                status = "new (not yet measured on this kind: --add-rows)"
        elif not c["gated"]:
            status = "info" + (" (down)" if c["regressed"] else "")
        elif verdicts is not None and name in verdicts:
            status = verdicts[name]
        else:
            status = "REGRESSED" if c["regressed"] else "ok"
        print(f"{name:<{w}}  " + "".join(f"{x:>17}  " for x in cells) + status)


def read_cpuinfo(path="/proc/cpuinfo"):
    """The first processor's fields of a /proc/cpuinfo text: {key: value}."""
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_identity(cpuinfo, target):
    """What a baseline is made for: vendor, family and SIMD target decide the
    kind; model, model name and the flags that matter are recorded too."""
    flags = set(cpuinfo.get("flags", "").split())
    family = cpuinfo.get("cpu family", "?")
    return {
        "kind": f"{cpuinfo.get('vendor_id', platform.machine() or 'unknown')}-family{family}-{target}",
        "vendor": cpuinfo.get("vendor_id", "?"),
        "family": family,
        "model": cpuinfo.get("model", "?"),
        "model_name": cpuinfo.get("model name", platform.processor() or "?"),
        "target": target,
        "flags": sorted(flags & {"avx2", "fma", "avx512f", "avx512_bf16", "avx512fp16",
                                 "amx_tile", "amx_bf16"}),
    }


def describe(ident):
    return (f"{ident['kind']} ({ident['model_name']}, model {ident['model']}; "
            f"flags {' '.join(ident['flags']) or 'none of note'})")


def load_average():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def make_baseline(runs, ident, how_args, load_before, provisional=False):
    rows = {}
    for name, f in runs[0]["rows"].items():
        rows[name] = {"gated": f["gated"]}
        for k in FIGS + ("GFLOPS",):
            if k in f:
                rows[name][k] = round(statistics.median(r["rows"][name][k] for r in runs), 5)
    base = {"schema": 2}
    if provisional:
        # Written by a run that found no baseline of its kind: not made by
        # --update-baseline on purpose, so every later run says so.
        base["provisional"] = True
    base.update(ident)
    base.update({
        "made": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": {"before": load_before, "after": load_average()},
        "how": f"tools/perf_regress.py {how_args} (per figure: the median over "
               f"{len(runs)} runs of each run's fastest repetition)",
        "rows": rows})
    return base


def write_baseline(path, base):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(base, f, indent=1)
        f.write("\n")
    # bench/RESULTS.md quotes every committed baseline and CI checks that it
    # matches (bench/report.py --check): a committed baseline that changes
    # regenerates it, so the two are committed together.
    committed = os.path.join(ROOT, "bench", "baselines")
    if os.path.dirname(os.path.abspath(path)) == committed:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "report.py")], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "attn-bench"))
    ap.add_argument("--baseline", help="this baseline file instead of the CPU kind's "
                                       "(it must be of this run's kind)")
    ap.add_argument("--baseline-dir", default=BASELINE_DIR,
                    help="where the per-kind baselines KIND.json live")
    ap.add_argument("--provisional-dir",
                    help="where a run that finds no committed baseline of its kind writes the "
                         "one it made, and where later runs look for it (default: perf_regress/ "
                         "beside --bench, outside the source tree)")
    ap.add_argument("--adopt", metavar="FILE",
                    help="commit the provisional baseline FILE: write it, unmarked, as "
                         "--baseline-dir/KIND.json, and run nothing")
    ap.add_argument("--cpuinfo", default="/proc/cpuinfo", help=argparse.SUPPRESS)
    ap.add_argument("--threshold", type=float, default=0.33,
                    help="fractional drop of a row's median figure that counts as a regression")
    ap.add_argument("--retries", type=int, default=2,
                    help="extra runs when a regression shows; fail if a row regressed in a "
                         "majority of runs (0: one run decides)")
    ap.add_argument("--min-time", type=float, default=0.1,
                    help="attn-bench --benchmark_min_time per repetition of a row")
    ap.add_argument("--repetitions", type=int, default=5,
                    help="repetitions of each row; the fastest counts")
    ap.add_argument("--update-baseline", action="store_true",
                    help="measure --runs times and write the per-figure median as the baseline "
                         "of this CPU kind")
    ap.add_argument("--add-rows", action="store_true",
                    help="measure --runs times and add to this CPU kind's committed baseline "
                         "the subset's rows it lacks (a row added to the subset after the "
                         "baseline was made), leaving its other rows as they are")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs for a baseline (--update-baseline, or a kind with none)")
    ap.add_argument("--json", help="also write this run's figures here")
    a = ap.parse_args()

    if a.adopt:
        return adopt(a.adopt, a.baseline_dir)
    if not os.access(a.bench, os.X_OK):
        print(f"perf_regress: no attn-bench at {a.bench}", file=sys.stderr)
        return 2
    slow = os.environ.get("ATTN_BENCH_SLOWDOWN")
    t_start = time.time()
    load_before = load_average()
    how_args = (f"--runs {a.runs} --min-time {a.min_time} --repetitions {a.repetitions}")
    cpuinfo = read_cpuinfo(a.cpuinfo)

    if (a.update_baseline or a.add_rows) and slow not in (None, "", "1"):
        print("perf_regress: refusing to write a baseline with ATTN_BENCH_SLOWDOWN set",
              file=sys.stderr)
        return 2
    try:
        run = run_bench(a.bench, a.min_time, slow, a.repetitions)
    except RuntimeError as e:
        print(f"perf_regress: {e}", file=sys.stderr)
        return 2
    if a.json:
        with open(a.json, "w") as f:
            json.dump(run, f, indent=1)
    ident = cpu_identity(cpuinfo, run["target"])
    committed = os.path.join(a.baseline_dir, ident["kind"] + ".json")
    provisional = os.path.join(a.provisional_dir or default_provisional_dir(a.bench),
                               ident["kind"] + ".json")
    path = a.baseline or committed
    if not a.baseline and not a.update_baseline and not os.path.exists(committed) \
            and os.path.exists(provisional):
        path = provisional  # written by an earlier run here; its banner says so
    shown = os.path.relpath(path, os.getcwd())

    def baseline_runs():
        runs = [run]
        for i in range(1, a.runs):
            print(f"perf_regress: baseline run {i + 1}/{a.runs} ...", file=sys.stderr)
            runs.append(run_bench(a.bench, a.min_time, None, a.repetitions))
        return runs

    if a.add_rows:
        return add_rows(a, run, ident, path, shown, baseline_runs, how_args, load_before)

    if a.update_baseline:
        try:
            base = make_baseline(baseline_runs(), ident, "--update-baseline " + how_args,
                                 load_before)
        except RuntimeError as e:
            print(f"perf_regress: {e}", file=sys.stderr)
            return 2
        write_baseline(path, base)
        print(f"perf_regress: wrote {shown} ({len(base['rows'])} rows) for {describe(ident)}, "
              f"load average {base['load_average']['before']} -> {base['load_average']['after']}")
        return 0

    if not os.path.exists(path) and not a.baseline:
        # No baseline of this kind: nothing to compare, said loudly, and
        # the baseline this machine would commit is written.
        bar = "perf_regress: " + "=" * 64
        print(bar)
        print(f"perf_regress: NOTHING COMPARED: no baseline for this CPU kind, {describe(ident)}")
        print(f"perf_regress: (committed kinds: {', '.join(known_kinds(a.baseline_dir)) or 'none'})")
        if slow not in (None, "", "1"):
            print("perf_regress: ATTN_BENCH_SLOWDOWN is set: no baseline written")
            print(bar)
            return 0
        try:
            base = make_baseline(baseline_runs(), ident, how_args, load_before, provisional=True)
        except RuntimeError as e:
            print(f"perf_regress: {e}", file=sys.stderr)
            return 2
        write_baseline(provisional, base)
        shown = os.path.relpath(provisional, os.getcwd())
        committed_shown = os.path.relpath(committed, os.getcwd())
        tool = os.path.relpath(os.path.abspath(__file__), os.getcwd())
        print(f"perf_regress: wrote the provisional baseline {shown} from {a.runs} runs here "
              f"(load average {base['load_average']['before']} -> "
              f"{base['load_average']['after']}), outside the source tree; later runs here "
              "compare against it and say so. To check this kind from now on, commit a "
              "baseline made on a quiet machine of this kind (bench/README.md, 'Performance "
              "regression check'):")
        print(f"perf_regress:   python3 {tool} --bench {os.path.relpath(a.bench, os.getcwd())} "
              f"--update-baseline && git add {committed_shown}")
        print(f"perf_regress: or, if this machine was quiet, this run's:")
        print(f"perf_regress:   python3 {tool} --adopt {shown} && git add {committed_shown}")
        print(bar)
        print_table(run, compare(run, {"rows": {}}, a.threshold), {"rows": {}}, a.threshold)
        return 0

    try:
        with open(path) as f:
            base = json.load(f)
    except (OSError, ValueError) as e:
        print(f"perf_regress: cannot read baseline {shown}: {e}", file=sys.stderr)
        return 2
    base_kind = base.get("kind") or f"(schema {base.get('schema')}, target {base.get('target')})"
    if base_kind != ident["kind"]:
        print(f"perf_regress: {shown} is a baseline of {base_kind}, this run is "
              f"{ident['kind']}: not comparable", file=sys.stderr)
        return 2
    if base.get("provisional"):
        print("perf_regress: " + "=" * 64)
        print(f"perf_regress: PROVISIONAL BASELINE: {shown} was written by an earlier run that "
              f"found no committed baseline of {ident['kind']} (made {base.get('made')}); it is "
              "not a quiet-machine baseline. Make one with --update-baseline (or --adopt this "
              "file) and commit it.")
        print("perf_regress: " + "=" * 64)
    if base.get("model") != ident["model"] or base.get("model_name") != ident["model_name"]:
        print(f"perf_regress: note: the baseline was made on {base.get('model_name')} model "
              f"{base.get('model')}, this is {ident['model_name']} model {ident['model']} "
              "(same kind: checked)")

    cmp = compare(run, base, a.threshold)
    runs_cmp = [cmp]
    flagged = [n for n, c in cmp.items() if c["gated"] and c["regressed"]]
    for i in range(a.retries if flagged else 0):
        print(f"perf_regress: {len(flagged)} row(s) below threshold, re-running "
              f"({i + 1}/{a.retries}) ...", file=sys.stderr)
        try:
            runs_cmp.append(compare(run_bench(a.bench, a.min_time, slow, a.repetitions), base,
                                    a.threshold))
        except RuntimeError as e:
            print(f"perf_regress: {e}", file=sys.stderr)
            return 2
    need = len(runs_cmp) // 2 + 1
    verdicts, failed = {}, []
    for name, c in cmp.items():
        if not c["gated"] or c.get("new"):
            continue
        hits = sum(1 for rc in runs_cmp if rc[name]["regressed"])
        if hits >= need:
            verdicts[name] = f"REGRESSED ({hits}/{len(runs_cmp)} runs)"
            failed.append(name)
        elif hits:
            verdicts[name] = f"ok (noise: {hits}/{len(runs_cmp)} runs)"
        else:
            verdicts[name] = "ok"
    print(f"perf_regress: attn-bench subset vs {shown} "
          f"({ident['kind']}, baseline made {base.get('made')}); a row regresses when "
          f"its median figure drops > {a.threshold:.0%}" +
          (f"; ATTN_BENCH_SLOWDOWN={slow}" if slow else ""))
    print_table(run, cmp, base, a.threshold, verdicts)
    gated = [n for n, c in cmp.items() if c["gated"] and not c.get("new")]
    print(f"perf_regress: {len(gated) - len(failed)} gated rows within threshold, "
          f"{len(failed)} regressed; {len(runs_cmp)} run(s), {time.time() - t_start:.0f} s")
    return 1 if failed else 0


def add_rows(a, run, ident, path, shown, baseline_runs, how_args, load_before):
    """--add-rows: the baseline at `path` gains the median figures of the
    subset rows it lacks, over --runs runs; its other rows, its "made" and
    its "how" stay as they were, and "rows_added" records when and how the
    new ones were measured. The rows it lacks are the ones the subset gained
    after the baseline was made: until a machine of the kind measures them,
    its baseline lists them in "rows_not_measured" and runs show them as
    new, never gated."""
    try:
        with open(path) as f:
            base = json.load(f)
    except (OSError, ValueError) as e:
        print(f"perf_regress: --add-rows needs this kind's baseline {shown}: {e}",
              file=sys.stderr)
        return 2
    if base.get("kind") != ident["kind"]:
        print(f"perf_regress: {shown} is a baseline of {base.get('kind')}, this run is "
              f"{ident['kind']}: not comparable", file=sys.stderr)
        return 2
    missing = [r[0] for r in subset() if r[0] not in base["rows"]]
    if not missing:
        print(f"perf_regress: {shown} already has every row of the subset; nothing added")
        return 0
    try:
        new = make_baseline(baseline_runs(), ident, "--add-rows " + how_args, load_before)
    except RuntimeError as e:
        print(f"perf_regress: {e}", file=sys.stderr)
        return 2
    for name in missing:
        base["rows"][name] = new["rows"][name]
    pending = base.get("rows_not_measured", {})
    for name in missing:
        pending.pop(name, None)
    if pending:
        base["rows_not_measured"] = pending
    else:
        base.pop("rows_not_measured", None)
    base.setdefault("rows_added", []).append(
        {"made": new["made"], "load_average": new["load_average"], "how": new["how"],
         "model": ident["model"], "model_name": ident["model_name"], "rows": missing})
    order = [r[0] for r in subset()]
    base["rows"] = {n: base["rows"][n] for n in order if n in base["rows"]}
    write_baseline(path, base)
    print(f"perf_regress: added {len(missing)} row(s) to {shown} for {describe(ident)}: "
          + ", ".join(missing))
    return 0


def default_provisional_dir(bench):
    """Where a run with no committed baseline puts the one it made: beside
    attn-bench (the build folder), unless that is a path of the source tree
    that git does not ignore; then the system's temporary folder."""
    d = os.path.join(os.path.dirname(os.path.abspath(bench)), "perf_regress")
    if os.path.commonpath([d, ROOT]) == ROOT:
        ignored = subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", d],
                                 capture_output=True).returncode == 0
        if not ignored:
            import tempfile
            d = os.path.join(tempfile.gettempdir(), "attn-perf_regress")
    return d


def adopt(path, baseline_dir):
    """Writes the provisional baseline at `path` as the committed baseline of
    its kind, baseline_dir/KIND.json, without its provisional mark."""
    try:
        with open(path) as f:
            base = json.load(f)
    except (OSError, ValueError) as e:
        print(f"perf_regress: cannot read {path}: {e}", file=sys.stderr)
        return 2
    kind = base.get("kind")
    if not kind or set(base.get("rows", {})) != {r[0] for r in subset()}:
        print(f"perf_regress: {path} is not a baseline of this tool's subset "
              "(kind or rows differ); make one with --update-baseline", file=sys.stderr)
        return 2
    if base.pop("provisional", False):
        base["how"] += "; adopted with --adopt from a run that found no baseline of its kind"
    out = os.path.join(baseline_dir, kind + ".json")
    write_baseline(out, base)
    print(f"perf_regress: wrote {os.path.relpath(out, os.getcwd())} for {kind} (made "
          f"{base.get('made')}, load average {base.get('load_average')}); commit it with "
          f"git add {os.path.relpath(out, os.getcwd())}")
    return 0


def known_kinds(directory):
    try:
        return sorted(f[:-5] for f in os.listdir(directory) if f.endswith(".json"))
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
