// The narrow (decode) path over ggml's block K and V, q8_0 and q4_0
// (attn.h DType::kQ8_0, kQ4_0), per Highway target (per-target include
// guard below): the score and mix passes of blocks-inl.h with the rows read
// as blocks of 32 elements and a binary16 scale, written once over a block
// format F (widen-inl.h Q8_0Format, Q4_0Format). The tiled walk
// (tiled-inl.h) calls these for a block K or V; the branch is taken once
// per tile, so the f32 / bf16 / f16 code is unchanged.
//
// Algorithm: the same as blocks-inl.h's, lanes along the head dimension.
// Scores: for each block of 32 elements, the block's scale is broadcast
// once per key (Q8_0ScaleVec: vpbroadcastw + vcvtph2ps on AVX2 / AVX-512)
// and its integers loaded as int32 (F::Ints: q8_0's int8 by vpmovsxbd,
// q4_0's nibbles by vpmovzxbd, a shift and a mask, less 8), converted to
// float and multiplied by the scale: the exact element values, which then
// enter the same float32 FMAs, accumulators and reductions
// (SumBlocksOfFour) as float32 K, so the precision contract
// (docs/precision.md) is unchanged. The chunk's q vectors stay in
// registers across the block of keys, so R rows share each dequantised K
// vector. Mix: each V vector dequantised the same way once per key and
// column chunk, shared by the R rows' FMAs. Hidden keys (weight -0) are
// found with one vector compare per 16 weights, not one scalar test per
// weight.
//
// Memory traffic: K and V are read once per view, 34 (q8_0) or 18 (q4_0)
// bytes per 32 elements (scales included: 0.53 or 0.28 of f16's); K rows
// are prefetched ahead and V rows during the same tile's scores as the
// tiled walk does, the distance in bytes (KeyPrefetchDistance), a
// contiguous run of rows (the usual dense cache) as one span of cache
// lines.
//
// Why q8_0 pays on decode: 16 heads are bound by memory, so fewer bytes
// read are faster; a GQA group is bound by its arithmetic (per 16 elements
// one int8 load-and-extend, one conversion and one multiply by the scale,
// shared by the group's rows, then one FMA per row), so its tokens/s over
// f16's is its compute speed over f16's. Measurements, and the variants
// tried and not kept (the scale folded into the dot products, other K
// prefetch distances): docs/performance.md ("Decode walks: measurements
// behind the kernel choices").
#if defined(ATTN_KERNELS_DECODE_QUANT_PASSES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_QUANT_PASSES_INL_H_
#undef ATTN_KERNELS_DECODE_QUANT_PASSES_INL_H_
#else
#define ATTN_KERNELS_DECODE_QUANT_PASSES_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/convert.h"        // kQ8_0BlockElements
#include "kernels/common/key_rows-inl.h"   // KeyPrefetchDistance, PrefetchRows
#include "kernels/common/lane_sums-inl.h"  // NarrowKeysPerBlock, SumBlocksOfFour
#include "kernels/common/microkernels-inl.h"  // DF, VF, IsHiddenWeight
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch
#include "kernels/common/vec_array-inl.h"  // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"      // Q8_0Format, Q4_0Format, Q8_0ScaleVec
#include "kernels/decode/blocks-inl.h"       // NarrowMixVectors, ForEachMixChunk

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Requests `count` block rows of `row_bytes` bytes, `row_step` bytes apart,
// into the cache: one span of lines when the rows are contiguous.
HWY_INLINE void PrefetchQuantRows(const uint8_t* HWY_RESTRICT rows, int64_t row_step,
                                 int64_t count, int64_t row_bytes) {
  if (count <= 0) return;
  if (row_step == row_bytes) {
    const int64_t bytes = count * row_bytes;
    for (int64_t byte = 0; byte < bytes; byte += 64) hwy::Prefetch(rows + byte);
    hwy::Prefetch(rows + bytes - 1);
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    PrefetchRowLines(reinterpret_cast<const char*>(rows + j * row_step), row_bytes);
  }
}

