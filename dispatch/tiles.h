#pragma once
#include <cstdint>

#include "attn/attn.h"
#include "kernels/kernel.h"  // DotPath

namespace attn::internal {

// Everything the tile defaults depend on. Pure data: ChooseTiles is a pure
// function of it (tested in tests/tiles_test.cc), so the autotuner can vary
// tiles around it.
struct TileInputs {
  int64_t q_len = 1, kv_len = 1, head_dim = 1, value_dim = 1;
  int64_t heads = 1;    // batch * q_heads: independent (head) work items
  int panel_width = 8;  // queries per SIMD panel on the target (PanelWidth)
  int threads = 1;
  // The kernel packs K and V into tiles of its own once per query block and
  // key tile (the AMX kernel, kernels/amx/head-body.h): larger blocks share
  // each packing among more rows (ChooseTiles).
  bool packs_kv_per_block = false;
};

// The thread count attention() uses for Options::threads == requested
// (0: OpenMP's default; 1 inside a parallel region).
int ResolveThreads(int requested);
// The tile rule's inputs for a problem run with `threads` threads on the
// bf16 dot-product path `path` (it matters only when Q, K and V are all
// bf16: whether the AMX kernel takes the problem).
TileInputs TileInputsFor(const Problem& problem, int threads, DotPath path = DotPath::kWiden);

// Default tiles for a shape: every field > 0.
Tiles ChooseTiles(const TileInputs& in);
// `requested` with its zero fields filled from ChooseTiles(in).
Tiles ResolveTiles(const Tiles& requested, const TileInputs& in);

// Most key-range splits the parallel kernel makes for one work item.
inline constexpr int kMaxKvSplits = 256;
// Resolved tiles limited to the problem: q_block to T_q rounded up to a
// panel, kv_block to T_k, kv_splits to min(T_k, kMaxKvSplits). Larger tiles
// buy nothing, and unclamped they would size scratch and split-KV partials
// by the request (2^31 rows) instead of by the problem.
Tiles ClampTiles(const Tiles& tiles, const TileInputs& in);

}  // namespace attn::internal
