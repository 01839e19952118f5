// attn-bench: Google Benchmark driver for the attn kernels and an OpenBLAS
// baseline. See bench/README.md for names and counters.
#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attn.h"
#include "attn/serving.h"
#include "bench/peak.h"
#include "bench/widen_probe.h"
#include "dispatch/tiles.h"
#include "hwy/aligned_allocator.h"
#include "kernels/amx/amx.h"
#ifdef ATTN_BENCH_HAVE_BLAS
#include "bench/blas_baseline.h"
#endif

namespace {

struct Case {
  // kSingle: one head, T_q = T_k = T (the original rows).
  // kGqa: batch 1, q_heads query heads sharing kv_heads K/V heads, T_q = T_k = T.
  // kDecode: batch 1, GQA heads, T_q = 1 against T_k = T cached keys.
  // kMultiHead: batch 1, q_heads = kv_heads = H, T_q = T_k = T.
  enum class Kind { kSingle, kGqa, kDecode, kMultiHead };
  Kind kind = Kind::kSingle;
  std::string kernel;  // "naive", ..., "auto", or "blas"
  attn::KernelId id = attn::KernelId::kAuto;
  bool scalar = false;  // the table's non-SIMD kernel (naive): kept small, never slowed
  int64_t T = 0;
  int64_t d = 0;
  int64_t q_heads = 1, kv_heads = 1;
  bool causal = false;
  int threads = 1;
  // Element types: Q and O (qo), K and V (kv). All float32 by default; the
  // f32 rows' names carry no type (tools/perf_regress.py and
  // bench/baselines/*.json key on them). Otherwise the name gets, before
  // "/threads:", "/dtype:<t>" when all four are <t>, or "/kv:<t>" when only
  // K and V are (a 16-bit KV cache, Q and O float32).
  attn::DType qo = attn::DType::kF32;
  attn::DType kv = attn::DType::kF32;
  // A bf16 dot-product path forced for the row (attn::ForceDotPath), e.g.
  // "avx512bf16"; "" runs what the process has (ATTN_DOT_PATH or the
  // default). Named "/path:<p>" before "/threads:".
  std::string dot_path;
  // Score modifiers (attn.h): a causal sliding window of `window` keys to
  // the left (-1: none), a soft-cap (0: none), a sink logit per query head,
  // ALiBi slopes per query head (the paper's 2^(-8(h+1)/H)).
  // Named "/window:W", "/softcap:C", "/sinks:1", "/alibi:1" before "/threads:".
  int64_t window = -1;
  float softcap = 0.0f;
  bool sinks = false;
  bool alibi = false;

  bool NotAllF32() const { return qo != attn::DType::kF32 || kv != attn::DType::kF32; }
  std::string TypeField() const {
    if (qo == kv) return qo == attn::DType::kF32 ? "" : std::string("/dtype:") + attn::DTypeName(qo);
    if (qo == attn::DType::kF32) return std::string("/kv:") + attn::DTypeName(kv);
    return std::string("/qo:") + attn::DTypeName(qo) + "/kv:" + attn::DTypeName(kv);
  }

  std::string Name() const {
    const std::string tail = "/d:" + std::to_string(d);
    std::string modifiers;
    if (window >= 0) modifiers += "/window:" + std::to_string(window);
    if (softcap != 0.0f) modifiers += "/softcap:" + std::to_string(int(softcap));
    if (sinks) modifiers += "/sinks:1";
    if (alibi) modifiers += "/alibi:1";
    const std::string threads_s = TypeField() + (dot_path.empty() ? "" : "/path:" + dot_path) +
                                  modifiers + "/threads:" + std::to_string(threads);
    const std::string heads =
        "/Hq:" + std::to_string(q_heads) + "/Hkv:" + std::to_string(kv_heads);
    switch (kind) {
      case Kind::kSingle: break;
      case Kind::kGqa:
        return kernel + "/gqa" + heads + "/T:" + std::to_string(T) + tail +
               "/causal:" + (causal ? "1" : "0") + threads_s;
      case Kind::kDecode:
        return kernel + "/decode" + heads + "/Tk:" + std::to_string(T) + tail + threads_s;
      case Kind::kMultiHead:
        return kernel + "/mh/H:" + std::to_string(q_heads) + "/T:" + std::to_string(T) + tail +
               "/causal:" + (causal ? "1" : "0") + threads_s;
    }
    return kernel + "/T:" + std::to_string(T) + tail + "/causal:" + (causal ? "1" : "0") +
           threads_s;
  }
  int64_t QLen() const { return kind == Kind::kDecode ? 1 : T; }
  // Useful FLOPs: Q·Kᵀ and P·V, 2·T_q·T_k·d each per query head; half the
  // pairs when causal (square problems only).
  double Flops() const {
    if (window >= 0 && kind != Kind::kDecode) {
      // The visible pairs of a causal window: row i sees min(i + 1, W + 1) keys.
      double pairs = 0.0;
      for (int64_t i = 0; i < T; ++i) pairs += double(std::min<int64_t>(i + 1, window + 1));
      return 4.0 * double(q_heads) * pairs * double(d);
    }
    const double f = 4.0 * double(q_heads) * double(QLen()) * double(T) * double(d);
    return causal ? 0.5 * f : f;
  }
  // Bytes of K and V a decode step must read at least once: kv_heads·T_k·(d + d_v)
  // elements of K/V's type: 4 or 2 bytes, or 34 (q8_0) or 18 (q4_0) per 32 (its scales
  // included; 0 for other kinds: no GBps counter).
  double KvBytes() const {
    return kind == Kind::kDecode
               ? double(attn::DTypeBytes(kv, 2 * d)) * double(kv_heads) * double(T)
               : 0.0;
  }
};

// FP32 FMA peak (GFLOP/s) by thread count, measured by EnsureProbes before
// the first row of that thread count runs.
std::map<int, double> g_peak_gflops;
// Memory read bandwidth (GB/s) by thread count, measured before the first
// decode row of that count: decode rows report GBps / this as bw_frac.
std::map<int, double> g_read_gbps;
// Each dot path's instruction peak (vdpbf16ps for avx512bf16, tdpbf16ps for
// amx) by (path, thread count), before the first row on that path: those
// rows' peak_frac is against it.
std::map<std::pair<std::string, int>, double> g_dot_path_gflops;

// The instruction a dot path's rows are held to.
const char* DotPathInstruction(const std::string& path) {
  return path == "amx" ? "tdpbf16ps" : "vdpbf16ps";
}

// One probe's result for n threads, a line on stderr ("FP32 FMA peak",
// "GFLOP/s"; "memory read bandwidth", "GB/s").
void ReportProbe(const char* what, const char* unit, int n, const attn_bench::Peak& probe) {
  std::fprintf(stderr, "attn-bench: %s, %d thread%s: %.1f %s (concurrent wall clock: %.1f %s)\n",
               what, n, n == 1 ? "" : "s", probe.gflops, unit, probe.wall_gflops, unit);
}

// The FMA peak of n threads, measured once, before the first row of n
// threads that needs it.
void EnsurePeakProbe(int n) {
  if (g_peak_gflops.count(n)) return;
  const attn_bench::Peak peak = attn_bench::MeasurePeak(n);
  g_peak_gflops[n] = peak.gflops;
  ReportProbe("FP32 FMA peak", "GFLOP/s", n, peak);
}

// The probes a row needs, each run once per thread count when the first
// row needing it runs (before its timed loop): only the thread counts of
// the rows that run pay for probes, with no copy of --benchmark_filter's
// rule (bench/peers/compare.py starts one attn-bench per shape and thread
// count, and each would otherwise pay for every count's probes).
void EnsureProbes(const Case& c) {
  const int n = c.threads;
  EnsurePeakProbe(n);
  if (!c.dot_path.empty() && !g_dot_path_gflops.count({c.dot_path, n})) {
    const attn_bench::Peak peak = c.dot_path == "amx" ? attn_bench::MeasureAmxPeak(n)
                                                      : attn_bench::MeasureBf16DotPeak(n);
    g_dot_path_gflops[{c.dot_path, n}] = peak.gflops;
    const std::string what = std::string("bf16 dot-product (") + DotPathInstruction(c.dot_path) +
                             ") peak";
    ReportProbe(what.c_str(), "GFLOP/s", n, peak);
  }
  if (c.KvBytes() > 0.0 && !g_read_gbps.count(n)) {
    const attn_bench::Peak bw = attn_bench::MeasureReadBandwidth(n);
    // Same time basis as the decode rows' GBps (SetCounters): CPU time at
    // one thread, wall clock at more (the threads share the memory bus).
    g_read_gbps[n] = n == 1 ? bw.gflops : bw.wall_gflops;
    ReportProbe("memory read bandwidth", "GB/s", n, bw);
    std::fprintf(stderr, "attn-bench: memory read bandwidth, %d thread%s: best with %d stream%s per thread\n",
                 n, n == 1 ? "" : "s", bw.streams, bw.streams == 1 ? "" : "s");
  }
}

// ATTN_BENCH_SLOWDOWN=N (an integer >= 1, default 1): every attn row calls
// attention() N times per timed iteration while its counters still count
// one call, i.e. attn looks N times slower; the naive and blas rows are not
// affected. Only for showing that tools/perf_regress.py catches a slowdown
// (bench/README.md); never set it when measuring.
int g_slowdown = 1;

// ATTN_BENCH_KV_BLOCK=N (an integer >= 1; unset or 0: the default tiles):
// Options::tiles.kv_block of every attn row, for experiments with the key
// tile (the narrow decode path caps it at 16 KiB of float32 V, 32 keys at
// d_v = 128). Row names do not change: it is printed on stderr and kept in
// the JSON context (attn_bench_kv_block); never set it for baselines.
int g_kv_block = 0;

std::vector<float> RandomUniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// Seconds of CPU time the calling thread has used.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Times the benchmark's timed loop both ways (see SetCounters).
class LoopClock {
 public:
  LoopClock() : wall0_(std::chrono::steady_clock::now()), cpu0_(ThreadCpuSeconds()) {}
  double WallSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
  }
  double CpuSeconds() const { return ThreadCpuSeconds() - cpu0_; }

