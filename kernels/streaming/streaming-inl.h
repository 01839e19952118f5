// Streaming kernel (flash-attention style online softmax), per Highway
// target (per-target include guard below).
//
// Algorithm, per head: queries in blocks of q_block rows (whole panels of P
// rows, transposed and pre-scaled into Qt once). For each block, stream the
// keys in tiles of kv_block: for every panel of the block, score the tile
// (register-blocked outer products), add the mask, update the running
// max/sum (rescaling the panel's accumulator only where the max grew), and
// mix the tile's weights into the accumulator Ot. Normalise once at the end.
// Causal: keys beyond the block's last visible key are never touched, a
// panel skips tiles wholly above its diagonal, and only tiles crossing it are
// masked.
// Sliding window: a block reads only the keys from its first row's window
// start to its last row's limit, and each panel computes from its own first
// row's window start, skipping whole tiles outside. At a window's left edge
// and at the causal diagonal the keys only one of a panel's two vectors of
// rows can see are computed for that vector alone (SplitPanelTile).
// A short window still costs more per visible pair than full causal, by
// its own structure: a 32-row panel computes 528 key-vectors' worth for
// 513 visible keys a row at W = 512, and the per-row packing, finishing and
// tile calls are spread over W keys instead of T (the figures, and the
// tile sizes and prefetches that did not help: docs/modifiers.md).
//
// Paged keys (HeadView::spans): tiles end at span ends as well, and the
// online softmax runs on across them; nothing is merged or copied.
//
// Memory traffic: K and V are read once per query block (q_block rows share
// each key tile while it is in L1/L2); Q is read once; O is written once.
// Extra memory: O(q_block·(d + dv) + kv_block·P) floats, independent of
// T_k (StreamingScratch); with bf16/f16 K or V also the widened key tile,
// kv_block·(d + dv) floats (widen-inl.h: K and V are then read from memory
// at 2 bytes an element, once per query block, and widened once there).
#if defined(ATTN_KERNELS_STREAMING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_STREAMING_INL_H_
#undef ATTN_KERNELS_STREAMING_INL_H_
#else
#define ATTN_KERNELS_STREAMING_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <limits>

#include "attn/attn.h"  // Tiles
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // panels: pack, score, mix, NonFiniteV
#include "kernels/common/scratch.h"
#include "kernels/common/modifiers-inl.h"  // ModifyPanelTile, WindowPanel
#include "kernels/common/softmax-inl.h"  // PanelStats, OnlineSoftmaxTile, FinishPanel
#include "kernels/common/widen-inl.h"  // WidenRows
#include "kernels/kernel.h"
#include "kernels/decode/walk-inl.h"  // NarrowHead

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Scratch of one streaming worker, sized for (q_block, kv_block, d, dv).
class StreamingScratch {
 public:
  void Reserve(int64_t q_block, int64_t kv_block, int64_t d, int64_t dv) {
    const size_t P = PanelWidth();
    const int64_t panels = (q_block + int64_t(P) - 1) / int64_t(P);
    internal::GrowScratch(qt_, qt_size_, size_t(panels * d) * P);
    internal::GrowScratch(ot_, ot_size_, size_t(panels * dv) * P);
    internal::GrowScratch(st_, st_size_, size_t(kv_block) * P);
    internal::GrowScratch(stats_, stats_size_, size_t(panels) * 3 * P);
  }
  // The widened K and V tiles, only for 16-bit K or V.
  void ReserveWidened(int64_t kv_block, int64_t d, int64_t dv) {
    internal::GrowScratch(kw_, kw_size_, size_t(kv_block * d));
    internal::GrowScratch(vw_, vw_size_, size_t(kv_block * dv));
  }
  float* kw() const { return kw_.get(); }
  float* vw() const { return vw_.get(); }
  float* qt(int64_t panel, int64_t d) const { return qt_.get() + panel * d * PanelWidth(); }
  float* ot(int64_t panel, int64_t dv) const { return ot_.get() + panel * dv * PanelWidth(); }
  float* st() const { return st_.get(); }
  // Scratch of narrow view i of the views NarrowHeads takes in turn.
  NarrowScratch& narrow(int64_t i = 0) { return narrow_[i]; }
  PanelStats stats(int64_t panel) const {
    float* base = stats_.get() + panel * 3 * PanelWidth();
    return PanelStats{base, base + PanelWidth(), base + 2 * PanelWidth()};
  }

