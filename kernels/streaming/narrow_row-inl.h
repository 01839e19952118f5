// The narrow path's row walk for one query row (decode: one query per kv
// head), per Highway target (per-target include guard below): tile t's mix
// and tile t + 1's scores a key at a time, K row then V row, with the
// output accumulators in registers for the whole tile. narrow-inl.h
// includes this file after its building blocks (KeyRowCursor, the lane
// sums) and takes this walk for views of 1, 2 or 4 rows with d = d_v of
// 2, 4 or 8 vectors and rows adjacent within each run (NarrowRowWalks,
// NarrowRowStepExists: q and o fit in registers, d <= 128 on AVX-512);
// other views take the pipelined or the tiled walk there.
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
// one row each per key; no software prefetch for float32 rows (the
// hardware prefetchers follow both streams), 16-bit rows (and q8_0 rows of
// one row's walk) requested 2 KiB of row bytes ahead (kGroupPrefetchBytes)
// by a cursor that follows the view's runs, so with head-major pages the
// request lands on the next page, not past the end of this one; q and the
// score buffers in L1; o loaded and stored once per tile.
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
// 8192 keys of float32) 57-59 GB/s against 34-36. q8_0 rows (one row;
// LoadRowVector) 14.2-14.6 GB/s against 10.0-10.2 for its tiled passes.
// GQA 32/8 groups of 4 rows (NarrowRowGroupKeys) against the tiled walk,
// two rounds alternated, probe 27-30 GB/s: float32 one thread 15.8-19.5
// GB/s against 7.6-11.7 (bw_frac 0.56-0.66 against 0.28-0.41), two
// threads 28.6-28.9 against 18.6-19.9 (0.85 against 0.62); bf16 and f16
// unchanged (12.1-13.4 against 11.5-12.6: bound by the FMAs, see
// narrow-inl.h), so they take it as well.
// Tried for the group walk on the same VM and not kept (Hq 32 Hkv 8, T_k
// 4096 and 32768, d = 128, alternated against this walk):
// - scoring two keys per load of each q vector, halving the walk's largest
//   stream of loads (rows 0-1 still mixed beside the scores): float32
//   0.41-0.58 of the probe against 0.52-0.70, bf16 0.38-0.49 against
//   0.40-0.58;
// - software prefetch (T0) of the K and V rows 4, 16 or 64 keys ahead:
//   float32 0.47-0.51 against 0.53-0.59, bf16 0.41-0.45 against 0.42-0.43;
// - mixing rows 2-3 every 4 keys from the V rows just read (L1), their o
//   loaded and stored per 4 keys, instead of the second pass over the
//   tile's V rows from L2 (the same bits), so that no phase of the walk is
//   without DRAM reads: float32 T_k 32768 one thread 50-52 tokens/s
//   against 68-73 (bw_frac 0.49 against 0.60-0.66), two threads 71-94
//   against 88-100, kv:f16 and kv:bf16 T_k 4096 710-762 against 867-981:
//   the extra o traffic costs more than the second pass;
// - requesting the first part of the next tile's V rows, and of the K rows
//   after them, into L2 (prefetcht1) during that second pass, medians of 5
//   alternated rounds at T_k 32768, one thread, float32 and kv:f16
//   tokens/s: a quarter of the tile 65 and 98 against 65 and 93, a third
//   60 and 99, an eighth 67 and 93, the whole tile 45-47 and 80-86 (two
//   rounds): at most +5%, within the spread of these rows.
// One head's group of 4 rows in L2 (768 keys, d = 128) costs 29 ns a key in
// float32 and 31 in f16, against 12.5-13 for one row: float32 groups could
// run at 35 GB/s from cache, above the probe, so what they lose from DRAM
// is on the memory side; f16 groups, at 16 GB/s from cache, are bound by
// their arithmetic.
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

