// Hostile inputs (issue 7): NaN/Inf/denormal/huge values in Q, K, V and the
// mask, odd scales, fully masked rows, misaligned pointers, null pointers,
// sizes whose byte counts overflow and outputs overlapping inputs. Every
// valid case runs on every kernel configuration x every SIMD target this
// CPU supports and is checked by tests/oracle.h against the float64
// reference: NaN exactly where the reference has NaN (but where +-Inf in V
// meets a weight that float64 underflows and float32 may not, that Inf or
// NaN), fully masked rows exactly 0 / -inf, finite values within the
// analytical bound. Invalid cases must throw attn::Error naming the field,
// with nothing written.
// docs/reliability.md lists each case with its outcome.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every kernel of the table with default tiles and with small ragged tiles
// (partial panels, many key tiles: every tail path), the threaded ones with
// OpenMP threads and split-KV (KernelVariants, tests/test_util.h).
std::vector<Variant> Variants() { return KernelVariants(); }

// Element (b, h, r, c) of a tensor of an OwnedProblem, through its strides.
float& At(std::vector<float>& buf, const ConstTensor& t, int64_t b, int64_t h, int64_t r,
          int64_t c) {
  return buf[size_t(b * t.batch_stride + h * t.head_stride + r * t.row_stride + c)];
}

// Runs every variant on every target; each result must pass the oracle.
// Outputs are pre-filled with NaN so that a kernel that reads (accumulates
// into) its output instead of overwriting it is caught too.
void ExpectEveryKernelMatches(OwnedProblem& owned) {
  const Problem& p = owned.problem;
  const reference::Result ref = reference::Attention(p);
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(target + " " + variant.name);
      std::fill(owned.out.begin(), owned.out.end(), kNaN);
      std::fill(owned.lse.begin(), owned.lse.end(), kNaN);
      ASSERT_NO_THROW(attention(p, variant.options));
      const std::string why = oracle::Check(p, ref);
      EXPECT_EQ(why, "") << owned.shape.Name();
    }
  }
  ForceTarget("auto");
}

// Counts of reference rows by kind, to assert that a case really produces
// what it is meant to (NaN rows next to finite rows, and so on).
struct RowKinds {
  int nan = 0, fully_masked = 0, finite = 0, nan_columns_only = 0;
};
RowKinds Kinds(const Problem& p) {
  const reference::Result ref = reference::Attention(p);
  RowKinds k;
  const int64_t dv = p.ValueDim();
  for (size_t row = 0; row < ref.lse.size(); ++row) {
    bool any_nan = false;
    for (int64_t c = 0; c < dv; ++c) any_nan |= std::isnan(ref.out[row * size_t(dv) + size_t(c)]);
    if (std::isnan(ref.lse[row])) {
      ++k.nan;
    } else if (ref.lse[row] == -std::numeric_limits<double>::infinity()) {
      ++k.fully_masked;
    } else if (any_nan) {
      ++k.nan_columns_only;
    } else {
      ++k.finite;
    }
  }
  return k;
}

// The base shape of the value tests: two query heads on one KV head, ragged
// T_q and T_k (partial panels and partial key tiles on every target), odd d
// and d_v (every micro-kernel tail), with lse.
Shape Base(Causal causal, bool mask = false) {
  Shape s;
  s.batch = 1;
  s.q_heads = 2;
  s.kv_heads = 1;
  s.tq = 37;
  s.tk = 53;
  s.d = 19;
  s.dv = 11;
  s.causal = causal;
  s.additive_mask = mask;
  s.seed = 7;
  return s;
}

// With bottom-right causal, T_q 37 and T_k 53, row i sees keys j <= 16 + i:
// key 43 is hidden from rows 0..26 and visible to rows 27..36. Row 27 is
// inside a panel on every target, so one panel holds both hidden and seeing
// rows: rows 24..31 on 8-row panels (EMU128/SSSE3/SSE4), 16..31 on 16-row
// ones (AVX2), 0..31 on 32-row ones (AVX3). (Key 40, seen from row 24 on,
// would split 8-row panels exactly at the boundary.)
constexpr int64_t kLateKey = 43;
constexpr int64_t kFirstRowSeeingLateKey = kLateKey - (53 - 37);  // 27
constexpr int64_t kRowsSeeingLateKey = 37 - kFirstRowSeeingLateKey;  // 10

// ---- NaN / Inf in Q, K, V and the mask -------------------------------------

TEST(Hostile, NaNOrInfInQPoisonsOnlyItsRow) {
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    OwnedProblem o = MakeProblem(Base(Causal::kBottomRight));
    At(o.q, o.problem.q, 0, 1, 5, 3) = bad;  // head 1, row 5
    const RowKinds k = Kinds(o.problem);
    EXPECT_EQ(k.nan, 1);  // +-inf in q: scores of both signs, so +inf - +inf
    EXPECT_EQ(k.finite, 2 * 37 - 1);
    ExpectEveryKernelMatches(o);
  }
}

TEST(Hostile, NaNOrInfInKPoisonsTheRowsThatSeeTheKey) {
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    OwnedProblem o = MakeProblem(Base(Causal::kBottomRight));
    At(o.k, o.problem.k, 0, 0, kLateKey, 2) = bad;
    const RowKinds k = Kinds(o.problem);
    // Rows 27..36 of both heads see the key: NaN, or (+-inf with the
    // sign of q) a -inf score that just removes the key. Rows 0..26 never
    // see it and stay finite.
    EXPECT_GE(k.finite, 2 * kFirstRowSeeingLateKey);
    if (std::isnan(bad)) {
      EXPECT_EQ(k.nan, 2 * kRowsSeeingLateKey);
    }
    ExpectEveryKernelMatches(o);
  }
}

