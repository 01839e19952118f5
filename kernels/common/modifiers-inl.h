// The score modifiers of attn.h ("Score modifiers": soft-capping, ALiBi,
// sliding window) on score tiles, per Highway target (per-target include
// guard below), in the two layouts the SIMD kernels use:
//   panel  St[j][i]: P query rows of a panel in the lanes, one key per row
//          of the tile (streaming, parallel; microkernels-inl.h);
//   row    s[j]: one query row's scores, keys in the lanes (narrow path).
// Each is applied after the scores are scaled and before the additive mask
// and the causal limit, in the reference's order (reference/reference.h):
// capped = cap·tanh(s / cap), then - slope·|diag(i) - j|, then + M, then
// -inf outside the window. The sink joins the softmax at the end
// (softmax-inl.h FinishRow).
#if defined(ATTN_KERNELS_COMMON_MODIFIERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_MODIFIERS_INL_H_
#undef ATTN_KERNELS_COMMON_MODIFIERS_INL_H_
#else
#define ATTN_KERNELS_COMMON_MODIFIERS_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF, PanelWidth, kPanelVectors
#include "kernels/kernel.h"                   // HeadView

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// expm1(a) for a >= 0 (and NaN lanes, whose result is discarded), with the
// arithmetic of Highway's Expm1 (hwy/contrib/math, max error 4 ULP) where
// a >= 0: the steps that only matter for negative inputs (the sign-dependent
// rounding offset, |a|, the clamp below -104) are identities there and are
// left out.
HWY_INLINE VF Expm1NonNegative(VF a) {
  const DF df;
  hn::impl::ExpImpl<float> impl;
  const auto q = impl.ToInt32(df, hn::MulAdd(a, hn::Set(df, 1.442695040888963407359924681f),
                                            hn::Set(df, 0.5f)));
  const VF y = impl.ExpPoly(df, impl.ExpReduce(df, a, q));
  const VF one = hn::Set(df, 1.0f);
  return hn::IfThenElse(hn::Lt(a, hn::Set(df, 0.346573590279972654708616f)), y,
                        hn::Sub(impl.LoadExpShortRange(df, hn::Add(y, one), q), one));
}

// cap · tanh(x / cap), NaN kept NaN, ±inf giving ±cap as in the reference.
// The arithmetic is Highway's Tanh (maximum error 4 ULP over all of
// float32: tanh|y| = e / (e + 2), e = expm1(2|y|), sign restored), on y =
// x / cap clamped to ±19, so the results are those of
// cap · hn::Tanh(clamp(x · (1/cap))) bit for bit, but for quotients below
// 2^-125 (subnormal: the doubling may round there; 1e-38 of slack in the
// bound covers it) (tests/blocks_test.cc
// TestSoftcap checks both that and the error against std::tanh in double on
// every target). Fewer operations than calling hn::Tanh on the clamped
// quotient, with the same values:
// - 2|y| as |x| · (2/cap): doubling is exact, so it is 2 · fl(|x| / cap);
// - the clamp at 38 = 2 · 19 on the non-negative 2|y| only: float32 tanh is
//   exactly 1 beyond 18.72, where e + 2 rounds to e, so Tanh's own limit
//   select (and the sign split inside it) are not needed;
// - Expm1NonNegative, since 2|y| >= 0;
// - NaN: SIMD conversions of NaN to int are defined (x86 gives 0x80000000),
//   so a NaN lane runs through and is replaced by x at the end; only the
//   C++-emulated targets zero it first, as a float-to-int conversion of NaN
//   is undefined behaviour there (UBSan reported it).
// Per 16 scores the tile costs about 256 FMAs (d = 128, score and mix), so
// each vector operation saved here shows in the capped rows' speed
// (docs/performance.md, "Prefill: measurements behind the kernel choices").
HWY_INLINE VF Softcap(VF x, VF cap, VF two_inv_cap) {
  const DF df;
  VF a = hn::Mul(hn::Abs(x), two_inv_cap);
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  a = hn::IfThenZeroElse(hn::IsNaN(a), a);
#endif
  a = hn::Min(a, hn::Set(df, 38.0f));
  const VF e = Expm1NonNegative(a);
  const VF t = hn::Mul(cap, hn::Div(e, hn::Add(e, hn::Set(df, 2.0f))));
  const VF signed_t = hn::Or(t, hn::And(x, hn::SignBit(df)));  // t >= +0
  return hn::IfThenElse(hn::IsNaN(x), x, signed_t);
}

