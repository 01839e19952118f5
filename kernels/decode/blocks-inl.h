// The widened decode walks' building blocks, per Highway target: lanes run
// along the head dimension (the panel micro-kernels put query rows in the
// lanes, and a view of 1 row would fill 1/P of every FMA), so every lane
// does useful work whatever the row count:
//   scores  s[r][j] = Σ_c q[r][c]·K[j][c]   (K rows loaded whole, reduced
//                                            across lanes, KB keys a block)
//   mix     o[r][:] += p[r][j]·V[j][:]      (broadcast p, load V rows)
// and the tile's softmax step. bf16 / f16 K and V are widened in registers
// (LoadWide). A key a row cannot see (weight -0) is skipped in the mix, so
// NaN or Inf in V there never reaches the row, as in the reference.
// Memory traffic: each K and V row of a tile once per group of up to
// kNarrowGroupRows rows (registers), later groups from L1/L2.
#if defined(ATTN_KERNELS_DECODE_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_BLOCKS_INL_H_
#undef ATTN_KERNELS_DECODE_BLOCKS_INL_H_
#else
#define ATTN_KERNELS_DECODE_BLOCKS_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/common/key_rows-inl.h"      // KeyPrefetcher, PrefetchRows
#include "kernels/common/lane_sums-inl.h"     // SumFourPerBlock, SumBlocksOfFour, SumFourDots
#include "kernels/common/microkernels-inl.h"  // DF, VF, IsHiddenWeight
#include "kernels/common/modifiers-inl.h"     // ModifyRow, WindowRow
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch, NarrowRowStats, NarrowSoftmaxRow
#include "kernels/common/vec_array-inl.h"     // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"         // LoadWide, WidenScalar
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Scores of R rows against KB keys starting at k: s(r)[j0 + b] for b < KB.
// TK: K's storage type (float, hwy::bfloat16_t, hwy::float16_t).
template <int R, int KB, typename TK>
HWY_INLINE void NarrowScoreBlock(const NarrowScratch& scratch, int64_t row0, int64_t d,
                                 const TK* HWY_RESTRICT k, int64_t k_stride, int64_t j0) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  ATTN_VEC_ARRAY(VF, acc, R * KB);  // vec_array-inl.h
  for (int a = 0; a < R * KB; ++a) ATTN_AT(acc, a) = hn::Zero(df);
  const int64_t full = d / N * N;
  for (int64_t c = 0; c < full; c += N) {
    ATTN_VEC_ARRAY(VF, q, R);
    for (int r = 0; r < R; ++r) ATTN_AT(q, r) = hn::Load(df, scratch.q(row0 + r) + c);
    for (int b = 0; b < KB; ++b) {
      const VF kv = LoadWide(df, k + b * k_stride + c);
      for (int r = 0; r < R; ++r)
        ATTN_AT(acc, r * KB + b) = hn::MulAdd(ATTN_AT(q, r), kv, ATTN_AT(acc, r * KB + b));
    }
  }
  float sums[R * KB + 15];
  SumLanes<R * KB>(acc, sums);
  for (int r = 0; r < R; ++r) {
    const float* HWY_RESTRICT q = scratch.q(row0 + r);
    for (int b = 0; b < KB; ++b) {
      float total = sums[r * KB + b];
      const TK* HWY_RESTRICT kb = k + b * k_stride;
      for (int64_t c = full; c < d; ++c) total += q[c] * WidenScalar(kb + c);  // ragged d
      scratch.s(row0 + r)[j0 + b] = total;
    }
  }
}

// Scores of a run of `keys` keys (view keys from key0) of a tile: blocks of
// KB keys, then the rest one at a time, with the same keys' V rows
// prefetched for the mix and K rows ahead (KeyPrefetcher).
template <int R, typename TK>
HWY_INLINE void NarrowScoreTile(const NarrowScratch& scratch, int64_t row0, int64_t d,
                                const TK* HWY_RESTRICT k, int64_t k_stride, int64_t keys,
                                int64_t key0, KeyPrefetcher& k_prefetch,
                                const void* HWY_RESTRICT v, DType v_type, int64_t v_stride,
                                int64_t dv, bool prefetch) {
  constexpr int KB = NarrowKeysPerBlock<R>();
  const int64_t v_row_bytes = internal::BytesOf(v_type, v_stride);
  const char* HWY_RESTRICT v_bytes = static_cast<const char*>(v);
  int64_t j = 0;
  for (; j + KB <= keys; j += KB) {
    if (prefetch) {
      PrefetchRows(v_bytes + j * v_row_bytes, v_type, v_stride, KB, dv);
      k_prefetch.Request(key0 + j, KB);
    }
    NarrowScoreBlock<R, KB>(scratch, row0, d, k + j * k_stride, k_stride, j);
  }
  if (prefetch) PrefetchRows(v_bytes + j * v_row_bytes, v_type, v_stride, keys - j, dv);
  for (; j < keys; ++j) NarrowScoreBlock<R, 1>(scratch, row0, d, k + j * k_stride, k_stride, j);
}

