#!/usr/bin/env python3
"""CPU attention of the libraries a user would pick instead of attn, timed
on attn-bench's shapes: PyTorch scaled_dot_product_attention, ONNX Runtime's
com.microsoft MultiHeadAttention / GroupQueryAttention, OpenVINO's
ScaledDotProductAttention and JAX's dot_product_attention.

Runs inside the peers virtual environment (bench/peers/setup_venv.sh), never
as part of libattn's build or tests. Two modes:

  peers.py run PEER --threads N [--shapes SPEC ...]   one JSON line per shape
  peers.py serve PEER --threads N                     JSON requests on stdin,
                                                      one JSON reply per line
                                                      (what compare.py uses)

PEER is torch, onnxruntime, openvino or jax. A shape SPEC is
`kind:H:Tq:Tk:d:causal` with kind single, mh or decode (e.g.
`single:1:512:512:64:1`, `decode:16:1:4096:128:0`). Every reply carries
"ok"; a peer that cannot import or run says why in "error".

Timing (the same convention compare.py reads from attn-bench): inputs
uniform in [-1, 1], float32, [B=1, H, T, d] (or the peer's own layout); two
warm-up calls; n calls per sample with n chosen so a sample takes at least
--min-time seconds of wall time; the minimum over --reps samples of the time
per call: the process's CPU time at one thread (immune to other processes
on a shared machine, like attn-bench's threads:1 rows), the wall clock at
more (seconds_wall and seconds_cpu are both reported).
Useful FLOPs are 4*H*Tq*Tk*d, halved when causal; decode also reports GB/s
of K and V read (H*Tk*2d*4 bytes per call).

Causal means query i sees keys j <= i (square shapes only, where top-left
and bottom-right agree); decode (Tq = 1) is non-causal: the one new query
sees every cached key. Each peer is first checked against a float64 numpy
reference on small shapes of each kind; a peer whose output disagrees is
reported as failing, not timed.
"""
import argparse
import json
import os
import sys
import time
import traceback

PEERS = ("torch", "onnxruntime", "openvino", "jax")
# Peers this harness runs in bf16 / f16 too (Q, K, V and O in the type).
SIXTEEN_BIT_PEERS = ("torch",)
PEER_NAMES = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO",
              "jax": "JAX"}


def parse_shape(spec):
    """kind:H:Tq:Tk:d:causal[:dtype] (dtype f32, bf16 or f16: Q, K, V and O)."""
    kind, h, tq, tk, d, causal, *dtype = spec.split(":")
    if kind not in ("single", "mh", "decode"):
        raise ValueError(f"bad shape kind {kind!r} in {spec!r}")
    dtype = dtype[0] if dtype else "f32"
    if dtype not in DTYPES:
        raise ValueError(f"bad dtype {dtype!r} in {spec!r}")
    return {"kind": kind, "H": int(h), "Tq": int(tq), "Tk": int(tk), "d": int(d),
            "causal": int(causal), "dtype": dtype}


DTYPES = ("f32", "bf16", "f16")
# A peer's max |error| against the float64 reference of the same (rounded)
# inputs may be at most this: 1e-3 for float32 (as before); for a 16-bit
# output, whose values |out| <= max|V| = 1 are rounded once, twice the unit
# roundoff plus that (bf16 2^-8, f16 2^-11), leaving room for the 16-bit
# intermediates a peer may keep.
CHECK_BOUND = {"f32": 1e-3, "bf16": 1e-3 + 2 * 2.0 ** -8, "f16": 1e-3 + 2 * 2.0 ** -11}


def round_to(x, dtype):
    """float32 x rounded to dtype (nearest even) and back to float32."""
    import numpy as np
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        u = x.astype(np.float32).view(np.uint32)
        u = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000))
        return u.view(np.float32)
    return x


def flops(s):
    f = 4.0 * s["H"] * s["Tq"] * s["Tk"] * s["d"]
    return f * 0.5 if s["causal"] else f


def kv_bytes(s):
    return (2.0 if s.get("dtype", "f32") != "f32" else 4.0) * s["H"] * s["Tk"] * 2 * s["d"]


def inputs(s, seed=0):
    """q [1,H,Tq,d], k, v [1,H,Tk,d] float32, uniform in [-1, 1]."""
    import numpy as np
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (1, s["H"], s["Tq"], s["d"])).astype(np.float32)
    k = rng.uniform(-1, 1, (1, s["H"], s["Tk"], s["d"])).astype(np.float32)
    v = rng.uniform(-1, 1, (1, s["H"], s["Tk"], s["d"])).astype(np.float32)
    return q, k, v


