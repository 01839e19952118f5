// Helpers of the serving tests (varlen_test.cc, paged_test.cc): typed
// buffers, errors of packed outputs against the float64 reference, the
// bound, and the loop over every kernel variant and target.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/serving_reference.h"
#include "tests/test_util.h"

namespace attn::test {

// Values of one element type: `f` holds them as floats (rounded to the
// type), `bits` the 16-bit patterns for bf16 / f16.
struct Buffer {
  DType type = DType::kF32;
  std::vector<float> f;
  std::vector<uint16_t> bits;

  void* data() { return type == DType::kF32 ? static_cast<void*>(f.data()) : bits.data(); }
  void Set(size_t i, float x) {
    if (type == DType::kF32) {
      f[i] = x;
      return;
    }
    bits[i] = type == DType::kBF16 ? BFloat16Bits(x) : Float16Bits(x);
    f[i] = type == DType::kBF16 ? FromBFloat16Bits(bits[i]) : FromFloat16Bits(bits[i]);
  }
  float Get(size_t i) const {
    if (type == DType::kF32) return f[i];
    return type == DType::kBF16 ? FromBFloat16Bits(bits[i]) : FromFloat16Bits(bits[i]);
  }
  void Resize(DType t, size_t n, float value) {
    type = t;
    f.assign(n, 0.0f);
    bits.assign(type == DType::kF32 ? 0 : n, 0);
    for (size_t i = 0; i < n; ++i) Set(i, value);
  }
  void Random(DType t, size_t n, std::mt19937_64& rng, float magnitude) {
    Resize(t, n, 0.0f);
    std::uniform_real_distribution<float> u(-magnitude, magnitude);
    for (size_t i = 0; i < n; ++i) Set(i, u(rng));
  }
  bool operator==(const Buffer& o) const { return type == o.type && f == o.f && bits == o.bits; }
};

// Score modifiers of a serving case (attn.h "Score modifiers"), applied
// per sequence by the library and by the reference alike.
struct ServingModifiers {
  Window window;
  float softcap = 0.0f;
  enum class Alibi { kNone, kShared, kPerSequence } alibi = Alibi::kNone;
  bool sinks = false;
};

// The slope and sink arrays of a case: slopes in [0.02, 0.5] (per sequence:
// a batch stride of q_heads + 3, the 3 unread), sinks in [-1, 3] (as large
// as the lse of a short row: they move the result) and one -inf (no sink).
struct ServingModifierArrays {
  std::vector<float> slopes, sinks;

