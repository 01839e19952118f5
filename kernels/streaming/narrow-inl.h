// Narrow streaming path for views with few query rows (decode: one query per
// head, or a GQA group's handful of heads), per Highway target (per-target
// include guard below); StreamingHead calls it for views of at most
// NarrowMaxRows() rows.
//
// Why a second formulation: the panel micro-kernels put P = 2 vectors of
// query rows in the SIMD lanes, so a view of 1 row fills 1/P of every FMA
// and decode read K/V far below the core's read bandwidth
// (docs/performance.md). Here the lanes run along the head dimension instead:
//   scores  s[r][j] = Σ_c q[r][c]·K[j][c]   (dot products, K rows loaded
//                                            whole, reduced across lanes)
//   mix     o[r][:] += p[r][j]·V[j][:]      (broadcast p, load V rows)
// so every lane does useful work whatever the row count, and each K and V
// row is loaded once per view (a group of R <= 4 rows shares it from
// registers, further groups from L1/L2).
//
// Algorithm, per key tile of kv_block keys: R·KB dot-product accumulators at
// a time (KB keys x R rows, 8 or 12 independent FMA chains), reduced four at
// a time into one vector of 128-bit-block partial sums; then mask and causal
// limits per row; online softmax per row, vectorised over the tile's keys
// (scores stored row-major, padded with -inf to whole vectors); and the mix
// in column chunks of R x CV accumulator vectors. A key a row cannot see
// (score -inf: causally hidden, masked with -inf) gets the weight -0 and is
// skipped for that row, so NaN or Inf in V there never reaches it, as in the
// reference; an underflowed weight (+0) is read, as the panel kernels do
// (softmax-inl.h ExpTile, microkernels-inl.h).
//
// Memory traffic: K and V are read once per view (the tile's K rows go
// through registers, its V rows once per column chunk: from L1 after the
// first chunk); q, o and the scores stay in L1. bf16 / f16 K and V are
// loaded as they are and widened in registers (widen-inl.h LoadWide): decode
// reads half the bytes of float32; ggml's q8_0 K and V take the passes of
// narrow_q8-inl.h (0.53 of f16's bytes). Extra memory:
// R·(d + kv_block + dv + padding) floats (NarrowScratch).
//
// The pieces every decode walk shares (kernels/bf16dot's and the AMX
// kernel's too) live in kernels/common/: the scratch, row state, softmax
// step and finish (narrow_state-inl.h), the lane sums of the score blocks
// (lane_sums-inl.h), and the key-row cursor and prefetch policy
// (key_rows-inl.h).
//
// Three walks over the tiles; the measurements behind each choice, and the
// variants tried and not kept, are in docs/performance.md ("Decode walks:
// measurements behind the kernel choices"):
// - the tiled walk (NarrowGroupTile: each tile's scores, softmax, then mix):
//   from DRAM its memory time adds to its compute time rather than hiding
//   behind it, so it reads well below the read probe. On AVX-512 (32
//   registers) it keeps 16 score accumulators (12 for 3 rows), reduced in
//   vector registers (SumBlocksOfFour), and mixes 4 V vectors a pass for
//   3-4 rows. The tests hold every variant to the float64 bound, and catch
//   a reduction's lanes swapped (.ci/planted_bug.sh narrowsum);
// - the pipelined walk (NarrowPipelines: one-row views, K and V of one 16-
//   or 32-bit type, whole V vectors; NarrowPipelinedKeys): tile t's mix and
//   tile t + 1's scores a step of keys at a time, so that the K and V
//   streams both stay in flight, each requested 16 float32 rows' worth of
//   bytes ahead. Its results are the tiled walk's bit for bit
//   (tests/narrow_pipeline_test.cc), so every test of the tiled walk holds
//   for it;
// - the row walk (narrow_row-inl.h: views of 1, 2 or 4 rows with d = d_v of
//   2, 4 or 8 vectors, i.e. d <= 128 on AVX-512): each K row read whole, K
//   and V a row at a time each. The tiled score blocks load their keys' K
//   vectors a column at a time across the block's rows, an order across
//   cache lines that costs DRAM rate, and the software prefetch that order
//   needs costs more; reading rows whole in address order avoids both.
#if defined(ATTN_KERNELS_STREAMING_NARROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_STREAMING_NARROW_INL_H_
#undef ATTN_KERNELS_STREAMING_NARROW_INL_H_
#else
#define ATTN_KERNELS_STREAMING_NARROW_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attn/attn.h"  // Tiles
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF, PanelWidth, IsHiddenWeight
#include "kernels/common/modifiers-inl.h"     // ModifyRow, WindowRow
#include "kernels/common/key_rows-inl.h"      // KeyRowCursor, KeyPrefetcher, PrefetchRows
#include "kernels/common/lane_sums-inl.h"     // SumFourPerBlock, SumBlocksOfFour, SumFourDots
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch, NarrowRowStats, NarrowSoftmaxRow
#include "kernels/common/scratch.h"
#include "kernels/common/softmax-inl.h"    // ExpNonPositive, MarkHidden, FinishRow
#include "kernels/common/vec_array-inl.h"  // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"      // LoadWide, WidenScalar, WithStorageType
#include "kernels/kernel.h"
#include "kernels/streaming/narrow_pipeline.h"

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
  // Horizontal sums, four accumulators at a time (sixteen on AVX-512).
  float sums[R * KB + 15];
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  auto acc_or_zero = [&](int a) { return a < R * KB ? ATTN_AT(acc, a) : hn::Zero(df); };
  for (int a = 0; a < R * KB; a += 16) {
    VF w[4];
    for (int g = 0; g < 4; ++g) {
      const int b = a + 4 * g;
      w[g] = SumFourPerBlock(acc_or_zero(b), acc_or_zero(b + 1), acc_or_zero(b + 2),
                             acc_or_zero(b + 3));
    }
    hn::StoreU(SumBlocksOfFour(w[0], w[1], w[2], w[3]), df, sums + a);
  }
