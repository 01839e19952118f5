#include "tools/tune/shape_tuner.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "attn/tuning.h"
#include "reference/reference.h"

namespace attn_tune {
namespace {

// The check: a candidate may differ from the float64 reference by at most
// 4x the naive float32 kernel's own error on the same rows, plus 16 float
// ULPs of max|V| (|out| <= max|V|, as the output is a convex combination of
// V rows) -- the bound tests/kernels_test.cc holds every kernel to (see
// BoundFromNaive in tests/test_util.cc for its justification). It scales
// with the problem: a single dropped key at T = 16k moves outputs by
// ~3e-5, well above the bound (~2e-6 with inputs in +-1), while correct
// kernels differ from naive by at most 2.4e-7 over the whole default grid.
constexpr double kNaiveErrorFactor = 4.0;
constexpr double kFloorUlps = 16.0;
// A bf16 dot-product path (an all-bf16 shape's candidates other than
// widen) rounds the softmax weights P to bf16 before P·V: the precision
// contract (docs/precision.md) adds 2^-8·ref(|V|) per output element to the
// float32 bound, and ref(|V|), a convex combination of |V| rows, is at most
// max|V|. A wrong dot-product kernel (a dropped pair half, a key pair mixed
// twice) moves outputs by O(max|V|/T) per key from T = 256 down, which the
// suite's tighter per-element bound (tests/bf16dot_test.cc) is for; this
// one keeps the tuner from crowning a kernel that is grossly wrong.
constexpr int kDotPathExtraExponent = -8;

// Reference work per shape, in naive FLOPs: the whole output when it costs
// less (about 0.1 s at naive's ~4 GFLOP/s), else sampled row blocks.
constexpr double kFullReferenceFlops = 4e8;
// The float64 reference keeps four T_q x T_k double matrices per head.
constexpr double kMaxReferencePairs = double(1 << 21);
// Sampled rows: blocks at the start, middle and end of the queries, where
// query-block edges, causal diagonals and split-KV remainders differ.
constexpr int kSampleBlocks = 3;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Keys query row i sees (bottom-right causal: the last query sees all).
int64_t VisibleKeys(const TuneShape& s, int64_t row) {
  if (!s.causal) return s.kv_len;
  return std::clamp<int64_t>(s.kv_len - s.q_len + row + 1, 0, s.kv_len);
}

double VisiblePairs(const TuneShape& s, int64_t row_begin, int64_t row_end) {
  double pairs = 0.0;
  for (int64_t i = row_begin; i < row_end; ++i) pairs += double(VisibleKeys(s, i));
  return pairs;
}

struct RowBlock {
  int64_t begin = 0, end = 0;
};

// The problem a shape is tuned on, with its own buffers.
struct TuningProblem {
  int64_t heads = 1;
  std::vector<float> q, k, v, out;
  std::vector<uint16_t> q16, k16, v16;  // Q, K and V as bf16 / f16 bit patterns
  std::vector<uint8_t> k8, v8;           // K and V as q8_0 / q4_0 blocks
  attn::Problem problem;