 private:
  // For views of few rows (kernels/decode), one per view taken in turn.
  NarrowScratch narrow_[kNarrowMaxInterleavedViews];
  hwy::AlignedFreeUniquePtr<float[]> qt_, ot_, st_, stats_, kw_, vw_;
  size_t qt_size_ = 0, ot_size_ = 0, st_size_ = 0, stats_size_ = 0, kw_size_ = 0, vw_size_ = 0;
};

// The keys of a panel tile [a0, end) split by which panel vectors (rows
// r0 + n·N .. r0 + n·N + N - 1) can see them: [a0, both) only vector 0,
// [both, last) both, [last, end) only vector 1. Vector 0's rows see no key
// from VisibleEnd(its last row) on, vector 1's none before KeyBegin(its
// first row): at a causal diagonal and a window's left edge one vector's
// half of the panel is hidden for 16 keys (AVX-512), so computing only the
// other halves the edge triangles' work (kPanelVectors = 2).
struct PanelVectorSplit {
  int64_t both, last;
};
HWY_INLINE PanelVectorSplit SplitPanelTile(const internal::HeadView& h, int64_t r0,
                                           int64_t panel_rows, int64_t a0, int64_t end) {
  static_assert(kPanelVectors == 2, "the split names two panel vectors");
  const int64_t N = int64_t(hn::Lanes(DF()));
  if (panel_rows <= N) return {end, end};  // vector 1 is all padding rows
  const int64_t both = std::clamp<int64_t>(h.KeyBegin(r0 + N), a0, end);
  const int64_t last = std::clamp<int64_t>(h.VisibleEnd(r0 + N - 1), both, end);
  return {both, last};
}

// St[j][lanes of vector n] = -inf for keys j in [first, end) of a panel tile.
HWY_INLINE void HideVector(size_t n, int64_t first, int64_t end, float* HWY_RESTRICT st) {
  const DF df;
  const size_t P = PanelWidth();
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (int64_t j = first; j < end; ++j) hn::Store(neg_inf, df, st + j * P + n * hn::Lanes(df));
}

