// Score modifiers (attn.h "Score modifiers": sliding window, soft-capping,
// ALiBi slopes, attention sinks): validation, the naive kernel against the
// float64 reference for each modifier alone and all together on ragged,
// GQA, causal (both alignments), masked, bf16 and strided problems, the lse
// and merge convention of sinks, and the dispatch rule (the SIMD rows
// decline modified problems, auto runs naive).
//
// The bound. The naive kernel is float32 scalar code over the same stages
// as the reference: its error on a row is that of d-term dot products, one
// tanh and one ALiBi product per score, a T_k-term softmax and a T_k-term
// mix, each a few float32 roundings relative to magnitudes of at most
// |scale·q·k| <= d·scale (entries in [-1, 1]) and |V| <= 1; on these shapes
// (d <= 64, T_k <= 97, slopes <= 0.5, so |bias| <= 48) that is below 2e-5
// (measured: under 3e-6). kBound = 1e-4 leaves a margin of ~5x and is still
// two orders of magnitude below what a window shifted by one key, a cap
// applied to the unscaled score, an ALiBi distance off by one or a dropped
// sink change (ModifiersBound.FailsForAnOffByOneInEachModifier checks that).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/dot_path.h"
#include "dispatch/kernel_table.h"
#include "reference/reference.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr double kBound = 1e-4;
constexpr float kInf = std::numeric_limits<float>::infinity();

// The modifiers of a case, with their arrays.
struct Modifiers {
  std::string name;
  Window window;
  float softcap = 0.0f;
  bool alibi = false, sinks = false;
  bool alibi_per_batch = false;
};

struct Modified {
  OwnedProblem owned;
  std::vector<float> slopes, sinks;
};

Modified Make(const Shape& shape, const Modifiers& m) {
  Modified x{MakeProblem(shape), {}, {}};
  Problem& p = x.owned.problem;
  p.window = m.window;
  p.softcap = m.softcap;
  if (m.alibi) {
    // ALiBi's geometric slopes 2^(-8(h+1)/H), and a second batch's scaled.
    const int64_t per = p.q_heads, batches = m.alibi_per_batch ? p.batch : 1;
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t h = 0; h < per; ++h) {
        x.slopes.push_back(float((b + 1) * std::exp2(-8.0 * double(h + 1) / double(per))) / 2);
      }
    p.alibi_slopes = {x.slopes.data(), m.alibi_per_batch ? per : 0};
  }
  if (m.sinks) {
    for (int64_t h = 0; h < p.q_heads; ++h) x.sinks.push_back(h % 3 == 2 ? -kInf : 0.5f * float(h) - 1);
    p.sinks = {x.sinks.data(), p.q_heads};
  }
  return x;
}

std::vector<Modifiers> AllModifiers() {
  std::vector<Modifiers> out;
  Modifiers m;
  m.name = "window_left5";
  m.window = {5, -1};
  out.push_back(m);
  m = {};
  m.name = "window_4_2";
  m.window = {4, 2};
  out.push_back(m);
  m = {};
  // Wider than a panel (up to 32 rows): keys every row of a panel sees lie
  // between the two edges that WindowPanelTile masks, and are not touched.
  m.name = "window_45_35";
  m.window = {45, 35};
  out.push_back(m);
  m = {};
  m.name = "window_right0";
  m.window = {-1, 0};
  out.push_back(m);
  m = {};
  m.name = "softcap";
  m.softcap = 1.5f;
  out.push_back(m);
  m = {};
  m.name = "alibi";
  m.alibi = true;
  out.push_back(m);
  m = {};
  m.name = "alibi_per_batch";
  m.alibi = m.alibi_per_batch = true;
  out.push_back(m);
  m = {};
  m.name = "sinks";
  m.sinks = true;
  out.push_back(m);
  m = {};
  m.name = "all";
  m.window = {7, 3};
  m.softcap = 2.0f;
  m.alibi = m.sinks = true;
  out.push_back(m);
  return out;
}