#else
  for (int a = 0; a < R * KB; a += 4) {
    SumFourDots(ATTN_AT(acc, a), a + 1 < R * KB ? ATTN_AT(acc, a + 1) : hn::Zero(df),
                a + 2 < R * KB ? ATTN_AT(acc, a + 2) : hn::Zero(df),
                a + 3 < R * KB ? ATTN_AT(acc, a + 3) : hn::Zero(df), 4, sums + a);
  }
#endif
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

template <int R, int CV, bool kSkipHidden, typename TV>
HWY_INLINE void NarrowMixChunkN(int64_t vectors, float* const* HWY_RESTRICT o,
                                const float* const* HWY_RESTRICT p, int64_t keys,
                                const TV* HWY_RESTRICT v, int64_t v_stride, int64_t c0) {
  if constexpr (CV > 0) {
    if (vectors == CV) return NarrowMixChunk<R, CV, kSkipHidden>(o, p, keys, v, v_stride, c0);
    NarrowMixChunkN<R, CV - 1, kSkipHidden>(vectors, o, p, keys, v, v_stride, c0);
  }
}

// Vectors of columns a mix pass for R rows: R·CV accumulators + CV V
// vectors; with 32 registers a 4-row group mixes 4 vectors a pass, so a
// tile's V rows are loaded (and a 16-bit V widened) half as often as with 2.
template <int R>
constexpr int NarrowMixVectors() {
  return kNarrowWideRegisters ? (R == 1 ? 8 : R == 2 ? 8 : 4) : (R == 1 ? 8 : R == 2 ? 4 : 2);
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
  for (int64_t n0 = 0; n0 < vectors; n0 += CV) {
    const int64_t chunk = std::min<int64_t>(CV, vectors - n0);
    if (any_hidden) {
      NarrowMixChunkN<R, CV, true>(chunk, o, p, keys, v, v_stride, n0 * N);
    } else {
      NarrowMixChunkN<R, CV, false>(chunk, o, p, keys, v, v_stride, n0 * N);
    }
  }
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

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

// q8_0 K and V (ggml's blocks): the score and mix passes; the row walk for
// views whose rows fit in registers; both built on the pieces above (each
// with its own per-target include guard).
#include "kernels/streaming/narrow_q8-inl.h"
#include "kernels/streaming/narrow_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// The scores of rows [row0, row0 + rows) for the tile's keys [j0, j0 +
// keys) (in the current score buffer) made weights: soft-cap and ALiBi,
// the mask, the causal limit and the window, then the online-softmax step.
HWY_INLINE void NarrowSoftmaxTile(const internal::HeadView& h, NarrowScratch& scratch,
                                  int64_t row0, int64_t rows, int64_t j0, int64_t keys,
                                  NarrowRowStats* HWY_RESTRICT stats) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool modified = h.HasScoreModifiers();
  for (int64_t r = row0; r < row0 + rows; ++r) {
    float* HWY_RESTRICT s = scratch.s(r);
    if (modified) ModifyRow(h, r, j0, keys, s);  // soft-cap, ALiBi
    if (h.mask) {
      const float* HWY_RESTRICT m = h.mask + r * h.mask_row_stride + j0 * h.mask_col_stride;
      for (int64_t j = 0; j < keys; ++j) {
        // Additive, as in the reference: NaN from K plus -inf stays NaN.
        s[j] += m[j * h.mask_col_stride];
      }
    }
    // Keys past this row's causal limit.
    const int64_t visible = std::clamp<int64_t>(h.KeyEnd(r) - j0, 0, keys);
    for (int64_t j = visible; j < keys; ++j) s[j] = neg_inf;
    if (modified) WindowRow(h, r, j0, keys, s);
    NarrowSoftmaxRow(s, keys, stats[r], scratch.o(r), h.dv);
  }
}

