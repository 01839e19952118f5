// What a transformer engine needs from one call, on every kernel and every
// SIMD target, against the float64 reference within the bound of
// tests/test_util.cc: batch x heads with grouped (GQA) and single (MQA)
// key/value heads, [B,H,T,d] and [B,T,H,d] layouts, a KV cache with spare
// capacity and padded rows, d_v != d, cross-attention (T_q != T_k), KV-cache
// decode (T_q = 1, long T_k, bottom-right causal), additive masks broadcast
// through stride 0 over batch, heads or rows, with -inf entries and fully
// masked rows, and the log-sum-exp output. Then attn::MergeAttention: T_k
// split into chunks, each attended separately with lse, merged, equals the
// one-shot result; masked parts; in-place (ring) accumulation; validation.
// Last, a Llama-style prefill + 64 decode steps through the public API.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSentinel = -7777.0f;

// ---- Problems with freely laid out buffers ---------------------------------

enum class MaskKind {
  kNone,
  kShared,      // one [T_q, T_k] mask for every batch and head (strides 0, 0)
  kPerHead,     // [H_q, T_q, T_k], broadcast over batch (batch_stride 0)
  kPerBatch,    // [B, T_q, T_k], broadcast over heads (head_stride 0)
  kKeyPadding,  // [B, T_k], broadcast over heads and rows (row_stride 0)
  kTransposed,  // one mask stored [T_k, T_q]: row_stride 1, col_stride T_q
};

struct Spec {
  std::string name;
  int64_t batch = 1, q_heads = 1, kv_heads = 1, tq = 1, tk = 1, d = 16, dv = 0;
  Causal causal = Causal::kNone;
  Layout q_layout = Layout::kBHTD, kv_layout = Layout::kBHTD, out_layout = Layout::kBHTD;
  int64_t kv_capacity = 0;  // > tk: K/V rows [tk, capacity) exist but are NaN
  int64_t pad = 0;          // extra floats (NaN for inputs) after every row
  MaskKind mask = MaskKind::kNone;
  bool fully_masked = false;  // some rows see only -inf mask entries
  uint64_t seed = 1;
  int64_t Dv() const { return dv ? dv : d; }
};

struct Strides {
  int64_t batch, head, row;
};

// [batch, heads, capacity, cols + pad] in `layout`; every element NaN.
Strides Allocate(std::vector<float>& buf, Layout layout, int64_t batch, int64_t heads,
                 int64_t capacity, int64_t cols, int64_t pad) {
  const int64_t row = cols + pad;
  buf.assign(size_t(batch * heads * capacity * row), std::nanf(""));
  if (layout == Layout::kBHTD) return {heads * capacity * row, capacity * row, row};
  return {capacity * heads * row, row, heads * row};
}

void Fill(std::vector<float>& buf, const Strides& s, int64_t batch, int64_t heads, int64_t rows,
          int64_t cols, const std::function<float()>& f) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          buf[size_t(b * s.batch + h * s.head + r * s.row + c)] = f();
}

struct Owned {
  Spec spec;
  std::vector<float> q, k, v, out, lse, mask;
  std::vector<char> addressed;  // out elements the problem addresses
  Problem p;

  void Clear() {
    std::fill(out.begin(), out.end(), kSentinel);
    std::fill(lse.begin(), lse.end(), kSentinel);
  }
  // Number of out elements outside the problem that are no longer the sentinel.
  int64_t StrayWrites() const {
    int64_t n = 0;
    for (size_t i = 0; i < out.size(); ++i) n += !addressed[i] && out[i] != kSentinel;
    return n;
  }
};

