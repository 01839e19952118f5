// Row softmax on score panels (St[j][i], lanes over the P query rows of a
// panel), compiled once per Highway target (per-target include guard below;
// it includes the micro-kernels' panel layout itself).
//
// Per-row statistics are vectors over the panel's rows, so the row max and
// row sum are lane-wise Max/Add over the key axis, never horizontal.
//
// Special rows follow the reference (reference/reference.h):
// - fully masked (max = -inf): exp is taken relative to 0 instead of -inf, so
//   every weight is exp(-inf) = 0, the sum stays 0, and Finish writes out 0,
//   lse -inf.
// - NaN anywhere in x = s - max (a NaN score, or +inf - +inf): the exp below
//   gives no meaningful value for NaN (and hn::Exp would give 0, silently
//   dropping it), so a per-row flag records it and Finish writes NaN.
#if defined(ATTN_KERNELS_COMMON_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_SOFTMAX_INL_H_
#undef ATTN_KERNELS_COMMON_SOFTMAX_INL_H_
#else
#define ATTN_KERNELS_COMMON_SOFTMAX_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "attn/attn.h"  // DType
#include "kernels/common/convert.h"  // StoreElement
#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF, PanelWidth, kPanelVectors
#include "kernels/common/widen-inl.h"          // StoreNarrowed
#include "kernels/kernel.h"                    // HeadView

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// c[0]·x^(K-1) + c[1]·x^(K-2) + ... + c[K-1] by Horner's rule, one MulAdd a
// coefficient, unrolled at compile time.
template <size_t K, size_t... I>
HWY_INLINE VF HornerSteps(VF x, const float (&c)[K], std::index_sequence<I...>) {
  const DF df;
  VF p = hn::Set(df, c[0]);
  ((p = hn::MulAdd(p, x, hn::Set(df, c[I + 1]))), ...);
  return p;
}
template <size_t K>
HWY_INLINE VF Horner(VF x, const float (&c)[K]) {
  return HornerSteps(x, c, std::make_index_sequence<K - 1>());
}

// e^x for the softmax's x = s - max <= 0 (also -inf, and NaN, for which it
// returns garbage that the NaN flag overrides). Highway's hn::Exp handles
// the whole float range with ~45 instructions a vector; here x <= 0 allows
// 2^(x·log2 e) = 2^n · 2^f, n = round, f in [-1/2, 1/2], with a degree-7
// Taylor polynomial for 2^f (truncation error 5e-9, below float rounding)
// and 2^n as a float built from its exponent bits: 18 instructions. Lanes
// with x·log2 e < -126 (weights below 2^-126 of the row max, irrelevant to
// any sum) give 0, as does x = -inf.
HWY_INLINE VF ExpNonPositive(VF x) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const VF x2 = hn::Mul(x, hn::Set(df, 1.44269504088896341f));
  const VF n = hn::Round(x2);
  const VF f = hn::Sub(x2, n);
  static constexpr float kTaylor[] = {
      1.525273380405984e-05f,  1.5403530393381606e-04f, 1.3333558146428443e-03f,
      9.618129107628477e-03f,  5.550410866482158e-02f,  2.402265069591007e-01f,
      6.931471805599453e-01f,  1.0f};
  const VF p = Horner(f, kTaylor);
  // 2^n for n >= -126 is a normal float: exponent field n + 127.
  const auto exponent = hn::Add(hn::ConvertTo(di, hn::Max(n, hn::Set(df, -126.0f))),
                                hn::Set(di, 127));
  const VF pow2n = hn::BitCast(df, hn::ShiftLeft<23>(exponent));
  return hn::IfThenZeroElse(hn::Lt(x2, hn::Set(df, -126.0f)), hn::Mul(p, pow2n));
}