// Scores of R rows against KB block keys at k (rows k_step bytes apart):
// s(r)[j0 + b] for b < KB. d is a multiple of 32.
template <class F, int R, int KB>
HWY_INLINE void NarrowScoreBlockQuant(const NarrowScratch& scratch, int64_t row0, int64_t d,
                                     const uint8_t* HWY_RESTRICT k, int64_t k_step, int64_t j0) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int64_t kBlock = internal::kQ8_0BlockElements;  // q4_0's too
  constexpr int64_t kBlockBytes = F::kBytes;
  if (!F::VectorsTile(df)) {  // scalar (no fixed-width target comes here)
    for (int r = 0; r < R; ++r) {
      const float* HWY_RESTRICT q = scratch.q(row0 + r);
      for (int b = 0; b < KB; ++b) {
        float total = 0.0f;
        for (int64_t c = 0; c < d; ++c) total += q[c] * F::Element(k + b * k_step, c);
        scratch.s(row0 + r)[j0 + b] = total;
      }
    }
    return;
  }
  // A chunk: two vectors, or the whole block when one vector is 32 lanes.
  constexpr int kChunk = 2;
  const int64_t chunk = std::min<int64_t>(kChunk * N, kBlock);
  const int64_t chunk_vectors = chunk / N;
  ATTN_VEC_ARRAY(VF, acc, R * KB);  // vec_array-inl.h
  for (int a = 0; a < R * KB; ++a) ATTN_AT(acc, a) = hn::Zero(df);
  for (int64_t c0 = 0; c0 < d; c0 += chunk) {
    // This chunk's block in key 0's row.
    const uint8_t* HWY_RESTRICT block0 = k + c0 / kBlock * kBlockBytes;
    ATTN_VEC_ARRAY2(VF, q, R, kChunk);  // vec_array-inl.h
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kChunk; ++v) {
        ATTN_AT2(q, r, v) =
            v < chunk_vectors ? hn::Load(df, scratch.q(row0 + r) + c0 + v * N) : hn::Zero(df);
      }
    const uint8_t* HWY_RESTRICT kb = block0;
    for (int b = 0; b < KB; ++b, kb += k_step) {
      const VF scale = Q8_0ScaleVec(df, reinterpret_cast<const Q8_0Block*>(kb));
      for (int v = 0; v < kChunk; ++v) {
        if (v >= chunk_vectors) break;
        const VF kv = hn::Mul(F::Ints(df, kb, c0 % kBlock + v * N), scale);
        for (int r = 0; r < R; ++r) {
          ATTN_AT(acc, r * KB + b) =
              hn::MulAdd(ATTN_AT2(q, r, v), kv, ATTN_AT(acc, r * KB + b));
        }
      }
    }
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // Sixteen dot products finished in registers (R·KB is 16, or 12 for
  // R = 3), lane a = r·KB + b, stored as each row's run of KB scores.
  static_assert(R * KB <= 16, "one vector of sums");
  auto acc_or_zero = [&](int a) { return a < R * KB ? ATTN_AT(acc, a) : hn::Zero(df); };
  VF w[4];
  for (int g = 0; g < 4; ++g) {
    w[g] = SumFourPerBlock(acc_or_zero(4 * g), acc_or_zero(4 * g + 1), acc_or_zero(4 * g + 2),
                           acc_or_zero(4 * g + 3));
  }
  const VF sums = SumBlocksOfFour(w[0], w[1], w[2], w[3]);
  if constexpr (KB == 16) {
    hn::StoreU(sums, df, scratch.s(row0) + j0);
  } else if constexpr (KB == 8) {
    const hn::Half<DF> dh;
    hn::StoreU(hn::LowerHalf(dh, sums), dh, scratch.s(row0) + j0);
    hn::StoreU(hn::UpperHalf(dh, sums), dh, scratch.s(row0 + 1) + j0);
  } else if constexpr (KB == 4) {
    const hn::Half<DF> dh;
    const hn::Half<decltype(dh)> dq;
    const auto lo = hn::LowerHalf(dh, sums), hi = hn::UpperHalf(dh, sums);
    const hn::Vec<decltype(dq)> quarters[4] = {hn::LowerHalf(dq, lo), hn::UpperHalf(dq, lo),
                                               hn::LowerHalf(dq, hi), hn::UpperHalf(dq, hi)};
    for (int r = 0; r < R; ++r) hn::StoreU(quarters[r], dq, scratch.s(row0 + r) + j0);
  } else {
    HWY_ALIGN float lanes[16];
    hn::Store(sums, df, lanes);
    for (int r = 0; r < R; ++r) std::memcpy(scratch.s(row0 + r) + j0, lanes + r * KB, KB * 4);
  }