def reference(q, k, v, causal):
    """float64 softmax(q k^T / sqrt(d) + causal mask) v, [1,H,Tq,d]."""
    import numpy as np
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        tq, tk = s.shape[-2:]
        s = np.where(np.tril(np.ones((tq, tk), dtype=bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


# ---- the peers -------------------------------------------------------------
# Each factory takes (threads) and returns prepare(shape, q, k, v) -> (call,
# to_bhtd): call() runs attention once and returns the output; to_bhtd(out)
# turns it into a numpy [1,H,Tq,d] array for the correctness check.


def torch_peer(threads):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    info = {"version": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}

    types = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

    def prepare(s, q, k, v):
        dtype = types[s.get("dtype", "f32")]
        tq, tk, tv = (torch.from_numpy(x).to(dtype) for x in (q, k, v))
        causal = bool(s["causal"])

        def call():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        return call, lambda out: out.float().numpy()
    return prepare, info


def onnxruntime_peer(threads):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    info = {"version": ort.__version__, "onnx": onnx.__version__}
    state = {"ir": None, "opset": None}

    def session(model_fn):
        # The newest IR version and default-domain opset this onnxruntime
        # accepts (the onnx package may be newer than the runtime).
        last = None
        irs = [state["ir"]] if state["ir"] else range(onnx.IR_VERSION, 6, -1)
        for ir in irs:
            model = model_fn()
            model.ir_version = ir
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.log_severity_level = 3
            try:
                sess = ort.InferenceSession(model.SerializeToString(), so,
                                            providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - try the next IR version
                last = e
                continue
            state["ir"] = ir
            info["ir_version"] = ir
            return sess
        raise RuntimeError(f"no IR version accepted: {last}")

    def prepare(s, q, k, v):
        H, tq, tk, d = s["H"], s["Tq"], s["Tk"], s["d"]
        # Both ops take [B, T, H*d] (BTHD) query/key/value.
        qb = np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(1, tq, H * d))
        kb = np.ascontiguousarray(k.transpose(0, 2, 1, 3).reshape(1, tk, H * d))
        vb = np.ascontiguousarray(v.transpose(0, 2, 1, 3).reshape(1, tk, H * d))
        fl = TensorProto.FLOAT
        ins = [helper.make_tensor_value_info("q", fl, [1, tq, H * d]),
               helper.make_tensor_value_info("k", fl, [1, tk, H * d]),
               helper.make_tensor_value_info("v", fl, [1, tk, H * d])]
        outs = [helper.make_tensor_value_info("o", fl, [1, tq, H * d])]
        feeds = {"q": qb, "k": kb, "v": vb}
        if s["causal"]:
            # GroupQueryAttention is always causal; num_heads = kv_num_heads.
            op = "GroupQueryAttention"
            ins += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
                    helper.make_tensor_value_info("total_len", TensorProto.INT32, [])]
            node = helper.make_node(op, ["q", "k", "v", "", "", "seqlens_k", "total_len"],
                                    ["o"], domain="com.microsoft", num_heads=H,
                                    kv_num_heads=H)
            feeds["seqlens_k"] = np.array([tk - 1], dtype=np.int32)
            feeds["total_len"] = np.array(tk, dtype=np.int32)
        else:
            op = "MultiHeadAttention"
            node = helper.make_node(op, ["q", "k", "v"], ["o"], domain="com.microsoft",
                                    num_heads=H)

        def model_fn():
            graph = helper.make_graph([node], "attn_peer", ins, outs)
            opsets = [helper.make_opsetid("", state["opset"] or 17),
                      helper.make_opsetid("com.microsoft", 1)]
            return helper.make_model(graph, opset_imports=opsets)
        sess = session(model_fn)
        info.setdefault("ops", [])
        if op not in info["ops"]:
            info["ops"].append(op)

        def call():
            return sess.run(["o"], feeds)[0]

        def to_bhtd(out):
            return out.reshape(1, tq, H, d).transpose(0, 2, 1, 3)
        return call, to_bhtd
    return prepare, info


def openvino_peer(threads):
    import numpy as np
    import openvino as ov
    try:
        from openvino import opset13 as ops
    except ImportError:
        from openvino.runtime import opset13 as ops
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
              "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    info = {"version": ov.__version__, "config": {k: str(v) for k, v in config.items()}}

    def prepare(s, q, k, v):
        params = [ops.parameter(list(x.shape), np.float32, name=n)
                  for n, x in zip("qkv", (q, k, v))]
        sdpa = ops.scaled_dot_product_attention(*params, causal=bool(s["causal"]))
        model = ov.Model([sdpa], params, "attn_peer")
        compiled = core.compile_model(model, "CPU", config)
        req = compiled.create_infer_request()
        feeds = {0: q, 1: k, 2: v}

        def call():
            req.infer(feeds, share_inputs=True)
            return req.get_output_tensor(0).data
        return call, lambda out: np.array(out)
    return prepare, info


def jax_peer(threads):
    if threads == 1:
        # XLA's CPU client sizes its pools from the cores it may run on.
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    info = {"version": jax.__version__, "device": str(jax.devices()[0]),
            "affinity": sorted(os.sched_getaffinity(0))}

    def prepare(s, q, k, v):
        # jax.nn.dot_product_attention takes [B, T, N, H].
        jq, jk, jv = (jnp.asarray(np.ascontiguousarray(x.transpose(0, 2, 1, 3)))
                      for x in (q, k, v))
        causal = bool(s["causal"])
        f = jax.jit(lambda a, b, c: jax.nn.dot_product_attention(
            a, b, c, is_causal=causal, implementation="xla"))

        def call():
            return f(jq, jk, jv).block_until_ready()
        return call, lambda out: np.asarray(out).transpose(0, 2, 1, 3)
    return prepare, info


FACTORIES = {"torch": torch_peer, "onnxruntime": onnxruntime_peer,
             "openvino": openvino_peer, "jax": jax_peer}


def time_call(call, min_time, reps):
    """(best wall s/call, best process-CPU s/call, calls per sample)."""
    call()
    call()
    n = 1
    while True:  # calibrate: n calls take at least min_time
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            call()
        t, c = time.perf_counter() - t0, time.process_time() - c0
        if t >= min_time:
            break
        n = max(n + 1, int(n * min(10.0, 1.2 * min_time / max(t, 1e-9))))
    best, best_cpu = t / n, c / n
    for _ in range(reps - 1):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - t0) / n)
        best_cpu = min(best_cpu, (time.process_time() - c0) / n)
    return best, best_cpu, n