// One tile of keys [j0, j0 + keys) for the R rows [row0, row0 + R) of a
// view: scores, mask and causal limits, online softmax, mix. The tile's keys
// are chunks[0 .. n_chunks) (one chunk unless the view's keys are in spans:
// then a chunk per run, e.g. per 16-token page), scored and mixed chunk by
// chunk; the softmax step runs once over the whole tile, so a paged cache
// costs the chunks' loop overhead, not a softmax step or a merge per page.
template <int R>
HWY_INLINE void NarrowGroupTile(const internal::HeadView& h, NarrowScratch& scratch,
                                int64_t row0, int64_t j0, int64_t keys, int64_t key_end,
                                const NarrowChunk* HWY_RESTRICT chunks, size_t n_chunks,
                                NarrowRowStats* HWY_RESTRICT stats) {
  // The first group of the tile brings its K and V rows into the cache.
  const bool prefetch = row0 == 0;
  KeyPrefetcher k_prefetch(h, key_end);
  for (size_t c = 0; c < n_chunks; ++c) {
    const NarrowChunk& ch = chunks[c];
    scratch.SetScoreAt(ch.at);
    // q8_0 K or V: narrow_q8-inl.h (one branch per chunk).
    if (h.k_type == DType::kQ8_0) {
      // The next run's K rows, requested while this one is scored: within
      // a run the q8_0 score pass requests K ahead itself, not across runs.
      if (prefetch && ch.next_k) {
        PrefetchRows(ch.next_k, h.k_type, h.k_stride,
                     std::min(ch.next_keys, KeyPrefetchDistance(h.k_type)), h.d);
      }
      NarrowScoreTileQ8_0<R>(scratch, row0, h.d, static_cast<const uint8_t*>(ch.k),
                             internal::BytesOf(h.k_type, h.k_stride), ch.keys, ch.k_ahead,
                             static_cast<const uint8_t*>(ch.v),
                             internal::BytesOf(h.v_type, h.v_stride),
                             internal::BytesOf(h.v_type, h.dv), prefetch);
    } else {
      WithStorageType(h.k_type, [&](auto tag) {
        using TK = decltype(tag);
        NarrowScoreTile<R>(scratch, row0, h.d, static_cast<const TK*>(ch.k), h.k_stride,
                           ch.keys, j0 + ch.at, k_prefetch, ch.v, h.v_type, h.v_stride, h.dv,
                           prefetch);
      });
    }
  }
  scratch.SetScoreAt(0);
  NarrowSoftmaxTile(h, scratch, row0, R, j0, keys, stats);
  for (size_t c = 0; c < n_chunks; ++c) {
    const NarrowChunk& ch = chunks[c];
    scratch.SetScoreAt(ch.at);
    if (h.v_type == DType::kQ8_0) {
      NarrowMixTileQ8_0<R>(scratch, row0, ch.keys, static_cast<const uint8_t*>(ch.v),
                           internal::BytesOf(h.v_type, h.v_stride), h.dv);
    } else {
      WithStorageType(h.v_type, [&](auto tag) {
        using TV = decltype(tag);
        NarrowMixTile<R>(scratch, row0, ch.keys, static_cast<const TV*>(ch.v), h.v_stride,
                         h.dv);
      });
    }
  }
  scratch.SetScoreAt(0);
}