TEST(Hostile, NaNOrInfInVPoisonsOneColumnOfTheRowsThatSeeIt) {
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    OwnedProblem o = MakeProblem(Base(Causal::kNone));
    At(o.v, o.problem.v, 0, 0, 20, 3) = bad;
    const RowKinds k = Kinds(o.problem);
    if (std::isnan(bad)) {
      EXPECT_EQ(k.nan_columns_only, 2 * 37);
    }
    EXPECT_EQ(k.nan, 0);  // lse is untouched by V
    ExpectEveryKernelMatches(o);
  }
}

TEST(Hostile, NaNOrPlusInfInTheMaskPoisonsItsRow) {
  for (float bad : {kNaN, kInf}) {
    SCOPED_TRACE(bad);
    OwnedProblem o = MakeProblem(Base(Causal::kNone, /*mask=*/true));
    o.mask[size_t(3 * 53 + 7)] = bad;  // broadcast mask: row 3 of every head
    EXPECT_EQ(Kinds(o.problem).nan, 2);
    ExpectEveryKernelMatches(o);
  }
}

TEST(Hostile, NaNInTheMaskAtACausallyHiddenKeyIsIgnored) {
  OwnedProblem o = MakeProblem(Base(Causal::kBottomRight, /*mask=*/true));
  o.mask[size_t(3 * 53 + kLateKey)] = kNaN;  // row 3 never sees key 43
  EXPECT_EQ(Kinds(o.problem).nan, 0);
  ExpectEveryKernelMatches(o);
}

TEST(Hostile, MinusInfInTheMaskRemovesKeysAndWholeRows) {
  Shape s = Base(Causal::kBottomRight, /*mask=*/true);
  s.fully_masked_rows = 3;  // rows 0..2 all -inf
  OwnedProblem o = MakeProblem(s);
  const RowKinds k = Kinds(o.problem);
  EXPECT_EQ(k.fully_masked, 2 * 3);
  EXPECT_EQ(k.nan, 0);
  ExpectEveryKernelMatches(o);
}

TEST(Hostile, FullyMaskedRowIsZeroEvenWhenVHoldsNaNAndInf) {
  Shape s = Base(Causal::kNone, /*mask=*/true);
  s.fully_masked_rows = 2;
  OwnedProblem o = MakeProblem(s);
  At(o.v, o.problem.v, 0, 0, 4, 1) = kNaN;
  At(o.v, o.problem.v, 0, 0, 9, 2) = kInf;
  // Rows 0..1 see no key: 0 / -inf, never NaN. Other rows see keys 4 and 9
  // (unless the random mask hid them) and get NaN / Inf in columns 1 / 2.
  ExpectEveryKernelMatches(o);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t c = 0; c < 11; ++c) EXPECT_EQ(At(o.out, o.problem.out, 0, h, i, c), 0.0f);
}

TEST(Hostile, RowsBeforeTheFirstVisibleKeyAreFullyMasked) {
  // Bottom-right causal with T_q > T_k: rows 0..T_q-T_k-1 see no key.
  Shape s = Base(Causal::kBottomRight);
  s.tq = 53;
  s.tk = 37;
  OwnedProblem o = MakeProblem(s);
  EXPECT_EQ(Kinds(o.problem).fully_masked, 2 * 16);
  ExpectEveryKernelMatches(o);
}

// NaN/Inf in V at a key that row i cannot see (causally hidden, removed by
// a -inf mask, or a -inf score from an infinite K): the reference never
// reads such a value, and neither does any kernel. In the SIMD kernels the
// key shares a key tile and a panel with rows that do see it (rows 27..36
// here; see kLateKey for the panel they share with hidden rows on each
// target); they take the NaN/Inf tile path of
// kernels/common/microkernels-inl.h (NonFiniteV).
TEST(Hostile, NonFiniteVAtAMaskedKeyIsNeverRead) {
  for (float bad : {kNaN, kInf, -kInf}) {
    for (const char* hidden_by : {"causal", "mask -inf", "score -inf"}) {
      const std::string how = hidden_by;
      SCOPED_TRACE(how + " " + std::to_string(bad));
      OwnedProblem o = MakeProblem(Base(how == "causal" ? Causal::kBottomRight : Causal::kNone,
                                        /*mask=*/how == "mask -inf"));
      At(o.v, o.problem.v, 0, 0, kLateKey, 3) = bad;
      if (how == "mask -inf") {
        // The rows causality would hide: the same panels mix hidden and
        // seeing rows.
        for (int64_t i = 0; i < kFirstRowSeeingLateKey; ++i) {
          o.mask[size_t(i * 53 + kLateKey)] = -kInf;
        }
      }
      if (how == "score -inf") {
        // Row i's score for the key is -inf where q[i][2] > 0 (the key is
        // removed), +inf where q[i][2] < 0 (the row is NaN).
        At(o.k, o.problem.k, 0, 0, kLateKey, 2) = -kInf;
      }
      const RowKinds k = Kinds(o.problem);
      if (how == "score -inf") {
        EXPECT_GT(k.finite, 10);  // rows that cannot see the key: exact
        EXPECT_GT(k.nan, 10);
      } else {
        EXPECT_EQ(k.nan, 0);
        if (std::isnan(bad)) {
          // Rows 0..26 of both heads exact; rows 27..36 NaN in column 3
          // (unless the random mask also hides the key from them).
          EXPECT_GE(k.finite, 2 * kFirstRowSeeingLateKey);
          EXPECT_GT(k.nan_columns_only, 0);
          EXPECT_EQ(k.finite + k.nan_columns_only, 2 * 37);
          if (how == "causal") {
            EXPECT_EQ(k.nan_columns_only, 2 * kRowsSeeingLateKey);
          }
        }
      }
      ExpectEveryKernelMatches(o);
    }
  }
}

