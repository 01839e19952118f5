#!/usr/bin/env python3
"""attn side by side with the libraries users would pick instead, on one
machine, in one run, as ratios.

  bash bench/peers/setup_venv.sh                       # once: the peers' venv
  python3 bench/peers/compare.py --bench build-perf/bench/attn-bench --tune

For each thread count (default 1 and all cores) and each shape, alternately:
attn-bench runs every attn kernel, `auto` (following a tuning file) and the
OpenBLAS baseline on that shape, then each peer (bench/peers/peers.py, one
long-lived worker per peer inside the venv) runs the same shape. So a burst
of load from elsewhere hits one shape of everyone rather than one library.
Prints markdown tables: GFLOP/s per implementation, and `auto` / X for every
X (> 1 means attn's auto is faster). A peer that did not install, import, or
run (or gave a wrong answer) is listed with its reason, never dropped.

Timing is the same for everyone: the minimum over --reps samples, each
sample >= --min-time seconds (attn-bench: --benchmark_repetitions and the
min over repetitions), of CPU time at one thread (attn: the benchmark
thread's; a peer: its whole process's, so other processes on a shared
machine count for neither) and of wall-clock time at more threads. Useful FLOPs: 4*H*Tq*Tk*d, halved
when causal; decode rows also give GB/s of K and V (H*Tk*2d*4 bytes).

--rounds N repeats the whole alternation (every shape, everyone) N times
and keeps each implementation's best sample over all rounds. On a shared
machine a slow spell lasts seconds to minutes: within one round it can
cover one implementation's samples of a shape and miss the others', and
ratios near 1 then flip from run to run; across rounds every implementation
gets samples spread over the whole run. The same rule for everyone.

Shapes (--set full): single head T in {128, 512, 2048, 8192}, d in {64, 128},
causal 0/1; H = 16 heads, T in {128, 512, 2048}, same d and causal; decode
(Tq = 1, 16 heads, d = 128) Tk in {4096, 32768}. --set quick: a handful.
--set decode: decode only, 16 heads and GQA 32 query heads over 8 K/V heads,
Tk in {4096, 32768}, d = 128, with the KV cache in each type of --kv
(f32, f16, bf16, q8_0; Q and O float32: attn-bench's "/kv:<t>" rows).

ggml (--peers ggml): ggml_flash_attn_ext of PyPI's ggml-python (it builds
ggml from source: `python3 -m venv /tmp/attn-ggml && /tmp/attn-ggml/bin/pip
install numpy ggml-python`, ~3 minutes on 2 cores), called through its ctypes
API by this file's own worker (`compare.py ggml-serve`, run under --ggml-venv's
python) on the decode shapes only, with f32, f16 or q8_0 K and V (Q float32,
its [d, 1, H, 1] layout, K/V [d, Tk, Hkv, 1], GQA by ggml's head broadcast),
one graph and a persistent ggml threadpool of the row's thread count. It is
checked against a float64 reference of the K/V values it stores (q8_0
decoded from its blocks) before it is timed, and timed like every peer.
ggml reads each K/V head once per query head of its group, attn once per
group: the same useful work, so GQA rows compare time for the same step.

Runs with the standard library only; the peers run under the venv's python.
"""
import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS = ("torch", "onnxruntime", "openvino", "jax")
PEER_LABEL = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO",
              "jax": "JAX", "ggml": "ggml"}
# K/V element types of --set decode (--kv); bytes per element (q8_0: 32
# int8 and one f16 scale per 34-byte block).
KV_BYTES = {"f32": 4.0, "bf16": 2.0, "f16": 2.0, "q8_0": 34.0 / 32.0}
KERNELS = ("naive", "blocked", "streaming", "parallel", "auto", "blas")