  template <class ServingProblem>
  void Apply(const ServingModifiers& m, int64_t batch, int64_t q_heads, uint64_t seed,
             ServingProblem& p) {
    std::mt19937_64 rng(seed ^ 0x5eed);
    p.window = m.window;
    p.softcap = m.softcap;
    if (m.alibi != ServingModifiers::Alibi::kNone) {
      const bool per_seq = m.alibi == ServingModifiers::Alibi::kPerSequence;
      const int64_t stride = per_seq ? q_heads + 3 : 0;
      slopes.assign(size_t(per_seq ? batch * stride : q_heads), std::nanf(""));
      std::uniform_real_distribution<float> u(0.02f, 0.5f);
      for (int64_t b = 0; b < (per_seq ? batch : 1); ++b)
        for (int64_t h = 0; h < q_heads; ++h) slopes[size_t(b * stride + h)] = u(rng);
      p.alibi_slopes = {slopes.data(), stride};
    }
    if (m.sinks) {
      sinks.resize(size_t(q_heads));
      std::uniform_real_distribution<float> u(-1.0f, 3.0f);
      for (float& s : sinks) s = u(rng);
      sinks.back() = -std::numeric_limits<float>::infinity();
      p.sinks = {sinks.data(), q_heads};
    }
  }
};

// What the tests write into unwritten outputs, to see what a call wrote.
inline constexpr float kServingSentinel = -12345.0f;

inline double PackedDiff(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) {
    return std::isnan(want) && std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isinf(want) || std::isinf(got)) {
    return got == want ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::fabs(got - want);
}

// Largest errors of a packed output (dense [total_q, heads, dv] in `out`)
// and lse (dense [total_q, heads], or empty) against the reference.
inline Errors PackedErrors(const Buffer& out, const std::vector<float>& lse,
                           const reference::PackedResult& ref) {
  Errors e;
  for (size_t i = 0; i < ref.out.size(); ++i) e.out = std::max(e.out, PackedDiff(out.Get(i), ref.out[i]));
  for (size_t i = 0; i < lse.size(); ++i) e.lse = std::max(e.lse, PackedDiff(lse[i], ref.lse[i]));
  return e;
}

// The kernels' bound (test_util.cc BoundFromNaive: 4x the naive kernel's
// own error on the same call plus a floor of 16 float ULPs of max|V| and
// one ULP of a 16-bit output), with every V value the call can read in
// `all_v`. A serving call runs each sequence's pages or packed rows through
// the same kernels, plus at most a float32 -> double merge per page of the
// partial results, which is one more reordering of the same sums (the
// parallel kernel's split-KV, covered by the same bound in kernels_test).
// All-bf16 q, k, v on a bf16 dot-product path round the weights P to bf16
// before P·V: up to 2^-9 · max|V| more (bf16dot_test.cc derives it per
// element as 2^-9 · ref(|V|) <= 2^-9 · max|V|); allowed twice that.
inline Bound PackedBound(const Errors& naive, const reference::PackedResult& ref,
                         const std::vector<float>& all_v, int64_t dv, DType out_type,
                         bool bf16_dot) {
  Problem p;
  p.head_dim = dv;
  p.value_dim = dv;
  p.kv_len = std::max<int64_t>(1, int64_t(all_v.size()) / dv);
  std::vector<float> v = all_v;
  v.resize(size_t(p.kv_len * dv), 0.0f);
  p.v = DenseBHTD(v.data(), 1, p.kv_len, dv);
  p.out.dtype = out_type;
  reference::Result r;
  r.out = ref.out;
  r.lse = ref.lse;
  Bound b = BoundFromNaive(naive, p, r);
  if (bf16_dot && CurrentDotPath() != "widen") {
    double max_v = 0;
    for (float x : all_v) max_v = std::max(max_v, double(std::fabs(x)));
    b.out += std::ldexp(max_v, -8);
  }
  return b;
}

// The naive kernel's own error on a serving problem: each sequence's dense
// problem (reference::ForEachSequence) through attn::attention with the
// naive kernel on one thread, float32 output, against the reference's rows.
// Measured outside the serving executor, so that a bug there (which the
// naive kernel run through it would share) cannot loosen the bound.
template <class ServingProblem>
Errors DenseNaiveErrors(const ServingProblem& p, const reference::PackedResult& ref) {
  Errors e;
  const int64_t dv = p.ValueDim(), heads = p.q_heads;
  Options naive;
  naive.kernel = KernelId::kNaive;
  naive.threads = 1;
  std::vector<float> out, lse;
  reference::ForEachSequence(p, [&](int64_t, int64_t q0, const Problem& sequence) {
    Problem dense = sequence;
    const int64_t tq = dense.q_len;
    out.assign(size_t(heads * tq * dv), 0.0f);
    lse.assign(size_t(heads * tq), 0.0f);
    dense.out = {out.data(), 0, tq * dv, dv, DType::kF32};  // [head][row][col]
    dense.lse = {lse.data(), 0, tq, 1};
    attention(dense, naive);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        const size_t packed = size_t((q0 + i) * heads + h);
        for (int64_t c = 0; c < dv; ++c) {
          e.out = std::max(e.out, PackedDiff(out[size_t((h * tq + i) * dv + c)],
                                             ref.out[packed * size_t(dv) + size_t(c)]));
        }
        e.lse = std::max(e.lse, PackedDiff(lse[size_t(h * tq + i)], ref.lse[packed]));
      }
  });
  return e;
}

// Runs `run(options)` (which clears the outputs, calls the library and
// returns its errors) for every variant of KernelVariants() (the naive
// kernel through the serving executor among them) on every supported
// target, each within the bound of the naive kernel's own error
// `naive_err` (DenseNaiveErrors).
inline void ExpectServingVariantsWithinBound(
    const std::function<Errors(const Options&)>& run, const Errors& naive_err,
    const std::function<Bound(const Errors&)>& bound_from_naive, int extra_threads = 3) {
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    const Bound bound = bound_from_naive(naive_err);  // the dot path follows the target
    for (const Variant& variant : KernelVariants(extra_threads)) {
      SCOPED_TRACE(target + " " + variant.name);
      const Errors e = run(variant.options);
      EXPECT_LE(e.out, bound.out) << "naive error " << naive_err.out;
      EXPECT_LE(e.lse, bound.lse) << "naive lse error " << naive_err.lse;
    }
  }
  ForceTarget("auto");
}

// Expects `call` to throw attn::Error naming `field` (and, if given, the
// value), e.g. ExpectError("cu_seqlens_k[2]", "3", [&] { ... }).
inline void ExpectError(const std::string& field, const std::string& value,
                        const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    if (!value.empty()) {
      EXPECT_EQ(e.value(), value) << e.what();
    }
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

}  // namespace attn::test