// The per-tile NaN/Inf check must find a value anywhere in the tile: first
// and last key (the last key tile is ragged), first, middle and last value
// column, with d_v below, at and above one vector on every target (11: the
// scalar path on AVX-512, a ragged last vector elsewhere; 37: several
// vectors and a ragged one). A missed value leaks into rows 0..35, which
// cannot see key 52, or row 0, which cannot see key 17.
TEST(Hostile, NonFiniteVIsFoundAnywhereInItsTile) {
  for (int64_t dv : {11, 37}) {
    const std::array<int64_t, 2> cells[] = {{17, 0}, {17, dv - 1}, {40, dv / 2}, {52, 0}, {52, dv - 1}};
    for (const auto& [key, column] : cells) {
      SCOPED_TRACE("dv " + std::to_string(dv) + " V[" + std::to_string(key) + "][" +
                   std::to_string(column) + "]");
      Shape s = Base(Causal::kBottomRight);
      s.dv = dv;
      OwnedProblem o = MakeProblem(s);
      At(o.v, o.problem.v, 0, 0, key, column) = kNaN;
      EXPECT_EQ(Kinds(o.problem).nan_columns_only, 2 * (36 - (key - 17)));
      ExpectEveryKernelMatches(o);
    }
  }
}

// The other side of that rule: a key the row can see is read whatever its
// weight. A mask of -200 gives key 43 a weight of e^-200 in rows 0..26:
// 0 in float32, tiny but not 0 in the reference's float64, where NaN times
// it is NaN. So the kernels must tell an underflowed weight (+0: read) from
// a hidden key's (-0: not read), not merely skip zero weights.
TEST(Hostile, NaNInVAtAVisibleKeyIsReadEvenWhenItsWeightUnderflows) {
  OwnedProblem o = MakeProblem(Base(Causal::kNone, /*mask=*/true));
  At(o.v, o.problem.v, 0, 0, kLateKey, 3) = kNaN;
  for (float& m : o.mask) m = std::isinf(m) ? 0.5f : m;  // every key visible
  for (int64_t i = 0; i < kFirstRowSeeingLateKey; ++i) o.mask[size_t(i * 53 + kLateKey)] = -200.0f;
  const RowKinds k = Kinds(o.problem);
  EXPECT_EQ(k.nan_columns_only, 2 * 37);  // column 3 NaN in every row
  ExpectEveryKernelMatches(o);
}

// The K counterpart. A causally hidden key's K is never read either: rows
// 0..26 stay exact. But the mask is additive (scores + M, as in the
// reference and in PyTorch's attn_mask): a key that a -inf mask removes
// still has its score computed, and NaN + -inf is NaN, so NaN in K there
// makes the row NaN in the reference and in every kernel alike. (+-Inf in
// K gives a +-inf score: +inf + -inf is NaN too, -inf + -inf removes the
// key.) To ignore K and V rows entirely, shorten kv_len or use the causal
// mask; a -inf mask only protects from NaN/Inf in V.
TEST(Hostile, NonFiniteKAtAMaskedKeyFollowsTheReference) {
  for (float bad : {kNaN, kInf, -kInf}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "mask -inf") + " " + std::to_string(bad));
      OwnedProblem o = MakeProblem(Base(causal ? Causal::kBottomRight : Causal::kNone, !causal));
      At(o.k, o.problem.k, 0, 0, kLateKey, 2) = bad;
      if (!causal) {
        for (int64_t i = 0; i < kFirstRowSeeingLateKey; ++i) {
          o.mask[size_t(i * 53 + kLateKey)] = -kInf;
        }
      }
      const RowKinds k = Kinds(o.problem);
      if (causal) {
        EXPECT_GE(k.finite, 2 * kFirstRowSeeingLateKey);  // rows 0..26 never read K[43]
        if (std::isnan(bad)) {
          EXPECT_EQ(k.nan, 2 * kRowsSeeingLateKey);
        }
      } else if (std::isnan(bad)) {
        EXPECT_EQ(k.nan, 2 * 37);  // NaN + -inf: rows 0..26 too
      } else {
        EXPECT_GT(k.nan, 0);  // +inf + -inf among rows 0..26
        EXPECT_GT(k.finite, 0);
      }
      ExpectEveryKernelMatches(o);
    }
  }
}

// The same rules on the streaming and parallel kernels' narrow path (views of
// at most half a panel of rows: decode, a few query rows over a cache), in
// groups of 4 rows. Bottom-right causal, T_k 53, T_q rows: row i sees keys
// j <= 53 - T_q + i, so key 51 is hidden from rows 0..T_q-3 and key 52 from
// rows 0..T_q-2. NaN/Inf in V there, hidden by causality or by a -inf mask,
// never reaches those rows; an underflowed weight (mask -200) still reads
// it; NaN in K at a causally hidden key is never read, and under a -inf
// mask follows the reference (NaN + -inf = NaN).
// T_q 3: one partial group, narrow on every target. T_q 13: groups of 4, 4,
// 4 and 1 rows (the last ragged; rows 11 and 12 see key 51, next to hidden
// rows 8..10), narrow on AVX3 only (16 rows at most); AVX2 runs it as a
// partial 16-row panel and the 8-row targets as one whole and one partial
// panel. Both paths must follow the same rules.
TEST(Hostile, NarrowPathFollowsTheSameNonFiniteRules) {
  for (int64_t tq : {3, 13}) {
    SCOPED_TRACE("T_q " + std::to_string(tq));
    Shape base = Base(Causal::kBottomRight);
    base.tq = tq;
    for (float bad : {kNaN, kInf}) {
      SCOPED_TRACE(std::to_string(bad));
      {
        SCOPED_TRACE("V, causal");
        OwnedProblem o = MakeProblem(base);
        At(o.v, o.problem.v, 0, 0, 52, 3) = bad;
        At(o.v, o.problem.v, 0, 0, 51, 0) = bad;
        if (std::isnan(bad)) {
          // Rows 0..T_q-3 of both heads (3 rows: row 0; 13 rows: 0..10).
          EXPECT_EQ(Kinds(o.problem).finite, 2 * (tq - 2));
        }
        ExpectEveryKernelMatches(o);
      }
      {
        SCOPED_TRACE("V, mask -inf / -200");
        Shape s = base;
        s.causal = Causal::kNone;
        s.additive_mask = true;
        OwnedProblem o = MakeProblem(s);
        for (float& m : o.mask) m = std::isinf(m) ? 0.5f : m;
        At(o.v, o.problem.v, 0, 0, 20, 1) = bad;
        // Rows 0, 3, 6, ...: hidden, exact; rows 1, 4, 7, ...: underflow,
        // read; the others see the key with an ordinary weight. Every whole
        // group of 4 rows mixes hidden and reading rows (13 rows: the
        // ragged group, row 12, is hidden).
        for (int64_t i = 0; i < tq; ++i) {
          if (i % 3 == 0) o.mask[size_t(i * 53 + 20)] = -kInf;
          if (i % 3 == 1) o.mask[size_t(i * 53 + 20)] = -200.0f;
        }
        if (std::isnan(bad)) {
          // The hidden rows of both heads: 3 rows: row 0; 13: 0, 3, 6, 9, 12.
          EXPECT_EQ(Kinds(o.problem).finite, 2 * ((tq + 2) / 3));
        }
        ExpectEveryKernelMatches(o);
      }
      {
        SCOPED_TRACE("K, causal");
        OwnedProblem o = MakeProblem(base);
        At(o.k, o.problem.k, 0, 0, 52, 2) = bad;
        // Rows 0..T_q-2 never read K[52].
        EXPECT_GE(Kinds(o.problem).finite, 2 * (tq - 1));
        ExpectEveryKernelMatches(o);
      }
    }
  }
}

