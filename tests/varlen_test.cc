// attn::VarlenAttention (attn/serving.h): every kernel variant of the table
// on every supported target against the float64 reference (each sequence a
// dense problem over its packed rows), within the kernels' bound; ragged and
// empty sequences, every causal alignment, GQA, element types, strided
// packing, one long sequence next to short ones (key splits over threads);
// the equality with a loop of dense calls; the bound failing for a wrong
// result; and every invalid field named, with nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/serving_reference.h"
#include "tests/serving_test_util.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

struct VarlenCase {
  std::string name;
  std::vector<int> tq, tk;  // per sequence
  int64_t q_heads = 4, kv_heads = 2, d = 24, dv = 0;
  Causal causal = Causal::kBottomRight;
  DType q_type = DType::kF32, k_type = DType::kF32, v_type = DType::kF32,
        out_type = DType::kF32;
  int64_t token_pad = 0;  // extra elements after each packed q/k/v token
  ServingModifiers mods;
  uint64_t seed = 1;
};
void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

struct OwnedVarlen {
  VarlenCase c;
  std::vector<int32_t> cu_q, cu_k;
  Buffer q, k, v, out;
  std::vector<float> lse;
  ServingModifierArrays mod_arrays;
  VarlenProblem p;

  void Clear() {
    for (size_t i = 0; i < out.f.size(); ++i) out.Set(i, kServingSentinel);
    std::fill(lse.begin(), lse.end(), kServingSentinel);
  }
};

std::vector<int32_t> Cumulative(const std::vector<int>& lens) {
  std::vector<int32_t> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  return cu;
}

// Dense packed tensors ([total, heads, cols], each token's row padded by
// token_pad elements), filled with uniform values rounded to their types.
void MakeVarlen(const VarlenCase& c, OwnedVarlen& o) {
  o.c = c;
  const int64_t dv = c.dv ? c.dv : c.d;
  o.cu_q = Cumulative(c.tq);
  o.cu_k = Cumulative(c.tk);
  const int64_t total_q = o.cu_q.back(), total_k = o.cu_k.back();
  std::mt19937_64 rng(c.seed);
  const int64_t q_row = c.q_heads * c.d + c.token_pad, k_row = c.kv_heads * c.d + c.token_pad,
                v_row = c.kv_heads * dv + c.token_pad;
  o.q.Random(c.q_type, size_t(total_q * q_row), rng, 1.0f);
  o.k.Random(c.k_type, size_t(total_k * k_row), rng, 1.0f);
  o.v.Random(c.v_type, size_t(total_k * v_row), rng, 1.0f);
  o.out.Resize(c.out_type, size_t(total_q * c.q_heads * dv), kServingSentinel);
  o.lse.assign(size_t(total_q * c.q_heads), kServingSentinel);
  VarlenProblem& p = o.p;
  p.batch = int64_t(c.tq.size());
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.d;
  if (c.dv) p.value_dim = c.dv;
  p.cu_seqlens_q = o.cu_q.data();
  p.cu_seqlens_k = o.cu_k.data();
  p.q = {o.q.data(), q_row, c.d, c.q_type};
  p.k = {o.k.data(), k_row, c.d, c.k_type};
  p.v = {o.v.data(), v_row, dv, c.v_type};
  p.out = {o.out.data(), c.q_heads * dv, dv, c.out_type};
  p.lse = {o.lse.data(), c.q_heads, 1};
  p.causal = c.causal;
  o.mod_arrays.Apply(c.mods, p.batch, c.q_heads, c.seed, p);
}

// Every V value any sequence can read (for the bound's floor).
std::vector<float> AllV(const OwnedVarlen& o) {
  std::vector<float> v;
  for (size_t i = 0; i < o.v.f.size(); ++i) {
    if (std::isfinite(o.v.Get(i))) v.push_back(o.v.Get(i));
  }
  return v;
}

Errors RunVarlen(OwnedVarlen& o, const reference::PackedResult& ref, const Options& options) {
  o.Clear();
  VarlenAttention(o.p, options);
  return PackedErrors(o.out, o.lse, ref);
}

bool AllBf16(const VarlenCase& c) {
  return c.q_type == DType::kBF16 && c.k_type == DType::kBF16 && c.v_type == DType::kBF16;
}