Owned Make(const Spec& s) {
  Owned o;
  o.spec = s;
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto rand = [&] { return unit(rng); };
  const int64_t cap = std::max(s.kv_capacity, s.tk), dv = s.Dv();
  const Strides qs = Allocate(o.q, s.q_layout, s.batch, s.q_heads, s.tq, s.d, s.pad);
  const Strides ks = Allocate(o.k, s.kv_layout, s.batch, s.kv_heads, cap, s.d, s.pad);
  const Strides vs = Allocate(o.v, s.kv_layout, s.batch, s.kv_heads, cap, dv, s.pad);
  const Strides os = Allocate(o.out, s.out_layout, s.batch, s.q_heads, s.tq, dv, s.pad);
  Fill(o.q, qs, s.batch, s.q_heads, s.tq, s.d, rand);
  Fill(o.k, ks, s.batch, s.kv_heads, s.tk, s.d, rand);
  Fill(o.v, vs, s.batch, s.kv_heads, s.tk, dv, rand);
  o.addressed.assign(o.out.size(), 0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.q_heads; ++h)
      for (int64_t r = 0; r < s.tq; ++r)
        for (int64_t c = 0; c < dv; ++c)
          o.addressed[size_t(b * os.batch + h * os.head + r * os.row + c)] = 1;
  // lse: [B, T_q, H] (a layout different from out, to exercise its strides).
  o.lse.assign(size_t(s.batch * s.tq * s.q_heads), kSentinel);

  Problem& p = o.p;
  p.batch = s.batch;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.q_len = s.tq;
  p.kv_len = s.tk;
  p.head_dim = s.d;
  if (s.dv) p.value_dim = s.dv;
  p.q = ConstTensor{o.q.data(), qs.batch, qs.head, qs.row};
  p.k = ConstTensor{o.k.data(), ks.batch, ks.head, ks.row};
  p.v = ConstTensor{o.v.data(), vs.batch, vs.head, vs.row};
  p.out = Tensor{o.out.data(), os.batch, os.head, os.row};
  p.lse = LseOutput{o.lse.data(), s.tq * s.q_heads, 1, s.q_heads};
  p.causal = s.causal;

  // Masks: uniform in [-2, 2] with ~10% -inf entries.
  std::uniform_real_distribution<float> m(-2.0f, 2.0f), u(0.0f, 1.0f);
  auto entry = [&] { return u(rng) < 0.1f ? -kInf : m(rng); };
  const int64_t tq = s.tq, tk = s.tk;
  switch (s.mask) {
    case MaskKind::kNone: break;
    case MaskKind::kShared:
      o.mask.resize(size_t(tq * tk));
      for (float& x : o.mask) x = entry();
      if (s.fully_masked) std::fill(o.mask.begin(), o.mask.begin() + 2 * tk, -kInf);  // rows 0, 1
      p.mask = AdditiveMask{o.mask.data(), 0, 0, tk, 1};
      break;
    case MaskKind::kPerHead:
      o.mask.resize(size_t(s.q_heads * tq * tk));
      for (float& x : o.mask) x = entry();
      if (s.fully_masked) {  // head 1, row min(3, T_q - 1)
        std::fill_n(o.mask.begin() + (1 * tq + std::min<int64_t>(3, tq - 1)) * tk, tk, -kInf);
      }
      p.mask = AdditiveMask{o.mask.data(), 0, tq * tk, tk, 1};
      break;
    case MaskKind::kPerBatch:
      o.mask.resize(size_t(s.batch * tq * tk));
      for (float& x : o.mask) x = entry();
      if (s.fully_masked) {  // last batch, last row
        std::fill_n(o.mask.begin() + ((s.batch - 1) * tq + tq - 1) * tk, tk, -kInf);
      }
      p.mask = AdditiveMask{o.mask.data(), tq * tk, 0, tk, 1};
      break;
    case MaskKind::kKeyPadding:
      // Batch b's last 3 + 5b keys are padding (-inf), the rest 0; with
      // fully_masked the last batch is entirely padding (an empty sequence).
      o.mask.assign(size_t(s.batch * tk), 0.0f);
      for (int64_t b = 0; b < s.batch; ++b) {
        const int64_t padded = (s.fully_masked && b == s.batch - 1) ? tk : 3 + 5 * b;
        for (int64_t j = tk - std::min(tk, padded); j < tk; ++j) o.mask[size_t(b * tk + j)] = -kInf;
      }
      p.mask = AdditiveMask{o.mask.data(), tk, 0, 0, 1};
      break;
    case MaskKind::kTransposed:
      o.mask.resize(size_t(tk * tq));
      for (float& x : o.mask) x = entry();
      if (s.fully_masked) {  // row 0: column 0 of the stored [T_k, T_q]
        for (int64_t j = 0; j < tk; ++j) o.mask[size_t(j * tq)] = -kInf;
      }
      p.mask = AdditiveMask{o.mask.data(), 0, 0, 1, tq};
      break;
  }
  o.Clear();
  return o;
}

// ---- Running every kernel on every target ----------------------------------

// Every kernel of the table (tests/test_util.h), the threaded ones on 3
// threads too, with and without 4 splits.
std::vector<Variant> Variants() { return KernelVariants(3); }

// The naive kernel's error on this input, and the bound derived from it.
Bound NaiveBound(Owned& o, const reference::Result& ref) {
  o.Clear();
  Options naive;
  naive.kernel = KernelId::kNaive;
  attention(o.p, naive);
  return BoundFromNaive(MaxErrors(o.p, ref), o.p, ref);
}

// Every variant x every supported target: out and lse within the bound, and
// nothing written outside the problem's outputs.
void ExpectEveryKernelMatches(Owned& o) {
  const reference::Result ref = reference::Attention(o.p);
  const Bound bound = NaiveBound(o, ref);
  const std::vector<std::string> targets = TestTargets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    ForceTarget(target);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(o.spec.name + " on " + target + " with " + variant.name);
      o.Clear();
      attention(o.p, variant.options);
      const Errors e = MaxErrors(o.p, ref);
      EXPECT_LE(e.out, bound.out);
      EXPECT_LE(e.lse, bound.lse);
      EXPECT_EQ(o.StrayWrites(), 0);
    }
  }
  ForceTarget("auto");
  // Without the lse output (a separate path in some kernels), best target.
  Problem no_lse = o.p;
  no_lse.lse = LseOutput{};
  for (const Variant& variant : Variants()) {
    SCOPED_TRACE(o.spec.name + " without lse, with " + variant.name);
    o.Clear();
    attention(no_lse, variant.options);
    EXPECT_LE(MaxErrors(no_lse, ref).out, bound.out);
    EXPECT_EQ(o.StrayWrites(), 0);
    for (float x : o.lse) ASSERT_EQ(x, kSentinel);
  }
}

void RunSpec(Spec s) {
  Owned o = Make(s);
  ExpectEveryKernelMatches(o);
}

// ---- GQA / MQA / layouts / cache / d_v -------------------------------------

TEST(Gqa, GroupedQueryHeadsBatch2) {
  Spec s;
  s.name = "gqa 8/2";
  s.batch = 2, s.q_heads = 8, s.kv_heads = 2, s.tq = 37, s.tk = 75, s.d = 64;
  RunSpec(s);
  s.causal = Causal::kBottomRight;  // prefill after a cached prefix
  s.seed = 2;
  RunSpec(s);
  s.causal = Causal::kTopLeft;
  s.seed = 3;
  RunSpec(s);
}

