// Unit tests of the kernels' SIMD building blocks (issue 14), one test per
// block, each run on every Highway target that is both compiled and
// supported by this CPU (hwy/tests/hwy_gtest.h: one test case per target).
// The kernels tests compare whole problems with the float64 reference; these
// pin a failure to the block, at the sizes where blocks go wrong: below, at
// and above each vector, panel, register-block and key-block width, which
// differ per target and so are read at run time (hn::Lanes, PanelWidth,
// kRows, NarrowKeysPerBlock). Every expectation is computed here in scalar
// code (double where it is numeric) from the block's documented semantics,
// never by other library code.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/blocks_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

// Each -inl.h includes what it uses: first here, the decode walks' leaves
// before the files that include them, then the reverse of the kernels'
// order (the decode walks pull in softmax-inl.h and microkernels-inl.h
// themselves; later includes are no-ops by the per-target include guards).
#include "kernels/decode/quant_passes-inl.h"
#include "kernels/decode/row-inl.h"
#include "kernels/decode/pipelined-inl.h"
#include "kernels/decode/tiled-inl.h"
#include "kernels/decode/walk-inl.h"
#include "kernels/streaming/streaming-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/modifiers-inl.h"
#include "kernels/common/widen-inl.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"

// ---- Target-independent helpers (compiled once, outside the per-target
// code): sample inputs and the scalar expectations.
#ifndef ATTN_TESTS_BLOCKS_TEST_HELPERS_
#define ATTN_TESTS_BLOCKS_TEST_HELPERS_
namespace attn::blocks_test {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kU = 1.0 / (1 << 24);  // float's unit roundoff, 2^-24
// Written to every output slot a block must not touch.
constexpr float kSentinel = -7777.0f;

// Reports at most this many mismatches per test case, then only counts.
constexpr int kMaxReports = 8;

// Samples in [lo, hi) as float.
std::vector<float> Uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- ExpNonPositive ----------------------------------------------------------

// -126·ln 2: below it x·log2 e < -126 and ExpNonPositive gives 0 (its comment).
const double kExpCut = -126.0 * std::log(2.0);

// The inputs, padded with 0 to a multiple of every target's lane count:
// - a uniform grid of 2^21 points from 0 to -110, past the cut-off and
//   float's own underflow to 0 at -103.3 (steps of 5e-5: every n =
//   round(x·log2 e), ~13000 points of each f);
// - every 509th float bit pattern from the smallest subnormal magnitude to
//   -110 (~2^21 points, log-spaced: |x| near 0, where exp(x) rounds to 1);
// - each half-integer of x·log2 e, where n rounds the other way and |f| is
//   largest (the polynomial's worst case), with 8 floats either side;
// - the cut-off with 64 floats either side;
// - 0, -0, the smallest subnormal and normal, -FLT_MAX, -inf.
std::vector<float> ExpSamples() {
  std::vector<float> x;
  const int kGrid = 1 << 21;
  for (int i = 0; i <= kGrid; ++i) x.push_back(float(-110.0 * i / kGrid));
  const uint32_t neg_110 = [] {
    const float f = -110.0f;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }();
  for (uint32_t b = 0x80000001u; b < neg_110; b += 509) {
    float f;
    memcpy(&f, &b, 4);
    x.push_back(f);
  }
  const auto around = [&](double center, int count) {
    const float c = float(center);
    float lo = c, hi = c;
    x.push_back(c);
    for (int i = 0; i < count; ++i) {
      lo = std::nextafter(lo, -kInf);
      hi = std::nextafter(hi, 0.0f);
      x.push_back(lo);
      x.push_back(hi);
    }
  };
  for (int k = 0; k <= 126; ++k) around(-(k + 0.5) * std::log(2.0), 8);
  around(kExpCut, 64);
  for (float f : {0.0f, -0.0f, -std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::min(), -std::numeric_limits<float>::max(), -kInf}) {
    x.push_back(f);
  }
  while (x.size() % 64 != 0) x.push_back(0.0f);
  return x;
}

// The bound of ExpNonPositive's relative error, in units of 2^-24·(1 + |x|).
// Why that unit: exp's condition number is |x|, so rounding x·log2 e to
// float once (as any float exp2-based method does) moves the result by up
// to |x|·2^-24 relative, and float log2 e adds 0.22·|x|·2^-24; the
// polynomial and the final product add a few 2^-24 at any x. A bound flat
// in x would have to allow the 55·2^-24 measured at x = -44 everywhere, and
// a polynomial error of 30·2^-24 near 0 would pass it.
// Measured on AMD EPYC Zen 3: max 1.20 over these samples on AVX2 (FMA;
// 3.3e-6 relative at x = -44.47) and 1.21 on SSE4, SSSE3 and EMU128 (no
// FMA); over every float in [-87.34, 0] (a one-off exhaustive run, 22 s,
// not part of the test) 1.21 on AVX2 and 1.25 on SSE4 (at x = -0.345). The
// bound is 2.4 times that. The f^2 coefficient off by 3e-5 relative gives
// 30, float log2 e off by 3e-6 gives 30 near 0 and a premature flush near
// the cut-off; a degree-6 polynomial (truncation 1.2e-7, 2·2^-24) gives
// 2.8 on AVX2 and 3.04 on SSE4: at the bound.
constexpr double kExpBound = 3.0;

// Checks e[i] = ExpNonPositive(x[i]) against std::exp in double: within
// kExpBound above the cut-off; +0 below it (the documented flush: not a
// subnormal, not garbage); either of the two within 4·2^-24 relative of the
// cut-off (the flush tests the product x·log2 e as rounded to float); and
// exactly 1 at x = ±0 (the row max's own weight, so a row's sum is >= 1).
void CheckExp(const std::vector<float>& x, const std::vector<float>& e, const char* target) {
  const double window = 4.0 * kU * -kExpCut;
  int bad = 0;
  double worst = 0.0, worst_x = 0.0, worst_rel = 0.0;
  double worst_small = 0.0;  // |x| <= 1: the polynomial's own error
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], got = e[i];
    const double exact = std::exp(xi);
    const double rel = std::fabs(got - exact) / exact;
    const double units = rel / (kU * (1.0 + std::fabs(xi)));
    const bool in_bound = std::isfinite(got) && units <= kExpBound;
    bool ok;
    const char* rule = "within the bound";
    if (xi == 0.0) {
      ok = got == 1.0;
      rule = "exactly 1";
    } else if (xi > kExpCut + window) {
      ok = in_bound;
      if (units > worst) {
        worst = units;
        worst_x = xi;
        worst_rel = rel;
      }
      if (std::fabs(xi) <= 1.0) worst_small = std::max(worst_small, units);
    } else if (xi < kExpCut - window) {
      ok = got == 0.0 && !std::signbit(got);
      rule = "+0 (x·log2 e < -126)";
    } else {
      ok = got == 0.0 || in_bound;
      rule = "0 or within the bound (at the cut-off)";
    }
    if (!ok && ++bad <= kMaxReports) {
      ADD_FAILURE() << target << ": ExpNonPositive(" << x[i] << ") = " << e[i]
                    << ", exp = " << exact << ", expected " << rule << "; relative error "
                    << rel << " = " << units << " x 2^-24·(1 + |x|), bound " << kExpBound;
    }
  }
  EXPECT_EQ(bad, 0) << target << ": " << bad << " of " << x.size() << " samples out of bound";
  printf("[ %s ] ExpNonPositive: %zu samples, max error %.3f x 2^-24·(1 + |x|) (relative %.3g at "
         "x = %.9g; %.3f for |x| <= 1), bound %.1f\n",
         target, x.size(), worst, worst_rel, worst_x, worst_small, kExpBound);
}

