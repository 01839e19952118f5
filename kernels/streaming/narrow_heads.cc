// The streaming kernel's narrow path (narrow-inl.h: views of at most half a
// panel of query rows, i.e. decode and GQA groups), compiled once per
// target here and called by every kernel that takes it: the streaming and
// parallel kernels (streaming-inl.h StreamingHead, streaming.cc RunViews)
// and the bf16 dot-product kernel's one-row views.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/streaming/narrow_heads.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>

#include <optional>

#include "hwy/highway.h"
#include "kernels/kernel.h"
#include "kernels/streaming/narrow-inl.h"

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
// Measured on AMD EPYC Zen 5 (attn-bench serving/decode_step, 8 kv heads,
// d = 128, bf16 pages of 16 tokens): see docs/serving.md.
// Where every view takes the pipelined walk (one row, or in a run groups of
// 2 and 4 rows: NarrowPipelines), the views go in lockstep instead: a
// pipelined step of 4 keys of each view before the next step of any, so
// the run reads 4 whole token rows of K, then of V, at a time, in address
// order. AMD EPYC Zen 4 (family 25 model 17), one thread, GQA 32/8, d =
// 128, T_k = 32768, token-major [T, 8, d], against the tiles of each view
// in turn (the same library before, alternated): bf16 9.0-10.0 GB/s
// against 7.4, float32 13.0-13.3 against 8.2 (head-major K/V, the row
// walk: 11-12 and 13-17); 16 heads of one row each, bf16 11.8-12.0
// against 8.8-9.0, float32 13.7-13.8 against 10.4-10.5 (head-major
// 23-26); attn-bench serving/decode_step, two rounds alternated:
// contiguous 10.1-10.5 against 7.4 GB/s at one thread, 19.8-20.3 against
// 14.7-14.9 at two; pages of 16 tokens 8.7-8.8 against 6.6, 17.0-17.2
// against 13.2-13.3; of 128 tokens 9.7-9.8 against 6.9-7.2, 19.0-19.2
// against 14.2-14.3. A standalone AVX-512 loop of the same steps (float32,
// 4-row groups, 8 kv heads token-major) ran at 14.1 GB/s in lockstep against
// 9.5-9.9 a tile of each head in turn, 16 or 64 keys, from DRAM.
void NarrowHeads(const internal::HeadView* views, int64_t count, const Tiles& tiles,
                 NarrowScratch* const* scratches) {
  constexpr int64_t kMax = kNarrowMaxInterleavedViews;
  HWY_DASSERT(count <= kMax);
  // Each view requests its own rows ahead, as alone (NarrowGroupTile). The
  // first view of a round requesting every view's rows of each token
  // instead, or the next round's rows requested at once before it, measured
  // 1.5-2x slower, contiguous and paged alike (AMD EPYC Zen 5).
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
    // the next view's, and the hardware prefetchers follow neither (see the
    // measurements above NarrowHeads). Each view's operations are those of
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