// Whether a view takes the pipelined walk (or, with d = d_v of at most 8
// vectors, the row walk: NarrowRowWalks): one row (a decode query per
// head), K and V of one 16- or 32-bit type (q8_0 has its own passes), and V
// rows of whole vectors. Other views take the tiled walk (NarrowGroupTile).
// A GQA group of 4 rows pipelined was slower than tiled for 16-bit K/V with
// o loaded and stored per key, and within the noise of tiled with o loaded
// and stored once per 4 keys (kNarrowPipelineStep, NarrowMixKeys) and 2
// keys a score block (docs/performance.md), so groups stay tiled, except
// with in_run: the view is one of a run that shares token rows
// (NarrowHeads: the kv heads of token-major K/V, [T, kv_heads, d] or
// FlashAttention's pages), whose views then take each step in lockstep,
// and there groups of 2 or 4 rows pipeline as well.
HWY_INLINE bool NarrowPipelines(const internal::HeadView& h, bool in_run = false) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  const bool rows = h.tq == 1 || (in_run && (h.tq == 2 || h.tq == 4));
  return internal::NarrowPipelineAllowed().load(std::memory_order_relaxed) && rows &&
         h.k_type == h.v_type && h.k_type != DType::kQ8_0 && h.dv % N == 0;
}


// Whether a view takes the row walk (narrow_row-inl.h): 1, 2 or 4 rows of
// K and V rows adjacent in memory, of one type (float32, bf16, f16, or q8_0
// for one row where a vector tiles a block), d = d_v of 2, 4 or 8 whole
// vectors (NarrowRowStepExists). q8_0 groups keep the tiled walk: the group
// walk, which dequantises each V row twice (rows 0-1, then 2-3), ran them
// slower. Rows adjacent within each run: dense head-major K/V, and
// head-major pages ([num_blocks, kv_heads, block_size, d], vLLM's CPU
// layout), whose runs the walk's cursors and its requests ahead follow.
// Strided rows (token-major K/V and pages, 8 kv heads of bf16 in each token
// row) keep the pipelined walk: the row walk ran them slower, with software
// prefetch and without, while it ran head-major pages faster (figures:
// docs/performance.md, "Decode walks: measurements behind the kernel
// choices"; docs/serving.md).
HWY_INLINE bool NarrowRowWalks(const internal::HeadView& h) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  const int64_t vectors = h.dv / N;
  return internal::NarrowPipelineAllowed().load(std::memory_order_relaxed) &&
         h.k_stride == h.d && h.v_stride == h.dv && h.k_type == h.v_type && h.d == h.dv &&
         h.dv % N == 0 && NarrowRowStepExists(h.tq, vectors) &&
         (h.k_type != DType::kQ8_0 || (h.tq == 1 && Q8_0VectorsTileBlocks(DF())));
}

// Keys a step of the pipelined walk: S keys of the next tile scored (in
// score blocks of min(S, NarrowKeysPerBlock<R>()) keys), then S keys of the
// current one mixed, in one pass where a V row is one column chunk
// (NarrowMixKeys: o loaded and stored once per S keys rather than per key).
constexpr int64_t kNarrowPipelineStep = 4;