// ---- ForEachRowBlock ---------------------------------------------------------

// The blocks ForEachRowBlock's comment specifies for n rows and register
// blocks of k rows: k at a time; a remainder of at least k/2 rows is a last
// block of its own; a smaller one (and n >= k) is folded with the last full
// block into two halves, the larger first.
std::vector<std::pair<int64_t, int64_t>> ExpectedRowBlocks(int64_t n, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  const int64_t full = n / k, rest = n % k;
  const bool fold = rest > 0 && rest < k / 2 && full > 0;
  for (int64_t b = 0; b < full - (fold ? 1 : 0); ++b) blocks.push_back({b * k, k});
  const int64_t first = int64_t(blocks.size()) * k;
  if (fold) {
    blocks.push_back({first, (k + rest + 1) / 2});
    blocks.push_back({first + (k + rest + 1) / 2, (k + rest) / 2});
  } else if (rest > 0) {
    blocks.push_back({first, rest});
  }
  return blocks;
}

// Row counts for register blocks of k rows: every n up to 4k + 3 (0, 1,
// below, at and above k/2, k, 2k ...), and head dims 64 ... 1000.
std::vector<int64_t> RowBlockSizes(int64_t k) {
  std::vector<int64_t> sizes;
  for (int64_t n = 0; n <= 4 * k + 3; ++n) sizes.push_back(n);
  for (int64_t n : {64, 80, 96, 100, 128, 192, 256, 1000}) sizes.push_back(n);
  return sizes;
}