std::vector<Shape> ModifierShapes() {
  auto shape = [](int64_t b, int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d,
                  Causal causal, bool mask, DType type, Layout layout, int64_t pad) {
    Shape s;
    s.batch = b;
    s.q_heads = hq;
    s.kv_heads = hkv;
    s.tq = tq;
    s.tk = tk;
    s.d = d;
    s.dv = d + 3;
    s.causal = causal;
    s.additive_mask = mask;
    s.fully_masked_rows = mask ? 1 : 0;
    s.q_type = s.k_type = s.v_type = type;
    s.layout = layout;
    s.row_padding = pad;
    s.seed = uint64_t(tq * 131 + tk * 7 + d);
    return s;
  };
  return {
      shape(2, 4, 2, 37, 53, 19, Causal::kNone, false, DType::kF32, Layout::kBHTD, 0),
      shape(2, 4, 2, 37, 53, 19, Causal::kBottomRight, true, DType::kF32, Layout::kBTHD, 3),
      shape(1, 3, 3, 41, 29, 33, Causal::kTopLeft, false, DType::kBF16, Layout::kBHTD, 0),
      shape(2, 6, 2, 1, 97, 64, Causal::kBottomRight, false, DType::kF16, Layout::kBHTD, 1),
      // Grouped-query decode with a group wider than the narrow path: the
      // panel path over query heads, each row its own sink.
      shape(1, 40, 1, 1, 70, 32, Causal::kBottomRight, false, DType::kF32, Layout::kBHTD, 0),
  };
}

// Largest |naive - reference| over out and lse (lse: -inf must match).
double NaiveError(Modified& x) {
  const reference::Result ref = reference::Attention(x.owned.problem);
  x.owned.ClearOutputs();
  Options naive;
  naive.kernel = KernelId::kNaive;
  attention(x.owned.problem, naive);
  const Errors e = MaxErrors(x.owned.problem, ref);
  return std::max(e.out, e.lse);
}

TEST(Modifiers, NaiveMatchesTheReferenceForEachModifierAndAllTogether) {
  for (const Shape& s : ModifierShapes()) {
    for (const Modifiers& m : AllModifiers()) {
      SCOPED_TRACE(s.Name() + " " + m.name);
      Modified x = Make(s, m);
      EXPECT_LE(NaiveError(x), kBound);
    }
  }
}

// Each modifier changes the result by far more than the bound when it is
// off by one, so the tests above would catch such a kernel.
TEST(ModifiersBound, FailsForAnOffByOneInEachModifier) {
  // Non-causal (a causal limit would hide a wrong right bound), masked.
  Shape s = ModifierShapes()[1];
  s.causal = Causal::kNone;
  auto moved = [&](const Modifiers& right, const Modifiers& wrong) {
    Modified want = Make(s, right), got = Make(s, wrong);
    const reference::Result ref = reference::Attention(want.owned.problem);
    Options naive;
    naive.kernel = KernelId::kNaive;
    got.owned.ClearOutputs();
    attention(got.owned.problem, naive);
    const Errors e = MaxErrors(got.owned.problem, ref);
    return std::max(e.out, e.lse);
  };
  Modifiers window, window_shifted;
  window.window = {5, 2};
  window_shifted.window = {6, 2};
  EXPECT_GT(moved(window, window_shifted), 10 * kBound) << "window.left off by one";
  window_shifted.window = {5, 3};
  EXPECT_GT(moved(window, window_shifted), 10 * kBound) << "window.right off by one";
  Modifiers cap, cap_wrong;
  cap.softcap = 1.5f;
  cap_wrong.softcap = 1.6f;
  EXPECT_GT(moved(cap, cap_wrong), 10 * kBound) << "softcap";
  Modifiers alibi, no_alibi;
  alibi.alibi = true;
  EXPECT_GT(moved(alibi, no_alibi), 10 * kBound) << "ALiBi dropped";
  Modifiers per_batch = alibi;
  per_batch.alibi_per_batch = true;
  EXPECT_GT(moved(alibi, per_batch), 10 * kBound) << "the second batch's slopes ignored";
  Modifiers sinks, no_sinks;
  sinks.sinks = true;
  EXPECT_GT(moved(sinks, no_sinks), 10 * kBound) << "sinks dropped";
}