// ---- +-Inf in V at a key whose weight underflows in one precision only -----

// A problem built by hand (one head, float32, no mask): q rows all `q_row`,
// key j `k_rows[j]`, V[j] = (1 + j, 2 + j), scale 1.
struct HandProblem {
  std::vector<float> q, k, v, out;
  Problem problem;
  HandProblem(int64_t tq, const std::vector<std::vector<float>>& k_rows,
              const std::vector<float>& q_row) {
    const int64_t tk = int64_t(k_rows.size()), d = int64_t(q_row.size()), dv = 2;
    // Element by element: GCC 12 warns (-Wstringop-overflow, a false
    // positive) on vector::insert of a range here.
    for (int64_t i = 0; i < tq; ++i)
      for (float x : q_row) q.push_back(x);
    for (const auto& row : k_rows)
      for (float x : row) k.push_back(x);
    for (int64_t j = 0; j < tk; ++j) {
      v.push_back(1.0f + float(j));
      v.push_back(2.0f + float(j));
    }
    out.assign(size_t(tq * dv), kNaN);
    problem.q_len = tq;
    problem.kv_len = tk;
    problem.head_dim = d;
    problem.value_dim = dv;
    problem.scale = 1.0f;
    problem.q = DenseBHTD(q.data(), 1, tq, d);
    problem.k = DenseBHTD(k.data(), 1, tk, d);
    problem.v = DenseBHTD(v.data(), 1, tk, dv);
    problem.out = DenseBHTD(out.data(), 1, tq, dv);
  }
  float& V(int64_t j, int64_t c) { return v[size_t(j * 2 + c)]; }
};

// Every variant, plus the streaming and parallel kernels with one key a
// tile (their running max then grows key by key), on every target: each
// result must pass the oracle; `each(where, out)` sees it too.
void ForEachKernelResult(HandProblem& hp,
                         const std::function<void(const std::string&, const std::vector<float>&)>&
                             each) {
  std::vector<Variant> variants = Variants();
  variants.push_back(MakeVariant("streaming/kv1", KernelId::kStreaming, 1, {0, 1, 0}));
  variants.push_back(MakeVariant("parallel/t2/kv1", KernelId::kParallel, 2, {0, 1, 0}));
  const reference::Result ref = reference::Attention(hp.problem);
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    for (const Variant& variant : variants) {
      const std::string where = target + " " + variant.name;
      SCOPED_TRACE(where);
      std::fill(hp.out.begin(), hp.out.end(), kNaN);
      ASSERT_NO_THROW(attention(hp.problem, variant.options));
      EXPECT_EQ(oracle::Check(hp.problem, ref), "");
      each(where, hp.out);
    }
  }
  ForceTarget("auto");
}

// The oracle's verdict on the kernel output `out` with column `col` of
// every row replaced by `value`.
std::string VerdictWith(HandProblem& hp, const std::vector<float>& out, int64_t col,
                        float value) {
  const reference::Result ref = reference::Attention(hp.problem);
  hp.out = out;
  for (size_t e = size_t(col); e < hp.out.size(); e += 2) hp.out[e] = value;
  return oracle::Check(hp.problem, ref);
}