// Checks the blocks seen for n rows: properties first (cover [0, n) once,
// in order, each 1 ... k rows, none under k/2 unless n is, as few blocks as
// k allows), with clear messages, then the exact documented split.
void CheckRowBlocks(int64_t n, int64_t k, const std::vector<std::pair<int64_t, int64_t>>& got,
                    const char* target) {
  const std::string where = std::string(target) + ", kRows " + std::to_string(k) + ", n " +
                            std::to_string(n);
  int64_t next = 0;
  for (const auto& [first, rows] : got) {
    EXPECT_EQ(first, next) << where << ": a gap, an overlap or out of order";
    EXPECT_GE(rows, 1) << where;
    EXPECT_LE(rows, k) << where << ": larger than a register block";
    EXPECT_GE(rows, std::min(n, k / 2)) << where << ": a block too short to hide the FMA latency";
    next = first + rows;
  }
  EXPECT_EQ(next, n) << where << ": rows not covered";
  EXPECT_EQ(int64_t(got.size()), (n + k - 1) / k) << where << ": more blocks than needed";
  EXPECT_EQ(got, ExpectedRowBlocks(n, k)) << where;
}

// ---- FinishPanel -------------------------------------------------------------

// One FinishPanel call: the panel's accumulator Ot (dv x P, aligned as the
// kernels' scratch is) and stats, and the outputs pre-filled with kSentinel.
// Rows i with i % 5 == 2 saw no key (max -inf, sum 0) and hold NaN and Inf in
// Ot (V may hold them at keys the row never weighted: its output must be 0,
// not acc·0); rows with i % 7 == 4 have the NaN flag. Ot rows past `rows`
// (padding lanes) hold NaN and must reach no output.
struct FinishCase {
  int64_t P, rows, dv, out_stride, lse_stride;
  bool with_lse;
  hwy::AlignedFreeUniquePtr<float[]> ot;
  std::vector<float> max, sum, nan;
  std::vector<float> out, lse;

  static bool Empty(int64_t i) { return i % 5 == 2; }
  static bool NaNRow(int64_t i) { return i % 7 == 4; }

  FinishCase(std::mt19937& rng, int64_t P_, int64_t rows_, int64_t dv_, bool with_lse_)
      : P(P_), rows(rows_), dv(dv_), out_stride(dv_ + 3), lse_stride(2), with_lse(with_lse_) {
    ot = hwy::AllocateAligned<float>(size_t(std::max<int64_t>(1, dv * P)));
    std::uniform_real_distribution<float> value(-4.0f, 4.0f), row_max(-30.0f, 30.0f),
        log_sum(std::log(0.5f), std::log(1000.0f));
    max.resize(size_t(P));
    sum.resize(size_t(P));
    nan.assign(size_t(P), 0.0f);
    for (int64_t i = 0; i < P; ++i) {
      max[size_t(i)] = row_max(rng);
      sum[size_t(i)] = std::exp(log_sum(rng));
      if (Empty(i)) {
        max[size_t(i)] = -kInf;
        sum[size_t(i)] = 0.0f;
      }
      if (NaNRow(i)) nan[size_t(i)] = 1.0f;
      for (int64_t c = 0; c < dv; ++c) {
        float& o = ot[size_t(c * P + i)];
        o = value(rng);
        if (i >= rows) o = std::numeric_limits<float>::quiet_NaN();
        if (Empty(i)) o = c % 2 ? kInf : std::numeric_limits<float>::quiet_NaN();
      }
    }
    // One row more than written, to catch a write past the last row.
    out.assign(size_t((rows + 1) * out_stride), kSentinel);
    lse.assign(size_t((rows + 1) * lse_stride), kSentinel);
  }

