#!/usr/bin/env python3
"""attn's and PyTorch's error against float64 on the same 16-bit inputs.

  /tmp/attn-integration-venv/bin/python bench/peers/precision.py [--dtype bf16,f16]
      [--seeds 1,2,3] [--json FILE]

For the attn-bench prefill shapes (one head, T in {512, 2048, 8192}, d in
{64, 128}, causal 0/1), Q, K, V ~ N(0, 1) rounded to the type: the max and
rms |error| of attn.torch.scaled_dot_product_attention (whatever dot path
is in force: attn.current_dot_path(), ATTN_DOT_PATH) and of
torch.nn.functional.scaled_dot_product_attention, both with outputs in the
type, against PyTorch's float64 result on the same rounded values. The max
error of a bf16 output is one element's, mostly its own rounding, so it moves
from seed to seed by ±10-25%: compare it over several seeds. --json writes
the rows (one per shape, type and seed) for bench/report.py. Needs a
venv with torch and attn (python/run_integration_tests.sh makes one).
"""
import argparse
import json
import platform

import torch
import torch.nn.functional as F

import attn
import attn.torch as at

TYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bf16,f16")
    ap.add_argument("--seeds", default="1", help="comma-separated generator seeds")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    torch.set_num_threads(1)
    header = (f"{platform.processor() or platform.machine()}, attn target {attn.current_target()}, "
              f"dot path {attn.current_dot_path()}, torch {torch.__version__}, one thread, "
              f"seeds {a.seeds}")
    print(f"# {header}")
    print("| shape | dtype | seed | attn max / rms | PyTorch max / rms | attn / PyTorch max | attn / PyTorch rms |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for seed in [int(x) for x in a.seeds.split(",")]:
        rows += measure(a.dtype.split(","), seed)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "bench/peers/precision.py", "header": header, "rows": rows}, f, indent=1)
            f.write("\n")


def measure(dtypes, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for T in (512, 2048, 8192):
        for d in (64, 128):
            for causal in (False, True):
                x = [torch.randn(1, 1, T, d, generator=gen) for _ in range(3)]
                for name in dtypes:
                    t = [v.to(TYPES[name]) for v in x]
                    exact = F.scaled_dot_product_attention(*[v.double() for v in t], is_causal=causal)
                    mine = at.scaled_dot_product_attention(*t, is_causal=causal).double()
                    theirs = F.scaled_dot_product_attention(*t, is_causal=causal).double()
                    ea, ep = (mine - exact).abs(), (theirs - exact).abs()
                    ma, mp = ea.max().item(), ep.max().item()
                    ra, rp = ea.pow(2).mean().sqrt().item(), ep.pow(2).mean().sqrt().item()
                    shape = f"T={T} d={d}{' causal' if causal else ''}"
                    print(f"| {shape} | {name} | {seed} | {ma:.3g} / {ra:.3g} | "
                          f"{mp:.3g} / {rp:.3g} | {ma / mp:.2f} | {ra / rp:.2f} |", flush=True)
                    rows.append({"shape": shape, "dtype": name, "seed": seed,
                                 "attn_max": float(f"{ma:.3g}"), "attn_rms": float(f"{ra:.3g}"),
                                 "torch_max": float(f"{mp:.3g}"), "torch_rms": float(f"{rp:.3g}"),
                                 "ratio_max": round(ma / mp, 2), "ratio_rms": round(ra / rp, 2)})
    return rows


if __name__ == "__main__":
    main()
