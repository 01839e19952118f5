// The pipelined walk, per Highway target: tile t's mix beside tile t + 1's
// scores, kNarrowPipelineStep keys of each in turn, so the K and V streams
// both stay in flight, each requested a fixed number of bytes ahead; then
// tile t + 1's softmax step. The tiled walk's operations in the same order
// per row and column, so its bits. Memory traffic: K and V once per view, a
// few rows at a time each, in address order.
#if defined(ATTN_KERNELS_DECODE_PIPELINED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_PIPELINED_INL_H_
#undef ATTN_KERNELS_DECODE_PIPELINED_INL_H_
#else
#define ATTN_KERNELS_DECODE_PIPELINED_INL_H_
#endif

#include <stdint.h>

#include <algorithm>

#include "hwy/highway.h"
#include "kernels/common/key_rows-inl.h"      // KeyRowCursor, PrefetchRows
#include "kernels/common/lane_sums-inl.h"     // NarrowKeysPerBlock
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch
#include "kernels/decode/blocks-inl.h"        // NarrowScoreBlock, NarrowMixKeys
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

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

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