 private:
  std::chrono::steady_clock::time_point wall0_;
  double cpu0_;
};

// GFLOPS = useful FLOPs x iterations / seconds x 1e-9, and peak_frac =
// GFLOPS / the probe's peak for the same thread count; decode rows also get
// GBps = bytes of K and V x iterations / seconds x 1e-9. Time basis:
// - threads:1 rows: the benchmark thread's CPU time, the same basis as Google
//   Benchmark's kIsRate counters and its "CPU" column. All the work runs on
//   this thread, so that is the kernel's work time, immune to other
//   processes preempting it on a shared machine (as is the peak probe).
// - threads:n>1 rows: wall-clock time (the "Time" column): the main thread's
//   CPU time would hide a worker that was descheduled or that it slept on.
//   (UseRealTime() would do this too, but appends "/real_time" to names.)
// Both are plain counters computed here, so neither prints a "/s" suffix.
void SetCounters(benchmark::State& state, const Case& c, const LoopClock& clock) {
  const double seconds = c.threads == 1 ? clock.CpuSeconds() : clock.WallSeconds();
  if (state.iterations() == 0 || seconds <= 0.0) return;
  const double gflops = c.Flops() * double(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOPS"] = benchmark::Counter(gflops);
  if (c.KvBytes() > 0.0) {
    const double gbps = c.KvBytes() * double(state.iterations()) / seconds * 1e-9;
    state.counters["GBps"] = benchmark::Counter(gbps);
    // Decode steps per second (batch 1: one token per step), the figure a
    // 16-bit KV cache should raise over the f32 row of the same shape.
    state.counters["tok_per_s"] = benchmark::Counter(double(state.iterations()) / seconds);
    const auto bw = g_read_gbps.find(c.threads);
    if (bw != g_read_gbps.end() && bw->second > 0.0) {
      state.counters["bw_frac"] = benchmark::Counter(gbps / bw->second);
    }
  }
  // A row on a bf16 dot-product path is held to that instruction's peak;
  // every other row, 16-bit ones included (widened to float32 and computed
  // with float32 FMAs), to the float32 FMA peak.
  double peak = 0.0;
  if (c.dot_path.empty()) {
    const auto found = g_peak_gflops.find(c.threads);
    if (found != g_peak_gflops.end()) peak = found->second;
  } else {
    const auto found = g_dot_path_gflops.find({c.dot_path, c.threads});
    if (found != g_dot_path_gflops.end()) peak = found->second;
  }
  if (peak > 0.0) state.counters["peak_frac"] = benchmark::Counter(gflops / peak);
  if (!c.dot_path.empty()) {
    state.SetLabel(std::string("peak_frac vs ") + DotPathInstruction(c.dot_path) + " peak");
  } else if (c.NotAllF32()) {
    state.SetLabel("peak_frac vs f32 FMA peak");
  }
}

// One input or output of a row in its element type: float32 values uniform
// in [-1, 1] from `seed` (0: zeros), for bf16 / f16 the same values rounded
// to nearest even (attn::BFloat16Bits / Float16Bits), for q8_0 quantised by
// ggml's rule (attn::QuantizeQ8_0; n a multiple of 32), so every type's row
// computes on the same data.
class Buffer {
 public:
  Buffer(attn::DType type, size_t n, uint32_t seed) : type_(type) {
    std::vector<float> x = seed == 0 ? std::vector<float>(n, 0.0f) : RandomUniform(n, seed);
    if (type == attn::DType::kF32) {
      f32_ = std::move(x);
      return;
    }
    if (type == attn::DType::kQ8_0 || type == attn::DType::kQ4_0) {
      blocks_.resize(size_t(attn::DTypeBytes(type, int64_t(n))));
      if (type == attn::DType::kQ8_0) {
        attn::QuantizeQ8_0(x.data(), int64_t(n), blocks_.data());
      } else {
        attn::QuantizeQ4_0(x.data(), int64_t(n), blocks_.data());
      }
      return;
    }
    bits_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits_[i] = type == attn::DType::kBF16 ? attn::BFloat16Bits(x[i]) : attn::Float16Bits(x[i]);
    }
  }
  void* data() {
    if (!blocks_.empty()) return blocks_.data();
    return type_ == attn::DType::kF32 ? static_cast<void*>(f32_.data()) : bits_.data();
  }
  float* f32() { return f32_.data(); }  // float32 buffers only (the blas rows)

 private:
  attn::DType type_;
  std::vector<float> f32_;
  std::vector<uint16_t> bits_;
  std::vector<uint8_t> blocks_;
};

// q8_0 and q4_0 rows (counters q4_* for q4_0): what quantising K and V costs against float32 K/V of the same
// values (the Buffer seeds of RunCase), measured once before the timed loop
// on the row's own shape and kernel: rms and max |out(q8_0) - out(f32)| over
// the outputs, as counters q8_rms_err and q8_max_err, and the rms relative
// to the f32 output's rms, q8_rel_rms_err (docs/precision.md).
void SetQuantisationError(benchmark::State& state, const attn::Problem& q8_problem,
                          const attn::Options& options, const std::vector<float>& q8_out,
                          int64_t k_elements) {
  // Counters q8_* for a q8_0 cache, q4_* for q4_0.
  const std::string prefix = q8_problem.k.dtype == attn::DType::kQ4_0 ? "q4" : "q8";
  Buffer k32(attn::DType::kF32, size_t(k_elements), 2), v32(attn::DType::kF32, size_t(k_elements), 3);
  std::vector<float> out32(q8_out.size());
  attn::Problem p = q8_problem;
  p.k = attn::DenseBHTD(k32.f32(), p.kv_heads, p.kv_len, p.head_dim);
  p.v = attn::DenseBHTD(v32.f32(), p.kv_heads, p.kv_len, p.head_dim);
  p.out = attn::DenseBHTD(out32.data(), p.q_heads, p.q_len, p.head_dim);
  attn::attention(p, options);
  double sum2 = 0.0, max_err = 0.0, out2 = 0.0;
  for (size_t i = 0; i < out32.size(); ++i) {
    const double e = double(q8_out[i]) - double(out32[i]);
    sum2 += e * e;
    out2 += double(out32[i]) * double(out32[i]);
    max_err = std::max(max_err, std::fabs(e));
  }
  state.counters[prefix + "_rms_err"] = benchmark::Counter(std::sqrt(sum2 / double(out32.size())));
  state.counters[prefix + "_max_err"] = benchmark::Counter(max_err);
  // Relative to the output's own rms (an average of many V rows is small).
  if (out2 > 0.0) {
    state.counters[prefix + "_rel_rms_err"] = benchmark::Counter(std::sqrt(sum2 / out2));
  }
}