// 2^x for x <= 16 (the AMX kernel's weights, x <= 0 up to the rounding of
// the scale into the exponent; also -inf, giving 0, and NaN, giving NaN),
// for weights that are rounded to bf16 next: a degree-5 polynomial for 2^f,
// f in [-1/2, 1/2], fitted for relative error (at most 3.5e-7 in float32,
// measured over 2e5 points: ~6000x below bf16's half ulp of 2^-9), times
// 2^n. n = round(x) by adding 1.5·2^23 (to nearest even, as hn::Round), whose
// low bits are then n itself: 2^n's bits are those shifted into the exponent
// field plus a constant (two integer instructions instead of a conversion,
// a clamp and an add), and x < -126 gives 0. On AVX-512, 2^n by a
// zero-masking vscalefps instead (the same product, rounded once).
HWY_INLINE VF Exp2Weight(VF x) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const VF magic = hn::Set(df, 12582912.0f);  // 1.5·2^23
  const VF t = hn::Add(x, magic);
  const VF n = hn::Sub(t, magic);
  const VF f = hn::Sub(x, n);
  static constexpr float kFit[] = {1.2915660627186298e-03f, 9.668532758951187e-03f,
                                   5.5516887456178665e-02f, 2.4022264778614044e-01f,
                                   6.931464672088623e-01f,  1.0f};
  const VF p = Horner(f, kFit);
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  (void)di;
  // Lanes with x < -126 (-inf too) zeroed by the mask rather than computed:
  // a vscalefps that underflows to 0 took a microcode assist (a causal
  // tile, -inf past each row's limit, ran 20% slower that way). NaN x is
  // kept (not-less-than is true for unordered).
  const __mmask16 keep = _mm512_cmp_ps_mask(x.raw, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  return VF{_mm512_maskz_scalef_ps(keep, p.raw, n.raw)};
#else
  // t's bits are 0x4B400000 + n for |n| < 2^22: (bits << 23) + (127 -
  // 0x4B400000) << 23 is 2^n's, modulo 2^32 (n >= -126 here; below, the
  // lane is zeroed).
  const auto bits = hn::ShiftLeft<23>(hn::BitCast(di, t));
  const auto pow2n = hn::Add(bits, hn::Set(di, int32_t(uint32_t(127 - 0x4B400000) << 23)));
  const VF scaled = hn::Mul(p, hn::BitCast(df, pow2n));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -126.0f)), scaled);
#endif
}

// Running softmax statistics of one panel, stored as arrays of P floats
// (max, sum, NaN flag as 0/1) so that panels can live side by side in scratch.
struct PanelStats {
  float* HWY_RESTRICT max;
  float* HWY_RESTRICT sum;
  float* HWY_RESTRICT nan;
};

HWY_INLINE void ResetStats(const PanelStats& s) {
  const size_t P = PanelWidth();
  for (size_t i = 0; i < P; ++i) {
    s.max[i] = -std::numeric_limits<float>::infinity();
    s.sum[i] = 0.0f;
    s.nan[i] = 0.0f;
  }
}

// Lane-wise max over keys of the tile, combined with `running`.
HWY_INLINE VF TileMax(const float* HWY_RESTRICT st, int64_t keys, size_t offset, VF running) {
  const DF df;
  const size_t P = PanelWidth();
  VF m0 = running, m1 = running;
  int64_t j = 0;
  for (; j + 2 <= keys; j += 2) {
    m0 = hn::Max(m0, hn::Load(df, st + j * P + offset));
    m1 = hn::Max(m1, hn::Load(df, st + (j + 1) * P + offset));
  }
  if (j < keys) m0 = hn::Max(m0, hn::Load(df, st + j * P + offset));
  return hn::Max(m0, m1);
}

// The weight exp(s - base) = e of a score s, or -0 where s is -inf (a key the
// row cannot see), so that the mix can tell it from an underflowed weight
// (microkernels-inl.h, NonFiniteV and IsHiddenWeight).
HWY_INLINE VF MarkHidden(VF s, VF e) {
  const DF df;
  return hn::IfThenElse(hn::Eq(s, hn::Set(df, -std::numeric_limits<float>::infinity())),
                        hn::Set(df, -0.0f), e);
}