// Issue 29 (tests/fuzz/corpus/crash-f7833006...): scores of ~1e18 that
// float64 tells apart and float32 does not. q = (1e9, 1), keys (1e9, 0),
// (1e9, -768), (1e9, 0): in float64 key 1 scores 768 below the others, so
// its weight e^-768 underflows to exactly 0, and with V[1][0] = +inf the
// reference's 0 * inf is NaN. In float32 the three scores are the one float
// nearest 1e18 (768 is far below its ulp, 2^36), each weight is 1/3, and
// every kernel gives +inf: the exact result (e^-768 > 0), which the oracle
// accepts in place of the reference's NaN. NaN is accepted too (the
// reference's own answer); a finite value or -inf is not. Nor is +inf where
// the NaN has another cause: NaN in V, or -inf at a key of positive weight.
TEST(Hostile, InfInVAtAKeyWhoseWeightUnderflowsOnlyInFloat64) {
  const std::vector<std::vector<float>> keys = {{1e9f, 0.0f}, {1e9f, -768.0f}, {1e9f, 0.0f}};
  HandProblem hp(/*tq=*/3, keys, {1e9f, 1.0f});
  hp.V(1, 0) = kInf;
  const reference::Result ref = reference::Attention(hp.problem);
  const reference::HeadStages st = reference::Stages(hp.problem, 0, 0);
  ASSERT_EQ(st.weights[1], 0.0);  // row 0, key 1: underflowed in float64
  ASSERT_GT(st.weights[0], 0.4);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isnan(ref.out[size_t(i * 2)]));
    EXPECT_TRUE(std::isfinite(ref.out[size_t(i * 2 + 1)]));
  }
  std::vector<float> kernel_out;
  ForEachKernelResult(hp, [&](const std::string&, const std::vector<float>& out) {
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(out[size_t(i * 2)], kInf) << "row " << i;
      EXPECT_TRUE(std::isfinite(out[size_t(i * 2 + 1)])) << "row " << i;
    }
    kernel_out = out;
  });
  ASSERT_FALSE(kernel_out.empty());
  EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kInf), "");
  EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kNaN), "");
  for (float wrong : {-kInf, 1.0f, 3.0f, 3.4e38f, -3.4e38f}) {
    SCOPED_TRACE(wrong);
    EXPECT_NE(VerdictWith(hp, kernel_out, 0, wrong), "");
  }
  {
    SCOPED_TRACE("NaN in V[1][0]: NaN in every precision");
    hp.V(1, 0) = kNaN;
    EXPECT_NE(VerdictWith(hp, kernel_out, 0, kInf), "");
    EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kNaN), "");
    hp.V(1, 0) = kInf;
  }
  {
    SCOPED_TRACE("-inf in V[0][0], weight 1/2: inf - inf");
    hp.V(0, 0) = -kInf;
    EXPECT_NE(VerdictWith(hp, kernel_out, 0, kInf), "");
    EXPECT_NE(VerdictWith(hp, kernel_out, 0, -kInf), "");
    EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kNaN), "");
    ForEachKernelResult(hp, [&](const std::string&, const std::vector<float>& out) {
      for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(out[size_t(i * 2)])) << "row " << i;
    });
  }
}

// The same at ordinary magnitudes, where float32's scores are exact: key j
// scores 80 j (q = 1, k_j = 80 j, 12 keys), V[0][0] = +inf. Key 0's weight is
// e^-880: 0 in float64 (reference NaN) and in a float32 e^(s - max) alike,
// so the naive and blocked kernels and the default tiles give NaN. But with
// one key a tile the streaming and parallel kernels' running max grows by
// 80 at a time: key 0 enters with weight 1, and each rescale e^-80 > 0 keeps
// inf * e^-80 = inf. Both are accepted. A single step of 200 on the way up
// (scores 0, 80, 160, 360, ...) makes a rescale e^-200 = 0 in float32 on
// every kernel and tiling: NaN everywhere, and the oracle rejects +inf.
TEST(Hostile, InfInVSurvivesTileRescalesThatUnderflowInFloat64) {
  for (int64_t tq : {1, 20}) {  // the narrow path; panels on every target
    SCOPED_TRACE("T_q " + std::to_string(tq));
    for (float jump : {80.0f, 200.0f}) {
      SCOPED_TRACE("jump " + std::to_string(jump));
      std::vector<std::vector<float>> keys;
      for (int j = 0; j < 12; ++j) {
        keys.push_back({80.0f * float(j) + (j >= 3 ? jump - 80.0f : 0.0f)});
      }
      HandProblem hp(tq, keys, {1.0f});
      hp.V(0, 0) = kInf;
      const reference::Result ref = reference::Attention(hp.problem);
      for (int64_t i = 0; i < tq; ++i) ASSERT_TRUE(std::isnan(ref.out[size_t(i * 2)]));
      bool some_inf = false;
      std::vector<float> kernel_out;
      ForEachKernelResult(hp, [&](const std::string& where, const std::vector<float>& out) {
        const bool one_key_tiles = where.find("kv1") != std::string::npos;
        for (int64_t i = 0; i < tq; ++i) {
          const float x = out[size_t(i * 2)];
          if (jump > 100.0f || !one_key_tiles) {
            EXPECT_TRUE(std::isnan(x)) << "row " << i << ": " << x;
          } else {
            EXPECT_EQ(x, kInf) << "row " << i;
          }
          some_inf |= std::isinf(x);
        }
        kernel_out = out;
      });
      EXPECT_EQ(some_inf, jump < 100.0f);
      ASSERT_FALSE(kernel_out.empty());
      EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kInf) == "", jump < 100.0f);
      EXPECT_NE(VerdictWith(hp, kernel_out, 0, -kInf), "");
      EXPECT_NE(VerdictWith(hp, kernel_out, 0, 1.0f), "");
      EXPECT_EQ(VerdictWith(hp, kernel_out, 0, kNaN), "");
    }
  }
}

// ---- denormal, huge and overflowing values ---------------------------------

TEST(Hostile, DenormalInputsAreOrdinaryNumbers) {
  OwnedProblem o = MakeProblem(Base(Causal::kBottomRight, /*mask=*/true));
  for (float& x : o.q) x *= 1e-39f;  // denormal
  for (float& x : o.v) x *= 1e-40f;
  for (size_t i = 0; i < o.k.size(); i += 3) o.k[i] = 1e-42f;
  for (size_t i = 0; i < o.mask.size(); i += 5) o.mask[i] = std::isinf(o.mask[i]) ? o.mask[i] : 1e-41f;
  EXPECT_EQ(Kinds(o.problem).nan, 0);
  ExpectEveryKernelMatches(o);
}