  TuningProblem(const TuneShape& s, int heads_count, uint64_t seed) : heads(heads_count) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& buf, int64_t rows) {
      buf.resize(size_t(heads * rows * s.head_dim));
      for (float& x : buf) x = unit(rng);
    };
    fill(q, s.q_len);
    fill(k, s.kv_len);
    fill(v, s.kv_len);
    out.assign(size_t(heads * s.q_len * s.head_dim), 0.0f);
    attn::Problem& p = problem;
    p.q_heads = p.kv_heads = heads;
    p.q_len = s.q_len;
    p.kv_len = s.kv_len;
    p.head_dim = s.head_dim;
    p.q = attn::DenseBHTD(q.data(), heads, s.q_len, s.head_dim);
    p.k = attn::DenseBHTD(k.data(), heads, s.kv_len, s.head_dim);
    p.v = attn::DenseBHTD(v.data(), heads, s.kv_len, s.head_dim);
    p.out = attn::DenseBHTD(out.data(), heads, s.q_len, s.head_dim);
    p.causal = s.causal ? attn::Causal::kBottomRight : attn::Causal::kNone;
    if (s.kv_type == attn::DType::kQ8_0 || s.kv_type == attn::DType::kQ4_0) {
      // ggml's blocks (head_dim a multiple of 32: attention() says so if not).
      auto quantize = [&](const std::vector<float>& from, std::vector<uint8_t>& to) {
        to.resize(size_t(attn::DTypeBytes(s.kv_type, int64_t(from.size()))));
        if (from.size() % 32 != 0) return;
        if (s.kv_type == attn::DType::kQ8_0) {
          attn::QuantizeQ8_0(from.data(), int64_t(from.size()), to.data());
        } else {
          attn::QuantizeQ4_0(from.data(), int64_t(from.size()), to.data());
        }
      };
      quantize(k, k8);
      quantize(v, v8);
      p.k = attn::DenseBHTD(k8.data(), s.kv_type, heads, s.kv_len, s.head_dim);
      p.v = attn::DenseBHTD(v8.data(), s.kv_type, heads, s.kv_len, s.head_dim);
    } else if (s.kv_type != attn::DType::kF32) {
      auto narrow = [&](const std::vector<float>& from, std::vector<uint16_t>& to) {
        to.resize(from.size());
        for (size_t i = 0; i < from.size(); ++i) {
          to[i] = s.kv_type == attn::DType::kBF16 ? attn::BFloat16Bits(from[i])
                                                  : attn::Float16Bits(from[i]);
        }
      };
      narrow(k, k16);
      narrow(v, v16);
      p.k = attn::DenseBHTD(k16.data(), s.kv_type, heads, s.kv_len, s.head_dim);
      p.v = attn::DenseBHTD(v16.data(), s.kv_type, heads, s.kv_len, s.head_dim);
    }
    if (s.q_type == attn::DType::kBF16) {
      q16.resize(q.size());
      for (size_t i = 0; i < q.size(); ++i) q16[i] = attn::BFloat16Bits(q[i]);
      p.q = attn::DenseBHTD(q16.data(), s.q_type, heads, s.q_len, s.head_dim);
    }
  }
};

// The float64 reference on the checked rows, exact[block][head][row][d],
// and the bound a candidate's distance to it must meet.
struct Reference {
  std::vector<RowBlock> blocks;
  std::vector<std::vector<double>> exact;
  double naive_error = 0.0;  // naive's own max |naive - exact|
  double bound = 0.0;
  double dot_path_bound = 0.0;  // for a bf16 dot-product path (see above)
  double seconds = 0.0;  // naive's time for these rows
  double pairs = 0.0;    // visible pairs of these rows, per head
  bool full = false;
};

bool FullReferenceAffordable(const TuneShape& s, int heads) {
  const double pairs = double(s.q_len) * double(s.kv_len);
  const double flops = 4.0 * pairs * double(s.head_dim) * heads;
  return flops <= kFullReferenceFlops && pairs <= kMaxReferencePairs &&
         attn::KernelSupports(attn::KernelId::kNaive, ShapeOnly(s, heads));
}

