// The narrow path's entry points (walk-inl.h: views of at most half a
// panel of query rows, i.e. decode and GQA groups), compiled once per
// target here and called by every kernel that takes it: the streaming and
// parallel kernels (streaming-inl.h StreamingHead, streaming.cc RunViews)
// and the one-row views of the bf16 dot-product and AMX kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode/heads.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>

#include <optional>

#include "hwy/highway.h"
#include "kernels/kernel.h"
#include "kernels/decode/walk-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Views of up to NarrowMaxRows() rows: normalised output and lse.
void NarrowHead(const internal::HeadView& h, const Tiles& tiles, NarrowScratch& scratch) {
  NarrowWalk walk(h, tiles, scratch);
  while (!walk.Done()) walk.Tile();
  walk.Finish();
}

// Several narrow views whose K and V rows interleave in memory (the kv heads
// of one sequence in a token-major layout [T, kv_heads, d], contiguous or in
// pages [num_blocks, block_size, kv_heads, d]): their tiles taken in turn,
// tile t of every view before tile t + 1 of any, each view with its own
// scratch. One view alone reads d of every kv_heads·d elements of a token
// row; in turn the views read each token row of the tile whole, while it is
// in L2, and a page from memory once. Results are those of NarrowHead on
// each view (the same operations in the same order per view).
// Where every view takes the pipelined walk (one row, or in a run groups of
// 2 and 4 rows: walk_table.cc), the views go in lockstep instead: a
// pipelined step of 4 keys of each view before the next step of any, so
// the run reads 4 whole token rows of K, then of V, at a time, in address
// order (measured: docs/serving.md, "In lockstep"; docs/performance.md).
void NarrowHeads(const internal::HeadView* views, int64_t count, const Tiles& tiles,
                 NarrowScratch* const* scratches) {
  constexpr int64_t kMax = kNarrowMaxInterleavedViews;
  HWY_DASSERT(count <= kMax);
  // Each view requests its own rows ahead, as alone (NarrowGroupTile): the
  // first view of a round requesting every view's rows of each token
  // instead, or the next round's rows requested at once before it, measured
  // slower (docs/serving.md).
  std::optional<NarrowWalk> walks[kMax];
  for (int64_t i = 0; i < count; ++i) walks[i].emplace(views[i], tiles, *scratches[i], true);
  bool lockstep = true;
  for (int64_t i = 0; i < count; ++i) {
    lockstep &= walks[i]->Stepped() && walks[i]->SameTilesAs(*walks[0]);
  }
  if (lockstep) {
    // Every view's pipelined step over keys [j, j + S) before any view's
    // next one: the run reads its token rows (every kv head's K then V
    // rows of S tokens) in address order, where a tile of each view in
    // turn reads a view's rows of the tile strided by the token row, then
    // the next view's, and the hardware prefetchers follow neither
    // (docs/serving.md, "In lockstep"). Each view's operations are those of
    // its own walk, in its order, so the same bits.
    while (!walks[0]->Done()) {
      for (int64_t i = 0; i < count; ++i) walks[i]->BeginTile();
      for (int64_t until = kNarrowPipelineStep, more = 1; more; until += kNarrowPipelineStep) {
        more = 0;
        for (int64_t i = 0; i < count; ++i) more |= walks[i]->Steps(until);
      }
      for (int64_t i = 0; i < count; ++i) walks[i]->EndTile();
    }
    for (int64_t i = 0; i < count; ++i) walks[i]->Finish();
    return;
  }
  for (bool more = true; more;) {
    more = false;
    for (int64_t i = 0; i < count; ++i) {
      if (walks[i]->Done()) continue;
      walks[i]->Tile();
      more |= !walks[i]->Done();
    }
  }
  for (int64_t i = 0; i < count; ++i) walks[i]->Finish();
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();
