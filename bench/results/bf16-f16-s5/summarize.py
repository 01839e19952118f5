#!/usr/bin/env python3
"""Markdown tables from attn-bench JSON (with repetitions): per row the median
and best (_max) of GFLOPS/peak_frac (prefill) or GBps/bw_frac/tok_per_s
(decode), and the 16-bit row over its f32 twin (same name without the type
field): ratio of medians and ratio of bests."""
import json, re, sys, collections

def load(paths):
    rows = collections.defaultdict(dict)
    ctx = None
    for p in paths:
        d = json.load(open(p))
        ctx = d["context"]
        for b in d["benchmarks"]:
            if b.get("run_type") != "aggregate":
                continue
            agg = b["aggregate_name"]
            if agg not in ("median", "max"):
                continue
            rows[b["run_name"]][agg] = b
    return rows, ctx

TYPE = re.compile(r"/(dtype|kv|qo):(bf16|f16)(/kv:(bf16|f16))?")

def twin(name):
    return TYPE.sub("", name)

def fmt(x, n=2):
    return f"{x:.{n}f}"

def main():
    rows, ctx = load(sys.argv[1:])
    dec = [n for n in rows if "/decode/" in n]
    pre = [n for n in rows if "/decode/" not in n]
    def key(n):
        return (twin(n), 0 if TYPE.search(n) is None else 1, n)
    print("### decode\n")
    print("| row | GBps med / best | bw_frac med / best | tok/s med / best | tok/s vs f32 med / best |")
    print("|---|---:|---:|---:|---:|")
    for n in sorted(dec, key=key):
        r = rows[n]; m, x = r["median"], r["max"]
        t = rows.get(twin(n)) if TYPE.search(n) else None
        sp = ""
        if t:
            sp = f"{m['tok_per_s']/t['median']['tok_per_s']:.2f}× / {x['tok_per_s']/t['max']['tok_per_s']:.2f}×"
        print(f"| `{n}` | {fmt(m['GBps'],1)} / {fmt(x['GBps'],1)} | {fmt(m['bw_frac'])} / {fmt(x['bw_frac'])} | "
              f"{m['tok_per_s']:.0f} / {x['tok_per_s']:.0f} | {sp} |")
    print("\n### prefill\n")
    print("| row | GFLOPS med / best | peak_frac med / best | vs f32 med / best |")
    print("|---|---:|---:|---:|")
    for n in sorted(pre, key=key):
        r = rows[n]; m, x = r["median"], r["max"]
        t = rows.get(twin(n)) if TYPE.search(n) else None
        sp = ""
        if t:
            sp = f"{m['GFLOPS']/t['median']['GFLOPS']:.2f} / {x['GFLOPS']/t['max']['GFLOPS']:.2f}"
        print(f"| `{n}` | {fmt(m['GFLOPS'],1)} / {fmt(x['GFLOPS'],1)} | {fmt(m['peak_frac'],3)} / {fmt(x['peak_frac'],3)} | {sp} |")

main()