TEST(Gqa, MultiQuery) {
  Spec s;
  s.name = "mqa 6/1";
  s.batch = 2, s.q_heads = 6, s.kv_heads = 1, s.tq = 29, s.tk = 67, s.d = 32;
  s.causal = Causal::kBottomRight;
  RunSpec(s);
  s.causal = Causal::kNone;
  s.tq = 1;  // MQA decode
  s.seed = 2;
  RunSpec(s);
  // A group (one view of 44 rows) wider than the panel of every target and
  // a multiple of none: 5 panels + 4 rows at 8-row panels (EMU128/SSSE3/
  // SSE4), 2 + 12 at 16 (AVX2), 1 + 12 at 32 (AVX3).
  s.name = "mqa decode 44/1";
  s.batch = 1, s.q_heads = 44, s.tk = 777, s.d = 64;
  s.causal = Causal::kBottomRight;
  s.seed = 3;
  RunSpec(s);
  s.name = "gqa decode 12/2";
  s.batch = 2, s.q_heads = 12, s.kv_heads = 2, s.tk = 333;
  s.q_layout = s.out_layout = Layout::kBTHD;
  s.seed = 4;
  RunSpec(s);
}

TEST(Gqa, SequenceMajorLayout) {
  Spec s;
  s.name = "BTHD";
  s.batch = 2, s.q_heads = 8, s.kv_heads = 2, s.tq = 33, s.tk = 50, s.d = 48;
  s.q_layout = s.kv_layout = s.out_layout = Layout::kBTHD;
  s.causal = Causal::kBottomRight;
  RunSpec(s);
  s.name = "mixed layouts";  // Q/out [B,T,H,d], K/V [B,H,T,d], padded rows
  s.kv_layout = Layout::kBHTD;
  s.pad = 5;
  s.causal = Causal::kNone;
  s.seed = 2;
  RunSpec(s);
}

TEST(Gqa, PaddedKvCache) {
  // K/V live in a [B, H_kv, capacity, d + pad] cache; only kv_len rows are
  // filled, the rest (and the row padding) are NaN: reading them would show.
  Spec s;
  s.name = "kv cache";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 90, s.tk = 90, s.d = 40;
  s.kv_capacity = 128;
  s.pad = 3;
  s.causal = Causal::kBottomRight;  // prefill
  RunSpec(s);
  s.tq = 7;  // a chunk of prefill appended to a 83-token cache
  s.seed = 2;
  RunSpec(s);
  s.kv_layout = Layout::kBTHD;  // [B, capacity, H_kv, d + pad]
  s.seed = 3;
  RunSpec(s);
}

TEST(Gqa, ValueDimDiffersFromHeadDim) {
  Spec s;
  s.name = "dv<d";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 21, s.tk = 45, s.d = 40, s.dv = 24;
  s.causal = Causal::kBottomRight;
  RunSpec(s);
  s.name = "dv>d";
  s.d = 16, s.dv = 72;
  s.causal = Causal::kNone;
  s.seed = 2;
  RunSpec(s);
}

TEST(Gqa, CrossAttention) {
  // T_q != T_k, no mask, both ways round.
  Spec s;
  s.name = "cross";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 23, s.tk = 140, s.d = 64;
  s.q_layout = s.out_layout = Layout::kBTHD;
  RunSpec(s);
  s.tq = 140, s.tk = 23;
  s.seed = 2;
  RunSpec(s);
}

TEST(Gqa, DecodeLongCache) {
  // One new query against a long cache, bottom-right causal (it sees every
  // key), in a cache with spare capacity: split-KV territory.
  Spec s;
  s.name = "decode";
  s.batch = 2, s.q_heads = 8, s.kv_heads = 2, s.tq = 1, s.tk = 3000, s.d = 128;
  s.kv_capacity = 3072;
  s.causal = Causal::kBottomRight;
  RunSpec(s);
  s.name = "decode BTHD";  // sequence-major Q, cache and out
  s.kv_layout = s.q_layout = s.out_layout = Layout::kBTHD;
  s.seed = 4;
  RunSpec(s);
  s.name = "decode BTHD dv";  // sequence-major cache, d_v != d, top-left
  s.kv_layout = s.q_layout = s.out_layout = Layout::kBTHD;
  s.tk = 2500, s.d = 64, s.dv = 32;
  s.causal = Causal::kTopLeft;  // sees key 0 only
  s.seed = 2;
  RunSpec(s);
  s.name = "speculative decode";  // 4 new queries
  s.tq = 4;
  s.causal = Causal::kBottomRight;
  s.seed = 3;
  RunSpec(s);
}

TEST(Gqa, BroadcastInputs) {
  // Inputs may broadcast through stride 0: one K/V shared by every batch
  // entry, and (decode) one query row shared by every head.
  Spec s;
  s.name = "kv shared over batch";
  s.batch = 3, s.q_heads = 8, s.kv_heads = 2, s.tq = 9, s.tk = 100, s.d = 32;
  s.causal = Causal::kBottomRight;
  Owned o = Make(s);
  o.p.k.batch_stride = o.p.v.batch_stride = 0;
  ExpectEveryKernelMatches(o);
  s.name = "q shared over heads, decode";
  s.tq = 1, s.tk = 500;
  s.seed = 2;
  Owned o2 = Make(s);
  o2.p.q.head_stride = 0;
  o2.p.q.batch_stride = 0;
  ExpectEveryKernelMatches(o2);
}

// ---- Additive masks --------------------------------------------------------

TEST(Gqa, MaskBroadcastOverBatchAndHeads) {
  Spec s;
  s.name = "mask shared";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 19, s.tk = 57, s.d = 32;
  s.mask = MaskKind::kShared;
  s.fully_masked = true;
  RunSpec(s);
  s.causal = Causal::kBottomRight;
  s.seed = 2;
  RunSpec(s);
}