Reference ComputeReference(const TuneShape& s, TuningProblem& tp) {
  Reference ref;
  const double per_row_flops = 4.0 * double(s.kv_len) * double(s.head_dim) * double(tp.heads);
  if (FullReferenceAffordable(s, int(tp.heads))) {
    ref.full = true;
    ref.blocks.push_back({0, s.q_len});
  } else {
    const double affordable_rows = std::min(kFullReferenceFlops / per_row_flops,
                                            kMaxReferencePairs / double(s.kv_len));
    const int64_t rows = std::clamp<int64_t>(int64_t(affordable_rows / kSampleBlocks), 1,
                                             std::max<int64_t>(1, s.q_len / kSampleBlocks));
    const int64_t mid = (s.q_len - rows) / 2;
    for (int64_t begin : {int64_t{0}, mid, s.q_len - rows}) {
      if (!ref.blocks.empty() && begin < ref.blocks.back().end) begin = ref.blocks.back().end;
      if (begin >= s.q_len) break;
      ref.blocks.push_back({begin, std::min(s.q_len, begin + rows)});
    }
  }
  for (const RowBlock& b : ref.blocks) {
    const int64_t n = b.end - b.begin;
    std::vector<float> out(size_t(tp.heads * n * s.head_dim), 0.0f);
    // Rows [begin, end) as their own problem: same Q rows and keys; for
    // bottom-right causal, the keys up to the block's last visible one, so
    // the sub-problem's own bottom-right diagonal is the original one.
    attn::Problem sub = tp.problem;
    sub.q_len = n;
    sub.q.data = tp.q16.empty() ? static_cast<const void*>(tp.q.data() + b.begin * s.head_dim)
                                : static_cast<const void*>(tp.q16.data() + b.begin * s.head_dim);
    sub.kv_len = s.causal ? std::max<int64_t>(1, VisibleKeys(s, b.end - 1)) : s.kv_len;
    sub.out = attn::DenseBHTD(out.data(), tp.heads, n, s.head_dim);
    attn::Options naive;
    naive.kernel = attn::KernelId::kNaive;
    naive.threads = 1;
    const auto t0 = Clock::now();
    attn::attention(sub, naive);
    ref.seconds += Seconds(t0, Clock::now());
    ref.pairs += VisiblePairs(s, b.begin, b.end);
    attn::reference::Result exact = attn::reference::Attention(sub);
    for (size_t i = 0; i < out.size(); ++i) {
      ref.naive_error = std::max(ref.naive_error, std::fabs(double(out[i]) - exact.out[i]));
    }
    ref.exact.push_back(std::move(exact.out));
  }
  float max_v = 0.0f;
  for (float x : tp.v) max_v = std::max(max_v, std::fabs(x));
  ref.bound = kNaiveErrorFactor * ref.naive_error + kFloorUlps * FLT_EPSILON * double(max_v);
  ref.dot_path_bound = ref.bound + std::ldexp(double(max_v), kDotPathExtraExponent);
  return ref;
}

// "" when the candidate's output (already in tp.out) matches the reference
// on the checked rows and is finite everywhere, else why not.
std::string CompareWithReference(const TuneShape& s, const TuningProblem& tp, const Reference& ref,
                                 bool dot_path, double* max_error) {
  const double bound = dot_path ? ref.dot_path_bound : ref.bound;
  const int64_t d = s.head_dim;
  // Outputs were NaN before the run: a NaN left anywhere is an unwritten or
  // broken row, even outside the sampled rows.
  for (size_t i = 0; i < tp.out.size(); ++i) {
    if (!std::isfinite(tp.out[i])) {
      const int64_t row = int64_t(i) / d % s.q_len;
      return "output row " + std::to_string(row) + " holds " + std::to_string(tp.out[i]);
    }
  }
  double worst = 0.0;
  int64_t worst_row = 0;
  for (size_t bi = 0; bi < ref.blocks.size(); ++bi) {
    const RowBlock& b = ref.blocks[bi];
    const int64_t n = b.end - b.begin;
    for (int64_t h = 0; h < tp.heads; ++h) {
      for (int64_t r = 0; r < n; ++r) {
        const float* got = tp.out.data() + (h * s.q_len + b.begin + r) * d;
        const double* want = ref.exact[bi].data() + (h * n + r) * d;
        for (int64_t c = 0; c < d; ++c) {
          const double err = std::fabs(double(got[c]) - want[c]);
          if (err > worst) {
            worst = err;
            worst_row = b.begin + r;
          }
        }
      }
    }
  }
  if (worst > bound) {
    char why[240];
    std::snprintf(why, sizeof(why),
                  "output is %.3g from the float64 reference at row %lld, over the bound %.3g "
                  "(4x naive's own error %.3g, plus 16 ULPs%s)",
                  worst, static_cast<long long>(worst_row), bound, ref.naive_error,
                  dot_path ? ", plus 2^-8 max|V| for P rounded to bf16" : "");
    return why;
  }
  *max_error = std::max(*max_error, worst);
  return "";
}

