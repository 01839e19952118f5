"""Error against a float64 reference of the same 16-bit inputs: attn vs PyTorch SDPA, bf16 and f16."""
import sys, numpy as np, torch, attn, ml_dtypes
torch.set_num_threads(1)
def ref64(q, k, v, causal):
    s = q @ k.T / np.sqrt(q.shape[-1])
    if causal:
        s = s + np.triu(np.full(s.shape, -np.inf), 1)
    s = s - s.max(-1, keepdims=True)
    w = np.exp(s); w /= w.sum(-1, keepdims=True)
    return w @ v
rng = np.random.default_rng(1)
print("shape | dtype | attn max/rms err | PyTorch max/rms err | attn/PyTorch (max)")
for T, d, causal in [(512, 64, False), (512, 128, False), (2048, 64, False), (2048, 128, False), (2048, 128, True)]:
    x = [rng.standard_normal((T, d)).astype(np.float32) for _ in range(3)]
    for tname, tt, nt in [("bf16", torch.bfloat16, ml_dtypes.bfloat16), ("f16", torch.float16, np.float16)]:
        t16 = [torch.from_numpy(a).to(tt) for a in x]
        r = ref64(*[t.to(torch.float64).numpy() for t in t16], causal)
        pt = torch.nn.functional.scaled_dot_product_attention(*[t[None, None] for t in t16], is_causal=causal)[0, 0]
        pt = pt.to(torch.float64).numpy()
        n16 = [t.to(torch.float32).numpy().astype(nt) for t in t16]
        o = attn.attention(*[a[None, None] for a in n16], causal=("top_left" if causal else False), threads=1)
        o = np.asarray(o, dtype=np.float64)[0, 0]
        ea, ep = np.abs(o - r), np.abs(pt - r)
        print(f"T={T} d={d}{' causal' if causal else ''} | {tname} | {ea.max():.3g} / {np.sqrt((ea**2).mean()):.3g} | {ep.max():.3g} / {np.sqrt((ep**2).mean()):.3g} | {ea.max()/ep.max():.2f}")