void RunCase(benchmark::State& state, const Case& c) {
  EnsureProbes(c);
  const int64_t tq = c.QLen(), tk = c.T;
  Buffer q(c.qo, size_t(c.q_heads * tq * c.d), 1), k(c.kv, size_t(c.kv_heads * tk * c.d), 2),
      v(c.kv, size_t(c.kv_heads * tk * c.d), 3), out(c.qo, size_t(c.q_heads * tq * c.d), 0);

#ifdef ATTN_BENCH_HAVE_BLAS
  if (c.kernel == "blas") {
    // One head after the other (q_heads = kv_heads for blas rows), each
    // with every thread; the T_q x T_k scores are reused across heads.
    std::vector<float> s(size_t(tq * tk));
    const size_t q_stride = size_t(tq * c.d), kv_stride = size_t(tk * c.d);
    const LoopClock clock;
    for (auto _ : state) {
      for (int64_t h = 0; h < c.q_heads; ++h) {
        attn_bench::BlasAttention(q.f32() + h * q_stride, k.f32() + h * kv_stride,
                                  v.f32() + h * kv_stride, s.data(), out.f32() + h * q_stride,
                                  tq, tk, c.d, c.causal, c.threads);
      }
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    SetCounters(state, c, clock);
    return;
  }
#endif

  attn::Problem p;
  p.batch = 1;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.q_len = tq;
  p.kv_len = tk;
  p.head_dim = c.d;
  p.q = attn::DenseBHTD(q.data(), c.qo, c.q_heads, tq, c.d);
  p.k = attn::DenseBHTD(k.data(), c.kv, c.kv_heads, tk, c.d);
  p.v = attn::DenseBHTD(v.data(), c.kv, c.kv_heads, tk, c.d);
  p.out = attn::DenseBHTD(out.data(), c.qo, c.q_heads, tq, c.d);
  if (c.kind == Case::Kind::kSingle || c.kind == Case::Kind::kMultiHead) {
    p.causal = c.causal ? attn::Causal::kTopLeft : attn::Causal::kNone;
  } else {
    // The KV-cache alignment (the same as top-left for the square GQA rows;
    // for decode the one query sees every key).
    p.causal = c.causal || c.kind == Case::Kind::kDecode ? attn::Causal::kBottomRight
                                                         : attn::Causal::kNone;
  }
  if (c.window >= 0) p.window.left = c.window;
  p.softcap = c.softcap;
  std::vector<float> sinks;
  if (c.sinks) {
    for (int64_t h = 0; h < c.q_heads; ++h) sinks.push_back(0.25f * float(h % 4));
    p.sinks = {sinks.data(), c.q_heads};
  }
  std::vector<float> slopes;
  if (c.alibi) {
    for (int64_t h = 0; h < c.q_heads; ++h) {
      slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(c.q_heads)));
    }
    p.alibi_slopes = {slopes.data(), 0};
  }
  attn::Options options;
  options.kernel = c.id;
  options.threads = c.threads;
  options.tiles.kv_block = g_kv_block;

  // The row's dot path for its run only (restored however the row ends).
  struct DotPathScope {
    explicit DotPathScope(const std::string& path) : forced(!path.empty()) {
      if (forced) attn::ForceDotPath(path);
    }
    ~DotPathScope() {
      if (forced) attn::ForceDotPath("auto");
    }
    bool forced;
  } dot_path_scope(c.dot_path);

  if ((c.kv == attn::DType::kQ8_0 || c.kv == attn::DType::kQ4_0) && c.qo == attn::DType::kF32) {
    try {
      attn::attention(p, options);
      const float* o = static_cast<const float*>(out.data());
      const std::vector<float> q8_out(o, o + c.q_heads * tq * c.d);
      SetQuantisationError(state, p, options, q8_out, c.kv_heads * tk * c.d);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
  }

  const int repeat = c.scalar ? 1 : g_slowdown;
  const LoopClock clock;
  for (auto _ : state) {
    try {
      for (int r = 0; r < repeat; ++r) attn::attention(p, options);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, c, clock);
}

// The thread counts of the parallel, auto and blas rows: {1, 2}, or the
// comma-separated list in ATTN_BENCH_THREADS (e.g. "1,16" on a 16-core host;
// the names carry the count, so the default rows keep their names).
std::vector<int> MultiThreadCounts() {
  const char* env = std::getenv("ATTN_BENCH_THREADS");
  if (env == nullptr || *env == '\0') return {1, 2};
  std::vector<int> counts;
  std::vector<std::string> items = CLI::detail::split(env, ',');
  if (std::string(env).back() == ',') items.push_back("");  // split drops a trailing item
  for (const std::string& item : items) {
    int n = 0;  // decimal digits only (lexical_cast would read 010 as octal)
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n, 10);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || n < 1) {
      std::fprintf(stderr, "attn-bench: ATTN_BENCH_THREADS must list integers >= 1, got '%s'\n",
                   env);
      std::exit(1);
    }
    counts.push_back(n);
  }
  return counts;
}

