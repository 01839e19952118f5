// The narrow path's row walk for one query row (decode: one query per kv
// head), per Highway target (per-target include guard below): tile t's mix
// and tile t + 1's scores a key at a time, K row then V row, with the
// output accumulators in registers for the whole tile. The walk table
// (walk_table.cc "row") gives it views of 1, 2 or 4 rows with d = d_v of
// 2, 4 or 8 vectors and rows adjacent within each run (q and o fit in
// registers, d <= 128 on AVX-512); walk-inl.h runs it.
//
// Algorithm, per step of four keys: for each key, its K row's dot product
// with q (one FMA chain over the columns, K read row by row, in address
// order), then its V row mixed into o (one FMA per vector, the weight
// broadcast); the four dot products reduced together (SumFourPerBlock), so
// a score costs a quarter of a horizontal sum. The operations per score
// and per output column are those of the tiled walk (NarrowScoreBlock,
// NarrowMixChunk) in the same order, so the results are its bits
// (tests/decode_walks_test.cc).
//
// Memory traffic: K and V read once, as two sequential streams advancing
// one row each per key; no software prefetch for float32 rows (the
// hardware prefetchers follow both streams), 16-bit rows (and q8_0 rows of
// one row's walk) requested 2 KiB of row bytes ahead (kGroupPrefetchBytes)
// by a cursor that follows the view's runs, so with head-major pages the
// request lands on the next page, not past the end of this one; q and the
// score buffers in L1; o loaded and stored once per tile.
//
// Why this order: the tiled walk's score blocks read K a column at a time
// across 16 rows and need software prefetch, which together cost half the
// DRAM rate; K rows read whole, K and V advancing a row each per key, keep
// the hardware prefetchers on two sequential streams. From DRAM float32
// groups still lose to memory (their second pass over V reads nothing from
// DRAM), 16-bit groups are bound by their arithmetic. Measurements, and
// the variants tried for the group walk and not kept: docs/performance.md
// ("Decode: the read pattern"; "Decode walks: measurements behind the
// kernel choices").
#if defined(ATTN_KERNELS_DECODE_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_ROW_INL_H_
#undef ATTN_KERNELS_DECODE_ROW_INL_H_
#else
#define ATTN_KERNELS_DECODE_ROW_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <type_traits>