TEST(Gqa, MaskBroadcastOverBatch) {
  Spec s;
  s.name = "mask per head";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 19, s.tk = 57, s.d = 32;
  s.mask = MaskKind::kPerHead;
  s.fully_masked = true;
  RunSpec(s);
  // Decode: the query heads of a group see different masks (and head 1 none
  // of the keys), so they cannot share one set of scores.
  s.name = "mask per head decode";
  s.tq = 1, s.tk = 900;
  s.causal = Causal::kBottomRight;
  s.fully_masked = false;
  s.seed = 2;
  RunSpec(s);
  s.name = "mask per head decode, a head fully masked";
  s.fully_masked = true;
  s.seed = 3;
  RunSpec(s);
}

TEST(Gqa, MaskBroadcastOverHeads) {
  Spec s;
  s.name = "mask per batch";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 1, s.tq = 19, s.tk = 57, s.d = 32;
  s.mask = MaskKind::kPerBatch;
  s.fully_masked = true;
  s.causal = Causal::kBottomRight;
  RunSpec(s);
}

TEST(Gqa, KeyPaddingMaskBroadcastOverRows) {
  Spec s;
  s.name = "key padding";
  s.batch = 3, s.q_heads = 4, s.kv_heads = 2, s.tq = 17, s.tk = 61, s.d = 32;
  s.mask = MaskKind::kKeyPadding;
  s.fully_masked = true;  // batch 2: every key padding -> every row out 0, lse -inf
  RunSpec(s);
  s.name = "key padding decode";
  s.tq = 1, s.tk = 700;
  s.causal = Causal::kBottomRight;
  s.fully_masked = false;
  s.seed = 2;
  RunSpec(s);
}

TEST(Gqa, TransposedMask) {
  Spec s;
  s.name = "mask col_stride";
  s.batch = 1, s.q_heads = 4, s.kv_heads = 2, s.tq = 13, s.tk = 40, s.d = 24;
  s.mask = MaskKind::kTransposed;
  s.fully_masked = true;
  RunSpec(s);
}

TEST(Gqa, FullyMaskedRowsAreZeroWithLseMinusInf) {
  // The documented convention, checked directly (not just via the reference).
  Spec s;
  s.name = "fully masked";
  s.batch = 3, s.q_heads = 4, s.kv_heads = 2, s.tq = 5, s.tk = 33, s.d = 16;
  s.mask = MaskKind::kKeyPadding;
  s.fully_masked = true;
  Owned o = Make(s);
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(target + " " + variant.name);
      o.Clear();
      attention(o.p, variant.options);
      const int64_t b = 2;  // the all-padding batch
      for (int64_t h = 0; h < s.q_heads; ++h)
        for (int64_t i = 0; i < s.tq; ++i) {
          const float* row = test::F32(o.p.out) + b * o.p.out.batch_stride + h * o.p.out.head_stride +
                             i * o.p.out.row_stride;
          for (int64_t c = 0; c < s.d; ++c) ASSERT_EQ(row[c], 0.0f);
          ASSERT_EQ(o.p.lse.data[b * o.p.lse.batch_stride + h * o.p.lse.head_stride +
                                 i * o.p.lse.row_stride],
                    -kInf);
        }
    }
  }
  ForceTarget("auto");
}

// ---- MergeAttention --------------------------------------------------------

// Partial results of `p` over the key chunks [bounds[c], bounds[c+1]): each
// chunk is the same problem with K, V (and the mask) advanced to the chunk's
// first key and kv_len = its length. Chunks before the last must be visible
// to every query row (no causal mask: checked); the last keeps p.causal
// (bottom-right composes: its own kv_len - q_len offset is the global one).
struct Parts {
  int64_t rows_per_part = 0;
  std::vector<std::vector<float>> out, lse;
  std::vector<MergePart> parts;
};

Parts ComputeParts(const Problem& p, const std::vector<int64_t>& bounds, const Options& options) {
  Parts r;
  const int64_t dv = p.ValueDim();
  const int n = int(bounds.size()) - 1;
  r.out.resize(size_t(n));
  r.lse.resize(size_t(n));
  for (int c = 0; c < n; ++c) {
    const int64_t k0 = bounds[size_t(c)], k1 = bounds[size_t(c) + 1];
    Problem sub = p;
    sub.kv_len = k1 - k0;
    sub.k.data = test::F32(p.k) + k0 * p.k.row_stride;
    sub.v.data = test::F32(p.v) + k0 * p.v.row_stride;
    if (p.mask.data) sub.mask.data += k0 * p.mask.col_stride;
    if (c + 1 < n) {
      EXPECT_TRUE(p.causal == Causal::kNone ||
                  (p.causal == Causal::kBottomRight && k1 <= p.kv_len - p.q_len + 1))
          << "chunk " << c << " is not visible to every row";
      sub.causal = Causal::kNone;
    } else {
      EXPECT_TRUE(p.causal != Causal::kTopLeft);
    }
    // Dense [B, H, T_q, d_v] partial outputs, [B, H, T_q] lse.
    r.out[size_t(c)].assign(size_t(p.batch * p.q_heads * p.q_len * dv), kSentinel);
    r.lse[size_t(c)].assign(size_t(p.batch * p.q_heads * p.q_len), kSentinel);
    sub.out = DenseBHTD(r.out[size_t(c)].data(), p.q_heads, p.q_len, dv);
    sub.lse = LseOutput{r.lse[size_t(c)].data(), p.q_heads * p.q_len, p.q_len, 1};
    attention(sub, options);
    r.parts.push_back(MergePart{sub.out, sub.lse});
  }
  return r;
}

MergeProblem MergeInto(const Problem& p, const std::vector<MergePart>& parts) {
  MergeProblem m;
  m.batch = p.batch;
  m.q_heads = p.q_heads;
  m.q_len = p.q_len;
  m.value_dim = p.ValueDim();
  m.parts = parts.data();
  m.n_parts = int(parts.size());
  m.out = p.out;
  m.lse = p.lse;
  return m;
}

