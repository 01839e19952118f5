// The tiled walk, per Highway target: per key tile of at most 16 KiB of V
// (so the mix's column passes stay in L1), each group of up to
// kNarrowGroupRows rows scores the tile (score blocks), takes the softmax
// step, then mixes it (column chunks). The first group requests the tile's
// V rows and K ahead. Memory traffic: K and V once per view, the tile's V
// once per column chunk from L1. Takes every widened view; the simple walk
// the others are tested against bit for bit (walk_table.cc).
#if defined(ATTN_KERNELS_DECODE_TILED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_TILED_INL_H_
#undef ATTN_KERNELS_DECODE_TILED_INL_H_
#else
#define ATTN_KERNELS_DECODE_TILED_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "hwy/highway.h"
#include "kernels/common/key_rows-inl.h"      // KeyPrefetcher, PrefetchRows
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch, NarrowChunk, NarrowRowStats
#include "kernels/common/widen-inl.h"         // WithStorageType
#include "kernels/decode/blocks-inl.h"        // NarrowScoreTile, NarrowSoftmaxTile, NarrowMixTile
#include "kernels/decode/quant_passes-inl.h"  // NarrowScoreTileQuant, NarrowMixTileQuant
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

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
    // q8_0 or q4_0 K or V: quant_passes-inl.h (one branch per chunk).
    if (internal::IsBlockType(h.k_type)) {
      // The next run's K rows, requested while this one is scored: within
      // a run the q8_0 score pass requests K ahead itself, not across runs.
      if (prefetch && ch.next_k) {
        PrefetchRows(ch.next_k, h.k_type, h.k_stride,
                     std::min(ch.next_keys, KeyPrefetchDistance(h.k_type)), h.d);
      }
      WithBlockFormat(h.k_type, [&](auto format) {
        NarrowScoreTileQuant<decltype(format), R>(
            scratch, row0, h.d, static_cast<const uint8_t*>(ch.k),
            internal::BytesOf(h.k_type, h.k_stride), ch.keys, ch.k_ahead,
            static_cast<const uint8_t*>(ch.v), internal::BytesOf(h.v_type, h.v_stride),
            internal::BytesOf(h.v_type, h.dv), prefetch);
      });
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
    if (internal::IsBlockType(h.v_type)) {
      WithBlockFormat(h.v_type, [&](auto format) {
        NarrowMixTileQuant<decltype(format), R>(scratch, row0, ch.keys,
                                                static_cast<const uint8_t*>(ch.v),
                                                internal::BytesOf(h.v_type, h.v_stride), h.dv);
      });
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

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
