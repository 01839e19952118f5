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

// Runs `run(options)` (which clears the outputs, calls the library and
// returns its errors) for the naive kernel, whose error gives the bound,
// then for every variant of KernelVariants() on every supported target.
inline void ExpectServingVariantsWithinBound(
    const std::function<Errors(const Options&)>& run,
    const std::function<Bound(const Errors&)>& bound_from_naive, int extra_threads = 3) {
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Errors naive_err = run(naive);
  for (const std::string& target : SupportedTargets()) {
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