std::vector<Case> DefaultCases() {
  const std::vector<int> multi = MultiThreadCounts();
  const int64_t kT[] = {128, 512, 2048, 8192};
  const int64_t kD[] = {64, 128};
  struct Kernel {
    const char* name;
    attn::KernelId id;
    std::vector<int> threads;
    bool scalar;
  };
  // Every kernel of the table, simplest first (the table lists the fastest
  // first), then auto; threaded ones at every thread count.
  std::vector<Kernel> kernels;
  for (auto k = attn::Kernels().rbegin(); k != attn::Kernels().rend(); ++k) {
    kernels.push_back({k->name, k->id, k->threaded ? multi : std::vector<int>{1}, !k->simd});
  }
  kernels.push_back({"auto", attn::KernelId::kAuto, multi, false});
  std::vector<Case> cases;
  auto add_single = [&](const Kernel& kern) {
    for (int64_t T : kT) {
      if (kern.scalar && T > 2048) continue;  // scalar: slow
      for (int64_t d : kD) {
        for (bool causal : {false, true}) {
          for (int threads : kern.threads) {
            Case c;
            c.kernel = kern.name;
            c.id = kern.id;
            c.scalar = kern.scalar;
            c.T = T;
            c.d = d;
            c.causal = causal;
            c.threads = threads;
            cases.push_back(c);
          }
        }
      }
    }
  };
  for (const Kernel& kern : kernels) add_single(kern);

  // Llama-style shapes: 32 query heads over 8 K/V heads, d = 128. Prefill
  // (causal, T_q = T_k = T) and one decode step (T_q = 1) over a T_k cache.
  // No naive prefill rows (scalar, ~35 GFLOP per call at T = 2048).
  for (const Kernel& kern : kernels) {
    for (Case::Kind kind : {Case::Kind::kGqa, Case::Kind::kDecode}) {
      if (kind == Case::Kind::kGqa && kern.scalar) continue;
      const std::vector<int64_t> lengths =
          kind == Case::Kind::kGqa ? std::vector<int64_t>{512, 2048}
                                   : std::vector<int64_t>{4096, 32768};
      for (int64_t T : lengths) {
        for (int threads : kern.threads) {
          Case c;
          c.kind = kind;
          c.kernel = kern.name;
          c.id = kern.id;
          c.scalar = kern.scalar;
          c.T = T;
          c.d = 128;
          c.q_heads = 32;
          c.kv_heads = 8;
          c.causal = kind == Case::Kind::kGqa;
          c.threads = threads;
          cases.push_back(c);
        }
      }
    }
  }

  // Multi-head (H = 16 query and K/V heads, T_q = T_k = T) prefill and
  // non-grouped decode (16 heads, T_q = 1), the shapes bench/peers compares
  // with other libraries. Naive prefill only up to T = 512 (scalar).
  constexpr int64_t kHeads = 16;
  auto add_multi_head = [&](const Kernel& kern, int64_t max_naive_T) {
    for (int64_t T : {int64_t{128}, int64_t{512}, int64_t{2048}}) {
      if (T > max_naive_T) continue;
      for (int64_t d : kD) {
        for (bool causal : {false, true}) {
          for (int threads : kern.threads) {
            Case c;
            c.kind = Case::Kind::kMultiHead;
            c.kernel = kern.name;
            c.id = kern.id;
            c.scalar = kern.scalar;
            c.T = T;
            c.d = d;
            c.q_heads = c.kv_heads = kHeads;
            c.causal = causal;
            c.threads = threads;
            cases.push_back(c);
          }
        }
      }
    }
  };
  auto add_decode_mh = [&](const Kernel& kern) {
    for (int64_t T : {int64_t{4096}, int64_t{32768}}) {
      for (int threads : kern.threads) {
        Case c;
        c.kind = Case::Kind::kDecode;
        c.kernel = kern.name;
        c.id = kern.id;
        c.scalar = kern.scalar;
        c.T = T;
        c.d = 128;
        c.q_heads = c.kv_heads = kHeads;
        c.threads = threads;
        cases.push_back(c);
      }
    }
  };
  for (const Kernel& kern : kernels) {
    add_multi_head(kern, kern.scalar ? 512 : 1 << 30);
    add_decode_mh(kern);
  }

  // 16-bit element types (bf16, f16), after every f32 row so that those keep
  // their names and order: prefill with Q, K, V and O all 16-bit, and
  // decode with a 16-bit KV cache (Q and O f32, "kv:<t>") or all 16-bit
  // ("dtype:<t>"). Kernels streaming and parallel (prefill), plus auto
  // (decode, and the prefill shapes of bench/peers/compare.py), at the
  // thread counts of their f32 rows; single-head prefill also with only K
  // and V 16-bit on streaming.
  auto find_kernel = [&](const char* name) -> const Kernel* {
    for (const Kernel& kern : kernels) {
      if (std::strcmp(kern.name, name) == 0) return &kern;
    }
    return nullptr;
  };
  std::vector<const Kernel*> prefill16, decode16;
  for (const char* name : {"streaming", "parallel"}) {
    if (const Kernel* kern = find_kernel(name)) prefill16.push_back(kern);
  }
  decode16 = prefill16;
  if (const Kernel* kern = find_kernel("auto")) decode16.push_back(kern);
  const attn::DType kTypes16[] = {attn::DType::kBF16, attn::DType::kF16};
  auto add16 = [&](Case c, const Kernel& kern, attn::DType qo, attn::DType kv) {
    for (int threads : kern.threads) {
      c.kernel = kern.name;
      c.id = kern.id;
      c.scalar = kern.scalar;
      c.threads = threads;
      c.qo = qo;
      c.kv = kv;
      cases.push_back(c);
    }
  };
  for (int64_t T : {int64_t{512}, int64_t{2048}}) {
    for (int64_t d : kD) {
      for (bool causal : {false, true}) {
        for (attn::DType type : kTypes16) {
          for (const Kernel* kern : prefill16) {
            Case c;
            c.T = T;
            c.d = d;
            c.causal = causal;
            add16(c, *kern, type, type);
            // Only K and V 16-bit (Q and O float32), one thread: tells the
            // cost of widening K/V tiles from that of converting Q and O.
            if (std::strcmp(kern->name, "streaming") == 0) {
              add16(c, *kern, attn::DType::kF32, type);
            }
          }
        }
      }
    }
  }
  // The same all-bf16 prefill rows on each bf16 dot-product path this CPU
  // runs in hardware ("/path:avx512bf16", "/path:amx"; the emulated paths are for tests,
  // not timing), and T = 8192 d = 128, where the bf16 path's packing and
  // softmax are the smallest share.
  std::vector<std::string> dot_paths;
  for (const std::string& path : attn::SupportedDotPaths()) {
    if (path != "widen" && path.find("emulated") == std::string::npos) dot_paths.push_back(path);
  }
  for (const std::string& path : dot_paths) {
    for (int64_t T : {int64_t{512}, int64_t{2048}, int64_t{8192}}) {
      for (int64_t d : kD) {
        if (T == 8192 && d != 128) continue;
        for (bool causal : {false, true}) {
          for (const Kernel* kern : prefill16) {
            Case c;
            c.T = T;
            c.d = d;
            c.causal = causal;
            c.dot_path = path;
            add16(c, *kern, attn::DType::kBF16, attn::DType::kBF16);
          }
        }
      }
    }
  }
  // Score modifiers (attn.h), one thread, streaming, each next to the plain
  // row of the same shape above: causal windows W = 512 and 4096 at T = 8192
  // (GFLOP/s on the visible pairs), a soft-cap of 50 (Gemma 2's) at T = 2048,
  // ALiBi at T = 2048 causal (every pair is visible: the FLOPs are the plain
  // row's), and sinks in GQA 32/8 decode at T_k = 32768.
  for (const Kernel& kern : kernels) {
    if (kern.name != std::string("streaming")) continue;
    for (int64_t W : {int64_t{512}, int64_t{4096}}) {
      Case c;
      c.kernel = kern.name;
      c.id = kern.id;
      c.T = 8192;
      c.d = 128;
      c.causal = true;
      c.window = W;
      cases.push_back(c);
    }
    for (bool causal : {false, true}) {
      Case c;
      c.kernel = kern.name;
      c.id = kern.id;
      c.T = 2048;
      c.d = 128;
      c.causal = causal;
      c.softcap = 50.0f;
      cases.push_back(c);
    }
    {
      Case c;
      c.kernel = kern.name;
      c.id = kern.id;
      c.T = 2048;
      c.d = 128;
      c.causal = true;
      c.alibi = true;
      cases.push_back(c);
    }
    Case c;
    c.kind = Case::Kind::kDecode;
    c.kernel = kern.name;
    c.id = kern.id;
    c.T = 32768;
    c.d = 128;
    c.q_heads = 32;
    c.kv_heads = 8;
    c.sinks = true;
    cases.push_back(c);
  }
  // auto, all 16-bit, on every prefill shape bench/peers/compare.py runs
  // (--dtype bf16,f16): one head T in {128, ..., 8192} and H = 16 heads T in
  // {128, 512, 2048}, d in {64, 128}, causal 0/1 (its decode shapes are
  // among the decode rows below).
  if (const Kernel* kern = find_kernel("auto")) {
    for (Case::Kind kind : {Case::Kind::kSingle, Case::Kind::kMultiHead}) {
      for (int64_t T : kT) {
        if (kind == Case::Kind::kMultiHead && T > 2048) continue;
        for (int64_t d : kD) {
          for (bool causal : {false, true}) {
            for (attn::DType type : kTypes16) {
              Case c;
              c.kind = kind;
              c.T = T;
              c.d = d;
              c.causal = causal;
              if (kind == Case::Kind::kMultiHead) c.q_heads = c.kv_heads = kHeads;
              add16(c, *kern, type, type);
            }
          }
        }
      }
    }
  }
  for (int64_t T : {int64_t{512}, int64_t{2048}}) {
    for (attn::DType type : kTypes16) {
      for (const Kernel* kern : prefill16) {
        Case c;
        c.kind = Case::Kind::kGqa;
        c.T = T;
        c.d = 128;
        c.q_heads = 32;
        c.kv_heads = 8;
        c.causal = true;
        add16(c, *kern, type, type);
      }
    }
  }
  // Decode over a 16-bit KV cache, then over ggml's 8-bit q8_0 and 4-bit
  // q4_0 caches (K and V only, "kv:q8_0", "kv:q4_0": Q and O float32), each
  // next to the f16 / bf16 rows of its shape: 34 or 18 bytes read per 32
  // elements, the bytes bw_frac counts.
  for (int64_t q_heads : {int64_t{32}, kHeads}) {
    for (int64_t T : {int64_t{4096}, int64_t{32768}}) {
      for (attn::DType type : kTypes16) {
        for (attn::DType qo : {attn::DType::kF32, type}) {
          for (const Kernel* kern : decode16) {
            Case c;
            c.kind = Case::Kind::kDecode;
            c.T = T;
            c.d = 128;
            c.q_heads = q_heads;
            c.kv_heads = q_heads == kHeads ? kHeads : 8;
            add16(c, *kern, qo, type);
          }
        }
      }
      for (const Kernel* kern : decode16) {
        Case c;
        c.kind = Case::Kind::kDecode;
        c.T = T;
        c.d = 128;
        c.q_heads = q_heads;
        c.kv_heads = q_heads == kHeads ? kHeads : 8;
        add16(c, *kern, attn::DType::kF32, attn::DType::kQ8_0);
        add16(c, *kern, attn::DType::kF32, attn::DType::kQ4_0);
      }
    }
  }

  // GQA decode at d = 64 (the head size of Llama 3.2 1B and TinyLlama, 32
  // query heads over 8 kv heads here), float32, a 16-bit cache and all
  // bf16: there a group of 4 rows keeps its output in registers for the
  // whole row walk (kernels/decode/row-inl.h,
  // kernels/decode/pair_row-body.h), unlike at d = 128.
  for (const Kernel* kern : decode16) {
    for (attn::DType kv : {attn::DType::kF32, attn::DType::kBF16, attn::DType::kF16}) {
      Case c;
      c.kind = Case::Kind::kDecode;
      c.T = 32768;
      c.d = 64;
      c.q_heads = 32;
      c.kv_heads = 8;
      add16(c, *kern, attn::DType::kF32, kv);
      if (kv == attn::DType::kBF16) add16(c, *kern, kv, kv);
    }
  }

#ifdef ATTN_BENCH_HAVE_BLAS
  // Last, so OpenBLAS's worker threads never idle-spin during attn cases.
  const Kernel blas = {"blas", attn::KernelId::kAuto, multi, false};
  add_single(blas);
  add_multi_head(blas, 1 << 30);
  add_decode_mh(blas);
#endif
  return cases;
}