// The tuner's parallel_slowdown probe: how many times longer `threads`
// threads take to each run a fixed dependent chain of arithmetic (a few ms
// on one core) than one thread alone at its fastest this process has seen:
// about 1 when every thread has a core to itself, about 2 when another
// process keeps one of two cores busy. The median of three tries, each a
// one-thread run then a `threads` run. The tuner asks only when a
// one-thread candidate is about to displace a threaded default.
constexpr int kProbeSteps = 1 << 20;
std::atomic<double> g_probe_sink{0.0};

double ProbeSpin() {
  const auto t0 = Clock::now();
  // Started from the sink, or the compiler computes the chain itself.
  double x = 1.0 + 1e-300 * g_probe_sink.load(std::memory_order_relaxed);
  for (int i = 0; i < kProbeSteps; ++i) x = x * 0.999999 + 1e-6;
  g_probe_sink.store(x, std::memory_order_relaxed);
  return Seconds(t0, Clock::now());
}

double ParallelSlowdown(int threads) {
  static double fastest_single = std::numeric_limits<double>::infinity();
  // Let the kernels' OpenMP workers finish spinning and sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::vector<double> ratios;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fastest_single = std::min(fastest_single, ProbeSpin());
    const auto t0 = Clock::now();
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back([] { ProbeSpin(); });
    ProbeSpin();
    for (std::thread& t : others) t.join();
    ratios.push_back(Seconds(t0, Clock::now()) / fastest_single);
  }
  return RobustSeconds(ratios);
}

// Tile fields the candidate's kernel reads that differ from the default's.
int RelevantFieldsDiffering(const AttnCandidate& c, const attn::Tiles& d) {
  const attn::KernelInfo& k = attn::GetKernelInfo(c.kernel);
  return int(k.uses_q_block && c.tiles.q_block != d.q_block) +
         int(k.uses_kv_block && c.tiles.kv_block != d.kv_block) +
         int(k.uses_kv_splits && c.tiles.kv_splits != d.kv_splits);
}

// The candidate's identity: its kernel, the tile fields that kernel reads,
// and its dot path.
std::tuple<int, int, int, int, std::string> CandidateKey(const AttnCandidate& c) {
  const attn::KernelInfo& k = attn::GetKernelInfo(c.kernel);
  return std::make_tuple(int(c.kernel), k.uses_q_block ? c.tiles.q_block : 0,
                         k.uses_kv_block ? c.tiles.kv_block : 0,
                         k.uses_kv_splits ? c.tiles.kv_splits : 0, c.dot_path);
}

// Whether a candidate multiplies in bf16 (a dot path other than widen).
bool OnADotProductPath(const AttnCandidate& c) {
  return !c.dot_path.empty() && c.dot_path != "widen";
}

}  // namespace

attn::Problem ShapeOnly(const TuneShape& s, int heads) {
  attn::Problem shape;
  shape.q_heads = shape.kv_heads = heads;
  shape.q_len = s.q_len;
  shape.kv_len = s.kv_len;
  shape.head_dim = s.head_dim;
  shape.causal = s.causal ? attn::Causal::kBottomRight : attn::Causal::kNone;
  shape.k.dtype = shape.v.dtype = s.kv_type;
  shape.q.dtype = s.q_type;
  return shape;
}

std::string TuneShape::Name() const {
  return std::to_string(q_len) + "x" + std::to_string(kv_len) + " d=" + std::to_string(head_dim) +
         (causal ? " causal" : "") + " t=" + std::to_string(threads) +
         (kv_type != attn::DType::kF32 ? std::string(" kv=") + attn::DTypeName(kv_type) : "") +
         (q_type != attn::DType::kF32 ? std::string(" q=") + attn::DTypeName(q_type) : "");
}