// A sink is one virtual key of value 0: splitting the keys into two parts,
// the sink in exactly one of them, and merging them gives the whole
// problem's output and lse (attn.h: lse counts the sink).
TEST(Modifiers, ASinkInExactlyOnePartMergesExactly) {
  Shape s = ModifierShapes()[0];
  Modifiers m;
  m.sinks = true;
  m.alibi = true;
  Modified whole = Make(s, m);
  const reference::Result ref = reference::Attention(whole.owned.problem);
  const Problem& p = whole.owned.problem;
  const int64_t split = 20, dv = p.ValueDim();
  std::vector<float> out[2], lse[2];
  Options naive;
  naive.kernel = KernelId::kNaive;
  for (int part = 0; part < 2; ++part) {
    Problem q = p;
    const int64_t begin = part == 0 ? 0 : split;
    q.kv_len = part == 0 ? split : p.kv_len - split;
    q.k.data = static_cast<const float*>(p.k.data) + begin * p.k.row_stride;
    q.v.data = static_cast<const float*>(p.v.data) + begin * p.v.row_stride;
    if (part == 1) q.sinks = {};  // the sink in exactly one part
    out[part].assign(size_t(p.batch * p.q_heads * p.q_len * dv), 0.0f);
    lse[part].assign(size_t(p.batch * p.q_heads * p.q_len), 0.0f);
    q.out = DenseBHTD(out[part].data(), p.q_heads, p.q_len, dv);
    q.out.batch_stride = p.q_heads * p.q_len * dv;
    q.lse = {lse[part].data(), p.q_heads * p.q_len, p.q_len, 1};
    // ALiBi is relative to the whole problem's diagonal: both parts' bias
    // as an additive mask, so that the split is only over keys.
    q.alibi_slopes = {};
    std::vector<float> bias(size_t(p.batch * p.q_heads * p.q_len * q.kv_len));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_len; ++i)
          for (int64_t j = 0; j < q.kv_len; ++j) {
            const int64_t key = begin + j, diag = i + p.kv_len - p.q_len;
            bias[size_t(((b * p.q_heads + h) * p.q_len + i) * q.kv_len + j)] =
                -whole.slopes[size_t(h)] * float(std::llabs(diag - key));
          }
    q.mask = {bias.data(), p.q_heads * p.q_len * q.kv_len, p.q_len * q.kv_len, q.kv_len, 1};
    attention(q, naive);
  }
  std::vector<float> merged(out[0].size()), merged_lse(lse[0].size());
  MergePart parts[2];
  for (int part = 0; part < 2; ++part) {
    parts[part].out = DenseBHTD(static_cast<const float*>(out[part].data()), p.q_heads, p.q_len, dv);
    parts[part].out.batch_stride = p.q_heads * p.q_len * dv;
    parts[part].lse = {lse[part].data(), p.q_heads * p.q_len, p.q_len, 1};
  }
  MergeProblem mp;
  mp.batch = p.batch;
  mp.q_heads = p.q_heads;
  mp.q_len = p.q_len;
  mp.value_dim = dv;
  mp.parts = parts;
  mp.n_parts = 2;
  mp.out = DenseBHTD(merged.data(), p.q_heads, p.q_len, dv);
  mp.out.batch_stride = p.q_heads * p.q_len * dv;
  mp.lse = {merged_lse.data(), p.q_heads * p.q_len, p.q_len, 1};
  MergeAttention(mp);
  double worst = 0.0;
  for (size_t r = 0; r < merged.size(); ++r) worst = std::max(worst, std::fabs(merged[r] - ref.out[r]));
  for (size_t r = 0; r < merged_lse.size(); ++r) {
    worst = std::max(worst, std::fabs(merged_lse[r] - ref.lse[r]));
  }
  EXPECT_LE(worst, kBound);
}

// Rows whose keys are all hidden (a window of width 0 on the left of the
// first keys, here: every key masked) get output 0 and lse = the sink.
TEST(Modifiers, AFullyMaskedRowWithASinkHasOutputZeroAndLseTheSink) {
  Shape s = ModifierShapes()[0];
  s.additive_mask = true;
  s.fully_masked_rows = 3;
  Modifiers m;
  m.sinks = true;
  Modified x = Make(s, m);
  EXPECT_LE(NaiveError(x), kBound);
  const reference::Result ref = reference::Attention(x.owned.problem);
  bool checked = false;
  for (size_t r = 0; r < ref.lse.size(); ++r) {
    const int64_t h = int64_t(r) / x.owned.problem.q_len % x.owned.problem.q_heads;
    if (std::isfinite(ref.lse[r]) && ref.lse[r] == double(x.sinks[size_t(h)])) checked = true;
  }
  EXPECT_TRUE(checked) << "no fully masked row with a finite sink in the case";
}