// ---- Serving rows (attn/serving.h) ---------------------------------------
// Each row times two ways of computing the same step in ONE loop, one call
// of each per iteration, alternated, so that load from elsewhere on a
// shared machine falls on both sides of the ratio alike:
// - serving/decode_step/bs:B: a continuous-batching decode step (16
//   sequences, T_k geometric from 100 to 32768, one query each, GQA 32/8,
//   d = 128, bf16 pool, float32 queries and output) through PagedAttention
//   over shuffled pages of B tokens, against the same keys laid out
//   contiguously through VarlenAttention ([total_k, kv_heads, d]; with
//   "/pages:head-major" the pages hold each head's rows together; with
//   "/mem:thp" both the pool and the contiguous K/V lie in memory advised
//   for 2 MiB pages, madvise(MADV_HUGEPAGE), as a server may back its
//   cache; the other rows in whatever malloc gives, 4 KiB pages where
//   transparent huge pages are "madvise" or "never").
//   Counters: paged_GBps and
//   contig_GBps (K/V bytes read once per step / its time), their bw_frac
//   (against the read probe of that thread count), and paged_vs_contig.
// - serving/mixed_step/bs:16: the same cache, two of the sequences a
//   chunked-prefill chunk of 256 causal queries (bottom-right), the rest
//   decode; paged_vs_contig is the ratio of steps per second. With
//   "/q:bf16" the queries are bf16 too: an all-bf16 step, which the dot
//   path in force (the label) multiplies, reading the pages in place
//   through the bf16 dot-product or AMX kernels' span entry point.
// - serving/varlen_vs_dense: 16 ragged causal prefills (T from 16 to 511,
//   16/4 heads, d = 64, float32), one VarlenAttention call against 16
//   attention() calls on the same packed tokens; varlen_speedup = dense
//   time / varlen time.
// Time basis as SetCounters: the thread's CPU time at one thread, wall
// clock at two.

struct ServingRow {
  enum class Kind { kDecode, kMixed, kVarlenVsDense };
  Kind kind = Kind::kDecode;
  int64_t block_size = 16;
  // Pages [num_blocks, kv_heads, block_size, d] (vLLM's CPU layout: a
  // head's rows of a page contiguous) instead of FlashAttention's
  // [num_blocks, block_size, kv_heads, d]; "/pages:head-major".
  bool head_major = false;
  // K/V and pool in memory advised for 2 MiB pages; "/mem:thp".
  bool huge_pages = false;
  // bf16 queries (mixed step): an all-bf16 problem, which the bf16
  // dot-product path in force multiplies (attn::CurrentDotPath, the row's
  // label); "/q:bf16".
  bool bf16_queries = false;
  int threads = 1;
  std::string Name() const {
    const std::string t = "/threads:" + std::to_string(threads);
    switch (kind) {
      case Kind::kDecode:
        return "serving/decode_step/bs:" + std::to_string(block_size) +
               "/seqs:16/Tk:100-32768/Hq:32/Hkv:8/d:128/kv:bf16" +
               (head_major ? "/pages:head-major" : "") + (huge_pages ? "/mem:thp" : "") + t;
      case Kind::kMixed:
        return "serving/mixed_step/bs:" + std::to_string(block_size) +
               "/seqs:16/prefill:2x256/Hq:32/Hkv:8/d:128/kv:bf16" +
               (bf16_queries ? "/q:bf16" : "") + t;
      case Kind::kVarlenVsDense: return "serving/varlen_vs_dense/seqs:16/T:16-511/Hq:16/Hkv:4/d:64" + t;
    }
    return "";
  }
};

// A std::vector allocator of whole, 2 MiB-aligned 2 MiB pages, advised
// for transparent huge pages when `huge` (before the vector first touches
// them, so the kernel can back them so); else plain 4 KiB-page memory of
// the same alignment.
template <typename T>
struct PageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(2) << 20;
  bool huge = false;
  PageAllocator() = default;
  explicit PageAllocator(bool h) : huge(h) {}
  template <typename U>
  PageAllocator(const PageAllocator<U>& o) : huge(o.huge) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, bytes);
    if (!p) throw std::bad_alloc();
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const PageAllocator<U>& o) const { return huge == o.huge; }
  template <typename U>
  bool operator!=(const PageAllocator<U>& o) const { return huge != o.huge; }
};
using PageVector16 = std::vector<uint16_t, PageAllocator<uint16_t>>;

// The share of the bytes of `buffers` that the kernel backs with
// transparent huge pages, from one read of /proc/self/smaps (AnonHugePages
// of the mappings each buffer overlaps, at most the buffer's own bytes: a
// mapping may hold more; 0 where it cannot be read), so that a "/mem:thp"
// row shows whether the advice took.
double HugePageShare(std::initializer_list<const PageVector16*> buffers) {
  std::vector<double> huge(buffers.size(), 0.0);
  double total = 0;
  for (const PageVector16* x : buffers) total += double(x->size() * sizeof(uint16_t));
  if (std::FILE* f = std::fopen("/proc/self/smaps", "r")) {
    char line[512];
    unsigned long begin = 0, end = 0;
    while (std::fgets(line, sizeof(line), f)) {
      unsigned long first = 0, last = 0, kib = 0;
      if (std::sscanf(line, "%lx-%lx ", &first, &last) == 2) {
        begin = first;  // a mapping's header line
        end = last;
      } else if (std::sscanf(line, "AnonHugePages: %lu kB", &kib) == 1) {
        size_t i = 0;
        for (const PageVector16* x : buffers) {
          const uintptr_t lo = reinterpret_cast<uintptr_t>(x->data());
          if (begin < lo + x->size() * sizeof(uint16_t) && lo < end) huge[i] += double(kib) * 1024.0;
          ++i;
        }
      }
    }
    std::fclose(f);
  }
  double backed = 0;
  size_t i = 0;
  for (const PageVector16* x : buffers) backed += std::min(huge[i++], double(x->size() * sizeof(uint16_t)));
  return total > 0 ? backed / total : 0.0;
}

// Uniform values in [-1, 1) from a 32-bit LCG, as bf16 (the float's upper
// half): the pools are hundreds of MiB, filled once per row.
struct Lcg {
  uint32_t x;
  float Next() {
    x = x * 1664525u + 1013904223u;
    return float(int32_t(x)) * (1.0f / 2147483648.0f);
  }
  uint16_t NextBf16() {
    const float f = Next();
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return uint16_t(bits >> 16);
  }
};

double SideSeconds(int threads, const LoopClock& clock) {
  return threads == 1 ? clock.CpuSeconds() : clock.WallSeconds();
}

void EnsureReadProbe(int n) {
  if (g_read_gbps.count(n)) return;
  const attn_bench::Peak bw = attn_bench::MeasureReadBandwidth(n);
  g_read_gbps[n] = n == 1 ? bw.gflops : bw.wall_gflops;
  ReportProbe("memory read bandwidth", "GB/s", n, bw);
}