// o[r][c0 + n·N + lane] += Σ_j p[r][j]·V[j][c0 + ...] for CV whole vectors
// of columns (o, p: R rows' accumulators and weights). With kSkipHidden
// (the keys include a hidden one somewhere), a row whose weight is -0 skips
// the key (see the file comment); otherwise there is no branch in the loop.
template <int R, int CV, bool kSkipHidden, typename TV>
HWY_INLINE void NarrowMixChunk(float* const* HWY_RESTRICT o, const float* const* HWY_RESTRICT p,
                               int64_t keys, const TV* HWY_RESTRICT v, int64_t v_stride,
                               int64_t c0) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  ATTN_VEC_ARRAY2(VF, acc, R, CV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < CV; ++n) ATTN_AT2(acc, r, n) = hn::Load(df, o[r] + c0 + n * N);
  for (int64_t j = 0; j < keys; ++j) {
    const TV* HWY_RESTRICT vj = v + j * v_stride + c0;
    ATTN_VEC_ARRAY(VF, vv, CV);
    for (int n = 0; n < CV; ++n) ATTN_AT(vv, n) = LoadWide(df, vj + n * N);
    for (int r = 0; r < R; ++r) {
      const float w = p[r][j];
      if (kSkipHidden && IsHiddenWeight(w)) continue;
      const VF pb = hn::Set(df, w);
      for (int n = 0; n < CV; ++n)
        ATTN_AT2(acc, r, n) = hn::MulAdd(pb, ATTN_AT(vv, n), ATTN_AT2(acc, r, n));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < CV; ++n) hn::Store(ATTN_AT2(acc, r, n), df, o[r] + c0 + n * N);
}

// Vectors of columns a mix pass for R rows: R·CV accumulators + CV V
// vectors; with 32 registers a 4-row group mixes 4 vectors a pass, so a
// tile's V rows are loaded (and a 16-bit V widened) half as often as with 2.
template <int R>
constexpr int NarrowMixVectors() {
  return kNarrowWideRegisters ? (R == 1 ? 8 : R == 2 ? 8 : 4) : (R == 1 ? 8 : R == 2 ? 4 : 2);
}

// Calls mix(first_vector, vectors, skip_hidden) for [0, vectors) in chunks of
// at most CV vectors, the last two as std::integral_constant: each chunk's
// accumulators get a compile-time count, and tiles without hidden weights
// skip the test.
template <int CV, class Mix>
HWY_INLINE void ForEachMixChunk(int64_t vectors, bool any_hidden, const Mix& mix) {
  for (int64_t n0 = 0; n0 < vectors; n0 += CV) {
    WithTileSize<CV>(std::min<int64_t>(CV, vectors - n0), [&](auto cv) ATTN_INLINE_LAMBDA {
      if (any_hidden) {
        mix(n0, cv, std::true_type());
      } else {
        mix(n0, cv, std::false_type());
      }
    });
  }
}

// o[r] += Σ_{j < keys} p[r][j]·V_j over the whole vectors of V's columns
// (`vectors` of them), in column chunks of NarrowMixVectors<R>() vectors:
// per column the fused multiply-adds of the keys in order, hidden weights
// skipped, whatever the number of keys, so mixing a tile in one call or in
// several calls over consecutive keys gives the same bits.
template <int R, typename TV>
HWY_INLINE void NarrowMixKeys(float* const* HWY_RESTRICT o, const float* const* HWY_RESTRICT p,
                              int64_t keys, const TV* HWY_RESTRICT v, int64_t v_stride,
                              int64_t vectors) {
  constexpr int CV = NarrowMixVectors<R>();
  const int64_t N = int64_t(hn::Lanes(DF()));
  bool any_hidden = false;
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < keys; ++j) any_hidden |= IsHiddenWeight(p[r][j]);
  }
  ForEachMixChunk<CV>(vectors, any_hidden, [&](int64_t n0, auto cv, auto skip) ATTN_INLINE_LAMBDA {
    NarrowMixChunk<R, decltype(cv)::value, decltype(skip)::value>(o, p, keys, v, v_stride, n0 * N);
  });
}

// o(r) += P·V for one tile: NarrowMixKeys over the whole vectors of
// columns, the ragged columns past the last whole vector in scalar code.
template <int R, typename TV>
HWY_INLINE void NarrowMixTile(const NarrowScratch& scratch, int64_t row0, int64_t keys,
                              const TV* HWY_RESTRICT v, int64_t v_stride, int64_t dv) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  const int64_t vectors = dv / N;
  float* o[R];
  const float* p[R];
  for (int r = 0; r < R; ++r) {
    o[r] = scratch.o(row0 + r);
    p[r] = scratch.s(row0 + r);
  }
  NarrowMixKeys<R>(o, p, keys, v, v_stride, vectors);
  for (int64_t c = vectors * N; c < dv; ++c) {
    for (int r = 0; r < R; ++r) {
      const float* HWY_RESTRICT p = scratch.s(row0 + r);
      float total = scratch.o(row0 + r)[c];
      for (int64_t j = 0; j < keys; ++j) {
        if (!IsHiddenWeight(p[j])) total += p[j] * WidenScalar(v + j * v_stride + c);
      }
      scratch.o(row0 + r)[c] = total;
    }
  }
}


// The scores of rows [row0, row0 + rows) for the tile's keys [j0, j0 +
// keys) (in the current score buffer) made weights: soft-cap and ALiBi,
// the mask, the causal limit and the window, then the online-softmax step.
HWY_INLINE void NarrowSoftmaxTile(const internal::HeadView& h, NarrowScratch& scratch,
                                  int64_t row0, int64_t rows, int64_t j0, int64_t keys,
                                  NarrowRowStats* HWY_RESTRICT stats) {
  const bool modified = h.HasScoreModifiers();
  for (int64_t r = row0; r < row0 + rows; ++r) {
    float* HWY_RESTRICT s = scratch.s(r);
    PrepareRowScores(h, modified, r, j0, keys, s);  // modifiers-inl.h
    NarrowSoftmaxRow(s, keys, stats[r], scratch.o(r), h.dv);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