class Runner:
    def __init__(self, peer, threads):
        self.peer, self.threads = peer, threads
        self.prepare, self.info, self.error = None, {}, None
        self.checked = {}
        try:
            self.prepare, self.info = FACTORIES[peer](threads)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            self.error = f"{type(e).__name__}: {e}"

    def check(self, s):
        """Max |peer - float64 reference| on a small shape of the same kind."""
        import numpy as np
        key = (s["kind"], s["causal"], s["d"], s.get("dtype", "f32"))
        if key not in self.checked:
            small = dict(s, H=min(s["H"], 2), Tq=1 if s["kind"] == "decode" else 67,
                         Tk=301 if s["kind"] == "decode" else 67)
            q, k, v = (round_to(x, s.get("dtype", "f32")) for x in inputs(small, seed=7))
            call, to_bhtd = self.prepare(small, q, k, v)
            err = float(np.max(np.abs(to_bhtd(call()) - reference(q, k, v, s["causal"]))))
            self.checked[key] = err
        return self.checked[key]

    def run(self, s, min_time, reps):
        out = {"peer": self.peer, "threads": self.threads, "shape": s}
        if self.error:
            return dict(out, ok=False, error=self.error)
        dtype = s.get("dtype", "f32")
        if dtype != "f32" and self.peer not in SIXTEEN_BIT_PEERS:
            return dict(out, ok=False, error=f"not run in {dtype}: this harness runs "
                                             f"{PEER_NAMES.get(self.peer, self.peer)} in float32 only")
        try:
            err = self.check(s)
            out["check_max_abs_err"] = err
            if not err < CHECK_BOUND[dtype]:
                return dict(out, ok=False, error=f"wrong result: max abs error {err:.3g} "
                                                  "against the float64 reference")
            q, k, v = inputs(s)
            call, _ = self.prepare(s, q, k, v)
            wall, cpu, n = time_call(call, min_time, reps)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            return dict(out, ok=False, error=f"{type(e).__name__}: {e}",
                        trace=traceback.format_exc(limit=3))
        # One thread: the process's CPU time, so that other processes on a
        # shared machine do not count (every thread of the process counts,
        # so a helper thread spinning would only make the peer look slower);
        # more threads: the wall clock. attn-bench does the same.
        sec = cpu if self.threads == 1 else wall
        out.update(ok=True, seconds=sec, seconds_wall=wall, seconds_cpu=cpu,
                   basis="cpu" if self.threads == 1 else "wall", calls_per_sample=n, reps=reps,
                   gflops=flops(s) / sec * 1e-9)
        if s["kind"] == "decode":
            out["gbps"] = kv_bytes(s) / sec * 1e-9
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("run", "serve", "info"))
    ap.add_argument("peer", choices=PEERS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", nargs="*", default=["single:1:512:512:64:0",
                                                    "single:1:512:512:64:1"])
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    runner = Runner(a.peer, a.threads)
    if a.mode == "info":
        print(json.dumps({"peer": a.peer, "ok": runner.error is None, "error": runner.error,
                          "info": runner.info}), flush=True)
        return 0
    if a.mode == "run":
        for spec in a.shapes:
            print(json.dumps(runner.run(parse_shape(spec), a.min_time, a.reps)), flush=True)
        return 0
    # serve: {"shape": {...}, "min_time": s, "reps": n} per line; "quit" ends.
    print(json.dumps({"peer": a.peer, "ready": True, "ok": runner.error is None,
                      "error": runner.error, "info": runner.info}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line or line == "quit":
            break
        req = json.loads(line)
        res = runner.run(req["shape"], req.get("min_time", a.min_time), req.get("reps", a.reps))
        res["info"] = runner.info
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
