#include "tools/tune/shape_tuner.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>
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

// Reference work per shape, in naive FLOPs: the whole output when it costs
// less (about 0.1 s at naive's ~4 GFLOP/s), else sampled row blocks.
constexpr double kFullReferenceFlops = 4e8;
// The float64 reference keeps four T_q x T_k double matrices per head.
constexpr double kMaxReferencePairs = double(1 << 21);
// Sampled rows: blocks at the start, middle and end of the queries, where
// query-block edges, causal diagonals and split-KV remainders differ.
constexpr int kSampleBlocks = 3;
// Naive materialises T_q x T_k scores per head; more than this is not run.
constexpr double kNaiveMaxScoreBytes = double(int64_t{1} << 30);

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
  }
};

// The float64 reference on the checked rows, exact[block][head][row][d],
// and the bound a candidate's distance to it must meet.
struct Reference {
  std::vector<RowBlock> blocks;
  std::vector<std::vector<double>> exact;
  double naive_error = 0.0;  // naive's own max |naive - exact|
  double bound = 0.0;
  double seconds = 0.0;  // naive's time for these rows
  double pairs = 0.0;    // visible pairs of these rows, per head
  bool full = false;
};

bool FullReferenceAffordable(const TuneShape& s, int heads) {
  const double pairs = double(s.q_len) * double(s.kv_len);
  const double flops = 4.0 * pairs * double(s.head_dim) * heads;
  return flops <= kFullReferenceFlops && pairs <= kMaxReferencePairs &&
         4.0 * pairs <= kNaiveMaxScoreBytes;
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
    sub.q.data = tp.q.data() + b.begin * s.head_dim;
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
  return ref;
}

// "" when the candidate's output (already in tp.out) matches the reference
// on the checked rows and is finite everywhere, else why not.
std::string CompareWithReference(const TuneShape& s, const TuningProblem& tp, const Reference& ref,
                                 double* max_error) {
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
  if (worst > ref.bound) {
    char why[200];
    std::snprintf(why, sizeof(why),
                  "output is %.3g from the float64 reference at row %lld, over the bound %.3g "
                  "(4x naive's own error %.3g, plus 16 ULPs)",
                  worst, static_cast<long long>(worst_row), ref.bound, ref.naive_error);
    return why;
  }
  *max_error = std::max(*max_error, worst);
  return "";
}

int RelevantFieldsDiffering(const AttnCandidate& c, const attn::Tiles& d) {
  switch (c.kernel) {
    case attn::KernelId::kBlocked:  // walks one panel at a time: no q_block
      return int(c.tiles.kv_block != d.kv_block);
    case attn::KernelId::kStreaming:
      return int(c.tiles.q_block != d.q_block) + int(c.tiles.kv_block != d.kv_block);
    case attn::KernelId::kParallel:
      return int(c.tiles.q_block != d.q_block) + int(c.tiles.kv_block != d.kv_block) +
             int(c.tiles.kv_splits != d.kv_splits);
    default:
      return 0;
  }
}

}  // namespace

std::string TuneShape::Name() const {
  return std::to_string(q_len) + "x" + std::to_string(kv_len) + " d=" + std::to_string(head_dim) +
         (causal ? " causal" : "") + " t=" + std::to_string(threads);
}

std::string AttnCandidate::Label() const {
  const std::string name = attn::KernelName(kernel);
  switch (kernel) {
    case attn::KernelId::kBlocked:
      return name + " kv=" + std::to_string(tiles.kv_block);
    case attn::KernelId::kStreaming:
      return name + " q=" + std::to_string(tiles.q_block) + " kv=" + std::to_string(tiles.kv_block);
    case attn::KernelId::kParallel:
      return name + " q=" + std::to_string(tiles.q_block) + " kv=" + std::to_string(tiles.kv_block) +
             " split=" + std::to_string(tiles.kv_splits);
    default:
      return name;
  }
}

bool NaiveIsCandidate(const TuneShape& shape, int heads) {
  return FullReferenceAffordable(shape, heads);
}

double ShapeFlops(const TuneShape& s, int heads) {
  return 4.0 * VisiblePairs(s, 0, s.q_len) * double(s.head_dim) * double(heads);
}