// Soft-caps `count` contiguous scores (count a multiple of the vector
// length: panel tiles are keys x P, narrow rows are padded).
HWY_INLINE void SoftcapScores(float* HWY_RESTRICT s, int64_t count, float cap) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  // 2 · (1/cap), exactly: the doubling is exact.
  const VF vcap = hn::Set(df, cap), two_inv = hn::Set(df, 2.0f * (1.0f / cap));
  for (int64_t j = 0; j < count; j += N) hn::Store(Softcap(hn::Load(df, s + j), vcap, two_inv), df, s + j);
}

// St[j][i] -= slope · |diag0 + i - (key0 + j)| for a panel tile, diag0 the
// diagonal key of the panel's row 0. Distances are exact in float32 up to
// 2^24 keys.
HWY_INLINE void AlibiPanelTile(float* HWY_RESTRICT st, int64_t keys, int64_t key0, int64_t diag0,
                               float slope) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  const VF neg_slope = hn::Set(df, -slope);
  const VF iota = hn::Iota(df, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    const float base = float(diag0 - (key0 + j));
    for (size_t n = 0; n < kPanelVectors; ++n) {
      const VF distance = hn::Abs(hn::Add(iota, hn::Set(df, base + float(n * N))));
      float* s = st + j * P + n * N;
      hn::Store(hn::MulAdd(neg_slope, distance, hn::Load(df, s)), df, s);
    }
  }
}

// St[j][i] = -inf where key key0 + j is outside panel row i's window
// [diag0 + i - left, diag0 + i + right] (-1: that side unbounded).
HWY_INLINE void WindowPanelTile(float* HWY_RESTRICT st, int64_t keys, int64_t key0, int64_t diag0,
                                int64_t left, int64_t right) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF iota = hn::Iota(df, 0.0f);
  auto hide_key = [&](int64_t j) {
    const int64_t key = key0 + j;
    for (size_t n = 0; n < kPanelVectors; ++n) {
      const VF row_diag = hn::Add(iota, hn::Set(df, float(diag0 + int64_t(n * N))));
      auto hide = hn::FirstN(df, 0);
      if (left >= 0) hide = hn::Or(hide, hn::Gt(row_diag, hn::Set(df, float(key + left))));
      if (right >= 0) hide = hn::Or(hide, hn::Lt(row_diag, hn::Set(df, float(key - right))));
      float* s = st + j * P + n * N;
      hn::Store(hn::IfThenElse(hide, neg_inf, hn::Load(df, s)), df, s);
    }
  };
  // Row i sees key k iff k - right <= diag0 + i <= k + left. Only the keys
  // some row of the panel does not see are touched: those before
  // diag0 + P - 1 - left (the band's left edge) and after diag0 + right;
  // the keys between, which every row sees (most of a wide window's), are
  // not even looked at.
  const int64_t left_end =
      left >= 0 ? std::clamp<int64_t>(diag0 + int64_t(P) - 1 - left - key0, 0, keys) : 0;
  const int64_t right_begin =
      right >= 0 ? std::clamp<int64_t>(diag0 + right + 1 - key0, 0, keys) : keys;
  for (int64_t j = 0; j < left_end; ++j) hide_key(j);
  for (int64_t j = std::max(left_end, right_begin); j < keys; ++j) hide_key(j);
}