// Uneven chunk boundaries: k chunks of T_k at growing fractions.
std::vector<int64_t> Chunks(int64_t tk, int k) {
  std::vector<int64_t> b = {0};
  const double w[] = {0.13, 0.29, 0.11, 0.31, 0.16};  // for k <= 5
  double sum = 0.0;
  for (int c = 0; c < k; ++c) sum += w[c];
  double acc = 0.0;
  for (int c = 0; c + 1 < k; ++c) {
    acc += w[c];
    b.push_back(std::max(b.back() + 1, int64_t(std::lround(acc / sum * double(tk)))));
  }
  b.push_back(tk);
  return b;
}

std::vector<Variant> MergeVariants() {
  std::vector<Variant> v;
  for (const Variant& x : Variants()) {
    const std::string& n = x.name;
    if (n == "blocked" || n == "streaming" || n == "parallel/threads2" ||
        n == "parallel/threads3/splits4" || n == "auto/threads2") {
      v.push_back(x);
    }
  }
  return v;
}

// Splits into k in {2, 3, 5} chunks with every merge variant on every
// target: the merged (out, lse) must meet the one-shot bound.
void ExpectSplitMergeMatches(Owned& o) {
  const reference::Result ref = reference::Attention(o.p);
  const Bound bound = NaiveBound(o, ref);
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    for (const Variant& variant : MergeVariants()) {
      for (int k : {2, 3, 5}) {
        SCOPED_TRACE(o.spec.name + " on " + target + " with " + variant.name + ", " +
                     std::to_string(k) + " chunks");
        const Parts parts = ComputeParts(o.p, Chunks(o.p.kv_len, k), variant.options);
        o.Clear();
        MergeAttention(MergeInto(o.p, parts.parts));
        const Errors e = MaxErrors(o.p, ref);
        EXPECT_LE(e.out, bound.out);
        EXPECT_LE(e.lse, bound.lse);
        EXPECT_EQ(o.StrayWrites(), 0);
      }
    }
  }
  ForceTarget("auto");
}

TEST(Merge, SplitKeysMergedEqualsOneShot) {
  Spec s;
  s.name = "merge";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 37, s.tk = 500, s.d = 64, s.dv = 48;
  s.out_layout = Layout::kBTHD;  // merged into a strided output
  Owned o = Make(s);
  ExpectSplitMergeMatches(o);
}

TEST(Merge, SplitKeysWithMaskAndFullyMaskedRows) {
  // The mask follows the chunks through its col_stride; rows fully masked in
  // the one-shot problem are -inf in every part: merged out 0, lse -inf.
  Spec s;
  s.name = "merge masked";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 1, s.tq = 11, s.tk = 300, s.d = 32;
  s.mask = MaskKind::kShared;
  s.fully_masked = true;
  Owned o = Make(s);
  ExpectSplitMergeMatches(o);
}

TEST(Merge, DecodeSplitsWithCausalLastChunk) {
  Spec s;
  s.name = "merge decode";  // T_q = 1: every chunk is visible to the query
  s.batch = 1, s.q_heads = 8, s.kv_heads = 2, s.tq = 1, s.tk = 3000, s.d = 128;
  s.kv_capacity = 3100;
  s.causal = Causal::kBottomRight;
  Owned o = Make(s);
  ExpectSplitMergeMatches(o);
  s.name = "merge speculative decode";  // T_q = 4: the last chunk is causal
  s.tq = 4, s.tk = 1000, s.d = 64;
  s.seed = 2;
  Owned o2 = Make(s);
  ExpectSplitMergeMatches(o2);
}

TEST(Merge, InPlaceAccumulationLikeRingAttention) {
  // acc = part 0; then acc = merge(acc, part c) in place, chunk by chunk, as
  // a ring-attention rank does with the blocks it receives.
  Spec s;
  s.name = "ring";
  s.batch = 2, s.q_heads = 4, s.kv_heads = 2, s.tq = 16, s.tk = 640, s.d = 64;
  Owned o = Make(s);
  const reference::Result ref = reference::Attention(o.p);
  const Bound bound = NaiveBound(o, ref);
  Options options;
  options.kernel = KernelId::kStreaming;
  const Parts parts = ComputeParts(o.p, Chunks(s.tk, 5), options);
  std::vector<float> acc = parts.out[0], acc_lse = parts.lse[0];
  const MergePart acc_part{DenseBHTD(static_cast<const float*>(acc.data()), s.q_heads, s.tq, s.d),
                           ConstLse{acc_lse.data(), s.q_heads * s.tq, s.tq, 1}};
  for (size_t c = 1; c < parts.parts.size(); ++c) {
    const std::vector<MergePart> two = {acc_part, parts.parts[c]};
    MergeProblem m = MergeInto(o.p, two);
    m.out = DenseBHTD(acc.data(), s.q_heads, s.tq, s.d);
    m.lse = LseOutput{acc_lse.data(), s.q_heads * s.tq, s.tq, 1};
    ASSERT_NO_THROW(MergeAttention(m));
  }
  // Copy into the problem's strided outputs and compare.
  const std::vector<MergePart> one = {acc_part};
  o.Clear();
  MergeAttention(MergeInto(o.p, one));  // a single part: a strided copy
  const Errors e = MaxErrors(o.p, ref);
  EXPECT_LE(e.out, bound.out);
  EXPECT_LE(e.lse, bound.lse);
}