// St[j] = exp(St[j] - base) in place; returns the lane-wise sum and ORs NaN
// lanes of (St - base) into *nan_lanes. With kMarkMasked, the weight of a
// -inf score (a key the row cannot see) is -0 instead of +0, so that the
// mix of a V tile holding NaN / Inf can tell it from an underflowed weight
// (microkernels-inl.h, NonFiniteV).
template <bool kMarkMasked = false>
HWY_INLINE VF ExpTile(float* HWY_RESTRICT st, int64_t keys, size_t offset, VF base,
                      hn::Mask<DF>* nan_lanes) {
  const DF df;
  const size_t P = PanelWidth();
  const auto mark = [](VF s, VF e) {
    if constexpr (kMarkMasked) return MarkHidden(s, e);
    (void)s;
    return e;
  };
  VF sum0 = hn::Zero(df), sum1 = hn::Zero(df);
  auto nan = *nan_lanes;
  int64_t j = 0;
  for (; j + 2 <= keys; j += 2) {
    float* s0 = st + j * P + offset;
    float* s1 = s0 + P;
    const VF v0 = hn::Load(df, s0);
    const VF v1 = hn::Load(df, s1);
    const VF x0 = hn::Sub(v0, base);
    const VF x1 = hn::Sub(v1, base);
    nan = hn::Or(nan, hn::Or(hn::IsNaN(x0), hn::IsNaN(x1)));
    const VF e0 = mark(v0, ExpNonPositive(x0));
    const VF e1 = mark(v1, ExpNonPositive(x1));
    hn::Store(e0, df, s0);
    hn::Store(e1, df, s1);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  if (j < keys) {
    float* s0 = st + j * P + offset;
    const VF v0 = hn::Load(df, s0);
    const VF x0 = hn::Sub(v0, base);
    nan = hn::Or(nan, hn::IsNaN(x0));
    const VF e0 = mark(v0, ExpNonPositive(x0));
    hn::Store(e0, df, s0);
    sum0 = hn::Add(sum0, e0);
  }
  *nan_lanes = nan;
  return hn::Add(sum0, sum1);
}

// The subtraction base for exp: the max, or 0 where the row is (so far)
// fully masked.
HWY_INLINE VF ExpBase(VF max) {
  const DF df;
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  return hn::IfThenZeroElse(hn::Eq(max, neg_inf), max);
}

// Online-softmax step for one score tile of a panel: updates the running
// max/sum, turns St into unnormalised weights exp(s - max), and rescales the
// panel's accumulator Ot (dv x P) by exp(old_max - new_max) in the lanes
// whose max grew (only then: most tiles after the first leave it alone).
// kMarkMasked: see ExpTile.
template <bool kMarkMasked = false>
HWY_INLINE void OnlineSoftmaxTile(float* HWY_RESTRICT st, int64_t keys, const PanelStats& s,
                                  float* HWY_RESTRICT ot, int64_t dv) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  for (size_t n = 0; n < kPanelVectors; ++n) {
    const size_t off = n * N;
    const VF old_max = hn::Load(df, s.max + off);
    const VF new_max = TileMax(st, keys, off, old_max);
    const VF base = ExpBase(new_max);
    auto nan = hn::Ne(hn::Load(df, s.nan + off), hn::Zero(df));
    const VF tile_sum = ExpTile<kMarkMasked>(st, keys, off, base, &nan);
    VF sum = hn::Load(df, s.sum + off);
    const auto grew = hn::Gt(new_max, old_max);
    if (!hn::AllFalse(df, grew)) {
      // exp(-inf - base) = 0 for lanes seeing their first visible key: their
      // accumulator and sum are 0 anyway.
      const VF alpha = hn::IfThenElse(grew, ExpNonPositive(hn::Sub(old_max, base)), hn::Set(df, 1.0f));
      sum = hn::Mul(sum, alpha);
      for (int64_t c = 0; c < dv; ++c) {
        float* o = ot + c * P + off;
        hn::Store(hn::Mul(hn::Load(df, o), alpha), df, o);
      }
    }
    hn::Store(hn::Add(sum, tile_sum), df, s.sum + off);
    hn::Store(new_max, df, s.max + off);
    hn::Store(hn::IfThenElseZero(nan, hn::Set(df, 1.0f)), df, s.nan + off);
  }
}