#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"
#include "kernels/common/convert.h"            // kQ8_0BlockElements, kQ8_0BlockBytes
#include "kernels/common/key_rows-inl.h"      // KeyRowCursor
#include "kernels/common/lane_sums-inl.h"     // SumFourPerBlock
#include "kernels/common/microkernels-inl.h"  // DF, VF, IsHiddenWeight
#include "kernels/common/vec_array-inl.h"     // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"         // BlockRow, LoadRowVector

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Keys a tile of the row walk at most (the tile's weights and the next
// tile's scores, 2 KiB, stay in L1). The tile sets how often the softmax
// step and o's loads and stores run: 256 keys read at least as fast as 32,
// 64 or 128, from DRAM and from L2 (docs/performance.md).
constexpr int64_t kNarrowRowTileKeys = 256;

// How far ahead the row walks request 16-bit (and q8_0) K and V rows: 2 KiB (8
// rows at d = 128). On the Intel Xeon (AMX) these requests sped up 16-bit
// and q8_0 decode from DRAM, 2 KiB the best distance tried for q8_0; on
// Zen 4 no distance from 0 to 8 KiB changed them beyond the noise. Float32
// rows gained little on the Xeon and lost on Zen 4, so they are not
// requested (docs/performance.md, "Decode walks: measurements behind the
// kernel choices").
constexpr int64_t kGroupPrefetchBytes = 2048;

// Whether the row walks request rows of T ahead: 16-bit and block (q8_0,
// q4_0) rows, not float32 (kGroupPrefetchBytes). Block rows reach only the
// one-row walk (the walk table keeps their groups on the tiled walk).
template <typename T>
constexpr bool RowIsRequestedAhead() {
  return kIsBlockRow<T> || sizeof(T) == 2;
}
// Bytes of a row of `elements` elements of T (blocks: 34 or 18 bytes per 32).
template <typename T>
constexpr int64_t RowBytes(int64_t elements) {
  if constexpr (kIsBlockRow<T>) {
    return elements / 32 * T::Format::kBytes;
  } else {
    return elements * int64_t(sizeof(T));
  }
}

// Keys ahead of its walk that a row walk requests rows: kGroupPrefetchBytes
// of the rows' own bytes (d elements of the type, whatever the stride), at
// least one key.
HWY_INLINE int64_t RowAheadKeys(DType type, int64_t d) {
  return std::max<int64_t>(1, kGroupPrefetchBytes / internal::BytesOf(type, d));
}

// Requests the row of `ahead`'s key (its cursor runs RowAheadKeys ahead of
// the walk's, through the same runs: pages are followed, not stepped over)
// unless the view ends first, and moves it on one key.
HWY_INLINE void RequestRowAhead(KeyRowCursor& ahead, int64_t end, int64_t row_bytes) {
  if (ahead.key() >= end) return;
  PrefetchRowLines(ahead.Next(), row_bytes);
}

// The cursors of a row walk's view: K rows of the next tile, V rows of the
// current one, V rows again (rows 2-3 of a group), and K and V RowAheadKeys
// ahead, requested up to ahead_end.
struct RowWalkCursors {
  KeyRowCursor& k_rows;
  KeyRowCursor& v_rows;
  KeyRowCursor& v_again;
  KeyRowCursor& k_ahead;
  KeyRowCursor& v_ahead;
  int64_t ahead_end;
};

// One step of the row walk for a view with d = d_v = V vectors: the mix of
// the current tile's `keys` keys (weights p) into o beside the scores of
// the next tile's `next_keys` keys (into s_next), a key of each in turn, K
// and V rows from their cursors; q and o in registers. kSkipHidden: some
// weight is -0 (a key the row cannot see), whose V row is then not read.
template <int V, typename TK, typename TV>
HWY_INLINE void NarrowRowKeys(bool skip_hidden, const float* HWY_RESTRICT q, const float* HWY_RESTRICT p,
                              int64_t keys, float* HWY_RESTRICT s_next, int64_t next_keys,
                              float* HWY_RESTRICT o, RowWalkCursors& c) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  ATTN_VEC_ARRAY(VF, qv, V);  // vec_array-inl.h
  ATTN_VEC_ARRAY(VF, acc, V);
  for (int n = 0; n < V; ++n) {
    ATTN_AT(qv, n) = hn::Load(df, q + n * N);
    ATTN_AT(acc, n) = hn::Load(df, o + n * N);
  }
  const int64_t steps = std::max(keys, next_keys);
  // 16-bit and q8_0 rows are requested ahead (RowIsRequestedAhead).
  constexpr bool kPrefetchK = RowIsRequestedAhead<TK>();
  constexpr bool kPrefetchV = RowIsRequestedAhead<TV>();
  const int64_t k_row_bytes = RowBytes<TK>(V * N), v_row_bytes = RowBytes<TV>(V * N);
  for (int64_t j = 0; j < steps; j += 4) {
    ATTN_VEC_ARRAY(VF, dot, 4);
    for (int b = 0; b < 4; ++b) {
      const int64_t i = j + b;
      ATTN_AT(dot, b) = hn::Zero(df);
      if (i < next_keys) {  // one FMA chain in column order, as NarrowScoreBlock
        const char* HWY_RESTRICT k = c.k_rows.Next();
        if constexpr (kPrefetchK) RequestRowAhead(c.k_ahead, c.ahead_end, k_row_bytes);
        for (int n = 0; n < V; ++n) {
          ATTN_AT(dot, b) = hn::MulAdd(ATTN_AT(qv, n), LoadRowVector<TK>(k, n), ATTN_AT(dot, b));
        }
      }
      if (i < keys) {
        const char* HWY_RESTRICT v = c.v_rows.Next();
        if constexpr (kPrefetchV) RequestRowAhead(c.v_ahead, c.ahead_end, v_row_bytes);
        const float w = p[i];
        if (skip_hidden && IsHiddenWeight(w)) continue;
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

// Output vectors a group's one-pass row walk may keep in registers: half
// of x86's 16 below AVX-512, half of the 32 of AVX-512, NEON and SVE.
// Groups of 4 at d = 64 on AVX-512 (16 vectors) thus take one pass, which
// keeps DRAM busy where the second pass of two reads nothing from it
// (docs/performance.md, "Why the float32 group walk reads at two thirds of
// the probe"). At d = 128 (32 vectors) the walk keeps two passes.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kRowWalkOutputVectors = 8;
#else
constexpr int kRowWalkOutputVectors = 16;
#endif

// The row walk for a view of R rows (2 or 4: a GQA group sharing each K/V
// row): as NarrowRowKeys, with each K row's R dot products (q from L1)
// reduced together, one score per row; the mix beside the scores, o in
// registers, of every row where the group's outputs fit
// (kRowWalkOutputVectors), else of rows 0 and 1, rows 2 and 3 then mixed
// over the tile's V rows again (v_again, from L2: the tile's V rows were
// just read). Per row and column the operations of the tiled walk in its
// order, so its bits.
template <int V, int R, typename TK, typename TV>
HWY_INLINE void NarrowRowGroupKeys(bool skip_hidden, const float* const* HWY_RESTRICT q,
                                   const float* const* HWY_RESTRICT p, int64_t keys,
                                   float* const* HWY_RESTRICT s_next, int64_t next_keys,
                                   float* const* HWY_RESTRICT o, RowWalkCursors& c) {
  static_assert(R >= 2 && R <= 4, "a group of 2 to 4 rows");
  // Rows mixed beside the scores: all of them where their outputs fit in
  // half the vector registers (a group of 4 at d = 64 on AVX-512: 16), so
  // the walk reads K and V once in one pass; otherwise rows 0-1, and rows
  // 2-3 over the tile's V rows again.
  constexpr int RA = R * V <= kRowWalkOutputVectors ? R : 2;
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  // 16-bit rows are requested ahead (RowIsRequestedAhead).
  constexpr bool kPrefetchK = RowIsRequestedAhead<TK>();
  constexpr bool kPrefetchV = RowIsRequestedAhead<TV>();
  const int64_t k_row_bytes = RowBytes<TK>(V * N), v_row_bytes = RowBytes<TV>(V * N);
  ATTN_VEC_ARRAY2(VF, acc, RA, V);  // vec_array-inl.h
  for (int r = 0; r < RA; ++r) {
    for (int n = 0; n < V; ++n) ATTN_AT2(acc, r, n) = hn::Load(df, o[r] + n * N);
  }
  const int64_t steps = std::max(keys, next_keys);
  for (int64_t i = 0; i < steps; ++i) {
    if (i < next_keys) {
      ATTN_VEC_ARRAY(VF, dot, 4);
      for (int r = 0; r < 4; ++r) ATTN_AT(dot, r) = hn::Zero(df);
      const char* HWY_RESTRICT k = c.k_rows.Next();
      if constexpr (kPrefetchK) RequestRowAhead(c.k_ahead, c.ahead_end, k_row_bytes);
      for (int n = 0; n < V; ++n) {
        const VF kv = LoadRowVector<TK>(k, n);
        for (int r = 0; r < R; ++r) {
          ATTN_AT(dot, r) = hn::MulAdd(hn::Load(df, q[r] + n * N), kv, ATTN_AT(dot, r));
        }
      }
      float scores[4];
      SumFourDots(ATTN_AT(dot, 0), ATTN_AT(dot, 1), ATTN_AT(dot, 2), ATTN_AT(dot, 3), R, scores);
      for (int r = 0; r < R; ++r) s_next[r][i] = scores[r];
    }
    if (i < keys) {
      const char* HWY_RESTRICT v = c.v_rows.Next();
      if constexpr (kPrefetchV) RequestRowAhead(c.v_ahead, c.ahead_end, v_row_bytes);
      ATTN_VEC_ARRAY(VF, vv, V);
      for (int n = 0; n < V; ++n) ATTN_AT(vv, n) = LoadRowVector<TV>(v, n);
      for (int r = 0; r < RA; ++r) {
        const float w = p[r][i];
        if (skip_hidden && IsHiddenWeight(w)) continue;
        const VF pb = hn::Set(df, w);
        for (int n = 0; n < V; ++n) {
          ATTN_AT2(acc, r, n) = hn::MulAdd(pb, ATTN_AT(vv, n), ATTN_AT2(acc, r, n));
        }
      }
    }
  }
  for (int r = 0; r < RA; ++r) {
    for (int n = 0; n < V; ++n) hn::Store(ATTN_AT2(acc, r, n), df, o[r] + n * N);
  }
  if constexpr (R > RA) {
    constexpr int RB = R - RA;
    ATTN_VEC_ARRAY2(VF, acc_b, RB, V);
    for (int r = 0; r < RB; ++r) {
      for (int n = 0; n < V; ++n) ATTN_AT2(acc_b, r, n) = hn::Load(df, o[RA + r] + n * N);
    }
    for (int64_t i = 0; i < keys; ++i) {
      const char* HWY_RESTRICT v = c.v_again.Next();
      ATTN_VEC_ARRAY(VF, vv, V);
      for (int n = 0; n < V; ++n) ATTN_AT(vv, n) = LoadRowVector<TV>(v, n);
      for (int r = 0; r < RB; ++r) {
        const float w = p[RA + r][i];
        if (skip_hidden && IsHiddenWeight(w)) continue;
        const VF pb = hn::Set(df, w);
        for (int n = 0; n < V; ++n) {
          ATTN_AT2(acc_b, r, n) = hn::MulAdd(pb, ATTN_AT(vv, n), ATTN_AT2(acc_b, r, n));
        }
      }
    }
    for (int r = 0; r < RB; ++r) {
      for (int n = 0; n < V; ++n) hn::Store(ATTN_AT2(acc_b, r, n), df, o[RA + r] + n * N);
    }
  }
}

// The row walk's step for R rows (1, 2 or 4) and a row of `vectors` (2, 4
// or 8) vectors: the only sizes instantiated, each costing compile time in
// every file that includes the narrow path (the walk table admits these).
template <int R, typename TK, typename TV>
HWY_INLINE void NarrowRowStep(int64_t vectors, bool skip_hidden,
                              const float* const* HWY_RESTRICT q,
                              const float* const* HWY_RESTRICT p, int64_t keys,
                              float* const* HWY_RESTRICT s_next, int64_t next_keys,
                              float* const* HWY_RESTRICT o, RowWalkCursors& c) {
  auto step = [&](auto v_tag) {
    constexpr int V = decltype(v_tag)::value;
    if constexpr (R == 1) {
      NarrowRowKeys<V, TK, TV>(skip_hidden, q[0], p[0], keys, s_next[0], next_keys, o[0], c);
    } else {
      NarrowRowGroupKeys<V, R, TK, TV>(skip_hidden, q, p, keys, s_next, next_keys, o, c);
    }
  };
  if (vectors == 8) return step(std::integral_constant<int, 8>());
  if (vectors == 4) return step(std::integral_constant<int, 4>());
  step(std::integral_constant<int, 2>());
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
