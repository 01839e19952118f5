#!/usr/bin/env python3
"""Plots for bench/RESULTS.md, from the raw results of bench/peers/compare.py
and bench/scaling.cc (attn-scaling --json). Needs matplotlib (it is in the
peers venv: bench/peers/setup_venv.sh).

  /tmp/attn-peers/bin/python bench/plot_results.py ratios bench/results/KIND/peers-f32.json \\
      bench/results/KIND/peers-f32
  /tmp/attn-peers/bin/python bench/plot_results.py scaling bench/results/KIND/scaling-t512-65536.jsonl \\
      bench/results/KIND/scaling-t512-65536.png --command "..."

`ratios` writes PREFIX-threads<N>.png per thread count: auto / X per shape
(log scale, > 1: attn's auto is faster), one bar per peer and the BLAS row.
`scaling` writes time per call and extra peak memory against T.
Each figure prints the command that produced its data at the bottom. KIND is
the CPU kind's folder; name each plot in its manifest.json with the data file
behind it ("plot": ...), or bench/report.py refuses it.
"""
import json
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEER_LABEL = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO",
              "jax": "JAX", "blas": "BLAS (seed's algorithm)"}


def flops(s):
    f = 4.0 * s["H"] * s["Tq"] * s["Tk"] * s["d"]
    return f * 0.5 if s["causal"] else f


def short(s):
    if s["kind"] == "decode":
        return f"dec H{s['H']}\nTk{s['Tk']}"
    h = "" if s["kind"] == "single" else f"H{s['H']} "
    return f"{h}T{s['Tq']}\nd{s['d']} {'c' if s['causal'] else 'nc'}"


def ratios(src, prefix):
    data = json.load(open(src))
    cmd = "python3 bench/peers/compare.py " + " ".join(data["cmd"][1:])
    for n in data["threads"]:
        rows = [r for r in data["results"] if r["threads"] == n]
        who = ["blas"] + [p for p in ("torch", "onnxruntime", "openvino", "jax")
                          if any(p in r["peers"] for r in rows)]
        fig, ax = plt.subplots(figsize=(max(10, 0.55 * len(rows) + 2), 5.2))
        width = 0.8 / len(who)
        for i, w in enumerate(who):
            xs, ys = [], []
            for j, r in enumerate(rows):
                auto = r["attn"].get("auto", {}).get("seconds")
                if w == "blas":
                    other = r["attn"].get("blas", {}).get("seconds")
                else:
                    p = r["peers"].get(w, {})
                    other = flops(r["shape"]) / (p["gflops"] * 1e9) if p.get("ok") else None
                if auto and other:
                    xs.append(j + (i - (len(who) - 1) / 2) * width)
                    ys.append(other / auto)
            ax.bar(xs, ys, width, label=PEER_LABEL[w])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([short(r["shape"]) for r in rows], fontsize=7)
        ax.set_ylabel("auto speed / X speed (log; > 1: attn faster)")
        ax.set_title(f"attn auto vs peers, {n} thread{'s' if n > 1 else ''}, same run, same shapes")
        ax.legend(fontsize=8, ncol=len(who))
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.text(0.01, 0.01, cmd, fontsize=7, family="monospace")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        out = f"{prefix}-threads{n}.png"
        fig.savefig(out, dpi=90)
        print(out)


def scaling(src, out, command):
    rows = [json.loads(x) for x in open(src) if x.strip()]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    series = sorted({(r["kernel"], r["threads"]) for r in rows if "kernel" in r})
    for k, n in series:
        ok = [r for r in rows if r.get("kernel") == k and r["threads"] == n and r["ok"]]
        lab = f"{k}, {n} thread{'s' if n > 1 else ''}"
        if ok:
            ax1.plot([r["T"] for r in ok], [r["seconds"] for r in ok], "o-", label=lab)
            ax2.plot([r["T"] for r in ok], [max(r["extra_mib"], 0.01) for r in ok], "o-",
                     label=lab)
        bad = [r for r in rows if r.get("kernel") == k and r["threads"] == n and not r["ok"]]
        if bad:
            y = ok[-1]["seconds"] if ok else 1.0
            ax1.plot([r["T"] for r in bad], [y] * len(bad), "rx", markersize=9)
            ax1.annotate(f"{k} refused (attn::Error:\nscores > 1 GiB)", (bad[0]["T"], y),
                         xytext=(-95, 12), textcoords="offset points", fontsize=7)
    if rows:
        t0 = min(r["T"] for r in rows if r.get("ok"))
        s0 = min((r for r in rows if r.get("ok") and r["T"] == t0 and r["kernel"] == "streaming"),
                 key=lambda r: r["seconds"], default=None)
        if s0:
            ts = sorted({r["T"] for r in rows})
            ax1.plot(ts, [s0["seconds"] * (t / t0) ** 2 for t in ts], "k:", linewidth=0.8,
                     label="4x per doubling")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("T (T_q = T_k, one head, d = 128)")
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylabel("seconds per call")
    ax2.set_ylabel("extra peak memory (MiB, beyond Q, K, V, O)")
    ax1.set_title("time")
    ax2.set_title("extra peak memory")
    fig.text(0.01, 0.01, command, fontsize=7, family="monospace")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=90)
    print(out)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "ratios":
        ratios(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "scaling":
        cmd = sys.argv[5] if len(sys.argv) >= 6 and sys.argv[4] == "--command" else ""
        scaling(sys.argv[2], sys.argv[3], cmd)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