  // out[i][c] = Ot[c][i] / sum[i] and lse[i] = max[i] + log(sum[i]) (in
  // double); 0 and -inf for a row that saw no key; NaN, NaN for a NaN row.
  // Nothing else written. Bounds: the kernel multiplies by float 1/sum, two
  // roundings, so 2·2^-24 relative, allowed 4·2^-24; lse is float log then
  // one add, within 2^-23·|log sum| + 2^-24·(|max| + |log sum|), allowed
  // 2^-22·(|max| + |log sum|) (absolute: max + log sum may cancel).
  void Check(const char* target, double* worst_out, double* worst_lse) const {
    const std::string where = std::string(target) + ", P " + std::to_string(P) + ", rows " +
                              std::to_string(rows) + ", dv " + std::to_string(dv) +
                              (with_lse ? "" : ", no lse");
    int bad = 0;
    const auto report = [&](int64_t i, int64_t c, float got, double want) {
      if (++bad <= kMaxReports) {
        ADD_FAILURE() << where << ": row " << i << ", column " << c
                      << " (-1: lse, past dv: padding) is " << got << ", expected " << want;
      }
    };
    for (int64_t i = 0; i <= rows; ++i) {
      for (int64_t c = 0; c < out_stride; ++c) {
        const float got = out[size_t(i * out_stride + c)];
        if (i == rows || c >= dv) {
          if (got != kSentinel) report(i, c, got, kSentinel);
        } else if (NaNRow(i)) {
          if (!std::isnan(got)) report(i, c, got, NAN);
        } else if (Empty(i)) {
          if (got != 0.0f) report(i, c, got, 0.0);
        } else {
          const double want = double(ot[size_t(c * P + i)]) / sum[size_t(i)];
          const double err = std::fabs(got - want) / (kU * std::fabs(want));
          if (want != 0.0) *worst_out = std::max(*worst_out, err);
          if (!(err <= 4.0) && !(got == 0.0f && want == 0.0)) report(i, c, got, want);
        }
      }
      for (int64_t s = 0; s < lse_stride; ++s) {
        const float got = lse[size_t(i * lse_stride + s)];
        if (!with_lse || i == rows || s > 0) {
          if (got != kSentinel) report(i, -1, got, kSentinel);
        } else if (NaNRow(i)) {
          if (!std::isnan(got)) report(i, -1, got, NAN);
        } else if (Empty(i)) {
          if (got != -kInf) report(i, -1, got, -kInf);
        } else {
          const double m = max[size_t(i)], l = std::log(double(sum[size_t(i)]));
          const double scale = kU * (std::fabs(m) + std::fabs(l));
          const double err = std::fabs(got - (m + l)) / scale;
          *worst_lse = std::max(*worst_lse, err);
          if (!(err <= 4.0)) report(i, -1, got, m + l);
        }
      }
    }
    EXPECT_EQ(bad, 0) << where;
  }
};

// ---- Narrow dot products -----------------------------------------------------

// Head dims for vectors of N lanes: 1, around 4 (one 128-bit block of the
// horizontal sums), around N, 2N and 4N, and the usual 64 / 128.
std::vector<int64_t> NarrowDims(int64_t N) {
  std::vector<int64_t> dims = {1, 2, 3, 4, 5, 7, 8, 9, N - 1, N, N + 1, 2 * N - 1, 2 * N,
                               2 * N + 1, 4 * N + 3, 64, 128};
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  dims.erase(std::remove_if(dims.begin(), dims.end(), [](int64_t d) { return d < 1; }), dims.end());
  return dims;
}

// Score s = Σ_c q[c]·k[c] in float against the double dot product. Bound:
// each product is rounded at most once and each term goes through at most
// d additions whatever the order (FMA chains per lane, the per-block sums,
// the cross-block sum, the scalar ragged tail), so |error| <= (d + 1)·2^-24
// ·Σ|q[c]·k[c]| to first order; allowed (d + 2)·2^-24·Σ|q·k|. A missing,
// repeated or wrong term is off by about Σ|q·k| / d, far above it.
struct DotCheck {
  double worst = 0.0;  // max |error| / (2^-24·Σ|q·k|)
  int bad = 0;
  void Add(const float* q, const float* k, int64_t d, float got, const std::string& where) {
    double dot = 0.0, mag = 0.0;
    for (int64_t c = 0; c < d; ++c) {
      dot += double(q[c]) * k[c];
      mag += std::fabs(double(q[c]) * k[c]);
    }
    const double err = std::fabs(got - dot) / (kU * mag);
    worst = std::max(worst, err);
    if (!(err <= double(d + 2)) && ++bad <= kMaxReports) {
      ADD_FAILURE() << where << ": score " << got << ", expected " << dot << " (error " << err
                    << " x 2^-24·Σ|q·k|, bound " << d + 2 << ")";
    }
  }
};

}  // namespace attn::blocks_test
#endif  // ATTN_TESTS_BLOCKS_TEST_HELPERS_

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace bt = attn::blocks_test;