TEST(Merge, MaskedPartsContributeNothing) {
  Spec s;
  s.name = "masked part";
  s.batch = 2, s.q_heads = 2, s.kv_heads = 1, s.tq = 9, s.tk = 200, s.d = 32;
  Owned o = Make(s);
  Options options;
  options.kernel = KernelId::kStreaming;
  const Parts parts = ComputeParts(o.p, Chunks(s.tk, 2), options);
  // The plain two-part merge.
  o.Clear();
  MergeAttention(MergeInto(o.p, parts.parts));
  const std::vector<float> want_out = o.out, want_lse = o.lse;

  // A third part with lse -inf everywhere and NaN outputs: never read.
  const size_t n_out = parts.out[0].size(), n_lse = parts.lse[0].size();
  std::vector<float> nan_out(n_out, std::nanf("")), inf_lse(n_lse, -kInf);
  std::vector<MergePart> three = parts.parts;
  three.insert(three.begin() + 1,
               MergePart{DenseBHTD(static_cast<const float*>(nan_out.data()), s.q_heads, s.tq,
                                   s.d),
                         ConstLse{inf_lse.data(), s.q_heads * s.tq, s.tq, 1}});
  o.Clear();
  MergeAttention(MergeInto(o.p, three));
  EXPECT_EQ(0, std::memcmp(o.out.data(), want_out.data(), n_out * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(o.lse.data(), want_lse.data(), n_lse * sizeof(float)));

  // A part from attention itself over fully masked keys (all -inf mask).
  std::vector<float> all_masked(size_t(s.tk), -kInf);
  Problem masked = o.p;
  masked.mask = AdditiveMask{all_masked.data(), 0, 0, 0, 1};
  std::vector<float> m_out(n_out, kSentinel), m_lse(n_lse, kSentinel);
  masked.out = DenseBHTD(m_out.data(), s.q_heads, s.tq, s.d);
  masked.lse = LseOutput{m_lse.data(), s.q_heads * s.tq, s.tq, 1};
  attention(masked, options);
  for (float x : m_out) ASSERT_EQ(x, 0.0f);
  for (float x : m_lse) ASSERT_EQ(x, -kInf);
  three[1] = MergePart{masked.out, masked.lse};
  o.Clear();
  MergeAttention(MergeInto(o.p, three));
  EXPECT_EQ(0, std::memcmp(o.out.data(), want_out.data(), n_out * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(o.lse.data(), want_lse.data(), n_lse * sizeof(float)));

  // Every part -inf: out 0, lse -inf (the fully masked row).
  const std::vector<MergePart> none = {three[1], three[1]};
  o.Clear();
  MergeAttention(MergeInto(o.p, none));
  EXPECT_EQ(o.StrayWrites(), 0);
  for (size_t i = 0; i < o.out.size(); ++i) {
    if (o.addressed[i]) {
      ASSERT_EQ(o.out[i], 0.0f);
    }
  }
  for (float x : o.lse) ASSERT_EQ(x, -kInf);
}

TEST(Merge, NanPropagates) {
  // One row of part 0 has a NaN lse: that row (every head of batch 0, row 2)
  // is NaN in out and lse, the others are finite.
  const int64_t H = 2, T = 4, dv = 3;
  std::vector<float> a(size_t(H * T * dv), 0.5f), b(size_t(H * T * dv), 0.25f);
  std::vector<float> la(size_t(H * T), 1.0f), lb(size_t(H * T), 2.0f);
  la[2] = std::nanf("");
  std::vector<float> out(size_t(H * T * dv), kSentinel), lse(size_t(H * T), kSentinel);
  const std::vector<MergePart> parts = {
      {DenseBHTD(static_cast<const float*>(a.data()), H, T, dv), ConstLse{la.data(), H * T, T, 1}},
      {DenseBHTD(static_cast<const float*>(b.data()), H, T, dv), ConstLse{lb.data(), H * T, T, 1}}};
  MergeProblem m;
  m.q_heads = H, m.q_len = T, m.value_dim = dv;
  m.parts = parts.data();
  m.n_parts = 2;
  m.out = DenseBHTD(out.data(), H, T, dv);
  m.lse = LseOutput{lse.data(), H * T, T, 1};
  MergeAttention(m);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      const bool nan = h == 0 && i == 2;
      EXPECT_EQ(std::isnan(lse[size_t(h * T + i)]), nan);
      for (int64_t c = 0; c < dv; ++c) EXPECT_EQ(std::isnan(out[size_t((h * T + i) * dv + c)]), nan);
    }
  // The finite rows: exactly the two-term formula.
  const double l = std::log(std::exp(1.0) + std::exp(2.0));
  EXPECT_NEAR(lse[1], l, 1e-6);
  EXPECT_NEAR(out[3], 0.5 * std::exp(1.0 - l) + 0.25 * std::exp(2.0 - l), 1e-7);
}

// ---- MergeAttention validation --------------------------------------------

struct MergeBuffers {
  static constexpr int64_t kB = 2, kH = 3, kT = 4, kDv = 5;
  std::vector<float> a, b, la, lb, out, lse;
  std::vector<MergePart> parts;
  MergeProblem m;
  MergeBuffers() {
    a.assign(size_t(kB * kH * kT * kDv), 0.5f);
    b.assign(a.size(), -0.5f);
    la.assign(size_t(kB * kH * kT), 0.0f);
    lb.assign(la.size(), 1.0f);
    out.assign(a.size(), kSentinel);
    lse.assign(la.size(), kSentinel);
    parts = {{DenseBHTD(static_cast<const float*>(a.data()), kH, kT, kDv),
              ConstLse{la.data(), kH * kT, kT, 1}},
             {DenseBHTD(static_cast<const float*>(b.data()), kH, kT, kDv),
              ConstLse{lb.data(), kH * kT, kT, 1}}};
    m.batch = kB, m.q_heads = kH, m.q_len = kT, m.value_dim = kDv;
    m.parts = parts.data();
    m.n_parts = 2;
    m.out = DenseBHTD(out.data(), kH, kT, kDv);
    m.lse = LseOutput{lse.data(), kH * kT, kT, 1};
  }
  MergeBuffers(const MergeBuffers&) = delete;
  std::vector<std::vector<float>*> All() { return {&a, &b, &la, &lb, &out, &lse}; }
};

TEST(MergeErrors, EveryInvalidFieldIsNamedAndNothingIsWritten) {
  struct Case {
    std::string field, value;
    std::function<void(MergeBuffers&)> mutate;
  };
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  const std::vector<Case> cases = {
      {"batch", "0", [](MergeBuffers& x) { x.m.batch = 0; }},
      {"q_heads", "-1", [](MergeBuffers& x) { x.m.q_heads = -1; }},
      {"q_len", "0", [](MergeBuffers& x) { x.m.q_len = 0; }},
      {"value_dim", "0", [](MergeBuffers& x) { x.m.value_dim = 0; }},
      {"n_parts", "0", [](MergeBuffers& x) { x.m.n_parts = 0; }},
      {"n_parts", "-3", [](MergeBuffers& x) { x.m.n_parts = -3; }},
      {"parts", "null", [](MergeBuffers& x) { x.m.parts = nullptr; }},
      {"parts[1].out.data", "null", [](MergeBuffers& x) { x.parts[1].out.data = nullptr; }},
      {"parts[0].lse.data", "null", [](MergeBuffers& x) { x.parts[0].lse.data = nullptr; }},
      {"parts[1].out.row_stride", "4", [](MergeBuffers& x) { x.parts[1].out.row_stride = 4; }},
      {"parts[0].out.head_stride", "-1", [](MergeBuffers& x) { x.parts[0].out.head_stride = -1; }},
      {"parts[1].lse.row_stride", "-2", [](MergeBuffers& x) { x.parts[1].lse.row_stride = -2; }},
      {"parts[0].out", "[2,3,4,5] with strides (" + std::to_string(huge) + ",20,5)",
       [huge](MergeBuffers& x) { x.parts[0].out.batch_stride = huge; }},
      {"out.data", "null", [](MergeBuffers& x) { x.m.out.data = nullptr; }},
      {"out.row_stride", "0", [](MergeBuffers& x) { x.m.out.row_stride = 0; }},
      {"out.batch_stride", "-60", [](MergeBuffers& x) { x.m.out.batch_stride = -60; }},
      {"out", "strides (60,0,5)", [](MergeBuffers& x) { x.m.out.head_stride = 0; }},
      {"lse", "strides (0,4,1)", [](MergeBuffers& x) { x.m.lse.batch_stride = 0; }},
      {"lse.head_stride", "-4", [](MergeBuffers& x) { x.m.lse.head_stride = -4; }},
      {"lse", "memory overlapping out",
       [](MergeBuffers& x) { x.m.lse.data = x.out.data() + 7; }},
      {"out", "memory overlapping parts[0].out",  // overlapping, but not the same tensor
       [](MergeBuffers& x) { x.m.out.data = x.a.data() + 1; x.m.lse.data = nullptr; }},
      {"out", "memory overlapping parts[1].out",  // same pointer, other strides
       [](MergeBuffers& x) { x.m.out = DenseBTHD(x.b.data(), MergeBuffers::kH, MergeBuffers::kT,
                                                 MergeBuffers::kDv); }},
      {"out", "memory overlapping parts[1].lse",
       [](MergeBuffers& x) { x.m.out = Tensor{x.lb.data(), 0, 0, 0}; x.m.batch = x.m.q_heads =
                                 x.m.q_len = 1; x.m.lse.data = nullptr; }},
      {"lse", "memory overlapping parts[0].out",
       [](MergeBuffers& x) { x.m.lse.data = x.a.data() + 3; }},
      {"lse", "memory overlapping parts[1].lse",
       [](MergeBuffers& x) { x.m.lse.data = x.lb.data() + 1; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value);
    MergeBuffers x;
    c.mutate(x);
    std::vector<std::vector<float>> before;
    for (auto* buf : x.All()) before.push_back(*buf);
    try {
      MergeAttention(x.m);
      ADD_FAILURE() << "no attn::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_EQ(e.value(), c.value) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find(c.field), std::string::npos) << what;
      EXPECT_NE(what.find(c.value), std::string::npos) << what;
    }
    const auto all = x.All();
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(all[i]->data(), before[i].data(), before[i].size() * sizeof(float)))
          << "buffer " << i << " written";
    }
  }
}

