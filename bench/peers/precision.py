#!/usr/bin/env python3
"""attn's and PyTorch's error against float64 on the same 16-bit inputs.

  /tmp/attn-integration-venv/bin/python bench/peers/precision.py [--dtype bf16,f16]

For the attn-bench prefill shapes (one head, T in {512, 2048, 8192}, d in
{64, 128}, causal 0/1), Q, K, V ~ N(0, 1) rounded to the type: the max and
rms |error| of attn.torch.scaled_dot_product_attention (whatever dot path
is in force: attn.current_dot_path(), ATTN_DOT_PATH) and of
torch.nn.functional.scaled_dot_product_attention, both with outputs in the
type, against PyTorch's float64 result on the same rounded values. Needs a
venv with torch and attn (python/run_integration_tests.sh makes one).
"""
import argparse
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
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(a.seed)
    print(f"# {platform.processor() or platform.machine()}, attn target {attn.current_target()}, "
          f"dot path {attn.current_dot_path()}, torch {torch.__version__}, one thread, seed {a.seed}")
    print("| shape | dtype | attn max / rms | PyTorch max / rms | attn / PyTorch max | attn / PyTorch rms |")
    print("|---|---|---|---|---|---|")
    for T in (512, 2048, 8192):
        for d in (64, 128):
            for causal in (False, True):
                x = [torch.randn(1, 1, T, d, generator=gen) for _ in range(3)]
                for name in a.dtype.split(","):
                    t = [v.to(TYPES[name]) for v in x]
                    exact = F.scaled_dot_product_attention(*[v.double() for v in t], is_causal=causal)
                    mine = at.scaled_dot_product_attention(*t, is_causal=causal).double()
                    theirs = F.scaled_dot_product_attention(*t, is_causal=causal).double()
                    ea, ep = (mine - exact).abs(), (theirs - exact).abs()
                    ma, mp = ea.max().item(), ep.max().item()
                    ra, rp = ea.pow(2).mean().sqrt().item(), ep.pow(2).mean().sqrt().item()
                    print(f"| T={T} d={d}{' causal' if causal else ''} | {name} | {ma:.3g} / {ra:.3g} | "
                          f"{mp:.3g} / {rp:.3g} | {ma / mp:.2f} | {ra / rp:.2f} |")


if __name__ == "__main__":
    main()