TEST(Hostile, HugeFiniteScoresStayFinite) {
  // |q|, |k| up to 1e15: scores ~1e30, far beyond exp's range, yet the max
  // subtraction keeps every weight in [0, 1]: a near one-hot softmax.
  Shape s = Base(Causal::kBottomRight);
  s.magnitude = 1e15f;
  OwnedProblem o = MakeProblem(s);
  ExpectEveryKernelMatches(o);
  for (float x : o.out) EXPECT_TRUE(std::isfinite(x));
}

TEST(Hostile, HugeValuesInVAndTheMask) {
  OwnedProblem o = MakeProblem(Base(Causal::kNone, /*mask=*/true));
  for (float& x : o.v) x *= 1e30f;  // T_k * max|V| = 5e31: no overflow
  for (float& x : o.mask) x = std::isinf(x) ? x : x * 1e20f;
  ExpectEveryKernelMatches(o);
}

TEST(Hostile, ScoresBeyondFloat32RangeGiveNaNNeverAWrongNumber) {
  // q.k = 19 * 1e40 overflows float32 (in the float64 reference it does
  // not): every score is +inf, so every row is NaN in every kernel.
  OwnedProblem o = MakeProblem(Base(Causal::kNone));
  for (float& x : o.q) x = 1e20f;
  for (float& x : o.k) x = 1e20f;
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(target + " " + variant.name);
      attention(o.problem, variant.options);
      for (float x : o.out) ASSERT_TRUE(std::isnan(x));
      for (float x : o.lse) ASSERT_TRUE(std::isnan(x));
    }
  }
  ForceTarget("auto");
}

// ---- scale -----------------------------------------------------------------

TEST(Hostile, ScaleZeroNegativeTinyAndHugeAreValid) {
  for (float scale : {0.0f, -0.0f, -1.0f, -1e4f, 1e-30f, 1e-45f, 1e30f}) {
    SCOPED_TRACE(scale);
    OwnedProblem o = MakeProblem(Base(Causal::kBottomRight, /*mask=*/true));
    o.problem.scale = scale;
    ExpectEveryKernelMatches(o);
  }
}

TEST(Hostile, ScaleZeroTimesInfInQIsNaN) {
  // 0 * inf is NaN: the reference and every kernel agree.
  OwnedProblem o = MakeProblem(Base(Causal::kNone));
  o.problem.scale = 0.0f;
  At(o.q, o.problem.q, 0, 0, 2, 0) = kInf;
  EXPECT_EQ(Kinds(o.problem).nan, 1);
  ExpectEveryKernelMatches(o);
}

TEST(Hostile, NonFiniteScaleIsRejected) {
  for (float scale : {kNaN, kInf, -kInf}) {
    OwnedProblem o = MakeProblem(Base(Causal::kNone));
    o.problem.scale = scale;
    try {
      attention(o.problem);
      ADD_FAILURE() << "scale " << scale << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "scale");
    }
  }
}

// ---- misaligned pointers ---------------------------------------------------

// Every tensor starts 1 float (4 bytes) past a 64-byte boundary and every row
// stride is odd, so no row of Q, K, V, O, the mask or lse is aligned to
// anything but a float: every kernel on every target must still be exact.
TEST(Hostile, MisalignedPointersWorkOnEveryTarget) {
  for (auto [tq, tk, d, dv] : std::vector<std::array<int64_t, 4>>{
           {37, 53, 19, 11}, {16, 64, 64, 64}, {1, 129, 32, 24}}) {
    SCOPED_TRACE(std::to_string(tq) + "x" + std::to_string(tk) + " d" + std::to_string(d));
    const int64_t heads = 2;
    // One arena; each tensor at a 64-byte boundary + 1 float.
    const int64_t sizes[] = {heads * tq * (d + 1), tk * (d + 1), tk * (dv + 1),
                             heads * tq * (dv + 1), tq * (tk + 1), heads * tq * 2};
    int64_t total = 0;
    for (int64_t n : sizes) total += n + 17;  // + room to reach the next boundary
    std::vector<float> arena(static_cast<size_t>(total));
    float* cursor = arena.data();
    auto take = [&](int64_t n) {
      uintptr_t a = reinterpret_cast<uintptr_t>(cursor);
      a = (a + 63) / 64 * 64 + sizeof(float);  // 64-byte boundary + 4 bytes
      float* p = reinterpret_cast<float*>(a);
      cursor = p + n;
      EXPECT_LE(cursor, arena.data() + arena.size());
      return p;
    };
    float* q = take(sizes[0]);
    float* k = take(sizes[1]);
    float* v = take(sizes[2]);
    float* out = take(sizes[3]);
    float* mask = take(sizes[4]);
    float* lse = take(sizes[5]);
    uint64_t state = 12345;
    auto fill = [&](float* p, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = float(int64_t(state >> 33) % 2001 - 1000) / 1000.0f;
      }
    };
    fill(q, sizes[0]);
    fill(k, sizes[1]);
    fill(v, sizes[2]);
    fill(mask, sizes[4]);
    Problem p;
    p.q_heads = heads;
    p.kv_heads = 1;
    p.q_len = tq;
    p.kv_len = tk;
    p.head_dim = d;
    p.value_dim = dv;
    p.q = ConstTensor{q, 0, tq * (d + 1), d + 1};
    p.k = ConstTensor{k, 0, 0, d + 1};
    p.v = ConstTensor{v, 0, 0, dv + 1};
    p.out = Tensor{out, 0, tq * (dv + 1), dv + 1};
    p.mask = AdditiveMask{mask, 0, 0, tk + 1, 1};
    p.lse = LseOutput{lse, 0, 1, 2};  // heads interleaved: row stride 2
    p.causal = Causal::kBottomRight;
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p.q.data) % 64, 4u);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p.out.data) % 64, 4u);
    const reference::Result ref = reference::Attention(p);
    for (const std::string& target : TestTargets()) {
      ForceTarget(target);
      for (const Variant& variant : Variants()) {
        SCOPED_TRACE(target + " " + variant.name);
        ASSERT_NO_THROW(attention(p, variant.options));
        EXPECT_EQ(oracle::Check(p, ref), "");
      }
    }
    ForceTarget("auto");
  }
}