std::string AttnCandidate::Label() const {
  const attn::KernelInfo& k = attn::GetKernelInfo(kernel);
  std::string label = k.name;
  if (k.uses_q_block) label += " q=" + std::to_string(tiles.q_block);
  if (k.uses_kv_block) label += " kv=" + std::to_string(tiles.kv_block);
  if (k.uses_kv_splits) label += " split=" + std::to_string(tiles.kv_splits);
  if (!dot_path.empty()) label += " " + dot_path;
  return label;
}

bool NaiveIsCandidate(const TuneShape& shape, int heads) {
  return FullReferenceAffordable(shape, heads);
}

double ShapeFlops(const TuneShape& s, int heads) {
  return 4.0 * VisiblePairs(s, 0, s.q_len) * double(s.head_dim) * double(heads);
}

std::vector<AttnCandidate> EnumerateCandidates(const TuneShape& s, int heads, bool quick,
                                               bool include_naive) {
  // What `auto` runs without a table (attn-tune clears any table first).
  const attn::Problem shape = ShapeOnly(s, heads);
  attn::Options auto_options;
  auto_options.threads = s.threads;
  const attn::AutoChoice def = attn::ExplainChoice(shape, auto_options);
  // An all-bf16 shape runs on each hardware dot path this CPU has (widen
  // included); a kernel without a row for a path runs it widened, so it
  // is a candidate there only as "widen" (one candidate, not one per path).
  std::vector<std::string> paths{""};
  if (s.AllBf16()) {
    paths.clear();
    for (const std::string& p : attn::SupportedDotPaths()) {
      if (p.find("-emulated") == std::string::npos) paths.push_back(p);
    }
  }
  auto effective_path = [&](attn::KernelId kernel, const std::string& path) {
    if (path.empty() || path == "widen") return path;
    attn::Options o;
    o.kernel = kernel;
    o.threads = s.threads;
    o.dot_path = path;
    return attn::ExplainChoice(shape, o).dot_product_row ? path : std::string("widen");
  };
  AttnCandidate default_candidate{def.kernel, def.tiles, true, {},
                                  effective_path(def.kernel, def.dot_path)};

  // Queries per SIMD panel: the q_block DefaultTiles gives a single query.
  const int panel = attn::DefaultTiles(1, s.kv_len, s.head_dim).q_block;
  const int64_t q_cap = (s.q_len + panel - 1) / panel * panel;
  std::set<int> q_blocks;
  for (int panels : quick ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4, 8}) {
    q_blocks.insert(int(std::min<int64_t>(int64_t(panels) * panel, q_cap)));
  }
  const std::vector<int> kv_blocks =
      quick ? std::vector<int>{64, 128, 256} : std::vector<int>{32, 64, 128, 256};
  // The AMX kernel packs K and V once per query block and key tile, so its
  // speed keeps growing to blocks of 1024 rows and tiles of 512 keys
  // (measured in dispatch/tiles.cc, ChooseTiles): its own, larger sizes.
  std::set<int> amx_q_blocks;
  for (int panels : quick ? std::vector<int>{8, 32} : std::vector<int>{4, 8, 16, 32}) {
    amx_q_blocks.insert(int(std::min<int64_t>(int64_t(panels) * panel, q_cap)));
  }
  const std::vector<int> amx_kv_blocks =
      quick ? std::vector<int>{256, 512} : std::vector<int>{128, 256, 512};
  auto splits_for = [&](int q_block) {
    // Split-KV only helps when the (head, query block) items cannot feed
    // every thread; each split keeps >= 64 keys so merging stays cheap.
    const int64_t items = int64_t(heads) * ((s.q_len + q_block - 1) / q_block);
    std::vector<int> splits{1};
    if (items >= 2 * int64_t(s.threads)) return splits;
    for (int n = 2; n <= (quick ? 8 : 16) && int64_t(n) * 64 <= s.kv_len; n *= 2) splits.push_back(n);
    return splits;
  };

  // Every kernel of the table that takes the shape, over the tile fields
  // it reads (the others stay at the default's). Single-threaded kernels
  // compete at every thread count: for small shapes the cost of waking
  // threads exceeds the work. The scalar kernel (naive) only when
  // `include_naive`; threaded ones only with more than one thread.
  std::vector<AttnCandidate> all;
  for (const attn::KernelInfo& k : attn::Kernels()) {
    if (!k.simd && !include_naive) continue;
    if (k.threaded && s.threads <= 1) continue;
    if (!attn::KernelSupports(k.id, shape)) continue;
    for (const std::string& requested_path : paths) {
      const std::string path = effective_path(k.id, requested_path);
      const bool amx = path == "amx";
      const std::set<int>& q_set = amx ? amx_q_blocks : q_blocks;
      const std::vector<int> qs = k.uses_q_block ? std::vector<int>(q_set.begin(), q_set.end())
                                                 : std::vector<int>{def.tiles.q_block};
      const std::vector<int> kvs = k.uses_kv_block ? (amx ? amx_kv_blocks : kv_blocks)
                                                   : std::vector<int>{def.tiles.kv_block};
      for (int qb : qs) {
        const std::vector<int> splits =
            k.uses_kv_splits ? splits_for(qb) : std::vector<int>{def.tiles.kv_splits};
        for (int kv : kvs) {
          for (int sp : splits) {
            all.push_back(AttnCandidate{k.id, attn::Tiles{qb, kv, sp}, false, {}, path});
          }
        }
      }
    }
  }
  // Drop duplicates of the default, and of each other in the fields the
  // kernel uses.
  std::set<std::tuple<int, int, int, int, std::string>> seen{CandidateKey(default_candidate)};
  std::vector<AttnCandidate> unique;
  for (const AttnCandidate& c : all) {
    if (seen.insert(CandidateKey(c)).second) unique.push_back(c);
  }
  std::stable_sort(unique.begin(), unique.end(), [&](const AttnCandidate& a, const AttnCandidate& b) {
    return RelevantFieldsDiffering(a, def.tiles) < RelevantFieldsDiffering(b, def.tiles);
  });
  unique.insert(unique.begin(), default_candidate);
  return unique;
}

