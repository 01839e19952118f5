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

// cap · tanh(x / cap), NaN kept NaN. Highway's Tanh has a maximum error of
// 4 ULP over all of float32 (hwy/contrib/math, and tests/blocks_test.cc
// TestSoftcap checks it on every target against std::tanh in double); a
// score of ±inf becomes ±cap, as in the reference.
//
// The quotient is clamped to ±19 first (NaN to 0): float32 tanh is exactly
// ±1 beyond ±18.72 (Highway's Tanh returns ±1 there itself), and Tanh's
// float-to-int conversion of NaN or ±inf is undefined behaviour on EMU128
// (UBSan reported it).
HWY_INLINE VF Softcap(VF x, VF cap, VF inv_cap) {
  const DF df;
  const VF limit = hn::Set(df, 19.0f);
  const VF y = hn::Mul(x, inv_cap);
  const VF safe = hn::Min(hn::Max(hn::IfThenZeroElse(hn::IsNaN(y), y), hn::Neg(limit)), limit);
  const VF t = hn::Mul(cap, hn::Tanh(df, safe));
  return hn::IfThenElse(hn::IsNaN(x), x, t);
}

// Soft-caps `count` contiguous scores (count a multiple of the vector
// length: panel tiles are keys x P, narrow rows are padded).
HWY_INLINE void SoftcapScores(float* HWY_RESTRICT s, int64_t count, float cap) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const VF vcap = hn::Set(df, cap), inv = hn::Set(df, 1.0f / cap);
  for (int64_t j = 0; j < count; j += N) hn::Store(Softcap(hn::Load(df, s + j), vcap, inv), df, s + j);
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
  for (int64_t j = 0; j < keys; ++j) {
    // Row i sees key k iff k - right <= diag0 + i <= k + left. Keys that
    // every row of the panel sees are skipped (most of a wide window's).
    const int64_t key = key0 + j;
    const bool some_left = left >= 0 && key < diag0 + int64_t(P) - 1 - left;
    const bool some_right = right >= 0 && key > diag0 + right;
    if (!some_left && !some_right) continue;
    for (size_t n = 0; n < kPanelVectors; ++n) {
      const VF row_diag = hn::Add(iota, hn::Set(df, float(diag0 + int64_t(n * N))));
      auto hide = hn::FirstN(df, 0);
      if (left >= 0) hide = hn::Or(hide, hn::Gt(row_diag, hn::Set(df, float(key + left))));
      if (right >= 0) hide = hn::Or(hide, hn::Lt(row_diag, hn::Set(df, float(key - right))));
      float* s = st + j * P + n * N;
      hn::Store(hn::IfThenElse(hide, neg_inf, hn::Load(df, s)), df, s);
    }
  }
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

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