const char* ThisTarget() { return hwy::TargetName(HWY_TARGET); }

// ExpNonPositive against std::exp over its whole input range (see CheckExp
// and kExpBound), and its lanes independent of a NaN lane: for NaN its
// comment promises nothing (the softmax's NaN flag overrides that lane), so
// the NaN lanes' values are not checked, but the other lanes of the same
// vector must be exactly what they are without the NaN.
// LoadWide (widen-inl.h) on every bf16 and f16 bit pattern equals the
// scalar widening (convert.h, itself checked against the types' definition
// in tests/dtype_test.cc): inf stays inf, NaN stays NaN, subnormals exact.
HWY_NOINLINE void TestLoadWide() {
  const DF df;
  const size_t N = hn::Lanes(df);
  std::vector<uint16_t> bits(65536 + N);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(i);
  HWY_ALIGN float got[hn::MaxLanes(DF())];
  int bad = 0;
  for (size_t i = 0; i < 65536; i += N) {
    for (int type = 0; type < 2; ++type) {
      if (type == 0) {
        hn::Store(LoadWide(df, reinterpret_cast<const hwy::float16_t*>(bits.data() + i)), df, got);
      } else {
        hn::Store(LoadWide(df, reinterpret_cast<const hwy::bfloat16_t*>(bits.data() + i)), df, got);
      }
      for (size_t lane = 0; lane < N; ++lane) {
        const uint16_t h = bits[i + lane];
        const float want = type == 0 ? internal::FloatFromF16(h) : internal::FloatFromBF16(h);
        const bool same = std::isnan(want) ? std::isnan(got[lane])
                                           : (got[lane] == want &&
                                              std::signbit(got[lane]) == std::signbit(want));
        if (!same && ++bad <= 5) {
          ADD_FAILURE() << ThisTarget() << (type == 0 ? " f16 " : " bf16 ") << "bits 0x" << std::hex
                        << h << std::dec << ": LoadWide " << got[lane] << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << ThisTarget();
}

// WidenScalar (widen-inl.h, the scalar edges of the widening loops) on every
// bf16 and f16 bit pattern equals the scalar widening of convert.h, sign,
// inf, NaN and subnormals included. Where hwy::float16_t is the native
// __fp16 (aarch64) it converts in hardware, elsewhere from the bits.
HWY_NOINLINE void TestWidenScalar() {
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    for (int type = 0; type < 2; ++type) {
      float got;
      if (type == 0) {
        hwy::float16_t x;
        memcpy(&x, &h, sizeof x);
        got = WidenScalar(&x);
      } else {
        hwy::bfloat16_t x;
        memcpy(&x, &h, sizeof x);
        got = WidenScalar(&x);
      }
      const float want = type == 0 ? internal::FloatFromF16(h) : internal::FloatFromBF16(h);
      const bool same = std::isnan(want) ? std::isnan(got)
                                         : (got == want && std::signbit(got) == std::signbit(want));
      if (!same && ++bad <= 5) {
        ADD_FAILURE() << ThisTarget() << (type == 0 ? " f16 " : " bf16 ") << "bits 0x" << std::hex
                      << h << std::dec << ": WidenScalar " << got << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0) << ThisTarget();
}

HWY_NOINLINE void TestExpNonPositive() {
  const DF df;
  const size_t N = hn::Lanes(df);
  const std::vector<float> x = bt::ExpSamples();
  std::vector<float> e(x.size());
  for (size_t i = 0; i < x.size(); i += N) {
    hn::StoreU(ExpNonPositive(hn::LoadU(df, x.data() + i)), df, e.data() + i);
  }
  bt::CheckExp(x, e, ThisTarget());

  std::mt19937 rng(14);
  for (int trial = 0; trial < 64; ++trial) {
    std::vector<float> v = bt::Uniform(rng, N, -90.0f, 0.0f), with_nan = v;
    for (size_t i = 0; i < N; ++i) {
      if ((trial >> (i % 6)) & 1) with_nan[i] = std::numeric_limits<float>::quiet_NaN();
    }
    std::vector<float> clean_e(N), nan_e(N);
    hn::StoreU(ExpNonPositive(hn::LoadU(df, v.data())), df, clean_e.data());
    hn::StoreU(ExpNonPositive(hn::LoadU(df, with_nan.data())), df, nan_e.data());
    for (size_t i = 0; i < N; ++i) {
      if (std::isnan(with_nan[i])) continue;
      EXPECT_EQ(memcmp(&clean_e[i], &nan_e[i], 4), 0)
          << ThisTarget() << ": lane " << i << " (x = " << v[i] << ") changed by a NaN lane: "
          << clean_e[i] << " vs " << nan_e[i];
    }
  }
}

// ForEachRowBlock's blocks for n rows below, at and above multiples of kRows
// and of kRows / 2 (see CheckRowBlocks).
HWY_NOINLINE void TestForEachRowBlock() {
  for (int64_t n : bt::RowBlockSizes(kRows)) {
    std::vector<std::pair<int64_t, int64_t>> got;
    ForEachRowBlock(n, [&](int64_t first, int64_t rows) { got.push_back({first, rows}); });
    bt::CheckRowBlocks(n, kRows, got, ThisTarget());
  }
}

// FinishPanel, driven directly with a hand-built accumulator and stats (see
// FinishCase): every row count up to the panel width (ragged panels, 4-row
// transpose blocks and their remainders), dv below, at and above 4 and the
// vector width, with and without lse.
HWY_NOINLINE void TestFinishPanel() {
  const int64_t P = int64_t(PanelWidth());
  const int64_t N = int64_t(hn::Lanes(DF()));
  std::vector<int64_t> dvs = {1, 2, 3, 4, 5, 7, 8, 9, N - 1, N, N + 1, 2 * N + 3, 64};
  std::sort(dvs.begin(), dvs.end());
  dvs.erase(std::unique(dvs.begin(), dvs.end()), dvs.end());
  std::mt19937 rng(14);
  double worst_out = 0.0, worst_lse = 0.0;
  for (int64_t rows = 1; rows <= P; ++rows) {
    for (int64_t dv : dvs) {
      for (bool with_lse : {true, false}) {
        bt::FinishCase fc(rng, P, rows, dv, with_lse);
        const PanelStats s{fc.max.data(), fc.sum.data(), fc.nan.data()};
        FinishPanel(fc.ot.get(), s, rows, dv, fc.out.data(), fc.out_stride,
                    with_lse ? fc.lse.data() : nullptr, fc.lse_stride);
        fc.Check(ThisTarget(), &worst_out, &worst_lse);
      }
    }
  }
  printf("[ %s ] FinishPanel: P %d, rows 1..%d, %zu dv; max error out %.2f x 2^-24 relative "
         "(bound 4), lse %.2f x 2^-24·(|max| + |log sum|) (bound 4)\n",
         ThisTarget(), int(P), int(P), dvs.size(), worst_out, worst_lse);
}

// SumFourPerBlock: w[4b + m] = Σ of a_m's lanes in 128-bit block b. Random
// integers in [-1000, 1000], so every sum is exact in float and a lane
// routed to the wrong sum shows as an inequality.
HWY_NOINLINE void TestSumFourPerBlock() {
  const DF df;
  const size_t N = hn::Lanes(df);
  std::mt19937 rng(14);
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<float> a(4 * N), w(N);
  for (int trial = 0; trial < 200; ++trial) {
    for (float& x : a) x = float(value(rng));
    const float* p = a.data();
    const VF sums = SumFourPerBlock(hn::LoadU(df, p), hn::LoadU(df, p + N),
                                    hn::LoadU(df, p + 2 * N), hn::LoadU(df, p + 3 * N));
    hn::StoreU(sums, df, w.data());
    for (size_t b = 0; b < N / 4; ++b) {
      for (size_t m = 0; m < 4; ++m) {
        float want = 0.0f;
        for (size_t l = 0; l < 4; ++l) want += a[m * N + 4 * b + l];
        ASSERT_EQ(w[4 * b + m], want) << ThisTarget() << ": block " << b << ", vector " << m;
      }
    }
  }
}

// NarrowScoreTile<R> (NarrowScoreBlock<R, KB> on whole blocks of KB keys,
// <R, 1> on the rest): s(r)[j] = q(r)·K[j] for the R rows of a group, for
// every key count up to 3·KB + 1 and d below, at and above 4, N, 2N (see
// NarrowDims), groups at row 0 and row 1 of the scratch, K rows unaligned
// with NaN between them and NaN in the q rows' padding past d (a read past
// d would show), V prefetched or not.
// Score slots past the tile's keys and rows outside the group keep their
// sentinel.
template <int R>
void CheckNarrowScoreTile(bt::DotCheck& check) {
  constexpr int KB = NarrowKeysPerBlock<R>();
  const int64_t N = int64_t(hn::Lanes(DF()));
  const int64_t max_keys = 3 * KB + 1;
  std::mt19937 rng(14 + R);
  for (int64_t d : bt::NarrowDims(N)) {
    const int64_t k_stride = d + 3;
    std::vector<float> k = bt::Uniform(rng, size_t(max_keys * k_stride), -1.0f, 1.0f);
    for (int64_t j = 0; j < max_keys; ++j) {
      for (int64_t c = d; c < k_stride; ++c) k[size_t(j * k_stride + c)] = NAN;
    }
    const int64_t dv = 5;
    const std::vector<float> v = bt::Uniform(rng, size_t(max_keys * dv), -1.0f, 1.0f);
    for (int64_t row0 : {0, 1}) {
      const int64_t rows = row0 + R + 1;  // a row after the group, too
      NarrowScratch scratch;
      scratch.Reserve(rows, d, max_keys, dv);
      const int64_t s_stride = (max_keys + N - 1) / N * N;
      const int64_t q_stride = scratch.q(1) - scratch.q(0);
      for (int64_t keys = 0; keys <= max_keys; ++keys) {
        for (bool prefetch : {false, true}) {
          for (int64_t r = 0; r < rows; ++r) {
            const std::vector<float> q = bt::Uniform(rng, size_t(d), -1.0f, 1.0f);
            std::copy(q.begin(), q.end(), scratch.q(r));
            std::fill(scratch.q(r) + d, scratch.q(r) + q_stride, NAN);
            std::fill(scratch.s(r), scratch.s(r) + s_stride, bt::kSentinel);
          }
          // The view the K prefetch requests rows of (its keys, in memory).
          internal::HeadView view;
          view.k = k.data();
          view.k_stride = k_stride;
          view.tk = keys;
          view.d = d;
          KeyPrefetcher k_prefetch(view, keys);
          NarrowScoreTile<R>(scratch, row0, d, k.data(), k_stride, keys, 0, k_prefetch, v.data(),
                             DType::kF32, dv, dv, prefetch);
          for (int64_t r = 0; r < rows; ++r) {
            const std::string where = std::string(ThisTarget()) + ", R " + std::to_string(R) +
                                      ", KB " + std::to_string(KB) + ", d " + std::to_string(d) +
                                      ", keys " + std::to_string(keys) + ", row " +
                                      std::to_string(r) + " of group at " + std::to_string(row0);
            const bool in_group = r >= row0 && r < row0 + R;
            for (int64_t j = 0; j < s_stride; ++j) {
              const float got = scratch.s(r)[j];
              if (in_group && j < keys) {
                check.Add(scratch.q(r), k.data() + j * k_stride, d, got, where);
              } else if (got != bt::kSentinel && ++check.bad <= bt::kMaxReports) {
                ADD_FAILURE() << where << ": slot " << j << " written (" << got << ")";
              }
            }
          }
        }
      }
    }
  }
}

HWY_NOINLINE void TestNarrowScoreTile() {
  bt::DotCheck check;
  CheckNarrowScoreTile<1>(check);
  CheckNarrowScoreTile<2>(check);
  CheckNarrowScoreTile<3>(check);
  CheckNarrowScoreTile<4>(check);
  EXPECT_EQ(check.bad, 0) << ThisTarget();
  printf("[ %s ] NarrowScoreTile: N %d, max error %.2f x 2^-24·Σ|q·k| (bound d + 2)\n",
         ThisTarget(), int(hn::Lanes(DF())), check.worst);
}

// ---- Softcap -----------------------------------------------------------------

// SoftcapScores (modifiers-inl.h) against cap·tanh(x / cap) in double, on a
// dense sweep of [-40, 40]·cap, scores of every magnitude, and the special
// values. The bound per element, in units of 2^-24: Highway's Tanh is
// within 4 ULP of tanh(y) at the float32 quotient y = fl(x / cap), and y is
// within 2^-24·|x / cap| of x / cap, which tanh moves by at most that times
// 1 - tanh² (its derivative); then ×cap rounds once more (1/2 ULP, here 1).
// So |got - want| <= 2^-24·cap·(6·|t| + |x / cap|·(1 - t²)) + the smallest
// normal, with t = tanh(x / cap); ±inf gives ±cap and NaN stays NaN, as in
// the reference.
void TestSoftcap() {
  const char* target = ThisTarget();
  const int64_t N = int64_t(hn::Lanes(DF()));
  for (const float cap : {0.5f, 1.0f, 30.0f, 50.0f}) {
    std::vector<float> x;
    for (int i = -40000; i <= 40000; ++i) x.push_back(float(i) * 1e-3f * cap);
    for (int e = -140; e <= 127; e += 3) {
      for (float sign : {-1.0f, 1.0f}) x.push_back(sign * std::ldexp(1.37f, e));
    }
    const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
    for (float v : specials) x.push_back(v);
    x.push_back(std::numeric_limits<float>::quiet_NaN());
    while (int64_t(x.size()) % N) x.push_back(0.0f);
    auto s = hwy::AllocateAligned<float>(x.size());
    std::copy(x.begin(), x.end(), s.get());
    SoftcapScores(s.get(), int64_t(x.size()), cap);
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(s[i])) << target << ": NaN became " << s[i];
        continue;
      }
      const double y = double(x[i]) / double(cap), t = std::tanh(y);
      const double want = double(cap) * t;
      const double bound = std::ldexp(double(cap) * (6.0 * std::fabs(t) +
                                                     (std::isinf(y) ? 0.0 : std::fabs(y) * (1.0 - t * t))),
                                      -24) + 1.2e-38;
      const double err = std::fabs(double(s[i]) - want);
      worst = std::max(worst, err / bound);
      if (!(err <= bound)) {
        ADD_FAILURE() << target << ": softcap " << cap << " of " << x[i] << " = " << s[i]
                      << ", want " << want << " (error " << err << ", bound " << bound << ")";
        return;
      }
    }
    printf("%s: softcap %g over %zu scores: worst error %.2f of the bound\n", target, double(cap),
           x.size(), worst);
    // Softcap keeps Highway's Tanh arithmetic with fewer operations
    // (modifiers-inl.h): the same values as cap · hn::Tanh of the clamped
    // quotient, bit for bit, but where the quotient is subnormal.
    const DF df;
    HWY_ALIGN float lanes[hn::MaxLanes(DF())];
    for (size_t i = 0; i < x.size(); i += size_t(N)) {
      const VF y = hn::Mul(hn::LoadU(df, x.data() + i), hn::Set(df, 1.0f / cap));
      const VF clamped = hn::Min(hn::Max(hn::IfThenZeroElse(hn::IsNaN(y), y), hn::Set(df, -19.0f)),
                                 hn::Set(df, 19.0f));
      hn::Store(hn::Mul(hn::Set(df, cap), hn::Tanh(df, clamped)), df, lanes);
      for (int64_t n = 0; n < N; ++n) {
        const float xi = x[i + size_t(n)];
        if (std::isnan(xi) || std::fabs(xi / cap) < std::ldexp(1.0f, -125)) continue;
        if (lanes[n] != s[i + size_t(n)]) {
          ADD_FAILURE() << target << ": softcap " << cap << " of " << xi << " = "
                        << s[i + size_t(n)] << ", cap * hn::Tanh gives " << lanes[n];
          return;
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_BEFORE_TEST(Blocks);
HWY_EXPORT_AND_TEST_P(Blocks, TestExpNonPositive);
HWY_EXPORT_AND_TEST_P(Blocks, TestSoftcap);
HWY_EXPORT_AND_TEST_P(Blocks, TestLoadWide);
HWY_EXPORT_AND_TEST_P(Blocks, TestWidenScalar);
HWY_EXPORT_AND_TEST_P(Blocks, TestForEachRowBlock);
HWY_EXPORT_AND_TEST_P(Blocks, TestFinishPanel);
HWY_EXPORT_AND_TEST_P(Blocks, TestSumFourPerBlock);
HWY_EXPORT_AND_TEST_P(Blocks, TestNarrowScoreTile);
}  // namespace attn
#endif  // HWY_ONCE