double ShapeResult::DefaultSeconds() const {
  if (default_index < 0) return 0.0;
  const Measurement& m = tuning.candidates[size_t(default_index)];
  return m.samples.empty() ? 0.0 : m.score;
}

std::map<std::string, double> ShapeResult::KernelBestSeconds() const {
  std::map<std::string, double> best;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Measurement& m = tuning.candidates[i];
    if (m.samples.empty() || m.verdict == Verdict::kWrong) continue;
    const std::string name = attn::KernelName(candidates[i].kernel);
    const auto it = best.find(name);
    if (it == best.end() || m.score < it->second) best[name] = m.score;
  }
  return best;
}

ShapeResult TuneOneShape(const TuneShape& shape, const ShapeTuneSettings& settings,
                         std::vector<AttnCandidate> candidates,
                         const std::function<double(const AttnCandidate&)>& fake_timer) {
  ShapeResult result;
  result.shape = shape;
  result.flops = ShapeFlops(shape, settings.heads);
  TuningProblem tp(shape, settings.heads, settings.seed);
  const Reference ref = ComputeReference(shape, tp);
  result.checked_rows = 0;
  for (const RowBlock& b : ref.blocks) result.checked_rows += b.end - b.begin;
  result.naive_extrapolated = !ref.full;
  result.naive_seconds = ref.seconds * VisiblePairs(shape, 0, shape.q_len) / std::max(1.0, ref.pairs);
  result.check_bound = ref.bound;
  result.dot_path_check_bound = ref.dot_path_bound;

  auto run = [&](size_t i) {
    const AttnCandidate& c = candidates[i];
    attn::Options options;
    options.kernel = c.kernel;
    options.threads = shape.threads;
    options.tiles = c.tiles;
    options.dot_path = c.dot_path;
    if (c.run) {
      c.run(tp.problem, options);
    } else {
      attn::attention(tp.problem, options);
    }
  };
  TunerHooks hooks;
  hooks.check = [&](size_t i) {
    if (settings.on_candidate) settings.on_candidate(i, candidates.size());
    CheckOutcome outcome;
    std::fill(tp.out.begin(), tp.out.end(), std::numeric_limits<float>::quiet_NaN());
    const auto t0 = Clock::now();
    try {
      run(i);
    } catch (const std::exception& e) {
      outcome.reason = std::string("it threw: ") + e.what();
      outcome.seconds = Seconds(t0, Clock::now());
      return outcome;
    }
    outcome.seconds = Seconds(t0, Clock::now());
    outcome.reason =
        CompareWithReference(shape, tp, ref, OnADotProductPath(candidates[i]),
                             &result.max_error_seen);
    outcome.correct = outcome.reason.empty();
    return outcome;
  };
  // A sample repeats calls until it lasts min_sample_seconds (at least one
  // call): every candidate is timed over the same wall time, whatever its
  // speed, and a candidate slowed a thousandfold by a descheduled thread
  // costs one call, not a count of calls fixed from a fast one.
  hooks.time_once = [&](size_t i) {
    if (fake_timer) return fake_timer(candidates[i]);
    const auto t0 = Clock::now();
    int calls = 0;
    double elapsed = 0.0;
    do {
      run(i);
      ++calls;
      elapsed = Seconds(t0, Clock::now());
    } while (elapsed < settings.min_sample_seconds);
    return elapsed / calls;
  };
  // What the fewer-threads rule compares: a kernel that is not threaded
  // runs one thread whatever Options::threads says.
  hooks.threads_used = [&](size_t i) {
    return attn::GetKernelInfo(candidates[i].kernel).threaded ? shape.threads : 1;
  };
  // A wall-clock probe, so not with a fake timer (whose timings it would
  // be judging).
  if (!fake_timer) hooks.parallel_slowdown = ParallelSlowdown;
  result.tuning = Tune(candidates.size(), hooks, settings.tuner);
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].is_default) {
      result.default_index = int(i);
      break;
    }
  }
  // A timed naive candidate is a better naive figure than the reference run.
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Measurement& m = result.tuning.candidates[i];
    if (candidates[i].kernel == attn::KernelId::kNaive && !m.samples.empty()) {
      result.naive_seconds = m.score;
      result.naive_extrapolated = false;
    }
  }
  result.candidates = std::move(candidates);
  return result;
}