#else
  float sums[R * KB + 3];
  for (int a = 0; a < R * KB; a += 4) {
    SumFourDots(ATTN_AT(acc, a), a + 1 < R * KB ? ATTN_AT(acc, a + 1) : hn::Zero(df),
                a + 2 < R * KB ? ATTN_AT(acc, a + 2) : hn::Zero(df),
                a + 3 < R * KB ? ATTN_AT(acc, a + 3) : hn::Zero(df), 4, sums + a);
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < KB; ++b) scratch.s(row0 + r)[j0 + b] = sums[r * KB + b];
#endif
}

// Scores of a tile of block keys (rows k_step bytes apart): blocks of KB
// keys, then the rest one at a time, with the same keys' V rows (v_step
// bytes apart, v_row_bytes long; any V type) prefetched for the mix.
template <class F, int R>
HWY_INLINE void NarrowScoreTileQuant(const NarrowScratch& scratch, int64_t row0, int64_t d,
                                    const uint8_t* HWY_RESTRICT k, int64_t k_step, int64_t keys,
                                    int64_t keys_left, const uint8_t* HWY_RESTRICT v,
                                    int64_t v_step, int64_t v_row_bytes, bool prefetch) {
  constexpr int KB = NarrowKeysPerBlock<R>();
  const int64_t k_row_bytes = internal::BytesOf(F::kType, d);
  const int64_t ahead = KeyPrefetchDistance(F::kType);
  auto block = [&](auto keys_per_block, int64_t j) {
    constexpr int kKeys = decltype(keys_per_block)::value;
    NarrowScoreBlockQuant<F, R, kKeys>(scratch, row0, d, k + j * k_step, k_step, j);
  };
  int64_t j = 0;
  for (; j + KB <= keys; j += KB) {
    if (prefetch) {
      PrefetchQuantRows(v + j * v_step, v_step, KB, v_row_bytes);
      if (j + ahead + KB <= keys_left) {
        PrefetchQuantRows(k + (j + ahead) * k_step, k_step, KB, k_row_bytes);
      }
    }
    block(std::integral_constant<int, KB>(), j);
  }
  if (prefetch) PrefetchQuantRows(v + j * v_step, v_step, keys - j, v_row_bytes);
  for (; j < keys; ++j) block(std::integral_constant<int, 1>(), j);
}