// The panel modifiers of view h for the tile of `keys` keys at key0 and the
// panel whose row 0 is row r0 of the view (soft-cap, ALiBi, window), before
// the additive mask and the causal limit.
HWY_INLINE void ModifyPanelTile(const internal::HeadView& h, int64_t r0, int64_t key0,
                                int64_t keys, float* HWY_RESTRICT st) {
  if (h.softcap != 0.0f) SoftcapScores(st, keys * int64_t(PanelWidth()), h.softcap);
  if (h.alibi_slope != 0.0f) AlibiPanelTile(st, keys, key0, r0 + h.diag_offset, h.alibi_slope);
}
HWY_INLINE void WindowPanel(const internal::HeadView& h, int64_t r0, int64_t key0, int64_t keys,
                            float* HWY_RESTRICT st) {
  if (h.window_left >= 0 || h.window_right >= 0) {
    WindowPanelTile(st, keys, key0, r0 + h.diag_offset, h.window_left, h.window_right);
  }
}

// The row modifiers for view row `row`'s scores s[0, keys) of keys from
// key0 (padded to whole vectors for the soft-cap), before the mask.
HWY_INLINE void ModifyRow(const internal::HeadView& h, int64_t row, int64_t key0, int64_t keys,
                          float* HWY_RESTRICT s) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  if (h.softcap != 0.0f) SoftcapScores(s, (keys + N - 1) / N * N, h.softcap);
  if (h.alibi_slope != 0.0f) {
    const int64_t diag = row + h.diag_offset;
    for (int64_t j = 0; j < keys; ++j) {
      s[j] -= h.alibi_slope * float(std::abs(diag - (key0 + j)));
    }
  }
}
// -inf outside view row `row`'s window, for keys [key0, key0 + keys).
HWY_INLINE void WindowRow(const internal::HeadView& h, int64_t row, int64_t key0, int64_t keys,
                          float* HWY_RESTRICT s) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t diag = row + h.diag_offset;
  if (h.window_left >= 0) {
    const int64_t first = std::clamp<int64_t>(diag - h.window_left - key0, 0, keys);
    std::fill(s, s + first, neg_inf);
  }
  if (h.window_right >= 0) {
    const int64_t end = std::clamp<int64_t>(diag + h.window_right + 1 - key0, 0, keys);
    std::fill(s + end, s + keys, neg_inf);
  }
}

// Scores made final, in the one order every kernel follows, which decides
// what NaN and -inf do: soft-cap and ALiBi, the additive mask (NaN from K
// plus -inf stays NaN, as in the reference), the causal limit, the window.
// A panel tile: st[j][0, P) for keys [key0, key0 + keys) of view rows
// [r0, r0 + rows).
HWY_INLINE void PreparePanelScores(const internal::HeadView& h, int64_t r0, int64_t rows,
                                   int64_t key0, int64_t keys, float* HWY_RESTRICT st) {
  const bool modified = h.HasScoreModifiers();
  if (modified) ModifyPanelTile(h, r0, key0, keys, st);
  if (h.mask) {
    AddMaskTile(h.mask + r0 * h.mask_row_stride + key0 * h.mask_col_stride, h.mask_row_stride,
                h.mask_col_stride, rows, keys, st);
  }
  if (key0 + keys - 1 > r0 + h.causal_offset) CausalMaskTile(key0, r0 + h.causal_offset, keys, st);
  if (modified) WindowPanel(h, r0, key0, keys, st);
}
// One view row's scores s[0, keys) for keys from key0. modified:
// h.HasScoreModifiers(), read once by the caller for all its rows;
// mask_added: the mask is already in s (a pass that fused it with the
// scaling).
HWY_INLINE void PrepareRowScores(const internal::HeadView& h, bool modified, int64_t row,
                                 int64_t key0, int64_t keys, float* HWY_RESTRICT s,
                                 bool mask_added = false) {
  if (modified) ModifyRow(h, row, key0, keys, s);
  if (h.mask && !mask_added) {
    const float* HWY_RESTRICT m = h.mask + row * h.mask_row_stride + key0 * h.mask_col_stride;
    for (int64_t j = 0; j < keys; ++j) s[j] += m[j * h.mask_col_stride];
  }
  const int64_t visible = std::clamp<int64_t>(h.KeyEnd(row) - key0, 0, keys);
  std::fill(s + visible, s + keys, -std::numeric_limits<float>::infinity());
  if (modified) WindowRow(h, row, key0, keys, s);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