void RunPagedVsContiguous(benchmark::State& state, const ServingRow& row) {
  const int64_t batch = 16, hq = 32, hkv = 8, d = 128, bs = row.block_size;
  EnsureReadProbe(row.threads);
  std::vector<int32_t> tk(batch), tq(batch, 1);
  for (int64_t b = 0; b < batch; ++b) {
    tk[size_t(b)] = int32_t(std::lround(100.0 * std::pow(32768.0 / 100.0, double(b) / 15.0)));
  }
  if (row.kind == ServingRow::Kind::kMixed) tq[3] = tq[8] = 256;
  std::vector<int32_t> cu_k{0}, cu_q{0};
  for (int64_t b = 0; b < batch; ++b) {
    cu_k.push_back(cu_k.back() + tk[size_t(b)]);
    cu_q.push_back(cu_q.back() + tq[size_t(b)]);
  }
  const int64_t total_k = cu_k.back(), total_q = cu_q.back(), row_elems = hkv * d;
  // Contiguous K/V [total_k, hkv, d] bf16.
  const PageAllocator<uint16_t> pages(row.huge_pages);
  PageVector16 k(size_t(total_k * row_elems), pages), v(k.size(), pages);
  Lcg rng{7};
  for (uint16_t& x : k) x = rng.NextBf16();
  for (uint16_t& x : v) x = rng.NextBf16();
  // The same keys in shuffled pages of bs tokens.
  int64_t max_blocks = 0, num_blocks = 0;
  for (int32_t n : tk) {
    max_blocks = std::max<int64_t>(max_blocks, (n + bs - 1) / bs);
    num_blocks += (n + bs - 1) / bs;
  }
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) order[size_t(i)] = int32_t(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(11));
  std::vector<int32_t> table(size_t(batch * max_blocks), -1);
  PageVector16 k_pool(size_t(num_blocks * bs * row_elems), pages), v_pool(k_pool.size(), pages);
  size_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t page = 0; page * bs < tk[size_t(b)]; ++page) {
      const int32_t block = order[next++];
      table[size_t(b * max_blocks + page)] = block;
      const int64_t t0 = page * bs, n = std::min<int64_t>(bs, tk[size_t(b)] - t0);
      const size_t from = size_t((cu_k[size_t(b)] + t0) * row_elems);
      const size_t to = size_t(int64_t(block) * bs * row_elems);
      if (row.head_major) {
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t g = 0; g < hkv; ++g) {
            const size_t at = to + size_t((g * bs + t) * d), of = from + size_t(t * row_elems + g * d);
            std::memcpy(&k_pool[at], &k[of], size_t(d) * 2);
            std::memcpy(&v_pool[at], &v[of], size_t(d) * 2);
          }
        }
      } else {
        std::memcpy(&k_pool[to], &k[from], size_t(n * row_elems) * 2);
        std::memcpy(&v_pool[to], &v[from], size_t(n * row_elems) * 2);
      }
    }
  }
  std::vector<float> q(size_t(total_q * hq * d)), out(size_t(total_q * hq * d));
  for (float& x : q) x = rng.Next();
  std::vector<uint16_t> q16(row.bf16_queries ? q.size() : 0);
  for (uint16_t& x : q16) x = rng.NextBf16();
  const attn::PackedTensor queries =
      row.bf16_queries ? attn::PackedTensor{q16.data(), hq * d, d, attn::DType::kBF16}
                       : attn::PackedTensor{q.data(), hq * d, d, attn::DType::kF32};

  attn::PagedProblem p;
  p.batch = batch;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.head_dim = d;
  p.num_blocks = num_blocks;
  p.block_size = bs;
  // PagePool {data, block_stride, row_stride, head_stride, dtype}.
  const int64_t row_stride = row.head_major ? d : row_elems;
  const int64_t head_stride = row.head_major ? bs * d : d;
  p.k_cache = {k_pool.data(), bs * row_elems, row_stride, head_stride, attn::DType::kBF16};
  p.v_cache = {v_pool.data(), bs * row_elems, row_stride, head_stride, attn::DType::kBF16};
  p.block_table = table.data();
  p.max_blocks = max_blocks;
  p.cache_seqlens = tk.data();
  p.q = queries;
  p.cu_seqlens_q = cu_q.data();
  p.out = {out.data(), hq * d, d, attn::DType::kF32};
  p.causal = attn::Causal::kBottomRight;
  attn::VarlenProblem c;
  c.batch = batch;
  c.q_heads = hq;
  c.kv_heads = hkv;
  c.head_dim = d;
  c.cu_seqlens_q = cu_q.data();
  c.cu_seqlens_k = cu_k.data();
  c.q = queries;
  c.k = {k.data(), row_elems, d, attn::DType::kBF16};
  c.v = {v.data(), row_elems, d, attn::DType::kBF16};
  c.out = {out.data(), hq * d, d, attn::DType::kF32};
  c.causal = attn::Causal::kBottomRight;
  attn::Options options;
  options.threads = row.threads;
  if (g_kv_block > 0) options.tiles.kv_block = g_kv_block;

  attn::PagedAttention(p, options);  // warm: scratch, threads
  attn::VarlenAttention(c, options);
  double paged_s = 0, contig_s = 0;
  for (auto _ : state) {
    {
      const LoopClock clock;
      attn::PagedAttention(p, options);
      paged_s += SideSeconds(row.threads, clock);
    }
    {
      const LoopClock clock;
      attn::VarlenAttention(c, options);
      contig_s += SideSeconds(row.threads, clock);
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (state.iterations() == 0 || paged_s <= 0 || contig_s <= 0) return;
  const double bytes = double(total_k) * double(row_elems) * 2.0 * 2.0 * double(state.iterations());
  const double paged = bytes / paged_s * 1e-9, contig = bytes / contig_s * 1e-9;
  state.counters["paged_GBps"] = benchmark::Counter(paged);
  state.counters["contig_GBps"] = benchmark::Counter(contig);
  state.counters["paged_vs_contig"] = benchmark::Counter(contig_s / paged_s);
  if (row.bf16_queries) state.SetLabel("dot path " + attn::CurrentDotPath());
  // The share of the K/V bytes (pool and contiguous) in huge pages.
  state.counters["thp_frac"] = benchmark::Counter(HugePageShare({&k, &v, &k_pool, &v_pool}));
  const double probe = g_read_gbps[row.threads];
  if (probe > 0) {
    state.counters["paged_bw_frac"] = benchmark::Counter(paged / probe);
    state.counters["contig_bw_frac"] = benchmark::Counter(contig / probe);
  }
}

void RunVarlenVsDense(benchmark::State& state, const ServingRow& row) {
  const int64_t batch = 16, hq = 16, hkv = 4, d = 64;
  std::vector<int32_t> len(batch), cu{0};
  for (int64_t b = 0; b < batch; ++b) {
    len[size_t(b)] = int32_t(16 + (b * 157) % 496);  // 16 .. 511, ragged
    cu.push_back(cu.back() + len[size_t(b)]);
  }
  const int64_t total = cu.back();
  const std::vector<float> q = RandomUniform(size_t(total * hq * d), 1);
  const std::vector<float> k = RandomUniform(size_t(total * hkv * d), 2);
  const std::vector<float> v = RandomUniform(size_t(total * hkv * d), 3);
  std::vector<float> out(size_t(total * hq * d));
  attn::VarlenProblem vp;
  vp.batch = batch;
  vp.q_heads = hq;
  vp.kv_heads = hkv;
  vp.head_dim = d;
  vp.cu_seqlens_q = cu.data();
  vp.cu_seqlens_k = cu.data();
  vp.q = {q.data(), hq * d, d, attn::DType::kF32};
  vp.k = {k.data(), hkv * d, d, attn::DType::kF32};
  vp.v = {v.data(), hkv * d, d, attn::DType::kF32};
  vp.out = {out.data(), hq * d, d, attn::DType::kF32};
  vp.causal = attn::Causal::kBottomRight;
  // The same sequences as dense problems on the packed tokens in place.
  std::vector<attn::Problem> dense(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    attn::Problem& p = dense[size_t(b)];
    const int64_t t0 = cu[size_t(b)];
    p.q_heads = hq;
    p.kv_heads = hkv;
    p.q_len = p.kv_len = len[size_t(b)];
    p.head_dim = d;
    p.q = {q.data() + t0 * hq * d, 0, d, hq * d, attn::DType::kF32};
    p.k = {k.data() + t0 * hkv * d, 0, d, hkv * d, attn::DType::kF32};
    p.v = {v.data() + t0 * hkv * d, 0, d, hkv * d, attn::DType::kF32};
    p.out = {out.data() + t0 * hq * d, 0, d, hq * d, attn::DType::kF32};
    p.causal = attn::Causal::kBottomRight;
  }
  attn::Options options;
  options.threads = row.threads;
  attn::VarlenAttention(vp, options);
  for (const attn::Problem& p : dense) attn::attention(p, options);
  double varlen_s = 0, dense_s = 0;
  for (auto _ : state) {
    {
      const LoopClock clock;
      attn::VarlenAttention(vp, options);
      varlen_s += SideSeconds(row.threads, clock);
    }
    {
      const LoopClock clock;
      for (const attn::Problem& p : dense) attn::attention(p, options);
      dense_s += SideSeconds(row.threads, clock);
    }
    benchmark::DoNotOptimize(out.data());
  }
  if (state.iterations() == 0 || varlen_s <= 0 || dense_s <= 0) return;
  double pairs = 0;
  for (int32_t n : len) pairs += double(n) * double(n + 1) / 2.0;
  const double flops = 4.0 * double(hq) * pairs * double(d) * double(state.iterations());
  state.counters["varlen_GFLOPS"] = benchmark::Counter(flops / varlen_s * 1e-9);
  state.counters["dense_GFLOPS"] = benchmark::Counter(flops / dense_s * 1e-9);
  state.counters["varlen_speedup"] = benchmark::Counter(dense_s / varlen_s);
}

std::vector<ServingRow> ServingRows() {
  std::vector<ServingRow> rows;
  for (int threads : {1, 2}) {
    // Token-major pages, head-major pages, token-major in 2 MiB pages.
    for (int variant : {0, 1, 2}) {
      for (int64_t bs : {int64_t{16}, int64_t{128}}) {
        ServingRow r;
        r.block_size = bs;
        r.head_major = variant == 1;
        r.huge_pages = variant == 2;
        r.threads = threads;
        rows.push_back(r);
      }
    }
    ServingRow m;
    m.kind = ServingRow::Kind::kMixed;
    m.threads = threads;
    rows.push_back(m);
    m.bf16_queries = true;
    rows.push_back(m);
  }
  for (int threads : {1, 2}) {
    ServingRow v;
    v.kind = ServingRow::Kind::kVarlenVsDense;
    v.threads = threads;
    rows.push_back(v);
  }
  return rows;
}

// widen/ rows (widen_probe.h): a decode step's arithmetic per element of
// each K/V type, from L1, one thread. Counters: Gelem_s (elements widened
// and multiplied per second), fma_frac (2 FLOPs per element and query row
// against the FP32 FMA peak: what the widening costs beside the FMAs),
// GBps (those elements' bytes of the type per second) and bw_ratio (GBps
// over the read probe). bw_ratio below 1 means that a decode step reading
// the type from DRAM cannot keep up with memory on this core, whatever its
// loads and prefetches: rows:1 for multi-head decode (a key's K and V rows
// meet one query row each), rows:4 for a GQA group of 4.
struct WidenRow {
  attn::DType type = attn::DType::kF32;
  int query_rows = 1;
  std::string Name() const {
    return std::string("widen/dtype:") + attn::DTypeName(type) + "/rows:" +
           std::to_string(query_rows) + "/threads:1";
  }
};

std::vector<WidenRow> WidenRows() {
  std::vector<WidenRow> rows;
  for (int query_rows : {1, 4}) {
    for (attn::DType type :
         {attn::DType::kF32, attn::DType::kBF16, attn::DType::kF16, attn::DType::kQ8_0}) {
      rows.push_back(WidenRow{type, query_rows});
    }
  }
  return rows;
}

void RunWidenRow(benchmark::State& state, const WidenRow& row) {
  EnsurePeakProbe(1);
  EnsureReadProbe(1);
  // 32 keys: 16 KiB of float32 rows at 128 elements, within every L1 here.
  const int64_t elements = attn_bench::WidenProbeRowElements(), keys = 32, passes = 256;
  const int64_t row_bytes = attn::DTypeBytes(row.type, elements);
  // Rows and q start on a cache line (hwy::AllocateAligned), as a cache's
  // rows do: float32 rows 16 bytes off a line ran at 0.58 of the FMA peak
  // against 0.90 on a line (AMD EPYC Zen 4; every vector load then spans
  // two lines).
  Buffer values(row.type, size_t(keys * elements), 5);
  const hwy::AlignedFreeUniquePtr<uint8_t[]> rows =
      hwy::AllocateAligned<uint8_t>(size_t(keys * row_bytes));
  std::memcpy(rows.get(), values.data(), size_t(keys * row_bytes));
  // q: 4 query rows of float32.
  const std::vector<float> q_values = RandomUniform(size_t(4 * elements), 6);
  const hwy::AlignedFreeUniquePtr<float[]> q = hwy::AllocateAligned<float>(q_values.size());
  std::copy(q_values.begin(), q_values.end(), q.get());
  float sink =
      attn_bench::WidenDot(row.type, row.query_rows, rows.get(), row_bytes, keys, q.get(), 1);
  if (sink == -1.0f) {
    state.SkipWithError("q8_0: this target's vectors do not tile a 32-element block");
    return;
  }
  const LoopClock clock;
  for (auto _ : state) {
    sink += attn_bench::WidenDot(row.type, row.query_rows, rows.get(), row_bytes, keys, q.get(),
                                 passes);
    benchmark::DoNotOptimize(sink);
  }
  const double seconds = clock.CpuSeconds();
  if (state.iterations() == 0 || seconds <= 0.0) return;
  const double per_iteration = double(keys * elements * passes);
  const double elements_per_s = per_iteration * double(state.iterations()) / seconds;
  const double gbps = elements_per_s * double(row_bytes) / double(elements) * 1e-9;
  state.counters["Gelem_s"] = benchmark::Counter(elements_per_s * 1e-9);
  state.counters["GBps"] = benchmark::Counter(gbps);
  if (g_peak_gflops[1] > 0.0) {
    state.counters["fma_frac"] = benchmark::Counter(2.0 * row.query_rows * elements_per_s * 1e-9 /
                                                    g_peak_gflops[1]);
  }
  if (g_read_gbps[1] > 0.0) state.counters["bw_ratio"] = benchmark::Counter(gbps / g_read_gbps[1]);
}

// amx-stages/ rows: the AMX kernel's loop on one all-bf16 head, one thread,
// the default tiles (dispatch/tiles.cc), each stage's time apart
// (kernels/common/stage_clock.h) per visible score element: counters
// <stage>_ns and <stage>_cyc (cycles at the probed scalar clock, clock_ghz),
// between_ns / between_cyc (every stage but the two tile products: the work
// the tiles leave to the vectors), tiles_ns, total_ns. On a CPU where the
// "amx" dot path cannot run, no tile instruction runs at all (AmxRun::
// exclude_tiles: the tile stores write zeros, the other stages are the
// target's own vectors, as on Intel): label "tiles: excluded", tiles_hw 0,
// and no qk_tiles / pv_tiles / tiles_ns / total_ns / GFLOPS counters. (The
// scalar emulation of the tiles took seconds a head and disturbed the
// small stages' times around it.)
// "/weights:general" rows run every row through the general weights
// (kernels/amx/head-body.h AmxRowWeights, what every row ran before the
// two-pass AmxRowWeightsTwoPass): the before beside the after, in one process.
// "/mod:mask" (an additive [T, T] float mask, random in [-1, 0] with one
// -inf key in 16) and "/mod:softcap" (cap 50, Gemma 2's) rows take the
// scores through AmxPrepareRow before the weights.
// "amx-stages/decode/" rows: all-bf16 GQA decode (T_q = 1, a group of
// Hq/Hkv query heads a KV head) through the tile loop, each view's group
// padded to 32 rows, beside the same problem through attention() on the
// "avx512bf16" path, whose decode is the bf16 pair walk
// (kernels/decode/pair_*-body.h) that "amx" hands groups of fewer than 8
// rows to (kernels/amx/amx.cc AmxTakesView): counters walk_ns and
// tiles_over_walk (total_ns / walk_ns; > 1: the walk is faster), where the
// CPU has both.
struct StageRow {
  int64_t T = 0, d = 0;
  bool causal = false;
  bool plain_weights = true;
  std::string mod;                    // "", "mask" or "softcap"
  int64_t q_heads = 0, kv_heads = 0;  // > 0: a decode row
  bool Decode() const { return q_heads > 0; }
  std::string Name() const {
    if (Decode()) {
      return "amx-stages/decode/Hq:" + std::to_string(q_heads) + "/Hkv:" + std::to_string(kv_heads) +
             "/Tk:" + std::to_string(T) + "/d:" + std::to_string(d) + "/threads:1";
    }
    return "amx-stages/T:" + std::to_string(T) + "/d:" + std::to_string(d) +
           "/causal:" + (causal ? "1" : "0") + (mod.empty() ? "" : "/mod:" + mod) +
           (plain_weights ? "" : "/weights:general") + "/threads:1";
  }
};

std::vector<StageRow> StageRows() {
  std::vector<StageRow> rows;
  for (const auto& [T, d, causal] : {std::tuple<int64_t, int64_t, bool>{512, 128, false},
                                     {2048, 64, false}, {2048, 128, false}, {2048, 128, true}}) {
    for (bool plain : {false, true}) rows.push_back(StageRow{T, d, causal, plain, ""});
  }
  for (const char* mod : {"mask", "softcap"}) {
    for (bool plain : {false, true}) rows.push_back(StageRow{2048, 128, false, plain, mod});
  }
  for (int64_t group : {4, 8, 16}) {
    StageRow r;
    r.T = 4096;
    r.d = 128;
    r.kv_heads = 8;
    r.q_heads = 8 * group;
    rows.push_back(r);
  }
  return rows;
}

double g_clock_ghz = -1.0;  // MeasureClockGhz, once

void RunStageRow(benchmark::State& state, const StageRow& row) {
  if (g_clock_ghz < 0.0) {
    g_clock_ghz = attn_bench::MeasureClockGhz();
    std::fprintf(stderr, "attn-bench: scalar clock %.2f GHz (dependent adds, 1 thread)\n",
                 g_clock_ghz);
  }
  const std::vector<std::string> paths = attn::SupportedDotPaths();
  const bool hardware = std::find(paths.begin(), paths.end(), "amx") != paths.end();
  const attn::DType bf16 = attn::DType::kBF16;
  const int64_t hq = row.Decode() ? row.q_heads : 1, hkv = row.Decode() ? row.kv_heads : 1;
  const int64_t tq = row.Decode() ? 1 : row.T;
  Buffer q(bf16, size_t(hq * tq * row.d), 1), k(bf16, size_t(hkv * row.T * row.d), 2),
      v(bf16, size_t(hkv * row.T * row.d), 3), out(bf16, size_t(hq * tq * row.d), 0);
  attn::Problem p;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.q_len = tq;
  p.kv_len = row.T;
  p.head_dim = row.d;
  p.q = attn::DenseBHTD(q.data(), bf16, hq, tq, row.d);
  p.k = attn::DenseBHTD(k.data(), bf16, hkv, row.T, row.d);
  p.v = attn::DenseBHTD(v.data(), bf16, hkv, row.T, row.d);
  p.out = attn::DenseBHTD(out.data(), bf16, hq, tq, row.d);
  p.causal = row.Decode() ? attn::Causal::kBottomRight
             : row.causal ? attn::Causal::kTopLeft
                          : attn::Causal::kNone;
  std::vector<float> mask;
  if (row.mod == "mask") {
    mask.resize(size_t(row.T * row.T));
    std::mt19937 gen(4);
    std::uniform_real_distribution<float> dist(-1.0f, 0.0f);
    for (size_t i = 0; i < mask.size(); ++i) {
      mask[i] = i % 16 == 5 ? -std::numeric_limits<float>::infinity() : dist(gen);
    }
    p.mask.data = mask.data();
    p.mask.row_stride = row.T;
  } else if (row.mod == "softcap") {
    p.softcap = 50.0f;
  }
  attn::internal::RunConfig config;
  config.dot_path = hardware ? attn::internal::DotPath::kAmx : attn::internal::DotPath::kAmxEmulated;
  config.tiles = attn::internal::ChooseTiles(attn::internal::TileInputsFor(p, 1, config.dot_path));
  if (g_kv_block > 0) config.tiles.kv_block = g_kv_block;
  attn::internal::StageClock clock;
  attn::internal::AmxRun run;
  run.clock = &clock;
  run.plain_weights = row.plain_weights;
  run.exclude_tiles = !hardware;
  for (auto _ : state) {
    attn::internal::AmxHeads(p, config, hardware, run);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (state.iterations() == 0) return;
  const double pairs = row.Decode() ? double(hq) * double(row.T)
                       : row.causal ? 0.5 * double(row.T) * double(row.T + 1)
                                    : double(row.T) * double(row.T);

  const double per = 1e9 / (pairs * double(state.iterations()));  // ns per score element
  using attn::internal::AmxStage;
  double between = 0.0, tiles = 0.0;
  for (int i = 0; i < int(AmxStage::kCount); ++i) {
    const AmxStage stage = AmxStage(i);
    const double ns = clock.seconds(stage) * per;
    const bool tile_stage = attn::internal::IsTileStage(stage);
    (tile_stage ? tiles : between) += ns;
    if (tile_stage && !hardware) continue;
    const std::string name = attn::internal::AmxStageName(stage);
    state.counters[name + "_ns"] = benchmark::Counter(ns);
    state.counters[name + "_cyc"] = benchmark::Counter(ns * g_clock_ghz);
  }
  state.counters["between_ns"] = benchmark::Counter(between);
  state.counters["between_cyc"] = benchmark::Counter(between * g_clock_ghz);
  if (hardware) {
    state.counters["tiles_ns"] = benchmark::Counter(tiles);
    state.counters["total_ns"] = benchmark::Counter(between + tiles);
    state.counters["GFLOPS"] = benchmark::Counter(4.0 * double(row.d) / (between + tiles));
  }
  if (row.Decode() && hardware &&
      std::find(paths.begin(), paths.end(), "avx512bf16") != paths.end()) {
    // The same problem on the pair walk, as many times, after the timed loop.
    attn::Options options;
    options.threads = 1;
    options.dot_path = "avx512bf16";
    attn::attention(p, options);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < int64_t(state.iterations()); ++i) attn::attention(p, options);
    const double walk_ns = std::chrono::duration<double, std::nano>(
                               std::chrono::steady_clock::now() - t0).count() /
                           (pairs * double(state.iterations()));
    state.counters["walk_ns"] = benchmark::Counter(walk_ns);
    state.counters["tiles_over_walk"] = benchmark::Counter((between + tiles) / walk_ns);
  }
  state.counters["clock_ghz"] = benchmark::Counter(g_clock_ghz);
  state.counters["tiles_hw"] = benchmark::Counter(hardware ? 1.0 : 0.0);
  state.SetLabel(std::string("tiles: ") + (hardware ? "amx" : "excluded") + ", q_block " +
                 std::to_string(config.tiles.q_block) + ", kv_block " +
                 std::to_string(config.tiles.kv_block));
}

bool HasFlag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Default --benchmark_min_time (seconds per case); an explicit flag wins.
  std::vector<char*> args(argv, argv + argc);
  static char kMinTime[] = "--benchmark_min_time=0.5";
  if (!HasFlag(argc, argv, "--benchmark_min_time")) args.insert(args.begin() + 1, kMinTime);
  const bool list_only = HasFlag(argc, argv, "--benchmark_list_tests") &&
                         !HasFlag(argc, argv, "--benchmark_list_tests=false") &&
                         !HasFlag(argc, argv, "--benchmark_list_tests=0");
  int args_count = int(args.size());
  args.push_back(nullptr);
  // An integer environment setting >= min (decimal digits only, as
  // ATTN_BENCH_THREADS): *value stays as it is when unset or empty; false
  // (after a message) for anything else.
  auto int_env = [](const char* name, int min, int* value) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return true;
    const size_t len = std::strlen(text);
    int n = 0;
    const auto [end, ec] = std::from_chars(text, text + len, n, 10);
    if (ec != std::errc() || end != text + len || n < min) {
      std::fprintf(stderr, "attn-bench: %s must be an integer >= %d, got '%s'\n", name, min, text);
      return false;
    }
    *value = n;
    return true;
  };
  if (!int_env("ATTN_BENCH_SLOWDOWN", 1, &g_slowdown)) return 1;
  if (g_slowdown > 1) {
    std::fprintf(stderr, "attn-bench: ATTN_BENCH_SLOWDOWN=%d: attn rows run %dx per iteration\n",
                 g_slowdown, g_slowdown);
    benchmark::AddCustomContext("attn_bench_slowdown", std::to_string(g_slowdown));
  }
  if (!int_env("ATTN_BENCH_KV_BLOCK", 0, &g_kv_block)) return 1;
  if (g_kv_block > 0) {
    std::fprintf(stderr, "attn-bench: ATTN_BENCH_KV_BLOCK=%d: tiles.kv_block of every attn row\n",
                 g_kv_block);
    benchmark::AddCustomContext("attn_bench_kv_block", std::to_string(g_kv_block));
  }

  const std::vector<Case> cases = DefaultCases();
  for (const Case& c : cases) {
    benchmark::RegisterBenchmark(c.Name().c_str(),
                                 [c](benchmark::State& state) { RunCase(state, c); })
        ->Unit(benchmark::kMicrosecond)
        // With --benchmark_repetitions=N, a "_max" row beside mean/median:
        // its GFLOPS and peak_frac are the best repetition's, the same
        // statistic as the peak probe (best of 4), so that a burst of load
        // from elsewhere on a shared machine lowers neither side of the
        // ratio. Its time columns are the slowest repetition's: read its
        // counters, or the "_median" row's times.
        ->ComputeStatistics("max", [](const std::vector<double>& v) {
          return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
        });
  }
  for (const ServingRow& r : ServingRows()) {
    benchmark::RegisterBenchmark(r.Name().c_str(),
                                 [r](benchmark::State& state) {
                                   if (r.kind == ServingRow::Kind::kVarlenVsDense) {
                                     RunVarlenVsDense(state, r);
                                   } else {
                                     RunPagedVsContiguous(state, r);
                                   }
                                 })
        ->Unit(benchmark::kMillisecond)
        ->ComputeStatistics("max", [](const std::vector<double>& v) {
          return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
        });
  }
  for (const WidenRow& r : WidenRows()) {
    benchmark::RegisterBenchmark(r.Name().c_str(),
                                 [r](benchmark::State& state) { RunWidenRow(state, r); })
        ->Unit(benchmark::kMicrosecond);
  }
  for (const StageRow& r : StageRows()) {
    benchmark::RegisterBenchmark(r.Name().c_str(),
                                 [r](benchmark::State& state) { RunStageRow(state, r); })
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;

  if (!list_only) {
    // Applies ATTN_TARGET first, so the probe dispatches like the kernels.
    const std::string target = attn::CurrentTarget();
    const size_t lanes = attn_bench::PeakProbeLanes();
    std::fprintf(stderr, "attn-bench: SIMD target %s (%zu float lanes)\n", target.c_str(), lanes);
    benchmark::AddCustomContext("attn_target", target);
    benchmark::AddCustomContext("peak_probe_lanes", std::to_string(lanes));
    // The bf16/f16 rows' peak_frac uses the same float32 FMA peak (16-bit
    // inputs widened, float32 FMAs), except the "/path:" rows: those are
    // against their instruction's peak (bf16dot_peak_gflops in stderr).
    benchmark::AddCustomContext("peak_16bit", "f32 FMA peak (16-bit inputs widened to f32)");
    benchmark::AddCustomContext("peak_dot_path",
                                "the dot path's instruction peak (vdpbf16ps, AMX tdpbf16ps)");
    benchmark::AddCustomContext("dot_path", attn::CurrentDotPath());
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