DefaultComparison CompareWithDefault(const TuneShape& shape, int heads, const AttnCandidate& tuned,
                                     int pairs, double min_sample_seconds) {
  DefaultComparison result;
  result.default_candidate = EnumerateCandidates(shape, heads, true, false).front();
  TuningProblem tp(shape, heads, 1);
  auto sample = [&](const AttnCandidate& c) {
    attn::Options options;
    options.kernel = c.kernel;
    options.threads = shape.threads;
    options.tiles = c.tiles;
    options.dot_path = c.dot_path;
    attn::attention(tp.problem, options);  // warm: scratch, OpenMP pool, caches
    int calls = 0;
    const auto t0 = Clock::now();
    double elapsed = 0.0;
    do {
      attn::attention(tp.problem, options);
      ++calls;
      elapsed = Seconds(t0, Clock::now());
    } while (elapsed < min_sample_seconds);
    return elapsed / calls;
  };
  std::vector<double> ratios, tuned_s, default_s;
  for (int i = 0; i < pairs; ++i) {
    double t, d;
    if (i % 2 == 0) {
      t = sample(tuned);
      d = sample(result.default_candidate);
    } else {
      d = sample(result.default_candidate);
      t = sample(tuned);
    }
    ratios.push_back(d / t);
    tuned_s.push_back(t);
    default_s.push_back(d);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  const double flops = ShapeFlops(shape, heads);
  result.median_ratio = median(ratios);
  result.tuned_gflops = flops / median(tuned_s) * 1e-9;
  result.default_gflops = flops / median(default_s) * 1e-9;
  return result;
}

}  // namespace attn_tune