// ---- null pointers ---------------------------------------------------------

TEST(Hostile, NullTensorsAreRejectedNullMaskAndLseMeanAbsent) {
  for (const char* name : {"q", "k", "v", "out"}) {
    OwnedProblem o = MakeProblem(Base(Causal::kNone));
    Problem p = o.problem;
    const std::string n = name;
    if (n == "q") p.q.data = nullptr;
    if (n == "k") p.k.data = nullptr;
    if (n == "v") p.v.data = nullptr;
    if (n == "out") p.out.data = nullptr;
    try {
      attention(p);
      ADD_FAILURE() << n << " null accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), n + ".data");
    }
  }
  // A null mask is "no mask" and a null lse "not requested", whatever
  // their strides say.
  OwnedProblem o = MakeProblem(Base(Causal::kBottomRight));
  o.problem.mask = AdditiveMask{nullptr, -1, -1, -1, -1};
  o.problem.lse = LseOutput{nullptr, -1, -1, -1};
  ExpectEveryKernelMatches(o);
}

// ---- sizes whose byte counts overflow --------------------------------------

// Every size field and every tensor, pushed so that the tensor's byte span
// (last element + 1, times 4) exceeds int64: rejected by validation, which
// never wraps. The data pointers are real but tiny buffers: a size that got
// through would make the kernels read far out of bounds (ASan would see it).
TEST(Hostile, SizesWhoseByteCountsOverflowAreRejected) {
  std::vector<float> tiny(64, 0.5f), out(64, -1.0f), lse(64, -1.0f);
  const int64_t huge[] = {int64_t{1} << 61, (int64_t{1} << 62) + 1,
                          std::numeric_limits<int64_t>::max()};
  struct Case {
    std::string field;  // the size field changed
    std::vector<std::string> tensors;  // which tensor(s) may be named
  };
  const Case cases[] = {{"batch", {"q", "k", "v", "out"}},
                        {"q_heads", {"q", "out"}},
                        {"q_len", {"q", "out"}},
                        {"kv_len", {"k", "v"}},
                        {"head_dim", {"q", "k"}},
                        {"value_dim", {"v", "out"}}};
  for (const Case& c : cases) {
    for (int64_t n : huge) {
      SCOPED_TRACE(c.field + " = " + std::to_string(n));
      Problem p;
      p.q_len = p.kv_len = p.head_dim = 1;
      p.value_dim = 1;
      p.q = ConstTensor{tiny.data(), 1, 1, 1};
      p.k = ConstTensor{tiny.data(), 1, 1, 1};
      p.v = ConstTensor{tiny.data(), 1, 1, 1};
      p.out = Tensor{out.data(), 1, 1, 1};
      p.lse = LseOutput{lse.data(), 1, 1, 1};
      if (c.field == "batch") p.batch = n;
      if (c.field == "q_heads") {
        p.q_heads = n;
        p.kv_heads = 1;
      }
      if (c.field == "q_len") p.q_len = n;
      if (c.field == "kv_len") p.kv_len = n;
      if (c.field == "head_dim") p.head_dim = n;
      if (c.field == "value_dim") p.value_dim = n;
      // Row strides >= the row length (else the row_stride rule fires first).
      p.q.row_stride = p.k.row_stride = p.head_dim;
      p.v.row_stride = p.out.row_stride = p.ValueDim();
      try {
        attention(p);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        bool named = false;
        for (const std::string& t : c.tensors) named |= e.field() == t || e.field() == "lse";
        EXPECT_TRUE(named) << e.what();
      }
      for (float x : out) ASSERT_EQ(x, -1.0f);
      for (float x : lse) ASSERT_EQ(x, -1.0f);
    }
  }
  // Strides: a stride whose offset overflows, for every tensor, the mask
  // and lse.
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;
  for (const char* which : {"q", "k", "v", "out", "mask", "lse"}) {
    SCOPED_TRACE(which);
    Problem p;
    p.batch = 3;
    p.q_len = p.kv_len = p.head_dim = 1;
    p.q = ConstTensor{tiny.data(), 1, 1, 1};
    p.k = ConstTensor{tiny.data() + 8, 1, 1, 1};
    p.v = ConstTensor{tiny.data() + 16, 1, 1, 1};
    p.out = Tensor{out.data(), 1, 1, 1};
    p.mask = AdditiveMask{tiny.data() + 24, 1, 1, 1, 1};
    p.lse = LseOutput{lse.data(), 1, 1, 1};
    const std::string w = which;
    if (w == "q") p.q.batch_stride = big;
    if (w == "k") p.k.batch_stride = big;
    if (w == "v") p.v.batch_stride = big;
    if (w == "out") p.out.batch_stride = big;
    if (w == "mask") p.mask.batch_stride = big;
    if (w == "lse") p.lse.batch_stride = big;
    try {
      attention(p);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), w) << e.what();
    }
  }
}

// ---- outputs overlapping inputs --------------------------------------------