def shapes(which):
    out = []
    if which == "full":
        for T in (128, 512, 2048, 8192):
            for d in (64, 128):
                for c in (0, 1):
                    out.append({"kind": "single", "H": 1, "Tq": T, "Tk": T, "d": d, "causal": c})
        for T in (128, 512, 2048):
            for d in (64, 128):
                for c in (0, 1):
                    out.append({"kind": "mh", "H": 16, "Tq": T, "Tk": T, "d": d, "causal": c})
        for tk in (4096, 32768):
            out.append({"kind": "decode", "H": 16, "Tq": 1, "Tk": tk, "d": 128, "causal": 0})
    elif which == "decode":
        for hq, hkv in ((16, 16), (32, 8)):
            for tk in (4096, 32768):
                out.append({"kind": "decode", "H": hq, "Hkv": hkv, "Tq": 1, "Tk": tk, "d": 128,
                            "causal": 0})
    else:  # quick
        for T, d, c in ((512, 64, 0), (512, 64, 1), (2048, 128, 0), (2048, 128, 1)):
            out.append({"kind": "single", "H": 1, "Tq": T, "Tk": T, "d": d, "causal": c})
        out.append({"kind": "mh", "H": 16, "Tq": 512, "Tk": 512, "d": 64, "causal": 1})
        out.append({"kind": "decode", "H": 16, "Tq": 1, "Tk": 4096, "d": 128, "causal": 0})
    return out


def label(s):
    t = "" if s.get("dtype", "f32") == "f32" else f" {s['dtype']}"
    if "kv" in s:  # --set decode: the KV cache's type, and the K/V heads
        return f"decode Hq={s['H']} Hkv={s['Hkv']} Tk={s['Tk']} d={s['d']} kv:{s['kv']}"
    if s["kind"] == "decode":
        return f"decode H={s['H']} Tk={s['Tk']} d={s['d']}{t}"
    h = "" if s["kind"] == "single" else f"H={s['H']} "
    return f"{h}T={s['Tq']} d={s['d']} causal={s['causal']}{t}"


def bench_name(kernel, s, threads):
    if s["kind"] == "single":
        mid = f"T:{s['Tq']}/d:{s['d']}/causal:{s['causal']}"
    elif s["kind"] == "mh":
        mid = f"mh/H:{s['H']}/T:{s['Tq']}/d:{s['d']}/causal:{s['causal']}"
    else:
        mid = f"decode/Hq:{s['H']}/Hkv:{s.get('Hkv', s['H'])}/Tk:{s['Tk']}/d:{s['d']}"
    # attn-bench's 16-bit rows: "/dtype:<t>" (Q, K, V and O in <t>) before
    # "/threads:"; float32 rows carry no type; "/kv:<t>" for a KV cache of
    # type <t> under float32 Q and O.
    t = "" if s.get("dtype", "f32") == "f32" else f"/dtype:{s['dtype']}"
    if s.get("kv", "f32") != "f32":
        t = f"/kv:{s['kv']}"
    return f"{kernel}/{mid}{t}/threads:{threads}"


def flops(s):
    f = 4.0 * s["H"] * s["Tq"] * s["Tk"] * s["d"]
    return f * 0.5 if s["causal"] else f


def kv_bytes(s):
    """Bytes of K and V a decode step reads once: Hkv*Tk*2d elements."""
    size = KV_BYTES[s["kv"]] if "kv" in s else 2.0 if s.get("dtype", "f32") != "f32" else 4.0
    return size * s.get("Hkv", s["H"]) * s["Tk"] * 2 * s["d"]


UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def run_attn(bench, s, threads, min_time, reps, env):
    """{kernel: {"seconds":..} or {"error":..}} for every attn-bench row of the shape."""
    names = {bench_name(k, s, threads): k for k in KERNELS}
    regex = "^(" + "|".join(KERNELS) + ")/" + bench_name("X", s, threads)[2:] + "$"
    cmd = [bench, f"--benchmark_filter={regex}", f"--benchmark_min_time={min_time}",
           f"--benchmark_repetitions={reps}", "--benchmark_format=json"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"_error": f"attn-bench exited {p.returncode}: {p.stderr.strip()[-300:]}"}
    try:
        data = json.loads(p.stdout)
    except ValueError:  # no row matched (attn-bench then prints no JSON)
        return {"_error": "attn-bench has no row " + bench_name("auto", s, threads) + ": " +
                (p.stdout + p.stderr).strip()[-200:]}
    res = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        k = names.get(b.get("run_name", b["name"]))
        if k is None:
            continue
        if b.get("error_occurred"):
            res[k] = {"error": b.get("error_message", "error")}
            continue
        # One thread: the benchmark thread's CPU time (all the work runs on
        # it); more: the wall clock. The peers are timed the same way.
        unit = UNIT[b.get("time_unit", "ns")]
        sec = (b["cpu_time"] if threads == 1 else b["real_time"]) * unit
        if k not in res or sec < res[k]["seconds"]:
            res[k] = {"seconds": sec, "seconds_wall": b["real_time"] * unit}
    return res