// One step of the pipelined walk for a view of R <= kNarrowGroupRows rows:
// the mix of the current tile's `keys` keys (weights in score buffer `cur`)
// and the scores of the next tile's `next_keys` keys (into buffer 1 - cur),
// kNarrowPipelineStep keys of each in turn (one key of each where a run of
// keys, e.g. a page, or a tile ends within the step). Each of K and V is one
// sequential stream, read a few rows at a time beside the other, with both
// requested a fixed number of bytes ahead (k_ahead, v_ahead: cursors that
// many keys on). Runs the steps from key j_begin until key j_until is
// reached (a step may end past it) and returns the key it stopped at, so a
// tile can be taken in several calls (NarrowHeads) with the operations of
// one call, in the same order.
template <int R, typename TK, typename TV>
HWY_INLINE int64_t NarrowPipelinedKeys(const internal::HeadView& h, NarrowScratch& scratch,
                                       int64_t cur, int64_t keys, int64_t next_keys,
                                       int64_t key_end, KeyRowCursor& k_rows,
                                       KeyRowCursor& v_rows, KeyRowCursor& k_ahead,
                                       KeyRowCursor& v_ahead, int64_t j_begin,
                                       int64_t j_until) {
  const int64_t vectors = h.dv / int64_t(hn::Lanes(DF()));
  float* o[R];
  const float* p[R];
  scratch.SetScoreBuffer(cur);
  for (int r = 0; r < R; ++r) {
    o[r] = scratch.o(r);
    p[r] = scratch.s(r);
  }
  scratch.SetScoreBuffer(1 - cur);
  constexpr int64_t S = kNarrowPipelineStep;
  // Four dot products at a time for the horizontal sums (SumFourPerBlock)
  // where the registers allow: one key a step ran 16-bit decode slower than
  // the tiled walk, its single FMA chain and reduction per key exposed.
  constexpr int KB = std::min<int>(int(S), NarrowKeysPerBlock<R>());
  static_assert(S % KB == 0, "a step is whole score blocks");
  // S keys a mix pass only where a V row is one column chunk (16-bit V at
  // d = 128 on AVX2) or for groups: a one-row float32 row of two chunks was
  // then read half a row at a time across the S rows, no faster than a key
  // at a time (docs/performance.md); a group mixed a key at a time loads
  // and stores o once per FMA of each row (4 rows of 8 vectors, 2 column
  // chunks on AVX-512).
  const bool mix_whole_rows = R > 1 || vectors <= NarrowMixVectors<R>();
  const int64_t steps = std::min(std::max(keys, next_keys), j_until);
  int64_t j = j_begin;
  while (j < steps) {
    const bool score_step = j + S <= next_keys && k_rows.Contiguous(S);
    const bool mix_pass = mix_whole_rows && j + S <= keys && v_rows.Contiguous(S);
    const int64_t n = score_step || (j >= next_keys && mix_pass) ? S : 1;
    if (j < next_keys) {
      for (int64_t i = 0; i < n && k_ahead.key() < key_end; ++i) {
        PrefetchRows(k_ahead.Next(), h.k_type, 0, 1, h.d);
      }
      const TK* HWY_RESTRICT k = reinterpret_cast<const TK*>(k_rows.Next(n));
      if (n == S) {
        for (int64_t b = 0; b < S; b += KB) {
          NarrowScoreBlock<R, KB>(scratch, 0, h.d, k + b * h.k_stride, h.k_stride, j + b);
        }
      } else {
        NarrowScoreBlock<R, 1>(scratch, 0, h.d, k, h.k_stride, j);
      }
    }
    const float* pj[R];
    if (n == S && mix_pass) {
      for (int64_t i = 0; i < S && v_ahead.key() < key_end; ++i) {
        PrefetchRows(v_ahead.Next(), h.v_type, 0, 1, h.dv);
      }
      for (int r = 0; r < R; ++r) pj[r] = p[r] + j;
      NarrowMixKeys<R>(o, pj, S, reinterpret_cast<const TV*>(v_rows.Next(S)), h.v_stride,
                       vectors);
    } else {
      for (int64_t i = j; i < std::min(j + n, keys); ++i) {
        if (v_ahead.key() < key_end) PrefetchRows(v_ahead.Next(), h.v_type, 0, 1, h.dv);
        for (int r = 0; r < R; ++r) pj[r] = p[r] + i;
        NarrowMixKeys<R>(o, pj, 1, reinterpret_cast<const TV*>(v_rows.Next()), h.v_stride,
                         vectors);
      }
    }
    j += n;
  }
  return j;
}