#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF, IsHiddenWeight
#include "kernels/common/vec_array-inl.h"     // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/convert.h"          // kQ8_0BlockElements, kQ8_0BlockBytes
#include "kernels/common/widen-inl.h"         // Q8_0Row, LoadRowVector

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Keys a tile of the row walk at most (the tile's weights and the next
// tile's scores, 2 KiB, stay in L1). The tile sets how often the softmax
// step and o's loads and stores run: 16 heads x 32768 keys of float32,
// d = 128, from DRAM ran at 0.79, 0.82, 0.87 and 0.87 of the read probe with
// tiles of 32, 64, 128 and 256 keys; from L2 at 0.73, 0.81, 0.83 and 0.81
// (AMD EPYC Zen 4, one process alternating the probe and the kernel).
constexpr int64_t kNarrowRowTileKeys = 256;

// How far ahead the row walks request 16-bit (and q8_0) K and V rows: 2 KiB (8
// rows at d = 128). Measured on Intel Xeon (family 6 model 167, AMX; 2-core
// VM), attn-bench decode Hq 32 Hkv 8, T_k 32768, d = 128, three rounds with
// and without in one build: kv:f16 one thread 67-70 -> 78-88 tokens/s, two
// threads 128-148 -> 180-183, dtype:f16 68-70 -> 81-89 and 138-147 ->
// 178-187; from L3 (T_k 4096) unchanged; 1 KiB ahead +13-24% and 512 B
// +4-14% (one thread, kv:f16, two rounds). The one-row walk (16 heads,
// T_k 32768, d = 128, same VM, with and without in one build, two rounds):
// kv:q8_0 one thread 60-64 -> 83-89 tokens/s (bw_frac 0.52-0.55 ->
// 0.71-0.77), two threads 117-118 -> 157-175; kv:f16 48-49 -> 51-54 (0.79
// -> 0.85-0.87) and 89-92 -> 100-102; dtype:bf16 two threads 82-89 ->
// 99-104; float32 rows 0.82-0.89 against 0.86 (not kept); 1, 4 and 8 KiB
// ahead for q8_0 76-78, 80-85 and 81 tokens/s against 83 at 2 KiB. On
// Zen 4 (where the one-row walk's request was not measured) the same
// request for widened bf16 group rows (4-64 keys ahead) changed nothing
// (bw_frac 0.41-0.45 against 0.42-0.43), and for float32 rows lost 10%
// (0.47-0.51 against 0.53-0.59; +6% on the Intel Xeon), so float32 rows
// are not requested. Likely cause, not measured (no counters in
// these VMs): widening costs the 16-bit walk more instructions a byte, so
// the out-of-order window holds fewer rows' loads in flight. Zen 4 again,
// one build with the distance read at run time, one round of 2
// repetitions, T_k 32768, d = 128, one thread, tokens/s for 0 (no
// request), 2, 4 and 8 KiB ahead: GQA 32/8 kv:f16 97-100, 99-100, 101-102,
// 97-98; dtype:bf16 (the pair walk, bf16dot/narrow-body.h) 99-105,
// 101-103, 95-96, 98-99; 16 heads kv:f16 93, 85-89, 80-81, 81-83 and
// dtype:bf16 91-94, 83-85, 80, 81-82. So no distance helps there; no
// request at all read the 16 heads 5-10% faster in that round, within the
// 78-93 tokens/s these rows span across runs on that VM, and 2 KiB stays.
constexpr int64_t kGroupPrefetchBytes = 2048;

// Whether the row walks request rows of T ahead: 16-bit and q8_0 rows, not
// float32 (measured above). q8_0 reaches only the one-row walk
// (NarrowRowWalks keeps q8_0 groups on the tiled walk).
template <typename T>
constexpr bool RowIsRequestedAhead() {
  return std::is_same_v<T, Q8_0Row> || sizeof(T) == 2;
}
// Bytes of a row of `elements` elements of T (q8_0: 34-byte blocks of 32).
template <typename T>
constexpr int64_t RowBytes(int64_t elements) {
  if constexpr (std::is_same_v<T, Q8_0Row>) {
    return elements / internal::kQ8_0BlockElements * internal::kQ8_0BlockBytes;
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
// Groups of 4 at d = 64 on AVX-512 (16 vectors) went from two passes to
// one: AMD EPYC Zen 4, attn-bench streaming/decode Hq 32 Hkv 8, T_k 32768,
// d = 64, one thread, the two builds alternated in three rounds: float32
// 88-132 -> 141-152 tokens/s (bw_frac 0.41-0.60 -> 0.65-0.77), kv:bf16
// 153-179 -> 185-193, kv:f16 156-175 -> 173-191; a standalone loop of the
// two-pass order reads DRAM at 0.64-0.73 of the probe, its first pass
// alone at 0.85-0.86 (docs/performance.md). At d = 128 (32 vectors) the
// walk keeps two passes.
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
// every file that includes the narrow path (NarrowRowWalks admits these).
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

// Whether the row walk has a step for R rows of `vectors` vectors.
HWY_INLINE bool NarrowRowStepExists(int64_t rows, int64_t vectors) {
  return (rows == 1 || rows == 2 || rows == 4) && (vectors == 2 || vectors == 4 || vectors == 8);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