class VarlenTest : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(VarlenTest, EveryVariantOnEveryTargetIsWithinTheBound) {
  OwnedVarlen o;
  MakeVarlen(GetParam(), o);
  const reference::PackedResult ref = reference::VarlenAttention(o.p);
  const int64_t dv = o.p.ValueDim();
  ExpectServingVariantsWithinBound(
      [&](const Options& options) { return RunVarlen(o, ref, options); },
      DenseNaiveErrors(o.p, ref),
      [&](const Errors& naive) {
        return PackedBound(naive, ref, AllV(o), dv, o.c.out_type, AllBf16(o.c));
      });
}

std::vector<VarlenCase> Cases() {
  std::vector<VarlenCase> cases;
  uint64_t seed = 700;
  auto add = [&](VarlenCase c) {
    c.seed = seed++;
    cases.push_back(c);
  };
  // Ragged, with an empty sequence (T_q = 0), a sequence without keys
  // (T_k = 0: output 0, lse -inf), T_q > T_k (bottom-right: fully masked
  // first rows) and a long-ish one; every causal alignment; d != d_v.
  const std::vector<int> tq{5, 0, 1, 37, 3, 64, 10};
  const std::vector<int> tk{9, 4, 0, 37, 100, 70, 4};
  for (Causal causal : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
    VarlenCase c;
    c.name = "ragged_causal" + std::to_string(int(causal));
    c.tq = tq;
    c.tk = tk;
    c.dv = 16;
    c.causal = causal;
    add(c);
  }
  {
    VarlenCase c;  // strided packing: every token row padded
    c.name = "ragged_padded_tokens";
    c.tq = tq;
    c.tk = tk;
    c.token_pad = 5;
    add(c);
  }
  {
    VarlenCase c;  // all bf16 (the bf16 dot-product path where it runs)
    c.name = "ragged_bf16";
    c.tq = tq;
    c.tk = tk;
    c.q_type = c.k_type = c.v_type = c.out_type = DType::kBF16;
    add(c);
  }
  {
    VarlenCase c;  // f32 queries over an f16 cache, bf16 output
    c.name = "ragged_f32_f16_f16_bf16";
    c.tq = tq;
    c.tk = tk;
    c.k_type = c.v_type = DType::kF16;
    c.out_type = DType::kBF16;
    add(c);
  }
  {
    VarlenCase c;  // decode of a GQA model: one query per sequence, 8 heads per kv head
    c.name = "decode_gqa8";
    c.tq = {1, 1, 1, 1};
    c.tk = {1, 300, 17, 1000};
    c.q_heads = 8;
    c.kv_heads = 1;
    c.d = 32;
    add(c);
  }
  {
    // One long sequence next to short ones: with threads its keys are
    // split into parts (8192 keys x 2 heads x d 64 is ~4 MFLOP, four times
    // the executor's minimum per item), merged by log-sum-exp.
    VarlenCase c;
    c.name = "long_next_to_short";
    c.tq = {1, 1, 2, 1, 1};
    c.tk = {8192, 3, 5, 1, 20};
    c.q_heads = 2;
    c.kv_heads = 1;
    c.d = 64;
    add(c);
  }
  {
    // Chunked prefill next to decode, many query rows: with threads the
    // long piece's rows are cut into blocks.
    VarlenCase c;
    c.name = "prefill_next_to_decode";
    c.tq = {300, 1, 1, 40};
    c.tk = {700, 50, 900, 40};
    c.q_heads = 2;
    c.kv_heads = 2;
    c.d = 64;
    add(c);
  }
  // Score modifiers, each sequence on its own lengths (its diagonal, its
  // window, its ALiBi distances; the sinks in every row's normaliser).
  using Alibi = ServingModifiers::Alibi;
  for (Causal causal : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
    VarlenCase c;  // a two-sided window (its right side only matters without causal)
    c.name = "window_ragged_causal" + std::to_string(int(causal));
    c.tq = tq;
    c.tk = tk;
    c.dv = 16;
    c.causal = causal;
    c.mods.window = {6, 2};
    add(c);
  }
  {
    VarlenCase c;  // soft-capping (scaled scores reach ~1: 0.25 bends them) and shared slopes
    c.name = "softcap_alibi_shared";
    c.tq = tq;
    c.tk = tk;
    c.causal = Causal::kNone;
    c.mods.softcap = 0.25f;
    c.mods.alibi = Alibi::kShared;
    add(c);
  }
  {
    VarlenCase c;  // per-sequence slopes, top-left diagonals
    c.name = "alibi_per_sequence_topleft";
    c.tq = tq;
    c.tk = tk;
    c.causal = Causal::kTopLeft;
    c.mods.alibi = Alibi::kPerSequence;
    add(c);
  }
  {
    // Sinks: a sequence without keys and bottom-right rows that see none
    // (T_q > T_k; and rows a window of 3 leaves without keys) get output
    // 0 and lse sink[h].
    VarlenCase c;
    c.name = "sinks_window_masked_rows";
    c.tq = tq;
    c.tk = tk;
    c.mods.window = {3, -1};
    c.mods.sinks = true;
    add(c);
  }
  {
    // A sliding window over one long sequence next to short ones: with
    // threads its ~6000 visible keys (from key 2191, not a part boundary)
    // are split into parts, the sinks joining part 0 only.
    VarlenCase c;
    c.name = "long_window_sinks_alibi_split";
    c.tq = {1, 1, 2, 1, 1};
    c.tk = {8192, 3, 5, 1, 20};
    c.q_heads = 2;
    c.kv_heads = 1;
    c.d = 64;
    c.mods.window = {6000, 0};
    c.mods.sinks = true;
    c.mods.alibi = Alibi::kPerSequence;
    add(c);
  }
  {
    // Chunked prefill with a window: the row blocks of the long piece each
    // start at their own first visible key.
    VarlenCase c;
    c.name = "prefill_window_softcap_sinks";
    c.tq = {300, 1, 1, 40};
    c.tk = {700, 50, 900, 40};
    c.q_heads = 2;
    c.kv_heads = 2;
    c.d = 64;
    c.mods.window = {100, 0};
    c.mods.softcap = 0.3f;
    c.mods.sinks = true;
    add(c);
    // The same without causal, a two-sided window and per-sequence slopes:
    // each row block's diagonal is the sequence's, not its own block's.
    c.name = "prefill_two_sided_window_alibi_no_causal";
    c.causal = Causal::kNone;
    c.mods.window = {100, 20};
    c.mods.alibi = ServingModifiers::Alibi::kPerSequence;
    add(c);
  }
  {
    VarlenCase c;  // every modifier at once, all bf16
    c.name = "ragged_bf16_every_modifier";
    c.tq = tq;
    c.tk = tk;
    c.q_type = c.k_type = c.v_type = c.out_type = DType::kBF16;
    c.mods.window = {20, 1};
    c.mods.softcap = 0.25f;
    c.mods.alibi = Alibi::kPerSequence;
    c.mods.sinks = true;
    add(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, VarlenTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// On one thread each sequence runs as its own dense problem would, with the
// same kernel and tiles: the varlen call equals a loop of dense
// attn::attention calls on the packed rows bit for bit; with the score
// modifiers too (each dense call given its sequence's slopes), those that
// leave every key tile where the dense call has it: softcap, ALiBi, sinks
// and a window's right side. (A window's left side starts the varlen
// call's keys at the first visible one, so its tiles, and the rounding of
// its sums, differ from a dense call's: the float64 cases check it.)
TEST(Varlen, EqualsALoopOfDenseCallsBitForBit) {
  for (bool modifiers : {false, true}) {
    VarlenCase c;
    c.name = "loop";
    c.tq = {5, 1, 37, 64, 3};
    c.tk = {9, 200, 37, 70, 1};
    c.dv = 16;
    if (modifiers) {
      c.causal = Causal::kNone;
      c.mods.window = {-1, 3};
      c.mods.softcap = 0.25f;
      c.mods.alibi = ServingModifiers::Alibi::kPerSequence;
      c.mods.sinks = true;
    }
    OwnedVarlen o;
    MakeVarlen(c, o);
    const int64_t dv = 16;
    for (KernelId kernel : {KernelId::kStreaming, KernelId::kBlocked, KernelId::kNaive}) {
      SCOPED_TRACE(std::string(KernelName(kernel)) + (modifiers ? " modifiers" : ""));
      Options options;
      options.kernel = kernel;
      options.threads = 1;
      o.Clear();
      VarlenAttention(o.p, options);
      const Buffer got = o.out;
      const std::vector<float> got_lse = o.lse;
      o.Clear();
      for (size_t b = 0; b < c.tq.size(); ++b) {
        Problem dense;
        dense.q_heads = c.q_heads;
        dense.kv_heads = c.kv_heads;
        dense.head_dim = c.d;
        dense.value_dim = dv;
        dense.q_len = c.tq[b];
        dense.kv_len = c.tk[b];
        dense.causal = c.causal;
        dense.window = o.p.window;
        dense.softcap = o.p.softcap;
        dense.sinks = o.p.sinks;
        if (o.p.alibi_slopes.data) {
          dense.alibi_slopes = {o.p.alibi_slopes.data + int64_t(b) * o.p.alibi_slopes.batch_stride,
                                0};
        }
        const int64_t q0 = o.cu_q[b], k0 = o.cu_k[b];
        dense.q = {static_cast<const float*>(o.p.q.data) + q0 * o.p.q.token_stride, 0,
                   o.p.q.head_stride, o.p.q.token_stride, DType::kF32};
        dense.k = {static_cast<const float*>(o.p.k.data) + k0 * o.p.k.token_stride, 0,
                   o.p.k.head_stride, o.p.k.token_stride, DType::kF32};
        dense.v = {static_cast<const float*>(o.p.v.data) + k0 * o.p.v.token_stride, 0,
                   o.p.v.head_stride, o.p.v.token_stride, DType::kF32};
        dense.out = {o.out.f.data() + q0 * c.q_heads * dv, 0, dv, c.q_heads * dv, DType::kF32};
        dense.lse = {o.lse.data() + q0 * c.q_heads, 0, 1, c.q_heads};
        attention(dense, options);
      }
      EXPECT_EQ(0, std::memcmp(got.f.data(), o.out.f.data(), got.f.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(got_lse.data(), o.lse.data(), got_lse.size() * sizeof(float)));
    }
  }
}

// The bound sees a wrong modifier: a window one key narrower than asked,
// or sequence 0's slopes used for every sequence (a batch stride dropped),
// for every kernel.
TEST(Varlen, BoundFailsForAWindowOffByOneOrSlopesOfTheWrongSequence) {
  VarlenCase c;
  c.name = "wrong_modifiers";
  c.tq = {5, 2, 37, 30, 3};
  c.tk = {9, 20, 37, 70, 10};
  c.mods.window = {4, -1};
  c.mods.alibi = ServingModifiers::Alibi::kPerSequence;
  OwnedVarlen o;
  MakeVarlen(c, o);
  const reference::PackedResult ref = reference::VarlenAttention(o.p);
  const Bound bound =
      PackedBound(DenseNaiveErrors(o.p, ref), ref, AllV(o), o.p.ValueDim(), c.out_type, false);
  for (int wrong = 0; wrong < 2; ++wrong) {
    VarlenProblem given = o.p;
    if (wrong == 0) o.p.window.left = 3;
    if (wrong == 1) o.p.alibi_slopes.batch_stride = 0;
    for (const KernelInfo& k : Kernels()) {
      Options options;
      options.kernel = k.id;
      options.threads = 2;
      const Errors e = RunVarlen(o, ref, options);
      EXPECT_GT(e.out, bound.out) << k.name << (wrong == 0 ? " window" : " slopes");
    }
    o.p = given;
  }
}

// The bound is tight enough to see a wrong result: offsets off by one for
// one sequence boundary (sequence 3 loses its last key to sequence 4) must
// exceed it, for every kernel.
TEST(Varlen, BoundFailsForAnOffByOneOffset) {
  VarlenCase c;
  c.name = "off_by_one";
  c.tq = {5, 2, 37, 30, 3};
  c.tk = {9, 20, 37, 70, 10};
  c.causal = Causal::kNone;
  OwnedVarlen o;
  MakeVarlen(c, o);
  const reference::PackedResult ref = reference::VarlenAttention(o.p);
  const Bound bound =
      PackedBound(DenseNaiveErrors(o.p, ref), ref, AllV(o), o.p.ValueDim(), c.out_type, false);
  std::vector<int32_t> wrong = o.cu_k;
  wrong[4] -= 1;
  o.p.cu_seqlens_k = wrong.data();
  for (const KernelInfo& k : Kernels()) {
    Options options;
    options.kernel = k.id;
    options.threads = 2;
    const Errors e = RunVarlen(o, ref, options);
    EXPECT_GT(e.out, bound.out) << k.name;
  }
}

// Every invalid field is named with its value, and nothing is written.
TEST(Varlen, ErrorsNameTheFieldAndWriteNothing) {
  VarlenCase c;
  c.name = "errors";
  c.tq = {3, 2};
  c.tk = {4, 5};
  OwnedVarlen o;
  MakeVarlen(c, o);
  auto expect = [&](const std::string& field, const std::string& value,
                    const std::function<void(VarlenProblem&)>& edit, Options options = {}) {
    SCOPED_TRACE(field);
    VarlenProblem bad = o.p;
    edit(bad);
    o.Clear();
    ExpectError(field, value, [&] { VarlenAttention(bad, options); });
    for (size_t i = 0; i < o.out.f.size(); ++i) ASSERT_EQ(o.out.Get(i), kServingSentinel);
    for (float x : o.lse) ASSERT_EQ(x, kServingSentinel);
  };
  std::vector<int32_t> starts_at_one{1, 3, 5}, decreasing_k{0, 5, 4};
  expect("batch", "0", [](VarlenProblem& p) { p.batch = 0; });
  expect("kv_heads", "3", [](VarlenProblem& p) { p.kv_heads = 3; });
  expect("head_dim", "0", [](VarlenProblem& p) { p.head_dim = 0; });
  expect("scale", "inf", [](VarlenProblem& p) { p.scale = std::numeric_limits<float>::infinity(); });
  expect("cu_seqlens_q", "null", [](VarlenProblem& p) { p.cu_seqlens_q = nullptr; });
  expect("cu_seqlens_q[0]", "1", [&](VarlenProblem& p) { p.cu_seqlens_q = starts_at_one.data(); });
  expect("cu_seqlens_k[2]", "4", [&](VarlenProblem& p) { p.cu_seqlens_k = decreasing_k.data(); });
  expect("max_seqlen_k", "4", [&](VarlenProblem& p) { p.max_seqlen_k = 4; });
  expect("max_seqlen_q", "-1", [&](VarlenProblem& p) { p.max_seqlen_q = -1; });
  expect("q.dtype", "7", [](VarlenProblem& p) { p.q.dtype = static_cast<DType>(7); });
  expect("q.data", "null", [](VarlenProblem& p) { p.q.data = nullptr; });
  expect("k.token_stride", "-1", [](VarlenProblem& p) { p.k.token_stride = -1; });
  expect("out", "", [](VarlenProblem& p) { p.out.token_stride = 0; });  // two tokens, one row
  expect("out", "", [&](VarlenProblem& p) { p.out.data = o.q.data(); });  // overlaps q
  expect("lse", "", [&](VarlenProblem& p) { p.lse.data = o.out.f.data(); });  // overlaps out
  const float nan_sink[4] = {0.0f, std::nanf(""), 0.0f, 0.0f};
  const float slopes[8] = {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
  expect("window.left", "-2", [](VarlenProblem& p) { p.window.left = -2; });
  expect("window.right", "-3", [](VarlenProblem& p) { p.window.right = -3; });
  expect("softcap", "-1", [](VarlenProblem& p) { p.softcap = -1.0f; });
  expect("sinks.size", "3", [&](VarlenProblem& p) { p.sinks = {nan_sink, 3}; });
  expect("sinks[1]", "nan", [&](VarlenProblem& p) { p.sinks = {nan_sink, 4}; });
  expect("alibi_slopes.batch_stride", "2", [&](VarlenProblem& p) { p.alibi_slopes = {slopes, 2}; });
  Options bad_threads;
  bad_threads.threads = -1;
  expect("threads", "-1", [](VarlenProblem&) {}, bad_threads);
}

// Options::round_inputs_to_bf16 equals the call on bf16 copies made by hand.
TEST(Varlen, RoundInputsToBf16EqualsTheCallOnBf16Copies) {
  VarlenCase c;
  c.name = "round";
  c.tq = {7, 1, 20};
  c.tk = {7, 40, 33};
  OwnedVarlen given, rounded;
  MakeVarlen(c, given);
  c.q_type = c.k_type = c.v_type = DType::kBF16;
  MakeVarlen(c, rounded);  // same seed, same values, rounded to bf16
  Options round;
  round.round_inputs_to_bf16 = true;
  round.threads = 1;
  Options plain;
  plain.threads = 1;
  given.Clear();
  rounded.Clear();
  VarlenAttention(given.p, round);
  VarlenAttention(rounded.p, plain);
  EXPECT_EQ(given.out.f, rounded.out.f);
  EXPECT_EQ(given.lse, rounded.lse);
}

}  // namespace
}  // namespace attn::test
