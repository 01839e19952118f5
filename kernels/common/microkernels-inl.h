// Register-blocked micro-kernels shared by the blocked, streaming and
// parallel kernels, compiled once per Highway target (per-target include
// guard below: any TU, or another -inl.h, may include it in any order).
//
// Layout: the "panel" formulation. A panel is kPanelVectors SIMD vectors of
// consecutive query rows (P = kPanelVectors * Lanes queries). Queries are
// transposed once per panel into Qt[c][i] (d x P, pre-multiplied by the
// scale), so that
//   scores  St[j][i] = Σ_c K[j][c] · Qt[c][i]     (broadcast K, load Qt)
//   mix     Ot[c][i] += Σ_j V[j][c] · Pt[j][i]    (broadcast V, load Pt)
// are both outer-product updates whose SIMD lanes run over the P queries.
// K and V are read in place, row-major, through any row stride and any
// alignment (only scalar broadcasts touch them), so nothing is packed or
// copied per key tile; per-row softmax statistics become lane-wise vector
// ops with no horizontal reductions.
//
// Register blocking: kRows broadcast rows (keys for scores, value columns
// for mix) x kPanelVectors vectors of accumulators. With 16 vector registers
// (SSE4, AVX2) that is 6 x 2 = 12 accumulators + 2 loaded + 1 broadcast; with
// 32 (AVX-512, NEON, SVE) 12 x 2. Per inner step: kRows broadcasts + 2 loads
// feed 2·kRows FMAs.
#if defined(ATTN_KERNELS_COMMON_MICROKERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_MICROKERNELS_INL_H_
#undef ATTN_KERNELS_COMMON_MICROKERNELS_INL_H_
#else
#define ATTN_KERNELS_COMMON_MICROKERNELS_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attn/attn.h"  // DType
#include "hwy/highway.h"
#include "kernels/common/vec_array-inl.h"  // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"      // WithStorageType, WidenScalar

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// 3x4 and 4x3 blockings (fewer broadcasts per FMA) measured slower than 6x2
// (docs/performance.md): the broadcasts are not the bottleneck.
constexpr size_t kPanelVectors = 2;
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR || \
    (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3)
constexpr int kRows = 6;  // 16 vector registers
#else
// 32 vector registers: twice the rows, chosen by register count, not yet
// tuned on an AVX-512 CPU (issue 16).
constexpr int kRows = 12;
#endif

// Queries per panel on this target.
HWY_INLINE size_t PanelWidth() { return kPanelVectors * hn::Lanes(DF()); }