std::vector<AttnCandidate> EnumerateCandidates(const TuneShape& s, int heads, bool quick,
                                               bool include_naive) {
  using attn::KernelId;
  // What `auto` runs without a table (attn-tune clears any table first).
  attn::Problem shape;
  shape.q_heads = shape.kv_heads = heads;
  shape.q_len = s.q_len;
  shape.kv_len = s.kv_len;
  shape.head_dim = s.head_dim;
  shape.causal = s.causal ? attn::Causal::kBottomRight : attn::Causal::kNone;
  attn::Options auto_options;
  auto_options.threads = s.threads;
  const attn::AutoChoice def = attn::ExplainChoice(shape, auto_options);
  AttnCandidate default_candidate{def.kernel, def.tiles, true, {}};

  // Queries per SIMD panel: the q_block DefaultTiles gives a single query.
  const int panel = attn::DefaultTiles(1, s.kv_len, s.head_dim).q_block;
  const int64_t q_cap = (s.q_len + panel - 1) / panel * panel;
  std::set<int> q_blocks;
  for (int panels : quick ? std::vector<int>{1, 4} : std::vector<int>{1, 2, 4, 8}) {
    q_blocks.insert(int(std::min<int64_t>(int64_t(panels) * panel, q_cap)));
  }
  const std::vector<int> kv_blocks =
      quick ? std::vector<int>{64, 128, 256} : std::vector<int>{32, 64, 128, 256};
  auto splits_for = [&](int q_block) {
    // Split-KV only helps when the (head, query block) items cannot feed
    // every thread; each split keeps >= 64 keys so merging stays cheap.
    const int64_t items = int64_t(heads) * ((s.q_len + q_block - 1) / q_block);
    std::vector<int> splits{1};
    if (items >= 2 * int64_t(s.threads)) return splits;
    for (int n = 2; n <= (quick ? 8 : 16) && int64_t(n) * 64 <= s.kv_len; n *= 2) splits.push_back(n);
    return splits;
  };

  std::vector<AttnCandidate> all;
  auto add = [&](KernelId kernel, int q_block, int kv_block, int kv_splits) {
    AttnCandidate c{kernel, attn::Tiles{q_block, kv_block, kv_splits}, false, {}};
    all.push_back(c);
  };
  if (include_naive) add(KernelId::kNaive, def.tiles.q_block, def.tiles.kv_block, 1);
  // Single-threaded kernels compete at every thread count: for small shapes
  // the cost of waking threads exceeds the work.
  for (int kv : kv_blocks) add(KernelId::kBlocked, def.tiles.q_block, kv, def.tiles.kv_splits);
  for (int qb : q_blocks) {
    for (int kv : kv_blocks) add(KernelId::kStreaming, qb, kv, def.tiles.kv_splits);
  }
  if (s.threads > 1) {
    for (int qb : q_blocks) {
      for (int kv : kv_blocks) {
        for (int sp : splits_for(qb)) add(KernelId::kParallel, qb, kv, sp);
      }
    }
  }
  // Drop duplicates of the default, and of each other in the fields the
  // kernel uses.
  auto key = [](const AttnCandidate& c) {
    const attn::Tiles& t = c.tiles;
    switch (c.kernel) {
      case KernelId::kNaive: return std::make_tuple(int(c.kernel), 0, 0, 0);
      case KernelId::kBlocked: return std::make_tuple(int(c.kernel), 0, t.kv_block, 0);
      case KernelId::kStreaming: return std::make_tuple(int(c.kernel), t.q_block, t.kv_block, 0);
      default: return std::make_tuple(int(c.kernel), t.q_block, t.kv_block, t.kv_splits);
    }
  };
  std::set<std::tuple<int, int, int, int>> seen{key(default_candidate)};
  std::vector<AttnCandidate> unique;
  for (const AttnCandidate& c : all) {
    if (seen.insert(key(c)).second) unique.push_back(c);
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
  return m.samples.empty() ? 0.0 : m.best;
}

std::map<std::string, double> ShapeResult::KernelBestSeconds() const {
  std::map<std::string, double> best;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Measurement& m = tuning.candidates[i];
    if (m.samples.empty() || m.verdict == Verdict::kWrong) continue;
    const std::string name = attn::KernelName(candidates[i].kernel);
    const auto it = best.find(name);
    if (it == best.end() || m.best < it->second) best[name] = m.best;
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

  auto run = [&](size_t i) {
    const AttnCandidate& c = candidates[i];
    attn::Options options;
    options.kernel = c.kernel;
    options.threads = shape.threads;
    options.tiles = c.tiles;
    if (c.run) {
      c.run(tp.problem, options);
    } else {
      attn::attention(tp.problem, options);
    }
  };
  // Calls per timed sample, fixed from the first sample of the shape so
  // that every candidate is timed the same way.
  int calls_per_sample = 0;

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
    outcome.reason = CompareWithReference(shape, tp, ref, &result.max_error_seen);
    outcome.correct = outcome.reason.empty();
    return outcome;
  };
  hooks.time_once = [&](size_t i) {
    if (fake_timer) return fake_timer(candidates[i]);
    if (calls_per_sample == 0) {
      const auto t0 = Clock::now();
      run(i);
      const double once = std::max(1e-7, Seconds(t0, Clock::now()));
      calls_per_sample = int(std::clamp(std::ceil(settings.min_sample_seconds / once), 1.0, 1e5));
    }
    const auto t0 = Clock::now();
    for (int n = 0; n < calls_per_sample; ++n) run(i);
    return Seconds(t0, Clock::now()) / calls_per_sample;
  };
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
      result.naive_seconds = m.best;
      result.naive_extrapolated = false;
    }
  }
  result.candidates = std::move(candidates);
  return result;
}

}  // namespace attn_tune