// A narrow view's walk over its key tiles, one tile a call, so that several
// views can take their tiles in turn (NarrowHeads). Rows go in groups of up
// to kNarrowGroupRows; every group of a key tile runs while the tile's K and
// V rows are in L1/L2, so K and V come from memory once per view whatever
// its row count.
class NarrowWalk {
 public:
  // in_run: the view is one of several that share token rows, taken a
  // pipelined step each in turn (NarrowHeads), so groups of 2 or 4 rows
  // take the pipelined walk too (NarrowPipelines).
  NarrowWalk(const internal::HeadView& h, const Tiles& tiles, NarrowScratch& scratch,
             bool in_run = false)
      : h_(h), scratch_(scratch), k_rows_(h, false), v_rows_(h, true), k_ahead_(h, false),
        v_ahead_(h, true), v_again_(h, true) {
    const int64_t rows = h.tq;
    // The mix walks the tile's V rows once per column chunk: the tile must
    // stay in L1 (16 KiB of V, in V's own element type: a 16-bit V fits
    // twice the keys), or with power-of-two row strides the passes evict
    // each other even from L2 (kv_block 128 at d = 128 ran at a quarter of
    // the speed for 4 rows, float32 V).
    const int64_t l1_keys = std::max<int64_t>(
        8, (16 * 1024) / std::max<int64_t>(1, internal::BytesOf(h.v_type, h.dv)));
    row_walk_ = NarrowRowWalks(h);
    // The row walk reads each V row once, so its tile is not held to L1:
    // longer tiles make fewer softmax steps (kNarrowRowTileKeys).
    kv_block_ = std::max<int64_t>(
        1, std::min<int64_t>(tiles.kv_block, row_walk_ ? kNarrowRowTileKeys : l1_keys));
    scratch.Reserve(rows, h.d, kv_block_, h.dv);
    NarrowRowStats* HWY_RESTRICT stats = scratch.stats();
    for (int64_t r = 0; r < rows; ++r) {
      stats[r] = NarrowRowStats();
      const void* HWY_RESTRICT q = h.QRow(r);
      float* HWY_RESTRICT qs = scratch.q(r);
      for (int64_t c = 0; c < h.d; ++c) qs[c] = h.scale * internal::LoadElement(q, h.q_type, c);
      std::fill(scratch.o(r), scratch.o(r) + h.dv, 0.0f);
    }
    // Keys outside [first row's window start, last row's last visible key)
    // are never read: a windowed decode reads the window's keys only.
    key_end_ = h.VisibleEnd(rows - 1);
    j0_ = h.KeyBegin(0);
    pipelined_ = row_walk_ || NarrowPipelines(h, in_run);
  }

  bool Done() const { return primed_ ? keys_ == 0 : j0_ >= key_end_; }

  // Whether the tiles can be taken a step at a time (BeginTile, Steps,
  // EndTile): the pipelined walk, not the row walk.
  bool Stepped() const { return pipelined_ && !row_walk_; }
  // Walks that cover the same keys in the same tiles take their steps in
  // lockstep.
  bool SameTilesAs(const NarrowWalk& o) const {
    return j0_ == o.j0_ && key_end_ == o.key_end_ && kv_block_ == o.kv_block_;
  }