// Qt[c][i] = scale * q[i][c] for i < rows, 0 for the padding rows, from
// float32 rows q (row stride in floats): a transpose in 4 x 4 blocks of
// 128-bit vectors (interleave + concat, on every target this project
// builds, as FinishPanel), scalar for the ragged columns. Each element is
// fl(scale · q), as the element-by-element loop it replaces, so the
// results are unchanged bit for bit. It pays in short windows, where the
// per-row costs weigh, not in long rows (docs/performance.md).
HWY_INLINE void PackQueryPanelF32(const float* HWY_RESTRICT q, int64_t q_stride, int64_t rows,
                                  int64_t d, float scale, float* HWY_RESTRICT qt) {
  const size_t P = PanelWidth();
  const hn::Full128<float> d4;
  const auto vscale = hn::Set(d4, scale);
  const int64_t full_rows = rows / 4 * 4;
  const int64_t full_cols = d / 4 * 4;
  for (int64_t i = 0; i < full_rows; i += 4) {
    const float* HWY_RESTRICT q0 = q + i * q_stride;
    const float* HWY_RESTRICT q1 = q0 + q_stride;
    const float* HWY_RESTRICT q2 = q1 + q_stride;
    const float* HWY_RESTRICT q3 = q2 + q_stride;
    for (int64_t c = 0; c < full_cols; c += 4) {
      const auto r0 = hn::Mul(hn::LoadU(d4, q0 + c), vscale);  // q[i][c..c+3]
      const auto r1 = hn::Mul(hn::LoadU(d4, q1 + c), vscale);
      const auto r2 = hn::Mul(hn::LoadU(d4, q2 + c), vscale);
      const auto r3 = hn::Mul(hn::LoadU(d4, q3 + c), vscale);
      const auto t0 = hn::InterleaveLower(d4, r0, r1);  // r0[0] r1[0] r0[1] r1[1]
      const auto t1 = hn::InterleaveLower(d4, r2, r3);
      const auto t2 = hn::InterleaveUpper(d4, r0, r1);  // r0[2] r1[2] r0[3] r1[3]
      const auto t3 = hn::InterleaveUpper(d4, r2, r3);
      float* HWY_RESTRICT dst = qt + c * P + i;
      hn::StoreU(hn::ConcatLowerLower(d4, t1, t0), d4, dst);  // column c, rows i..i+3
      hn::StoreU(hn::ConcatUpperUpper(d4, t1, t0), d4, dst + P);
      hn::StoreU(hn::ConcatLowerLower(d4, t3, t2), d4, dst + 2 * P);
      hn::StoreU(hn::ConcatUpperUpper(d4, t3, t2), d4, dst + 3 * P);
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    float* HWY_RESTRICT dst = qt + c * P;
    // Columns past the blocks for every row, then the rows past them.
    for (int64_t i = c < full_cols ? full_rows : 0; i < rows; ++i) dst[i] = scale * q[i * q_stride + c];
    for (int64_t i = rows; i < int64_t(P); ++i) dst[i] = 0.0f;
  }
}

// Qt[c][i] = scale * q[i][c] for i < rows, 0 for the padding rows; q of
// element type q_type (widened exactly, then scaled in float32). 16-bit
// rows are widened first (exactly) into a per-thread copy.
HWY_INLINE void PackQueryPanel(const void* HWY_RESTRICT q, DType q_type, int64_t q_stride,
                               int64_t rows, int64_t d, float scale,
                               float* HWY_RESTRICT qt) {
  if (q_type == DType::kF32) {
    return PackQueryPanelF32(static_cast<const float*>(q), q_stride, rows, d, scale, qt);
  }
  thread_local std::vector<float> widened;  // rows x d, per thread
  if (widened.size() < size_t(rows * d)) widened.resize(size_t(rows * d));
  WithStorageType(q_type, [&](auto tag) {
    using T = decltype(tag);
    WidenRowsOf(static_cast<const T*>(q), q_stride, rows, d, widened.data(), d);
  });
  PackQueryPanelF32(widened.data(), d, rows, d, scale, qt);
}

// St[r][:] = Σ_c k[r][c] · Qt[c][:] for R keys starting at k, in the NV
// panel vectors from vector V0 (the others are not written).
template <int R, size_t V0 = 0, size_t NV = kPanelVectors>
HWY_INLINE void ScoreRows(const float* HWY_RESTRICT qt, int64_t d,
                          const float* HWY_RESTRICT k, int64_t k_stride,
                          float* HWY_RESTRICT st) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  ATTN_VEC_ARRAY2(VF, acc, R, NV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n) ATTN_AT2(acc, r, n) = hn::Zero(df);
  for (int64_t c = 0; c < d; ++c) {
    ATTN_VEC_ARRAY(VF, q, NV);
    for (size_t n = 0; n < NV; ++n) ATTN_AT(q, n) = hn::Load(df, qt + c * P + (V0 + n) * N);
    for (int r = 0; r < R; ++r) {
      const VF kb = hn::Set(df, k[r * k_stride + c]);
      for (size_t n = 0; n < NV; ++n)
        ATTN_AT2(acc, r, n) = hn::MulAdd(kb, ATTN_AT(q, n), ATTN_AT2(acc, r, n));
    }
  }
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n)
      hn::Store(ATTN_AT2(acc, r, n), df, st + r * P + (V0 + n) * N);
}

// Splits n rows (keys for scores, value columns for mix) into register
// blocks: kRows at a time, except that a remainder too small to hide the FMA
// latency (fewer than kRows / 2 rows: under 2·kRows/2 = kRows independent
// accumulator chains, i.e. below 2 pipes x 4 cycles on most cores) is
// folded with the last full block into two near-equal halves. E.g. d = 128
// with kRows = 6: 20 blocks of 6 and 4 + 4 rather than 21 x 6 + a 2-row
// block at half the FMA rate. Calls block(first_row, rows) in order.
template <class Block>
HWY_INLINE void ForEachRowBlock(int64_t n, const Block& block) {
  int64_t first = 0;
  while (n - first >= kRows) {
    const int64_t rest = n - first - kRows;
    if (rest > 0 && rest < kRows / 2) {
      const int64_t both = kRows + rest;
      block(first, (both + 1) / 2);
      block(first + (both + 1) / 2, both / 2);
      return;
    }
    block(first, kRows);
    first += kRows;
  }
  if (first < n) block(first, n - first);
}

// St[j][:] for keys j in [0, keys): the score tile of one panel, in the NV
// panel vectors from V0.
template <size_t V0 = 0, size_t NV = kPanelVectors>
HWY_INLINE void ScoreTile(const float* HWY_RESTRICT qt, int64_t d,
                          const float* HWY_RESTRICT k, int64_t k_stride,
                          int64_t keys, float* HWY_RESTRICT st) {
  const int64_t P = int64_t(PanelWidth());
  ForEachRowBlock(keys, [&](int64_t j, int64_t rows) {
    WithTileSize<kRows>(rows, [&](auto r) ATTN_INLINE_LAMBDA {
      ScoreRows<decltype(r)::value, V0, NV>(qt, d, k + j * k_stride, k_stride, st + j * P);
    });
  });
}

