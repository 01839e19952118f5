// One instruction layer's copy of the bf16 pair kernels. NOT a normal
// header: bf16dot.cc includes it once per layer, inside the layer's
// namespace (and, for the hardware layer, its attribute region), after
// `using Dot = ...` and `kPairRowWalkLayer`, so that every function here is
// compiled with that layer's instructions. Defines the decode pair walks,
// Bf16DotHead and LayerView, the layer's entry for one view.
ATTN_DEFINE_WITH_TILE_SIZE  // vec_array-inl.h: with this layer's instructions
#include "kernels/decode/pair_blocks-body.h"  // NOLINT: included per layer
#include "kernels/decode/pair_tiled-body.h"   // NOLINT: included per layer
#include "kernels/decode/pair_row-body.h"     // NOLINT: included per layer
#include "kernels/decode/pair_head-body.h"    // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"        // NOLINT: included per layer

// One view (a head, or a slice of its rows or keys) with this thread's
// scratch, kept across calls (per thread, layer and target).
void LayerView(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;
  Bf16DotHead(view, tiles, scratch);
}