// o(r)[c0 + n·N + lane] += Σ_j p(r)[j]·V[j][c0 + ...] for CV whole vectors of
// block columns (rows v_step bytes apart; c0 a multiple of 32, or the chunk
// within one block). Each V vector is dequantised once per key (a block's
// scale broadcast once: vectors n with n % (32 / N) == 0 start a block) and
// shared by the R rows. With kSkipHidden a row whose weight is -0 skips the
// key (blocks-inl.h's file comment).
template <class F, int R, int CV, bool kSkipHidden>
HWY_INLINE void NarrowMixChunkQuant(const NarrowScratch& scratch, int64_t row0, int64_t keys,
                                   const uint8_t* HWY_RESTRICT v, int64_t v_step, int64_t c0) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int64_t kBlock = internal::kQ8_0BlockElements;
  const int64_t block_vectors = kBlock / N;
  ATTN_VEC_ARRAY2(VF, acc, R, CV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < CV; ++n)
      ATTN_AT2(acc, r, n) = hn::Load(df, scratch.o(row0 + r) + c0 + n * N);
  }
  const float* HWY_RESTRICT p[R];
  for (int r = 0; r < R; ++r) p[r] = scratch.s(row0 + r);
  const uint8_t* HWY_RESTRICT vj = v + c0 / kBlock * F::kBytes;
  const int64_t first_col = c0 % kBlock;
  for (int64_t j = 0; j < keys; ++j, vj += v_step) {
    ATTN_VEC_ARRAY(VF, vv, CV);
    VF scale = hn::Zero(df);
    for (int n = 0; n < CV; ++n) {
      // Vector n: column `col` from the chunk's first block.
      const int64_t col = first_col + n * N;
      const uint8_t* HWY_RESTRICT block = vj + col / kBlock * F::kBytes;
      if (n % block_vectors == 0) scale = Q8_0ScaleVec(df, reinterpret_cast<const Q8_0Block*>(block));
      ATTN_AT(vv, n) = hn::Mul(F::Ints(df, block, col % kBlock), scale);
    }
    for (int r = 0; r < R; ++r) {
      const float w = p[r][j];
      if (kSkipHidden && IsHiddenWeight(w)) continue;
      const VF pb = hn::Set(df, w);
      for (int n = 0; n < CV; ++n)
        ATTN_AT2(acc, r, n) = hn::MulAdd(pb, ATTN_AT(vv, n), ATTN_AT2(acc, r, n));
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < CV; ++n)
      hn::Store(ATTN_AT2(acc, r, n), df, scratch.o(row0 + r) + c0 + n * N);
  }
}

// Whether any of the R rows' weights p(r)[0, keys) is -0 (a key the row
// cannot see), a vector of weights at a time (the rows are padded to whole
// vectors; the lanes past `keys` are not looked at).
template <int R>
HWY_INLINE bool AnyHiddenWeight(const NarrowScratch& scratch, int64_t row0, int64_t keys) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto minus_zero = hn::Set(du, 0x80000000u);
  auto any = hn::Eq(minus_zero, hn::Zero(du));  // all false
  for (int r = 0; r < R; ++r) {
    const float* HWY_RESTRICT p = scratch.s(row0 + r);
    int64_t j = 0;
    // Unaligned: a paged tile's chunk starts anywhere in the score row
    // (NarrowScratch::SetScoreAt), and its tail is read key by key, so that
    // nothing past the row's last key is read.
    for (; j + N <= keys; j += N) {
      any = hn::Or(any, hn::Eq(hn::BitCast(du, hn::LoadU(df, p + j)), minus_zero));
    }
    for (; j < keys; ++j) {
      if (IsHiddenWeight(p[j])) return true;
    }
  }
  return !hn::AllFalse(du, any);
}

// o(r) += P·V for one tile of block V (rows v_step bytes apart): column
// chunks of CV vectors as blocks-inl.h's NarrowMixTile (dv is a multiple of
// 32; a scalable vector that does not tile a block takes scalar code).
template <class F, int R>
HWY_INLINE void NarrowMixTileQuant(const NarrowScratch& scratch, int64_t row0, int64_t keys,
                                  const uint8_t* HWY_RESTRICT v, int64_t v_step, int64_t dv) {
  constexpr int CV = NarrowMixVectors<R>();
  const int64_t N = int64_t(hn::Lanes(DF()));
  if (!F::VectorsTile(DF())) {
    for (int64_t c = 0; c < dv; ++c) {
      for (int r = 0; r < R; ++r) {
        const float* HWY_RESTRICT p = scratch.s(row0 + r);
        float total = scratch.o(row0 + r)[c];
        for (int64_t j = 0; j < keys; ++j) {
          if (!IsHiddenWeight(p[j])) total += p[j] * F::Element(v + j * v_step, c);
        }
        scratch.o(row0 + r)[c] = total;
      }
    }
    return;
  }
  const int64_t vectors = dv / N;
  const bool any_hidden = AnyHiddenWeight<R>(scratch, row0, keys);
  ForEachMixChunk<CV>(vectors, any_hidden, [&](int64_t n0, auto cv, auto skip) ATTN_INLINE_LAMBDA {
    NarrowMixChunkQuant<F, R, decltype(cv)::value, decltype(skip)::value>(scratch, row0, keys, v,
                                                                      v_step, n0 * N);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