// Ot[c0 + r][:] += Σ_j v[j][c0 + r] · Pt[j][:] for R value columns, in the
// NV panel vectors from V0 (the others are left as they are).
template <int R, size_t V0 = 0, size_t NV = kPanelVectors>
HWY_INLINE void MixColumns(const float* HWY_RESTRICT pt, int64_t keys,
                           const float* HWY_RESTRICT v, int64_t v_stride,
                           float* HWY_RESTRICT ot) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  ATTN_VEC_ARRAY2(VF, acc, R, NV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n) ATTN_AT2(acc, r, n) = hn::Zero(df);
  for (int64_t j = 0; j < keys; ++j) {
    ATTN_VEC_ARRAY(VF, p, NV);
    for (size_t n = 0; n < NV; ++n) ATTN_AT(p, n) = hn::Load(df, pt + j * P + (V0 + n) * N);
    const float* HWY_RESTRICT vj = v + j * v_stride;
    for (int r = 0; r < R; ++r) {
      const VF vb = hn::Set(df, vj[r]);
      for (size_t n = 0; n < NV; ++n)
        ATTN_AT2(acc, r, n) = hn::MulAdd(vb, ATTN_AT(p, n), ATTN_AT2(acc, r, n));
    }
  }
  for (int r = 0; r < R; ++r) {
    for (size_t n = 0; n < NV; ++n) {
      float* HWY_RESTRICT o = ot + r * P + (V0 + n) * N;
      hn::Store(hn::Add(hn::Load(df, o), ATTN_AT2(acc, r, n)), df, o);
    }
  }
}

// Ot[c][:] += Σ_j V[j][c] · Pt[j][:] for every value column c < dv, in the
// NV panel vectors from V0.
template <size_t V0 = 0, size_t NV = kPanelVectors>
HWY_INLINE void MixTile(const float* HWY_RESTRICT pt, int64_t keys,
                        const float* HWY_RESTRICT v, int64_t v_stride, int64_t dv,
                        float* HWY_RESTRICT ot) {
  const int64_t P = int64_t(PanelWidth());
  ForEachRowBlock(dv, [&](int64_t c, int64_t columns) {
    WithTileSize<kRows>(columns, [&](auto r) ATTN_INLINE_LAMBDA {
      MixColumns<decltype(r)::value, V0, NV>(pt, keys, v + c, v_stride, ot + c * P);
    });
  });
}

// ---- NaN and ±Inf in V ------------------------------------------------------
// The reference reads V[j] only in rows that can see key j (score not -inf):
// there NaN and Inf propagate as in IEEE arithmetic whatever the weight
// (0 · NaN = NaN), and a row that cannot see the key never reads it. MixTile
// alone would multiply a hidden key's NaN by its zero weight, and the NaN
// would reach every lane of the panel. So the kernels check each V tile once
// per (query block, key tile) with HasNonFinite (one load and one FMA per
// vector of V: about 1/(2·q_block) of the tile's mix FMAs, and the tile is
// then in cache for the mix), and only a tile that holds NaN or Inf takes
// the slow path:
//   1. the softmax marks the weights of keys whose score is -inf with -0
//      (OnlineSoftmaxTile<true>, FullSoftmax<true>); every other weight,
//      underflowed ones included, is >= +0;
//   2. MixTile mixes NonFiniteV::Clean's copy of the tile, NaN and Inf
//      replaced by 0;
//   3. NonFiniteV::AddTo adds each NaN / Inf value times its weight in the
//      lanes whose weight is not -0.