def merge_attn(old, new):
    """attn-bench's results of one shape over two rounds: each kernel's
    fastest sample; an error only where no round ran the kernel."""
    res = dict(old)
    for k, v in new.items():
        cur = res.get(k)
        if k == "_error":
            res.setdefault(k, v)
        elif cur is None or ("seconds" in v and ("seconds" not in cur
                                                or v["seconds"] < cur["seconds"])):
            res[k] = v
    if any(k != "_error" for k in res):
        res.pop("_error", None)
    return res


def merge_peer(old, new):
    """A peer's results of one shape over two rounds: the faster run."""
    if not old.get("ok"):
        return new
    return new if new.get("ok") and new["gflops"] > old["gflops"] else old


# ---- ggml (its own worker: `compare.py ggml-serve`, under the ggml venv) ----
# Max |error| ggml may have against the float64 reference of the K/V values it
# stores: 1e-3 for f32 (as peers.py); with f16 or q8_0 K, ggml's CPU kernel
# first rounds Q to K's dot-product type (f16, or q8_0: 1/254 of each block's
# max), and that is most of its error (measured 5.7e-4 for f16 and 4.9e-5
# for q8_0 at Tk = 4096, AMD EPYC Zen 5), so twice f16's unit roundoff more.
GGML_CHECK_BOUND = {"f32": 1e-3, "f16": 1e-3 + 2 * 2.0 ** -11, "q8_0": 1e-3 + 2 * 2.0 ** -11}


def time_call(call, min_time, reps):
    """(best wall s/call, best process-CPU s/call, calls per sample), as
    peers.py: two warm-up calls, n calls per sample of >= min_time."""
    call()
    call()
    n = 1
    while True:
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