TEST(MergeErrors, ExactAliasesAreAccepted) {
  // out = parts[0].out and lse = parts[1].lse exactly: in-place merging.
  MergeBuffers x;
  x.m.out = Tensor{x.a.data(), x.parts[0].out.batch_stride, x.parts[0].out.head_stride,
                   x.parts[0].out.row_stride};
  x.m.lse = LseOutput{x.lb.data(), x.parts[1].lse.batch_stride, x.parts[1].lse.head_stride,
                      x.parts[1].lse.row_stride};
  ASSERT_NO_THROW(MergeAttention(x.m));
  const double l = std::log(std::exp(0.0) + std::exp(1.0));
  for (float v : x.lb) EXPECT_NEAR(v, l, 1e-6);
  for (float v : x.a) EXPECT_NEAR(v, 0.5 * std::exp(-l) - 0.5 * std::exp(1.0 - l), 1e-7);
}

// ---- Llama-style: prefill, then 64 decode steps appending to the cache ----

TEST(Llama, PrefillThenDecodeThroughTheCache) {
  constexpr int64_t kHq = 32, kHkv = 8, kD = 128, kPrefill = 2048, kSteps = 64;
  constexpr int64_t kCap = kPrefill + kSteps;
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = unit(rng);
  };
  // The cache: [1, H_kv, capacity, d] so that rows can be appended. Rows not
  // yet written are NaN.
  std::vector<float> k_cache(size_t(kHkv * kCap * kD), std::nanf(""));
  std::vector<float> v_cache(k_cache.size(), std::nanf(""));
  auto cache_row = [&](std::vector<float>& cache, int64_t h, int64_t t) {
    return cache.data() + (h * kCap + t) * kD;
  };
  for (int64_t h = 0; h < kHkv; ++h)
    for (int64_t t = 0; t < kPrefill; ++t)
      for (int64_t c = 0; c < kD; ++c) {
        cache_row(k_cache, h, t)[c] = unit(rng);
        cache_row(v_cache, h, t)[c] = unit(rng);
      }
  const ConstTensor k{k_cache.data(), kHkv * kCap * kD, kCap * kD, kD};
  const ConstTensor v{v_cache.data(), kHkv * kCap * kD, kCap * kD, kD};

  // Prefill: T = 2048, causal, every head, kernel auto.
  std::vector<float> q(size_t(kHq * kPrefill * kD)), out(q.size(), kSentinel);
  std::vector<float> lse(size_t(kHq * kPrefill), kSentinel);
  fill(q);
  Problem prefill;
  prefill.q_heads = kHq;
  prefill.kv_heads = kHkv;
  prefill.q_len = prefill.kv_len = kPrefill;
  prefill.head_dim = kD;
  prefill.q = DenseBHTD(static_cast<const float*>(q.data()), kHq, kPrefill, kD);
  prefill.k = k;
  prefill.v = v;
  prefill.out = DenseBHTD(out.data(), kHq, kPrefill, kD);
  prefill.lse = LseOutput{lse.data(), kHq * kPrefill, kPrefill, 1};
  prefill.causal = Causal::kBottomRight;
  attention(prefill);  // kernel auto, OpenMP's default threads

  // The float64 reference is ~1 G multiply-adds per head here: check heads
  // 0, 13 and 31 (kv heads 0, 3, 7; first, middle and last of a group) as
  // one-head sub-problems that read the prefill's own outputs.
  for (int64_t h : {0, 13, 31}) {
    SCOPED_TRACE("prefill head " + std::to_string(h));
    Problem sub = prefill;
    sub.q_heads = sub.kv_heads = 1;
    sub.q.data = test::F32(prefill.q) + h * prefill.q.head_stride;
    sub.k.data = test::F32(prefill.k) + (h / (kHq / kHkv)) * k.head_stride;
    sub.v.data = test::F32(prefill.v) + (h / (kHq / kHkv)) * v.head_stride;
    sub.out.data = test::F32(prefill.out) + h * prefill.out.head_stride;
    sub.lse.data += h * prefill.lse.head_stride;
    const reference::Result ref = reference::Attention(sub);
    const Errors got = MaxErrors(sub, ref);
    // The bound, from the naive kernel on the same head.
    std::vector<float> n_out(size_t(kPrefill * kD)), n_lse(static_cast<size_t>(kPrefill));
    Problem naive = sub;
    naive.out = DenseBHTD(n_out.data(), 1, kPrefill, kD);
    naive.lse = LseOutput{n_lse.data(), kPrefill, kPrefill, 1};
    Options naive_options;
    naive_options.kernel = KernelId::kNaive;
    attention(naive, naive_options);
    const Bound bound = BoundFromNaive(MaxErrors(naive, ref), naive, ref);
    EXPECT_LE(got.out, bound.out);
    EXPECT_LE(got.lse, bound.lse);
  }

  // 64 decode steps: append the new token's K/V row to every kv head, then
  // attend with T_q = 1 over kv_len = 2049 .. 2112, bottom-right causal.
  std::vector<float> dq(size_t(kHq * kD)), dout(dq.size()), dlse(static_cast<size_t>(kHq));
  std::vector<float> n_out(dq.size()), n_lse(static_cast<size_t>(kHq));
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t t = kPrefill + step;
    for (int64_t h = 0; h < kHkv; ++h)
      for (int64_t c = 0; c < kD; ++c) {
        cache_row(k_cache, h, t)[c] = unit(rng);
        cache_row(v_cache, h, t)[c] = unit(rng);
      }
    fill(dq);
    std::fill(dout.begin(), dout.end(), kSentinel);
    std::fill(dlse.begin(), dlse.end(), kSentinel);
    Problem decode = prefill;
    decode.q_len = 1;
    decode.kv_len = t + 1;
    decode.q = DenseBHTD(static_cast<const float*>(dq.data()), kHq, 1, kD);
    decode.out = DenseBHTD(dout.data(), kHq, 1, kD);
    decode.lse = LseOutput{dlse.data(), kHq, 1, 1};
    attention(decode);
    SCOPED_TRACE("decode step " + std::to_string(step) + ", kv_len " +
                 std::to_string(decode.kv_len));
    const reference::Result ref = reference::Attention(decode);
    Problem naive = decode;
    naive.out = DenseBHTD(n_out.data(), kHq, 1, kD);
    naive.lse = LseOutput{n_lse.data(), kHq, 1, 1};
    Options naive_options;
    naive_options.kernel = KernelId::kNaive;
    attention(naive, naive_options);
    const Bound bound = BoundFromNaive(MaxErrors(naive, ref), naive, ref);
    const Errors got = MaxErrors(decode, ref);
    ASSERT_LE(got.out, bound.out);
    ASSERT_LE(got.lse, bound.lse);
  }
}

}  // namespace
}  // namespace attn::test