// Whether any V[j][c], j < keys, c < dv, is NaN or ±Inf: v·0 + acc is NaN
// exactly when v is not finite (acc starting at 0). Eight keys at a time,
// each into its own accumulator: eight independent FMA chains cover the
// FMA latency, so the scan runs at load throughput. The last group repeats
// the tile's last key instead of a ragged loop, and a ragged dv ends with
// one vector overlapping the previous one: nothing past a row is read.
HWY_INLINE bool HasNonFinite(const float* HWY_RESTRICT v, int64_t v_stride, int64_t keys,
                             int64_t dv) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const VF zero = hn::Zero(df);
  if (dv < N) {
    float acc = 0.0f;
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t c = 0; c < dv; ++c) acc += v[j * v_stride + c] * 0.0f;
    return std::isnan(acc);
  }
  constexpr int kKeys = 8;
  ATTN_VEC_ARRAY(VF, acc, kKeys);
  for (int r = 0; r < kKeys; ++r) ATTN_AT(acc, r) = zero;
  const int64_t last = dv - N;  // start of the last (possibly overlapping) vector
  for (int64_t j = 0; j < keys; j += kKeys) {
    const float* HWY_RESTRICT row[kKeys];
    for (int r = 0; r < kKeys; ++r) row[r] = v + std::min<int64_t>(j + r, keys - 1) * v_stride;
    for (int64_t c = 0;; c += N) {
      if (c > last) c = last;
      for (int r = 0; r < kKeys; ++r)
        ATTN_AT(acc, r) = hn::MulAdd(hn::LoadU(df, row[r] + c), zero, ATTN_AT(acc, r));
      if (c == last) break;
    }
  }
  for (int r = 1; r < kKeys; ++r) ATTN_AT(acc, 0) = hn::Add(ATTN_AT(acc, 0), ATTN_AT(acc, r));
  return !hn::AllFalse(df, hn::IsNaN(ATTN_AT(acc, 0)));
}

// Whether a softmax weight marks a key its row cannot see: -0 (see above;
// the narrow path of the streaming kernel follows the same convention).
HWY_INLINE bool IsHiddenWeight(float w) { return w == 0.0f && std::signbit(w); }

// The slow path's state for one V tile that holds NaN or ±Inf.
class NonFiniteV {
 public:
  // Keeps where the tile is and copies it (keys x dv, row stride dv) with
  // every NaN / ±Inf replaced by 0, for MixTile.
  void Clean(const float* HWY_RESTRICT v, int64_t v_stride, int64_t keys, int64_t dv) {
    v_ = v;
    v_stride_ = v_stride;
    dv_ = dv;
    clean_.resize(size_t(keys * dv));
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t c = 0; c < dv; ++c) {
        const float x = v[j * v_stride + c];
        clean_[size_t(j * dv + c)] = std::isfinite(x) ? x : 0.0f;
      }
    }
  }
  const float* clean() const { return clean_.data(); }

  // After MixTile on clean(): Ot[c][i] += V[j][c] · Pt[j][i] for every NaN
  // or ±Inf V[j][c], j < keys, in the lanes i whose weight is not -0 (the
  // rows that can see key j; Pt from a softmax with kMarkMasked).
  void AddTo(const float* HWY_RESTRICT pt, int64_t keys, float* HWY_RESTRICT ot) const {
    const int64_t P = int64_t(PanelWidth());
    for (int64_t j = 0; j < keys; ++j) {
      for (int64_t c = 0; c < dv_; ++c) {
        const float x = v_[j * v_stride_ + c];
        if (std::isfinite(x)) continue;
        for (int64_t i = 0; i < P; ++i) {
          const float w = pt[j * P + i];
          if (IsHiddenWeight(w)) continue;  // key hidden from row i
          ot[c * P + i] += x * w;
        }
      }
    }
  }

 private:
  const float* v_ = nullptr;
  int64_t v_stride_ = 0, dv_ = 0;
  std::vector<float> clean_;
};

// Adds the additive mask to a score tile: St[j][i] += M[row0 + i][j] for the
// rows < rows of the panel (mask already offset to key 0 of the tile).
HWY_INLINE void AddMaskTile(const float* HWY_RESTRICT mask, int64_t row_stride,
                            int64_t col_stride, int64_t rows, int64_t keys,
                            float* HWY_RESTRICT st) {
  const size_t P = PanelWidth();
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      st[j * P + i] += mask[i * row_stride + j * col_stride];
    }
  }
}

// Sets St[j][i] = -inf where key (key0 + j) is causally hidden from panel row
// i, i.e. where key0 + j > row0 + i + causal_offset.
HWY_INLINE void CausalMaskTile(int64_t key0, int64_t first_row_limit, int64_t keys,
                               float* HWY_RESTRICT st) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF iota = hn::Iota(df, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    // Row i hides this key iff i < (key0 + j) - first_row_limit.
    int64_t hidden_rows = key0 + j - first_row_limit;
    if (hidden_rows <= 0) continue;
    if (hidden_rows > int64_t(P)) hidden_rows = int64_t(P);
    for (size_t n = 0; n < kPanelVectors; ++n) {
      const VF lane = hn::Add(iota, hn::Set(df, float(n * N)));
      const auto hide = hn::Lt(lane, hn::Set(df, float(hidden_rows)));
      float* s = st + j * P + n * N;
      hn::Store(hn::IfThenElse(hide, neg_inf, hn::Load(df, s)), df, s);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