// Bad values: attn::Error naming the field and the value, nothing written.
TEST(Modifiers, BadValuesAreErrorsNamingTheField) {
  struct Bad {
    const char* field;
    const char* value;
    void (*set)(Modified&);
  };
  const Bad cases[] = {
      {"window.left", "-2", [](Modified& x) { x.owned.problem.window.left = -2; }},
      {"window.right", "-5", [](Modified& x) { x.owned.problem.window.right = -5; }},
      {"softcap", "nan", [](Modified& x) { x.owned.problem.softcap = std::nanf(""); }},
      {"softcap", "-1", [](Modified& x) { x.owned.problem.softcap = -1.0f; }},
      {"softcap", "inf", [](Modified& x) { x.owned.problem.softcap = kInf; }},
      {"sinks.size", "3", [](Modified& x) { x.owned.problem.sinks.size = 3; }},
      {"sinks[1]", "nan", [](Modified& x) { x.sinks[1] = std::nanf(""); }},
      {"sinks[2]", "inf", [](Modified& x) { x.sinks[2] = kInf; }},
      {"sinks.size", "4", [](Modified& x) { x.owned.problem.sinks.data = nullptr; }},
      {"alibi_slopes.batch_stride", "1",
       [](Modified& x) { x.owned.problem.alibi_slopes.batch_stride = 1; }},
      {"alibi_slopes[3]", "nan", [](Modified& x) { x.slopes[3] = std::nanf(""); }},
  };
  Modifiers m;
  m.alibi = m.sinks = true;
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.field);
    Modified x = Make(ModifierShapes()[0], m);
    bad.set(x);
    x.owned.ClearOutputs();
    const std::vector<float> before = x.owned.out;
    try {
      attention(x.owned.problem);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), bad.field) << e.what();
      EXPECT_EQ(e.value(), bad.value) << e.what();
    }
    EXPECT_EQ(x.owned.out, before) << "written before the error";
  }
}

// Every kernel variant (blocked, streaming and parallel: panel and narrow
// paths, split-KV, ragged tiles, 1 and 2 threads) on every target, against the reference with the naive kernel's bound
// (test_util.h BoundFromNaive), for each modifier and all together.
TEST(Modifiers, EveryKernelAndTargetIsWithinTheNaiveBound) {
  // The float32 kernels: an all-bf16 shape would otherwise take the
  // default dot path (avx512bf16 where it runs, P rounded to bf16), which
  // TheBf16DotProductKernelsComputeThemWithinTheirBound holds to its bound.
  ForceDotPath("widen");
  const std::vector<Variant> variants = KernelVariants();
  for (const Shape& s : ModifierShapes()) {
    for (const Modifiers& m : AllModifiers()) {
      SCOPED_TRACE(s.Name() + " " + m.name);
      Modified x = Make(s, m);
      ExpectVariantsWithinNaiveBound(x.owned, variants);
    }
  }
  ForceDotPath("auto");
}

// Every kernel of the table takes modified problems, and so do the bf16
// dot-product rows (not silently the widened ones); auto computes them.
TEST(Modifiers, EveryRowTakesThem) {
  Modifiers m;
  m.softcap = 1.0f;
  Modified x = Make(ModifierShapes()[0], m);
  for (const KernelInfo& k : Kernels()) {
    EXPECT_TRUE(KernelSupports(k.id, x.owned.problem)) << k.name;
  }
  EXPECT_TRUE(KernelSupports(KernelId::kStreaming, x.owned.problem));
  EXPECT_TRUE(KernelSupports(KernelId::kParallel, x.owned.problem));
  Modified bf = Make(ModifierShapes()[2], m);  // all-bf16
  EXPECT_STRNE(internal::ImplFor(KernelId::kStreaming, bf.owned.problem,
                                 internal::DotPath::kAmxEmulated).path,
               "");
  EXPECT_STRNE(internal::ImplFor(KernelId::kStreaming, bf.owned.problem,
                                 internal::DotPath::kAvx512Bf16Emulated).path,
               "");
  const reference::Result ref = reference::Attention(x.owned.problem);
  x.owned.ClearOutputs();
  attention(x.owned.problem);
  const Errors e = MaxErrors(x.owned.problem, ref);
  EXPECT_LE(std::max(e.out, e.lse), kBound);
  // Without modifiers the table is as before.
  Modified plain = Make(ModifierShapes()[0], Modifiers{});
  EXPECT_TRUE(KernelSupports(KernelId::kStreaming, plain.owned.problem));
}