// In-place attention (out over q, the common attempt) and every other
// output/input overlap are rejected, never computed: the kernels read
// inputs after writing outputs.
TEST(Hostile, OutputsOverlappingInputsAreRejected) {
  Shape s = Base(Causal::kNone, /*mask=*/true);
  s.dv = s.d;  // so that out can take q's exact layout
  for (int which = 0; which < 9; ++which) {
    OwnedProblem o = MakeProblem(s);
    Problem p = o.problem;
    std::vector<float> q_copy = o.q;
    std::string expect = "out";
    switch (which) {
      case 0: p.out = Tensor{o.q.data(), p.q.batch_stride, p.q.head_stride, p.q.row_stride}; break;
      case 1: p.out.data = test::F32Mutable(p.k); break;
      case 2: p.out.data = test::F32Mutable(p.v) + 5; break;
      case 3: p.out.data = o.mask.data() + o.mask.size() - 1; break;
      case 4: p.lse.data = test::F32Mutable(p.q) + 3; expect = "lse"; break;
      case 5: p.lse.data = test::F32Mutable(p.k); expect = "lse"; break;
      case 6: p.lse.data = o.mask.data(); expect = "lse"; break;
      case 7: p.lse.data = test::F32(p.out) + 1; expect = "out|lse"; break;
      case 8: p.mask.data = test::F32(p.out) + 2; break;  // a mask read from the output
    }
    SCOPED_TRACE(which);
    try {
      attention(p);
      ADD_FAILURE() << "overlap accepted";
    } catch (const Error& e) {
      EXPECT_NE(expect.find(e.field()), std::string::npos) << e.what();
      EXPECT_NE(e.value().find("overlapping"), std::string::npos) << e.what();
    }
    EXPECT_EQ(o.q, q_copy);
  }
}

// ---- tile overrides far beyond the problem ----------------------------------

// Options::tiles larger than anything the problem needs (a q_block of 2^31
// rows for 2 queries, 2^31 key splits for 3 keys). Today the kernels size
// their scratch by the tiles, not by the problem, so such a call either
// fails with attn::Error "memory" or allocates the absurd amount; it must
// never crash or throw anything but attn::Error.
struct TileCase {
  const char* name;
  KernelId kernel;
  Tiles tiles;
};
const TileCase kHugeTiles[] = {
    {"streaming q_block 2^31-1", KernelId::kStreaming, {INT32_MAX, 0, 0}},
    {"streaming kv_block 2^31-1", KernelId::kStreaming, {0, INT32_MAX, 0}},
    {"blocked both", KernelId::kBlocked, {INT32_MAX, INT32_MAX, 0}},
    {"parallel kv_splits 2^31-1", KernelId::kParallel, {0, 0, INT32_MAX}},
    {"parallel q_block and kv_splits 2^31-1", KernelId::kParallel, {INT32_MAX, 0, INT32_MAX}},
    {"parallel kv_splits 2^20", KernelId::kParallel, {0, 0, 1 << 20}},
};

Problem TinyProblem(std::vector<float>& buf) {
  buf.assign(64, 0.0f);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = 0.1f * float(i % 7) - 0.3f;
  Problem p;
  p.q_len = 2;
  p.kv_len = 3;
  p.head_dim = 4;
  p.q = DenseBHTD(buf.data(), 1, 2, 4);
  p.k = DenseBHTD(buf.data() + 8, 1, 3, 4);
  p.v = DenseBHTD(buf.data() + 20, 1, 3, 4);
  p.out = DenseBHTD(buf.data() + 40, 1, 2, 4);
  return p;
}

// Whether this build runs under AddressSanitizer, whose operator new aborts
// on a failed allocation instead of throwing std::bad_alloc.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

TEST(Hostile, HugeTileOverridesNeverCrash) {
  for (const TileCase& c : kHugeTiles) {
    const std::string name = c.name;
    if (name.find("q_block and kv_splits") != std::string::npos) continue;  // below
    // 2^31 splits ask operator new for 512 GiB of partials: bad_alloc, and
    // attn::Error "memory", except under ASan, which aborts instead.
    if (kAsan && name == "parallel kv_splits 2^31-1") continue;
    SCOPED_TRACE(c.name);
    std::vector<float> buf;
    const Problem p = TinyProblem(buf);
    const reference::Result ref = reference::Attention(p);
    Options o;
    o.kernel = c.kernel;
    o.threads = 2;
    o.tiles = c.tiles;
    try {
      attention(p, o);
      EXPECT_EQ(oracle::Check(p, ref), "");
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "memory") << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-attn exception: " << e.what();
    }
  }
}

// Tiles are clamped to the problem (dispatch/tiles.h, ClampTiles): q_block
// to T_q rounded up to a panel, kv_block to T_k, kv_splits to the keys, so
// absurd overrides cost a few KiB here instead of gigabytes of scratch or a
// wrapped split-KV partial size.
TEST(Hostile, HugeTileOverridesAreClampedToTheProblem) {
  for (const TileCase& c : kHugeTiles) {
    SCOPED_TRACE(c.name);
    std::vector<float> buf;
    const Problem p = TinyProblem(buf);
    const reference::Result ref = reference::Attention(p);
    Options o;
    o.kernel = c.kernel;
    o.threads = 2;
    o.tiles = c.tiles;
    ASSERT_NO_THROW(attention(p, o));
    EXPECT_EQ(oracle::Check(p, ref), "");
  }
}

// ---- the oracle itself -----------------------------------------------------

// The oracle's bound must catch what the kernels' tests catch: a dropped
// key and a 0.1% scale error.
TEST(Hostile, OracleCatchesADroppedKeyAndAWrongScale) {
  OwnedProblem o = MakeProblem(Base(Causal::kNone));
  const reference::Result ref = reference::Attention(o.problem);
  Options streaming;
  streaming.kernel = KernelId::kStreaming;
  attention(o.problem, streaming);
  EXPECT_EQ(oracle::Check(o.problem, ref), "");
  Problem dropped = o.problem;
  dropped.kv_len -= 1;
  attention(dropped, streaming);
  EXPECT_NE(oracle::Check(o.problem, ref), "");
  Problem scaled = o.problem;
  scaled.scale = o.problem.Scale() * 1.001f;
  attention(scaled, streaming);
  EXPECT_NE(oracle::Check(o.problem, ref), "");
  // And the validity oracle agrees with the library on the base problem.
  EXPECT_EQ(oracle::ValidityViolation(o.problem, Options{}), "");
}

}  // namespace
}  // namespace attn::test
