#pragma once
#include <cstdint>

#include "attn/attn.h"

namespace attn::internal {

// Everything the tile defaults depend on. Pure data: ChooseTiles is a pure
// function of it (tested in tests/tiles_test.cc), so the autotuner can vary
// tiles around it.
struct TileInputs {
  int64_t q_len = 1, kv_len = 1, head_dim = 1, value_dim = 1;
  int64_t heads = 1;    // batch * q_heads: independent (head) work items
  int panel_width = 8;  // queries per SIMD panel on the target (PanelWidth)
  int threads = 1;
};

// Default tiles for a shape: every field > 0.
Tiles ChooseTiles(const TileInputs& in);
// `requested` with its zero fields filled from ChooseTiles(in).
Tiles ResolveTiles(const Tiles& requested, const TileInputs& in);

}  // namespace attn::internal