class GgmlDecode:
    """ggml_flash_attn_ext on one decode shape: Q float32 [d, 1, H, 1], K and
    V of type kv [d, Tk, Hkv, 1], uniform in [-1, 1] (seeded), one graph, a
    threadpool of `threads` threads kept across calls."""

    def __init__(self, ggml, tp, threads, s, seed):
        import ctypes
        import numpy as np
        self.ggml, self.np, self.ctypes = ggml, np, ctypes
        H, hkv, tk, d = s["H"], s.get("Hkv", s["H"]), s["Tk"], s["d"]
        self.s, self.kv = s, s.get("kv", "f32")
        self.type = {"f32": ggml.GGML_TYPE_F32, "f16": ggml.GGML_TYPE_F16,
                     "q8_0": ggml.GGML_TYPE_Q8_0}[self.kv]
        kv_size = ggml.ggml_row_size(self.type, d) * tk * hkv
        params = ggml.ggml_init_params(mem_size=2 * kv_size + (16 << 20), mem_buffer=None,
                                       no_alloc=False)
        self.ctx = ggml.ggml_init(params)
        if not self.ctx:
            raise MemoryError("ggml_init failed")
        rng = np.random.default_rng(seed)
        self.q = rng.uniform(-1, 1, (H, d)).astype(np.float32)
        self.k = rng.uniform(-1, 1, (hkv, tk, d)).astype(np.float32)
        self.v = rng.uniform(-1, 1, (hkv, tk, d)).astype(np.float32)
        tq = ggml.ggml_new_tensor_4d(self.ctx, ggml.GGML_TYPE_F32, d, 1, H, 1)
        self.tk = ggml.ggml_new_tensor_4d(self.ctx, self.type, d, tk, hkv, 1)
        self.tv = ggml.ggml_new_tensor_4d(self.ctx, self.type, d, tk, hkv, 1)
        ctypes.memmove(ggml.ggml_get_data(tq), self.q.ctypes.data, self.q.nbytes)
        self._store(self.tk, self.k)
        self._store(self.tv, self.v)
        self.out = ggml.ggml_flash_attn_ext(self.ctx, tq, self.tk, self.tv, None,
                                            1.0 / float(np.sqrt(d)), 0.0, 0.0)
        ggml.ggml_flash_attn_ext_set_prec(self.out, ggml.GGML_PREC_F32)
        self.graph = ggml.ggml_new_graph(self.ctx)
        ggml.ggml_build_forward_expand(self.graph, self.out)
        self.plan = ggml.ggml_graph_plan(self.graph, threads, tp)
        self.work = (ctypes.c_uint8 * max(1, self.plan.work_size))()
        self.plan.work_data = ctypes.cast(self.work, ctypes.POINTER(ctypes.c_uint8))

    def _store(self, tensor, x):
        ggml, np, ctypes = self.ggml, self.np, self.ctypes
        dst = ggml.ggml_get_data(tensor)
        if self.kv == "f32":
            ctypes.memmove(dst, x.ctypes.data, x.nbytes)
        elif self.kv == "f16":
            y = x.astype(np.float16)
            ctypes.memmove(dst, y.ctypes.data, y.nbytes)
        else:  # ggml's own reference quantiser
            ggml.ggml_quantize_chunk(self.type, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                     dst, 0, x.size // x.shape[-1], x.shape[-1], None)

    def stored(self, tensor, x):
        """The values ggml holds for x, float64 (q8_0: int8 x f16 scale)."""
        np, ctypes = self.np, self.ctypes
        if self.kv == "f32":
            return x.astype(np.float64)
        if self.kv == "f16":
            return x.astype(np.float16).astype(np.float64)
        blocks = x.size // 32
        raw = np.ctypeslib.as_array(ctypes.cast(self.ggml.ggml_get_data(tensor),
                                                ctypes.POINTER(ctypes.c_uint8)),
                                    shape=(blocks * 34,)).reshape(blocks, 34)
        scale = raw[:, :2].copy().view(np.float16).astype(np.float64)
        return (raw[:, 2:].copy().view(np.int8).astype(np.float64) * scale).reshape(x.shape)

    def __call__(self):
        self.ggml.ggml_graph_compute(self.graph, self.ctypes.byref(self.plan))

    def result(self):
        """[H, d] float32 output (ggml's res is [d, H, 1, 1])."""
        np, ctypes = self.np, self.ctypes
        H, d = self.q.shape
        ptr = ctypes.cast(self.ggml.ggml_get_data(self.out), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(H, d)).copy()

    def reference(self):
        np = self.np
        k, v = self.stored(self.tk, self.k), self.stored(self.tv, self.v)
        H, d = self.q.shape
        group = H // k.shape[0]
        ref = np.zeros((H, d))
        for h in range(H):
            sc = k[h // group] @ self.q[h].astype(np.float64) / np.sqrt(d)
            w = np.exp(sc - sc.max())
            ref[h] = (w / w.sum()) @ v[h // group]
        return ref

    def free(self):
        self.ggml.ggml_free(self.ctx)


def ggml_serve(threads):
    """peers.py's serve protocol for ggml: a hello line, then one JSON reply
    per {"shape", "min_time", "reps"} line on stdin; "quit" ends."""
    try:
        import ctypes
        import ggml
        import numpy as np  # noqa: F401 - ggml-python needs it; fail here if absent
        params = ggml.ggml_threadpool_params_default(threads)
        tp = ggml.ggml_threadpool_new(ctypes.byref(params))
        info = {"version": getattr(ggml, "__version__", "?"), "threads": threads,
                "op": "ggml_flash_attn_ext", "prec": "GGML_PREC_F32"}
        error = None
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        tp, info, error = None, {}, f"{type(e).__name__}: {e}"
    print(json.dumps({"peer": "ggml", "ready": True, "ok": error is None, "error": error,
                      "info": info}), flush=True)
    checked = {}
    for line in sys.stdin:
        line = line.strip()
        if not line or line == "quit":
            break
        req = json.loads(line)
        s = req["shape"]
        out = {"peer": "ggml", "threads": threads, "shape": s, "info": info}
        kv = s.get("kv", "f32")
        if error:
            out.update(ok=False, error=error)
        elif s["kind"] != "decode" or s.get("dtype", "f32") != "f32" or kv not in GGML_CHECK_BOUND:
            out.update(ok=False, error="not run: this harness runs ggml on decode shapes with "
                                       "f32 Q and f32, f16 or q8_0 K/V only")
        else:
            try:
                key = (s.get("Hkv", s["H"]) != s["H"], kv)
                if key not in checked:
                    hkv = min(s.get("Hkv", s["H"]), 2)
                    small = dict(s, H=hkv * (s["H"] // s.get("Hkv", s["H"])), Hkv=hkv, Tk=301)
                    g = GgmlDecode(ggml, tp, threads, small, seed=7)
                    g()
                    checked[key] = float(abs(g.result() - g.reference()).max())
                    g.free()
                err = checked[key]
                out["check_max_abs_err"] = err
                if not err < GGML_CHECK_BOUND[kv]:
                    out.update(ok=False, error=f"wrong result: max abs error {err:.3g} against "
                                               "the float64 reference")
                else:
                    g = GgmlDecode(ggml, tp, threads, s, seed=0)
                    wall, cpu, n = time_call(g, req.get("min_time", 0.2), req.get("reps", 5))
                    g.free()
                    sec = cpu if threads == 1 else wall
                    out.update(ok=True, seconds=sec, seconds_wall=wall, seconds_cpu=cpu,
                               basis="cpu" if threads == 1 else "wall", calls_per_sample=n,
                               gflops=flops(s) / sec * 1e-9, gbps=kv_bytes(s) / sec * 1e-9)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                out.update(ok=False, error=f"{type(e).__name__}: {e}")
        print(json.dumps(out), flush=True)
    return 0


def peer_runs_shape(peer, s):
    """Why peers.py's peers do not run a shape of --set decode, or None: its
    shapes have one head count and Q, K, V of one type."""
    if peer == "ggml":
        return None
    if s.get("Hkv", s["H"]) != s["H"] or s.get("kv", "f32") != "f32":
        return "not run: peers.py runs no GQA or mixed-type (KV cache) decode shapes"
    return None


class Worker:
    """One peers.py serve process (one peer, one thread count); ggml: this
    file's ggml-serve under the ggml venv's python."""

    def __init__(self, python, peer, threads, startup_timeout):
        self.peer, self.error, self.info = peer, None, {}
        env = dict(os.environ)
        # The environment's OpenBLAS work-arounds slow numpy/torch: unset
        # both for the peers only (attn-bench keeps them).
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
        env["OMP_NUM_THREADS"] = str(threads)
        self.stderr = tempfile.TemporaryFile(mode="w+")
        cmd = ([python, os.path.abspath(__file__), "ggml-serve", "--threads", str(threads)]
               if peer == "ggml" else
               [python, os.path.join(HERE, "peers.py"), "serve", peer, "--threads", str(threads)])
        self.p = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        hello = self._read(startup_timeout)
        if hello is None:
            self.error = "worker did not start: " + self._stderr_tail()
        elif not hello.get("ok"):
            self.error = hello.get("error") or "import failed"
        self.info = (hello or {}).get("info", {})

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return {"ok": False, "error": "bad reply: " + line[:200]}

    def _stderr_tail(self):
        self.stderr.seek(0)
        lines = [x for x in self.stderr.read().strip().splitlines() if x.strip()]
        return lines[-1][:300] if lines else f"exit code {self.p.poll()}"

    def run(self, s, min_time, reps, timeout):
        if self.error:
            return {"ok": False, "error": self.error}
        try:
            self.p.stdin.write(json.dumps({"shape": s, "min_time": min_time, "reps": reps}) + "\n")
            self.p.stdin.flush()
        except OSError:
            self.error = "worker exited: " + self._stderr_tail()
            return {"ok": False, "error": self.error}
        r = self._read(timeout)
        if r is None:
            if self.p.poll() is None:
                self.p.kill()
                self.error = f"timed out after {timeout:.0f} s"
            else:
                self.error = "worker exited: " + self._stderr_tail()
            return {"ok": False, "error": self.error}
        return r

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


def tune(tuner, shape_list, threads, output, budget):
    specs = sorted({f"{s['Tq']}:{s['Tk']}:{s['d']}:{s['causal']}" for s in shape_list})
    cmd = [tuner, "--shapes", ",".join(specs), "--threads", ",".join(map(str, threads)),
           "--output", output, "--budget", str(budget)]
    print("# tuning: " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def fmt_ratio(a, b):
    if a is None or b is None:
        return "-"
    return f"{a / b:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-perf", "bench", "attn-bench"))
    ap.add_argument("--tuner", default=None, help="attn-tune (default: beside --bench's build)")
    ap.add_argument("--venv", default=os.environ.get("ATTN_PEERS_VENV", "/tmp/attn-peers"))
    ap.add_argument("--python", default=None,
                    help="python that runs the peers (default: the venv's); e.g. python3 on a "
                         "host whose system Python has PyTorch")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--threads", default=None, help="e.g. 1,2 (default: 1 and all cores)")
    ap.add_argument("--set", choices=("full", "quick", "decode"), default="full")
    ap.add_argument("--kv", default="f32",
                    help="--set decode: KV cache types, e.g. f32,f16,q8_0 (Q and O float32)")
    ap.add_argument("--ggml-venv", default=os.environ.get("ATTN_GGML_VENV", "/tmp/attn-ggml"),
                    help="venv with numpy and ggml-python, for --peers ggml")
    ap.add_argument("--dtype", default="f32",
                    help="element types to compare, e.g. f32,bf16,f16 (Q, K, V and O in the "
                         "type; attn-bench's dtype:<t> rows; peers that this harness runs in "
                         "float32 only are listed with that reason)")
    ap.add_argument("--match", action="append", default=[],
                    help="only shapes whose label (e.g. 'T=8192 d=128 causal=0', 'decode') "
                         "contains this; repeatable (any may match)")
    ap.add_argument("--tuning-file", default=None,
                    help="tuning file auto follows (ATTN_TUNING_FILE); see --tune")
    ap.add_argument("--tune", action="store_true",
                    help="run attn-tune on exactly these shapes first, into --tuning-file "
                         "(default: OUT/tuning.json)")
    ap.add_argument("--tune-budget", type=float, default=600)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the whole alternation; best sample over all rounds")
    ap.add_argument("--out", default="/tmp/attn-compare", help="folder for raw results")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per peer call")
    a = ap.parse_args()

    ncores = len(os.sched_getaffinity(0))
    threads = [int(x) for x in a.threads.split(",")] if a.threads else sorted({1, ncores})
    dtypes = a.dtype.split(",")
    if any(t not in ("f32", "bf16", "f16") for t in dtypes):
        sys.exit(f"compare: --dtype takes f32, bf16, f16, got {a.dtype!r}")
    shape_list = [dict(s, dtype=t) for t in dtypes for s in shapes(a.set)]
    if a.set == "decode":
        kvs = a.kv.split(",")
        if any(t not in KV_BYTES for t in kvs):
            sys.exit(f"compare: --kv takes {', '.join(KV_BYTES)}, got {a.kv!r}")
        shape_list = [dict(s, kv=t) for t in kvs for s in shape_list]
    if a.match:
        shape_list = [s for s in shape_list if any(m in label(s) for m in a.match)]
        if not shape_list:
            sys.exit("compare: --match selects no shape")
    os.makedirs(a.out, exist_ok=True)
    bench = os.path.abspath(a.bench)
    if not os.access(bench, os.X_OK):
        sys.exit(f"compare: no attn-bench at {bench} (build it: bench/README.md)")
    env = dict(os.environ)
    # attn-bench registers parallel/auto/blas rows at these thread counts.
    env["ATTN_BENCH_THREADS"] = ",".join(map(str, sorted({1, *threads})))
    if a.tune:
        tuning = a.tuning_file or os.path.join(a.out, "tuning.json")
        tuner = a.tuner or os.path.join(os.path.dirname(os.path.dirname(bench)), "tools",
                                        "attn-tune")
        tune(tuner, shape_list, threads, tuning, a.tune_budget)
        env["ATTN_TUNING_FILE"] = os.path.abspath(tuning)
    elif a.tuning_file:
        env["ATTN_TUNING_FILE"] = os.path.abspath(a.tuning_file)
    tuning_note = env.get("ATTN_TUNING_FILE", "(none: auto's default rule or the per-user cache)")

    python = a.python or os.path.join(a.venv, "bin", "python")
    if a.python and os.sep not in python:
        python = shutil.which(python) or python
    install_status = {}
    status_file = os.path.join(a.venv, "peers-install.txt")
    if os.path.exists(status_file):
        for line in open(status_file):
            parts = line.split(None, 2)
            if len(parts) >= 2:
                install_status[parts[0]] = " ".join(parts[1:]).strip()
    peers = [p for p in a.peers.split(",") if p]

    results = []  # one dict per (threads, shape)
    peer_notes = {}
    t_start = time.time()
    for n in threads:
        workers = {}
        for peer in peers:
            if peer == "ggml":
                ggml_python = os.path.join(a.ggml_venv, "bin", "python")
                if not os.access(ggml_python, os.X_OK):
                    peer_notes[peer] = (f"no ggml venv at {a.ggml_venv} (python3 -m venv "
                                        f"{a.ggml_venv} && {a.ggml_venv}/bin/pip install numpy "
                                        "ggml-python)")
                    continue
                w = Worker(ggml_python, peer, n, startup_timeout=300)
                workers[peer] = w
                if w.error:
                    peer_notes.setdefault(peer, w.error)
                elif w.info:
                    peer_notes.setdefault(peer, "ran: " + json.dumps(w.info, sort_keys=True))
                continue
            if not os.access(python, os.X_OK):
                peer_notes[peer] = (f"no python at {python}" if a.python else
                                    f"no venv at {a.venv} (run bench/peers/setup_venv.sh)")
                continue
            st = install_status.get(peer, "")
            if st.startswith("failed"):
                peer_notes[peer] = "install " + st
                continue
            w = Worker(python, peer, n, startup_timeout=300)
            workers[peer] = w
            if w.error:
                peer_notes.setdefault(peer, w.error)
            elif w.info:
                peer_notes.setdefault(peer, "ran: " + json.dumps(w.info, sort_keys=True))
        best = {}  # shape index -> row, best over the rounds so far
        for rnd in range(max(1, a.rounds)):
            for i, s in enumerate(shape_list):
                row = {"threads": n, "shape": s, "attn": run_attn(bench, s, n, a.min_time, a.reps,
                                                                  env), "peers": {}}
                time.sleep(0.3)  # let the last library's worker threads go idle
                for peer in peers:
                    why_not = peer_runs_shape(peer, s)
                    if why_not:
                        row["peers"][peer] = {"ok": False, "error": why_not}
                    elif peer in workers:
                        row["peers"][peer] = workers[peer].run(s, a.min_time, a.reps, a.timeout)
                        time.sleep(0.3)
                    else:
                        row["peers"][peer] = {"ok": False,
                                              "error": peer_notes.get(peer, "not run")}
                auto = row["attn"].get("auto", {}).get("seconds")
                line = f"# round {rnd + 1} threads={n} {label(s)}: auto " + (
                    f"{flops(s) / auto * 1e-9:.1f} GFLOP/s" if auto else "n/a")
                for peer in peers:
                    r = row["peers"][peer]
                    line += f", {peer} " + (f"{r['gflops']:.1f}" if r.get("ok") else "failed")
                print(line, file=sys.stderr, flush=True)
                if i in best:
                    row["attn"] = merge_attn(best[i]["attn"], row["attn"])
                    row["peers"] = {p: merge_peer(best[i]["peers"][p], r)
                                    for p, r in row["peers"].items()}
                best[i] = row
        results.extend(best[i] for i in range(len(shape_list)))
        for w in workers.values():
            w.close()
    elapsed = time.time() - t_start

    raw = os.path.join(a.out, "compare.json")
    with open(raw, "w") as f:
        json.dump({"threads": threads, "tuning_file": tuning_note, "peer_notes": peer_notes,
                   "install_status": install_status, "results": results,
                   "rounds": max(1, a.rounds), "elapsed_s": elapsed, "cmd": sys.argv}, f,
                  indent=1)

    # ---- the tables ------------------------------------------------------
    def gf(row, who):
        if who in KERNELS:
            r = row["attn"].get(who, {})
            return flops(row["shape"]) / r["seconds"] * 1e-9 if "seconds" in r else None
        r = row["peers"].get(who, {})
        return r.get("gflops") if r.get("ok") else None

    out = []
    out.append(f"Command: `{' '.join(['python3', 'bench/peers/compare.py'] + sys.argv[1:])}`  ")
    out.append(f"Tuning file for auto: `{tuning_note}`; {elapsed / 60:.1f} min in all.\n")
    out.append("Peers:\n")
    for peer in peers:
        ran = any(r["peers"].get(peer, {}).get("ok") for r in results)
        fails = sorted({r["peers"][peer].get("error", "")[:160] for r in results
                        if not r["peers"].get(peer, {}).get("ok")})
        state = "ran" if ran else "FAILED"
        note = install_status.get(peer, "") or (f"ggml-python in {a.ggml_venv}"
                                                if peer == "ggml" else "")
        line = f"- {PEER_LABEL[peer]} ({peer}): {state}; install: {note or 'unknown'}"
        if fails:
            line += "; failures: " + " | ".join(fails)
        out.append(line)
    out.append("")
    cols = [p for p in peers]
    for n in threads:
        rows = [r for r in results if r["threads"] == n]
        out.append(f"### {n} thread{'s' if n > 1 else ''}: auto / X (X's time over auto's; "
                   "> 1: auto faster)\n")
        head = ["shape", "auto GFLOP/s", "/ blas", "/ naive", "/ streaming", "/ parallel",
                "/ blocked"] + [f"/ {PEER_LABEL[p]}" for p in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in rows:
            auto = gf(r, "auto")
            cells = [label(r["shape"]), f"{auto:.1f}" if auto else "-"]
            for who in ["blas", "naive", "streaming", "parallel", "blocked"] + cols:
                cells.append(fmt_ratio(auto, gf(r, who)))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append(f"GFLOP/s ({n} thread{'s' if n > 1 else ''}; decode: GB/s of K and V in "
                   "brackets)\n")
        head = ["shape"] + list(KERNELS) + [PEER_LABEL[p] for p in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in rows:
            cells = [label(r["shape"])]
            for who in list(KERNELS) + cols:
                g = gf(r, who)
                if g is None:
                    cells.append("-")
                elif r["shape"]["kind"] == "decode":
                    gb = g * kv_bytes(r["shape"]) / flops(r["shape"])
                    cells.append(f"{g:.1f} ({gb:.1f})")
                else:
                    cells.append(f"{g:.1f}")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    text = "\n".join(out)
    with open(os.path.join(a.out, "compare.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"# raw results: {raw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "ggml-serve":
        # The ggml worker: compare.py ggml-serve --threads N (Worker starts it).
        sys.exit(ggml_serve(int(sys.argv[sys.argv.index("--threads") + 1])
                            if "--threads" in sys.argv else 1))
    sys.exit(main())
