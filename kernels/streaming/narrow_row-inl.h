// The narrow path's row walk for one query row (decode: one query per kv
// head), per Highway target (per-target include guard below): tile t's mix
// and tile t + 1's scores a key at a time, K row then V row, with the
// output accumulators in registers for the whole tile. narrow-inl.h
// includes this file after its building blocks (KeyRowCursor, the lane
// sums) and takes this walk for one-row views whose V row fits in
// kNarrowRowMaxVectors registers, d = d_v (NarrowRowWalks); other views
// take the pipelined or the tiled walk there.
//
// Algorithm, per step of four keys: for each key, its K row's dot product
// with q (one FMA chain over the columns, K read row by row, in address
// order), then its V row mixed into o (one FMA per vector, the weight
// broadcast); the four dot products reduced together (SumFourPerBlock), so
// a score costs a quarter of a horizontal sum. The operations per score
// and per output column are those of the tiled walk (NarrowScoreBlock,
// NarrowMixChunk) in the same order, so the results are its bits
// (tests/narrow_pipeline_test.cc).
//
// Memory traffic: K and V read once, as two sequential streams advancing
// one row each per key; no software prefetch (the hardware prefetchers
// follow both streams); q and the score buffers in L1; o loaded and
// stored once per tile.
//
// Why this order, measured on AMD EPYC Zen 4 (family 25 model 17, AVX3,
// 1 MiB L2 a core; 2-core VM on a shared host, so the DRAM rate moves
// +-20% with the neighbours' load and only ratios from one process count):
// a standalone AVX-512 loop over 16 heads x 32768 keys of float32, d = 128,
// against an 8-stream plain read of the same bytes in the same process:
// - scores with the lanes of 16 keys' accumulators loaded a column at a
//   time across the 16 rows (the tiled walk's NarrowScoreBlock order):
//   0.41-0.51 of the plain read; the same loop reading each K row whole
//   before the next: 0.57-0.80 (1 or 2 FMA chains a key): the cache-line
//   order across rows, not the arithmetic, was most of the loss;
// - then K and V interleaved a row at a time (this walk): 0.84-0.91, and
//   with two key ranges of a head interleaved the same way 0.82-1.09;
//   K and V interleaved 16 rows at a time: 0.52-0.83;
// - any software prefetch (every line, 2-32 KiB ahead, K and V): 0.45-0.63
//   against 0.67-0.72 without, in the tiled order; 2, 4 or 8 heads taken a
//   tile each in turn: 0.50-0.73.
// In the kernel (attn-bench decode rows, H 16, T_k = 32768, d = 128, same
// VM, this walk against the pipelined walk it replaces there, two rounds
// alternated, read probe 28-30 GB/s): one thread float32 21.9-25.9 GB/s
// against 14.3-15.4 (bw_frac 0.73-0.88 against 0.48-0.54), bf16 23.7-24.6
// against 17.8-20.1 (0.81-0.84), f16 23.8-25.0 against 19.2-20.1
// (0.80-0.85); two threads 32-36 GB/s against 16-32. From L2 (one head,
// 8192 keys of float32) 57-59 GB/s against 34-36.
#if defined(ATTN_KERNELS_STREAMING_NARROW_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_STREAMING_NARROW_ROW_INL_H_
#undef ATTN_KERNELS_STREAMING_NARROW_ROW_INL_H_
#else
#define ATTN_KERNELS_STREAMING_NARROW_ROW_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF, IsHiddenWeight
#include "kernels/common/vec_array-inl.h"     // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/convert.h"          // kQ8_0BlockElements, kQ8_0BlockBytes
#include "kernels/common/widen-inl.h"         // LoadWide, LoadQ8_0Ints, Q8_0ScaleVec

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// The most vectors of a row the row walk keeps in registers, q's and o's
// (2 x 8 + four dot products: within AVX-512's 32 registers at d = 128;
// 16-register targets take heads up to 8 vectors too, q then partly
// reloaded from the stack).
constexpr int64_t kNarrowRowMaxVectors = 8;

// Keys a tile of the row walk at most (the tile's weights and the next
// tile's scores, 2 KiB, stay in L1). The tile sets how often the softmax
// step and o's loads and stores run: 16 heads x 32768 keys of float32,
// d = 128, from DRAM ran at 0.79, 0.82, 0.87 and 0.87 of the read probe with
// tiles of 32, 64, 128 and 256 keys; from L2 at 0.73, 0.81, 0.83 and 0.81
// (AMD EPYC Zen 4, one process alternating the probe and the kernel).
constexpr int64_t kNarrowRowTileKeys = 256;

// out[b] = Σ of dot[b]'s lanes for b < count (<= 4), summed in the order of
// NarrowScoreBlock (SumFourPerBlock, then the 128-bit blocks), so a score
// has the tiled walk's bits.
HWY_INLINE void SumFourDots(VF d0, VF d1, VF d2, VF d3, int64_t count, float* HWY_RESTRICT out) {
  const DF df;
  const VF w = SumFourPerBlock(d0, d1, d2, d3);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // As SumBlocksOfFour: (block 0 + block 1) + (block 2 + block 3).
  const VF t = hn::Add(w, hn::SwapAdjacentBlocks(w));
  const VF sums = hn::Add(t, hn::ConcatUpperUpper(df, t, t));
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(sums, df, lanes);
  for (int64_t b = 0; b < count; ++b) out[b] = lanes[b];
#else
  const int64_t N = int64_t(hn::Lanes(df));
  HWY_ALIGN float blocks[hn::MaxLanes(DF())];
  hn::Store(w, df, blocks);
  for (int64_t b = 0; b < count; ++b) {
    float total = 0.0f;
    for (int64_t blk = 0; blk < N / 4; ++blk) total += blocks[blk * 4 + b];
    out[b] = total;
  }
#endif
}