  // The next tile of keys, for every row group.
  void Tile() {
    if (pipelined_) return PipelinedTile();
    const internal::HeadView& h = h_;
    const int64_t j0 = j0_, keys = std::min(kv_block_, key_end_ - j0);
    // The tile's runs of contiguous keys: one for strided keys; with spans
    // one per run the tile meets (RunAt). K is requested ahead across runs
    // (KeyPrefetcher); a q8_0 K within its run (k_ahead) and the next run's
    // first keys (next_k).
    std::vector<NarrowChunk>& chunks = scratch_.chunks();
    chunks.clear();
    for (int64_t j = j0; j < j0 + keys;) {
      const internal::KeyRun run = h.RunAt(j, &hint_);
      NarrowChunk ch;
      ch.k = run.k;
      ch.v = run.v;
      ch.at = j - j0;
      ch.keys = std::min(run.keys, j0 + keys - j);
      ch.k_ahead = std::min(run.keys, key_end_ - j);
      if (h.k_type == DType::kQ8_0 && h.spans && run.keys == ch.keys && j + ch.keys < key_end_) {
        int64_t next_hint = hint_;
        const internal::KeyRun next = h.RunAt(j + ch.keys, &next_hint);
        ch.next_k = next.k;
        ch.next_keys = std::min(next.keys, key_end_ - (j + ch.keys));
      }
      chunks.push_back(ch);
      j += ch.keys;
    }
    const NarrowChunk* ch = chunks.data();
    const size_t n = chunks.size();
    NarrowRowStats* HWY_RESTRICT stats = scratch_.stats();
    for (int64_t row0 = 0; row0 < h.tq; row0 += kNarrowGroupRows) {
      switch (std::min<int64_t>(kNarrowGroupRows, h.tq - row0)) {
        case 1: NarrowGroupTile<1>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        case 2: NarrowGroupTile<2>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        case 3: NarrowGroupTile<3>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        default: NarrowGroupTile<4>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
      }
    }
    j0_ += keys;
  }

  void Finish() const {
    for (int64_t r = 0; r < h_.tq; ++r) FinishNarrowRow(h_, r, scratch_.o(r), scratch_.stats()[r]);
  }

 private:
  // The pipelined walk (NarrowPipelinedKeys): tile t's mix beside tile t +
  // 1's scores, then tile t + 1's softmax step, which rescales o only after
  // tile t is mixed into it: the operations of the tiled walk in the same
  // order per row and column, so the same bits.
  void PipelinedTile() {
    BeginTile();
    Steps(std::numeric_limits<int64_t>::max());
    EndTile();
  }

 public:
  // A pipelined tile in parts: BeginTile (the first tile's scores alone,
  // once), Steps until the tile's keys are done (each call runs the steps
  // up to a key; false once none is left), EndTile (the next tile's softmax
  // step). The same operations as PipelinedTile in one call.
  void BeginTile() {
    const internal::HeadView& h = h_;
    if (!primed_) {  // the first tile's scores alone
      primed_ = true;
      keys_ = std::min(kv_block_, key_end_ - j0_);
      k_rows_.Seek(j0_);
      v_rows_.Seek(j0_);
      // The row walk requests rows RowAheadKeys ahead (narrow_row-inl.h),
      // the pipelined walk KeyPrefetchDistance.
      k_ahead_.Seek(j0_ + (row_walk_ ? RowAheadKeys(h.k_type, h.d) : KeyPrefetchDistance(h.k_type)));
      v_ahead_.Seek(j0_ + (row_walk_ ? RowAheadKeys(h.v_type, h.dv) : KeyPrefetchDistance(h.v_type)));
      Pipelined(1, 0, keys_, 0, std::numeric_limits<int64_t>::max());
      scratch_.SetScoreBuffer(cur_);
      NarrowSoftmaxTile(h, scratch_, 0, h.tq, j0_, keys_, scratch_.stats());
    }
    next_keys_ = std::min(kv_block_, key_end_ - (j0_ + keys_));
    step_j_ = 0;
  }
  bool Steps(int64_t until) {
    step_j_ = Pipelined(cur_, keys_, next_keys_, step_j_, until);
    return step_j_ < std::max(keys_, next_keys_);
  }
  void EndTile() {
    const int64_t next_j0 = j0_ + keys_;
    cur_ = 1 - cur_;
    if (next_keys_ > 0) {
      scratch_.SetScoreBuffer(cur_);
      NarrowSoftmaxTile(h_, scratch_, 0, h_.tq, next_j0, next_keys_, scratch_.stats());
    }
    scratch_.SetScoreBuffer(0);
    j0_ = next_j0;
    keys_ = next_keys_;
  }