// The bf16 dot-product kernels (AVX512-BF16 and AMX) compute every
// modifier, through the emulated layers and on AVX3 through the
// instructions where the CPU has them, within the path's bound (test_util.h
// Bf16DotBound): all-bf16 shapes with panels (and, for a window, tiles of
// 16 keys, of which whole ones fall outside a row block's window), the
// narrow path (a GQA decode view), and split-KV over two threads.
TEST(Modifiers, TheBf16DotProductKernelsComputeThemWithinTheirBound) {
  const std::string default_target = CurrentTarget();
  auto bf16 = [](int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d, Causal causal) {
    Shape s;
    s.batch = 1;
    s.q_heads = hq;
    s.kv_heads = hkv;
    s.tq = tq;
    s.tk = tk;
    s.d = d;
    s.dv = d + 1;
    s.causal = causal;
    s.q_type = s.k_type = s.v_type = DType::kBF16;
    s.seed = uint64_t(tq * 17 + tk);
    return s;
  };
  const std::vector<Shape> shapes = {ModifierShapes()[2],
                                     bf16(2, 1, 150, 180, 24, Causal::kBottomRight),
                                     bf16(4, 1, 1, 90, 32, Causal::kBottomRight)};
  // The emulated AMX tiles are ~100x slower than widening: on the default
  // target only (the layer itself is tested on every target in
  // amx_layer_test).
  std::vector<std::pair<std::string, std::vector<std::string>>> paths = {
      {"avx512bf16-emulated", TestTargets()}, {"amx-emulated", {default_target}}};
  for (const std::string& p : SupportedDotPaths()) {
    if (p == "avx512bf16" || p == "amx") paths.push_back({p, {"AVX3"}});
  }
  std::vector<Variant> variants = {MakeVariant("streaming", KernelId::kStreaming, 1),
                                   MakeVariant("streaming/kv16", KernelId::kStreaming, 1,
                                               Tiles{0, 16, 0}),
                                   MakeVariant("parallel/t2/split2", KernelId::kParallel, 2,
                                               Tiles{0, 32, 2})};
  for (const Shape& s : shapes) {
    for (const Modifiers& m : AllModifiers()) {
      Modified x = Make(s, m);
      const reference::Result ref = reference::Attention(x.owned.problem);
      const Bf16DotBound bound = MakeBf16DotBound(x.owned, ref);
      for (const auto& [path, targets] : paths) {
        for (const std::string& target : targets) {
          ForceTarget(target);
          for (const Variant& v : variants) {
            SCOPED_TRACE(s.Name() + " " + m.name + " " + path + " " + target + " " + v.name);
            Options o = v.options;
            o.dot_path = path;
            ASSERT_STRNE(internal::ImplFor(o.kernel, x.owned.problem,
                                           internal::ParseDotPath(path)).path,
                         "");
            x.owned.ClearOutputs();
            attention(x.owned.problem, o);
            EXPECT_EQ(FirstBf16DotViolation(x.owned, ref, bound), "");
          }
        }
      }
      ForceTarget("auto");
    }
  }
}

// attn-tune --explain and AutoChoice::reason name the modifiers, and for a
// window how many keys a row reads.
TEST(Modifiers, TheExplanationNamesThem) {
  Problem p;
  p.q_len = p.kv_len = 8192;
  p.head_dim = 128;
  p.causal = Causal::kBottomRight;
  EXPECT_EQ(ExplainChoice(p).reason.find("score modifiers"), std::string::npos);
  p.window = {512, 0};
  std::string why = ExplainChoice(p).reason;
  EXPECT_NE(why.find("window (left 512, right 0), each row reads at most 513 of the 8192 keys"),
            std::string::npos)
      << why;
  p.window = {-1, 3};
  p.softcap = 30.0f;
  const float sinks[1] = {0.5f};
  p.sinks = {sinks, 1};
  why = ExplainChoice(p).reason;
  EXPECT_NE(why.find("window (left unbounded, right 3); soft-cap 30"), std::string::npos) << why;
  EXPECT_NE(why.find("attention sinks"), std::string::npos) << why;
}

}  // namespace
}  // namespace attn::test