// Exact softmax over a whole row block (all keys of the panel at once): St
// becomes unnormalised weights exp(s - max); stats get the final max/sum.
// kMarkMasked: see ExpTile.
template <bool kMarkMasked = false>
HWY_INLINE void FullSoftmax(float* HWY_RESTRICT st, int64_t keys, const PanelStats& s) {
  const DF df;
  const size_t N = hn::Lanes(df);
  for (size_t n = 0; n < kPanelVectors; ++n) {
    const size_t off = n * N;
    const VF max = TileMax(st, keys, off, hn::Load(df, s.max + off));
    auto nan = hn::Ne(hn::Load(df, s.nan + off), hn::Zero(df));
    const VF sum = ExpTile<kMarkMasked>(st, keys, off, ExpBase(max), &nan);
    hn::Store(hn::Add(hn::Load(df, s.sum + off), sum), df, s.sum + off);
    hn::Store(max, df, s.max + off);
    hn::Store(hn::IfThenElseZero(nan, hn::Set(df, 1.0f)), df, s.nan + off);
  }
}

// A finished row's output factor and lse from its softmax state: 1/sum and
// max + log(sum); NaN and NaN for a NaN row; for a row that saw no key
// (sum 0) factor 0 and lse -inf, and its output must be written as 0, not
// as acc * 0 (V may hold NaN / Inf at keys it never weighted).
struct RowFinish {
  float inv, lse;
  bool empty;
};
//
// A sink logit (attn.h "Score modifiers"; -inf: none) is one more key of
// value 0: it joins the normaliser, so with m = max(max, sink) the row's
// sum is sum·e^(max - m) + e^(sink - m), the output factor e^(max - m) /
// that, and lse m + log of it (a row that saw no key: output 0, lse sink).
HWY_INLINE RowFinish FinishRow(float max, float sum, bool nan,
                               float sink = -std::numeric_limits<float>::infinity()) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (nan) return {kNaN, kNaN, false};
  const bool empty = !(sum > 0.0f);
  if (sink == kNegInf) {
    if (empty) return {0.0f, kNegInf, true};
    return {1.0f / sum, max + std::log(sum), false};
  }
  const float m = empty ? sink : std::max(max, sink);
  const float keys = empty ? 0.0f : sum * std::exp(max - m);
  const float total = keys + std::exp(sink - m);
  return {empty ? 0.0f : std::exp(max - m) / total, m + std::log(total), empty};
}