 private:
  // Mix `keys` keys from buffer `cur` beside scoring `next_keys` into the
  // other, the steps from key j_begin until j_until (the row walk: all of
  // them); returns the key reached.
  int64_t Pipelined(int64_t cur, int64_t keys, int64_t next_keys, int64_t j_begin,
                    int64_t j_until) {
    // NarrowRowWalks admits 1, 2 or 4 rows, NarrowPipelines one row (2 or 4
    // in a run); both K and V of one type.
    if (row_walk_) {
      const int64_t rows = h_.tq;
      const float* q[kNarrowGroupRows];
      const float* p[kNarrowGroupRows];
      float* s_next[kNarrowGroupRows];
      float* o[kNarrowGroupRows];
      bool any_hidden = false;
      for (int64_t r = 0; r < rows; ++r) {
        q[r] = scratch_.q(r);
        o[r] = scratch_.o(r);
        scratch_.SetScoreBuffer(cur);
        p[r] = scratch_.s(r);
        scratch_.SetScoreBuffer(1 - cur);
        s_next[r] = scratch_.s(r);
        for (int64_t j = 0; j < keys; ++j) any_hidden |= IsHiddenWeight(p[r][j]);
      }
      scratch_.SetScoreBuffer(0);
      v_again_.Seek(j0_);
      RowWalkCursors cursors{k_rows_, v_rows_, v_again_, k_ahead_, v_ahead_, key_end_};
      const int64_t vectors = h_.dv / int64_t(hn::Lanes(DF()));
      auto row_keys = [&](auto tag) {
        using T = decltype(tag);
        auto step = [&](auto rows_tag) {
          NarrowRowStep<decltype(rows_tag)::value, T, T>(vectors, any_hidden, q, p, keys, s_next,
                                                          next_keys, o, cursors);
        };
        if (rows == 1) return step(std::integral_constant<int, 1>());
        // q8_0 groups take the tiled walk (NarrowRowWalks): their steps are
        // not instantiated, which saves their compile time in every target.
        if constexpr (!std::is_same_v<T, Q8_0Row>) {
          if (rows == 2) return step(std::integral_constant<int, 2>());
          step(std::integral_constant<int, 4>());
        }
      };
      if (h_.k_type == DType::kQ8_0) {
        row_keys(Q8_0Row());
      } else {
        WithStorageType(h_.k_type, row_keys);
      }
      return std::max(keys, next_keys);
    }
    int64_t reached = j_begin;
    WithStorageType(h_.k_type, [&](auto tag) {
      using T = decltype(tag);
      auto step = [&](auto rows_tag) {
        reached = NarrowPipelinedKeys<decltype(rows_tag)::value, T, T>(
            h_, scratch_, cur, keys, next_keys, key_end_, k_rows_, v_rows_, k_ahead_, v_ahead_,
            j_begin, j_until);
      };
      // One row, or a group of 2 or 4 in a run of views (NarrowPipelines).
      if (h_.tq == 1) return step(std::integral_constant<int, 1>());
      if (h_.tq == 2) return step(std::integral_constant<int, 2>());
      step(std::integral_constant<int, 4>());
    });
    return reached;
  }

  const internal::HeadView& h_;
  NarrowScratch& scratch_;
  int64_t kv_block_ = 1, key_end_ = 0, j0_ = 0, hint_ = 0;
  // The pipelined walk's state: the tile at j0_ has keys_ keys, scored and
  // made weights in buffer cur_ once primed_.
  bool pipelined_ = false, primed_ = false, row_walk_ = false;
  int64_t keys_ = 0, cur_ = 0;
  // The tile in parts (BeginTile): the next tile's keys, the step reached.
  int64_t next_keys_ = 0, step_j_ = 0;
  KeyRowCursor k_rows_, v_rows_, k_ahead_, v_ahead_, v_again_;
};

// The narrow path's entry points, defined once per target in
// narrow_heads.cc (see there). Out of line so that the walk above is
// compiled once per target, not inlined into every kernel that takes the
// narrow path (the streaming and parallel kernels, each bf16 dot-product
// layer): the streaming kernel's translation unit was the longest step of
// every build, with the parallel and bf16dot ones next (docs/performance.md,
// "Compile time").
//
// Views of up to NarrowMaxRows() rows: normalised output and lse.
void NarrowHead(const internal::HeadView& h, const Tiles& tiles, NarrowScratch& scratch);
// Several narrow views whose K and V rows interleave in memory (the kv
// heads of one sequence in a token-major layout), taken side by side.
void NarrowHeads(const internal::HeadView* views, int64_t count, const Tiles& tiles,
                 NarrowScratch* const* scratches);

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