// The row walk's element type for ggml's q8_0 rows (34-byte blocks of 32
// int8 and a binary16 scale).
struct Q8_0Row {};

// Vector n of a row (elements n·N .. n·N + N - 1) as float32: widened
// exactly (LoadWide), or a q8_0 row's int8 values times their block's
// scale (exact in float32; the values narrow_q8-inl.h's passes compute).
template <typename T>
HWY_INLINE VF LoadRowVector(const char* HWY_RESTRICT row, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  if constexpr (std::is_same_v<T, Q8_0Row>) {
    constexpr int64_t kBlock = internal::kQ8_0BlockElements;
    const int64_t col = n * N;
    const uint8_t* HWY_RESTRICT block =
        reinterpret_cast<const uint8_t*>(row) + col / kBlock * internal::kQ8_0BlockBytes;
    return hn::Mul(LoadQ8_0Ints(df, block + 2 + col % kBlock),
                   Q8_0ScaleVec(df, reinterpret_cast<const Q8_0Block*>(block)));
  } else {
    return LoadWide(df, reinterpret_cast<const T*>(row) + n * N);
  }
}

// One step of the row walk for a view with d = d_v = V vectors: the mix of
// the current tile's `keys` keys (weights p) into o beside the scores of
// the next tile's `next_keys` keys (into s_next), a key of each in turn, K
// and V rows from their cursors; q and o in registers. kSkipHidden: some
// weight is -0 (a key the row cannot see), whose V row is then not read.
template <int V, bool kSkipHidden, typename TK, typename TV>
HWY_INLINE void NarrowRowKeys(const float* HWY_RESTRICT q, const float* HWY_RESTRICT p,
                              int64_t keys, float* HWY_RESTRICT s_next, int64_t next_keys,
                              float* HWY_RESTRICT o, KeyRowCursor& k_rows,
                              KeyRowCursor& v_rows) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  ATTN_VEC_ARRAY(VF, qv, V);  // vec_array-inl.h
  ATTN_VEC_ARRAY(VF, acc, V);
  for (int n = 0; n < V; ++n) {
    ATTN_AT(qv, n) = hn::Load(df, q + n * N);
    ATTN_AT(acc, n) = hn::Load(df, o + n * N);
  }
  const int64_t steps = std::max(keys, next_keys);
  for (int64_t j = 0; j < steps; j += 4) {
    ATTN_VEC_ARRAY(VF, dot, 4);
    for (int b = 0; b < 4; ++b) {
      const int64_t i = j + b;
      ATTN_AT(dot, b) = hn::Zero(df);
      if (i < next_keys) {  // one FMA chain in column order, as NarrowScoreBlock
        const char* HWY_RESTRICT k = k_rows.Next();
        for (int n = 0; n < V; ++n) {
          ATTN_AT(dot, b) = hn::MulAdd(ATTN_AT(qv, n), LoadRowVector<TK>(k, n), ATTN_AT(dot, b));
        }
      }
      if (i < keys) {
        const char* HWY_RESTRICT v = v_rows.Next();
        const float w = p[i];
        if (kSkipHidden && IsHiddenWeight(w)) continue;
        const VF pb = hn::Set(df, w);
        for (int n = 0; n < V; ++n) {
          ATTN_AT(acc, n) = hn::MulAdd(pb, LoadRowVector<TV>(v, n), ATTN_AT(acc, n));
        }
      }
    }
    if (j < next_keys) {
      SumFourDots(ATTN_AT(dot, 0), ATTN_AT(dot, 1), ATTN_AT(dot, 2), ATTN_AT(dot, 3),
                  std::min<int64_t>(4, next_keys - j), s_next + j);
    }
  }
  for (int n = 0; n < V; ++n) hn::Store(ATTN_AT(acc, n), df, o + n * N);
}

template <int V, typename TK, typename TV>
HWY_INLINE void NarrowRowKeysN(int64_t vectors, bool any_hidden, const float* HWY_RESTRICT q,
                               const float* HWY_RESTRICT p, int64_t keys,
                               float* HWY_RESTRICT s_next, int64_t next_keys,
                               float* HWY_RESTRICT o, KeyRowCursor& k_rows,
                               KeyRowCursor& v_rows) {
  if constexpr (V > 0) {
    if (vectors == V) {
      if (any_hidden) {
        return NarrowRowKeys<V, true, TK, TV>(q, p, keys, s_next, next_keys, o, k_rows, v_rows);
      }
      return NarrowRowKeys<V, false, TK, TV>(q, p, keys, s_next, next_keys, o, k_rows, v_rows);
    }
    NarrowRowKeysN<V - 1, TK, TV>(vectors, any_hidden, q, p, keys, s_next, next_keys, o, k_rows,
                                  v_rows);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