// Writes the panel's rows: out[i][c] = Ot[c][i] / sum[i], lse[i] = max + log
// sum (natural log). Fully masked rows give 0 / -inf, NaN rows NaN / NaN.
//
// Ot is column-major for the panel, so this is a transpose: 4 x 4 blocks
// of 128-bit vectors (interleave + concat, available on every target but
// HWY_SCALAR, which this project does not build), unaligned stores into the
// caller's rows, scalar code for the ragged edges. For short sequences the
// transpose was ~10% of the kernel when done element by element.
HWY_INLINE void FinishPanel(const float* HWY_RESTRICT ot, const PanelStats& s, int64_t rows,
                            int64_t dv, float* HWY_RESTRICT out, int64_t out_stride,
                            float* HWY_RESTRICT lse, int64_t lse_stride,
                            float sink = -std::numeric_limits<float>::infinity(),
                            const float* HWY_RESTRICT row_sinks = nullptr) {
  const size_t P = PanelWidth();
  // Per-row factor (FinishRow); fully masked rows are zeroed below.
  float inv[hn::MaxLanes(DF()) * kPanelVectors];
  bool empty[hn::MaxLanes(DF()) * kPanelVectors];
  bool any_empty = false;
  for (int64_t i = 0; i < rows; ++i) {
    const RowFinish f = FinishRow(s.max[i], s.sum[i], s.nan[i] != 0.0f, row_sinks ? row_sinks[i] : sink);
    empty[i] = f.empty;
    any_empty |= f.empty;
    inv[i] = f.inv;
    if (lse) lse[i * lse_stride] = f.lse;
  }
  const hn::Full128<float> d4;
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    float* HWY_RESTRICT o0 = out + i * out_stride;
    int64_t c = 0;
    for (; c + 4 <= dv; c += 4) {
      const auto r0 = hn::Load(d4, ot + (c + 0) * P + i);
      const auto r1 = hn::Load(d4, ot + (c + 1) * P + i);
      const auto r2 = hn::Load(d4, ot + (c + 2) * P + i);
      const auto r3 = hn::Load(d4, ot + (c + 3) * P + i);
      const auto t0 = hn::InterleaveLower(d4, r0, r1);  // r0[0] r1[0] r0[1] r1[1]
      const auto t1 = hn::InterleaveLower(d4, r2, r3);
      const auto t2 = hn::InterleaveUpper(d4, r0, r1);  // r0[2] r1[2] r0[3] r1[3]
      const auto t3 = hn::InterleaveUpper(d4, r2, r3);
      hn::StoreU(hn::Mul(hn::ConcatLowerLower(d4, t1, t0), hn::Set(d4, inv[i])), d4, o0 + c);
      hn::StoreU(hn::Mul(hn::ConcatUpperUpper(d4, t1, t0), hn::Set(d4, inv[i + 1])), d4,
                 o0 + out_stride + c);
      hn::StoreU(hn::Mul(hn::ConcatLowerLower(d4, t3, t2), hn::Set(d4, inv[i + 2])), d4,
                 o0 + 2 * out_stride + c);
      hn::StoreU(hn::Mul(hn::ConcatUpperUpper(d4, t3, t2), hn::Set(d4, inv[i + 3])), d4,
                 o0 + 3 * out_stride + c);
    }
    for (; c < dv; ++c) {
      for (int64_t r = 0; r < 4; ++r) o0[r * out_stride + c] = ot[c * P + i + r] * inv[i + r];
    }
  }
  for (; i < rows; ++i) {
    for (int64_t c = 0; c < dv; ++c) out[i * out_stride + c] = ot[c * P + i] * inv[i];
  }
  if (any_empty) {
    for (int64_t r = 0; r < rows; ++r) {
      if (empty[r]) {
        for (int64_t c = 0; c < dv; ++c) out[r * out_stride + c] = 0.0f;
      }
    }
  }
}

// FinishPanel into rows of element type out_type: float32 as above; bf16
// and f16 rows are finished into a float32 staging copy (the same
// transpose), then each float32 result is rounded once to nearest even
// (widen-inl.h StoreNarrowed). Element by element, this was 13-15% of a
// T = 512 bf16 prefill on Zen 3 (attn-bench, bench/RESULTS.md).
HWY_INLINE void FinishPanel(const float* HWY_RESTRICT ot, const PanelStats& s, int64_t rows,
                            int64_t dv, void* HWY_RESTRICT out, DType out_type,
                            int64_t out_stride, float* HWY_RESTRICT lse, int64_t lse_stride,
                            float sink = -std::numeric_limits<float>::infinity(),
                            const float* HWY_RESTRICT row_sinks = nullptr) {
  if (out_type == DType::kF32) {
    return FinishPanel(ot, s, rows, dv, static_cast<float*>(out), out_stride, lse, lse_stride,
                       sink, row_sinks);
  }
  thread_local std::vector<float> staging;  // rows x dv, per thread
  if (staging.size() < size_t(rows * dv)) staging.resize(size_t(rows * dv));
  FinishPanel(ot, s, rows, dv, staging.data(), dv, lse, lse_stride, sink, row_sinks);
  for (int64_t i = 0; i < rows; ++i) {
    StoreNarrowed(staging.data() + i * dv, dv,
                  internal::ElementOffset(out, out_type, i * out_stride), out_type);
  }
}

// The panel of view h whose row 0 is view row r0 (at most P rows, the
// view's last panel fewer) finished into its output, lse and sinks.
HWY_INLINE void FinishViewPanel(const internal::HeadView& h, int64_t r0,
                                const float* HWY_RESTRICT ot, const PanelStats& s) {
  FinishPanel(ot, s, std::min<int64_t>(int64_t(PanelWidth()), h.tq - r0), h.dv, h.OutRow(r0),
              h.out_type, h.out_stride, h.lse ? h.lse + r0 * h.lse_stride : nullptr,
              h.lse_stride, h.sink, h.row_sinks ? h.row_sinks + r0 : nullptr);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