// One head (or a sub-view of rows/keys of one), normalised output and lse.
HWY_INLINE void StreamingHead(const internal::HeadView& h, const Tiles& tiles,
                              StreamingScratch& scratch) {
  // A view of a few rows would fill few lanes of a panel (decode).
  if (h.tq <= NarrowMaxRows()) return NarrowHead(h, tiles, scratch.narrow());
  const int64_t P = int64_t(PanelWidth());
  const int64_t q_block = std::max<int64_t>(P, (tiles.q_block + P - 1) / P * P);
  const int64_t kv_block = std::max<int64_t>(1, tiles.kv_block);
  scratch.Reserve(q_block, kv_block, h.d, h.dv);
  if (h.k_type != DType::kF32 || h.v_type != DType::kF32) {
    scratch.ReserveWidened(kv_block, h.d, h.dv);
  }
  float* HWY_RESTRICT st = scratch.st();

  for (int64_t q0 = 0; q0 < h.tq; q0 += q_block) {
    const int64_t rows = std::min(q_block, h.tq - q0);
    const int64_t panels = (rows + P - 1) / P;
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = q0 + p * P;
      PackQueryPanel(h.QRow(r0), h.q_type, h.q_stride, std::min(P, h.tq - r0), h.d, h.scale,
                     scratch.qt(p, h.d));
      ResetStats(scratch.stats(p));
      std::fill(scratch.ot(p, h.dv), scratch.ot(p, h.dv) + h.dv * P, 0.0f);
    }
    // Keys outside [the block's first window start, its last visible key)
    // are never read: a sliding window costs O(T·W), not O(T²).
    const int64_t key_end = h.VisibleEnd(q0 + rows - 1);
    NonFiniteV bad_v;  // slow path for NaN / Inf in V (microkernels-inl.h)
    int64_t hint = 0;
    // The next block's Q rows (read by its packing) and output rows
    // (written by its finish) are prefetched a share per key tile of this
    // block: in a short window (8 panels over ~6 tiles a block at W = 512)
    // packing and finishing otherwise wait on cache misses on Q and O, not
    // on arithmetic (docs/modifiers.md). The next key tile's K and V are
    // not requested: the hardware prefetchers follow them.
    const int64_t next_rows = std::min(q_block, h.tq - q0 - rows);
    const int64_t block_tiles = (key_end - h.KeyBegin(q0) + kv_block - 1) / kv_block;
    int64_t tile_index = 0, prefetched = 0;
    for (int64_t j0 = h.KeyBegin(q0), tile_keys = 0; j0 < key_end; j0 += tile_keys) {
      if (next_rows > 0) {
        // Rows up to this tile's share (a paged view's short tiles only
        // bring the share forward).
        const int64_t upto =
            std::min(next_rows, next_rows * ++tile_index / std::max<int64_t>(1, block_tiles));
        const int64_t next = q0 + rows + prefetched;
        if (upto > prefetched) {  // key_rows-inl.h's PrefetchRows
          PrefetchRows(h.QRow(next), h.q_type, h.q_stride, upto - prefetched, h.d);
          PrefetchRows(h.OutRow(next), h.out_type, h.out_stride, upto - prefetched, h.dv);
          prefetched = upto;
        }
      }
      // A view with key spans (a paged cache) ends a tile at each span's
      // end: the tile's rows are then at one stride from its first.
      const internal::KeyRun run = h.RunAt(j0, &hint);
      tile_keys = std::min({kv_block, key_end - j0, run.keys});
      // float32 K and V are read in place; bf16 / f16 widened once here.
      const FloatRows k = WidenRows(run.k, h.k_type, h.k_stride, tile_keys, h.d, scratch.kw());
      const FloatRows vt = WidenRows(run.v, h.v_type, h.v_stride, tile_keys, h.dv, scratch.vw());
      const float* v = vt.data;
      const bool bad = HasNonFinite(v, vt.stride, tile_keys, h.dv);  // once per block and tile
      if (bad) bad_v.Clean(v, vt.stride, tile_keys, h.dv);
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t r0 = q0 + p * P;
        const int64_t panel_rows = std::min(P, h.tq - r0);
        // Keys this panel may see: up to its last row's causal limit.
        const int64_t tile_end =
            std::clamp<int64_t>(h.VisibleEnd(r0 + panel_rows - 1), j0, j0 + tile_keys);
        // ... and from its first row's window start: a windowed panel
        // computes the keys of its own window, not those of the block's
        // first row (with W = 512 and 256-key tiles that was a quarter more
        // work). A tile with NaN / Inf in V keeps its first key (NonFiniteV
        // indexes the whole tile).
        const int64_t a0 = bad ? j0 : std::clamp<int64_t>(h.KeyBegin(r0), j0, tile_end);
        const int64_t keys = tile_end - a0;
        if (keys <= 0) continue;  // tile wholly above the diagonal or before the window
        // Keys [a0, both) are scored for panel vector 0 only, [last,
        // tile_end) for vector 1 only (the other's lanes set to -inf below).
        const PanelVectorSplit split =
            bad ? PanelVectorSplit{a0, tile_end} : SplitPanelTile(h, r0, panel_rows, a0, tile_end);
        const float* qt = scratch.qt(p, h.d);
        const float* k0 = k.data + (a0 - j0) * k.stride;
        const int64_t both = split.both - a0, last = split.last - a0;
        ScoreTile<0, 1>(qt, h.d, k0, k.stride, both, st);
        ScoreTile(qt, h.d, k0 + both * k.stride, k.stride, last - both, st + both * P);
        ScoreTile<1, 1>(qt, h.d, k0 + last * k.stride, k.stride, keys - last, st + last * P);
        PreparePanelScores(h, r0, panel_rows, a0, keys, st);  // modifiers-inl.h
        HideVector(1, 0, both, st);
        HideVector(0, last, keys, st);
        if (bad) {
          OnlineSoftmaxTile<true>(st, keys, scratch.stats(p), scratch.ot(p, h.dv), h.dv);
        } else {
          OnlineSoftmaxTile(st, keys, scratch.stats(p), scratch.ot(p, h.dv), h.dv);
        }
        // A tile with NaN / Inf in V mixes the cleaned copy, all of it in
        // both vectors (its split is the whole tile).
        const float* v0 = bad ? bad_v.clean() : v + (a0 - j0) * vt.stride;
        const int64_t v_stride = bad ? h.dv : vt.stride;
        float* ot = scratch.ot(p, h.dv);
        if (both > 0) MixTile<0, 1>(st, both, v0, v_stride, h.dv, ot);
        if (last > both) {
          MixTile(st + both * P, last - both, v0 + both * v_stride, v_stride, h.dv, ot);
        }
        if (keys > last) {
          MixTile<1, 1>(st + last * P, keys - last, v0 + last * v_stride, v_stride, h.dv, ot);
        }
        if (bad) bad_v.AddTo(st, keys, scratch.ot(p, h.dv));
      }
    }
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = q0 + p * P;
      FinishViewPanel(h, r0, scratch.ot(p, h.dv), scratch.stats(p));  // softmax-inl.h
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
