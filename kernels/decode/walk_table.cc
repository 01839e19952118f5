// The decode walk table's rows (walk_table.h). Each row's rule is what its
// walk needs to run (sizes it is compiled for, layouts it reads) and where
// it measured faster than the rows below it (docs/performance.md, "Decode
// walks: measurements behind the kernel choices").
#include "kernels/decode/walk_table.h"

#include "kernels/common/convert.h"  // kQ8_0BlockElements, IsBlockType

namespace attn::internal {
namespace {

// Views the widened walks take: every view of a call that widens, and the
// one-row views of the dot-product paths (one row gains nothing from pairs).
bool Widened(const DecodeView& v) { return v.products == DecodeProducts::kWidened || v.rows == 1; }
bool OneType(const DecodeView& v) { return v.k_type == v.v_type; }

const char* AmxTilesDeclines(const DecodeView& v) {
  if (v.products != DecodeProducts::kAmx) return "not the amx dot path";
  // Fewer rows would fill the tiles' 32-row groups mostly with padding, and
  // pack each key for few rows (kernels/amx/amx.cc).
  if (v.rows < 8) return "fewer than 8 rows: the tiles would be mostly padding";
  return nullptr;
}

const char* PairRowDeclines(const DecodeView& v) {
  if (Widened(v)) return "not a group of rows on a bf16 dot path";
  if (!v.pair_row_compiled) return "not compiled for this target and layer (AVX3, vdpbf16ps or its emulation)";
  // Paged views keep the tiled walk, which requests K and V ahead across
  // pages; a group of 8 mixes as the tiled walk's two groups of 4 only where
  // no row can hide a key from another.
  if (v.spans) return "keys in pages";
  if (!(v.rows == 2 || v.rows == 4 || (v.rows == 8 && v.same_keys))) {
    return "not 2, 4, or 8 rows that all see the same keys";
  }
  const int64_t width = 2 * v.float_lanes;
  if (v.d != v.dv || v.d % width != 0 || !(v.d / width == 2 || v.d / width == 4)) {
    return "d = d_v is not 2 or 4 vectors of pairs";
  }
  if (!v.rows_adjacent) return "K or V rows are not adjacent";
  return nullptr;
}

const char* PairTiledDeclines(const DecodeView& v) {
  return Widened(v) ? "not a group of rows on a bf16 dot path" : nullptr;
}

const char* RowDeclines(const DecodeView& v) {
  if (!Widened(v)) return "a group on a bf16 dot path: the pair walks take it";
  const int64_t n = v.float_lanes;
  if (!v.rows_adjacent) return "K or V rows are not adjacent";
  if (!OneType(v)) return "K and V of two types";
  if (v.d != v.dv || v.dv % n != 0 || !(v.dv / n == 2 || v.dv / n == 4 || v.dv / n == 8)) {
    return "d = d_v is not 2, 4 or 8 vectors";
  }
  if (!(v.rows == 1 || v.rows == 2 || v.rows == 4)) return "not 1, 2 or 4 rows";
  // q8_0 groups measured slower than tiled (each V row dequantised once per
  // two rows); one row needs vectors that tile a block.
  if (v.k_type == DType::kQ8_0 &&
      (v.rows != 1 || n > kQ8_0BlockElements || kQ8_0BlockElements % n != 0)) {
    return "q8_0 with more than one row";
  }
  // As q8_0: one row, with vectors that lie within a block's half.
  if (v.k_type == DType::kQ4_0 && (v.rows != 1 || n > 16 || 16 % n != 0)) {
    return "q4_0 with more than one row";
  }
  return nullptr;
}

const char* PipelinedDeclines(const DecodeView& v) {
  if (!Widened(v)) return "a group on a bf16 dot path: the pair walks take it";
  // Groups measured no faster pipelined than tiled, except in a run of
  // views that take each step in lockstep (NarrowHeads).
  if (!(v.rows == 1 || (v.in_run && (v.rows == 2 || v.rows == 4)))) {
    return "not one row, or a group of 2 or 4 in a run of views";
  }
  if (!OneType(v) || IsBlockType(v.k_type)) return "K and V not of one 16- or 32-bit type";
  if (v.dv % v.float_lanes != 0) return "d_v is not whole vectors";
  return nullptr;
}

const char* TiledDeclines(const DecodeView& v) {
  return Widened(v) ? nullptr : "a group on a bf16 dot path: the pair walks take it";
}

}  // namespace

DecodeView DescribeDecodeView(const HeadView& h, int64_t float_lanes, DecodeProducts products) {
  DecodeView v;
  v.rows = h.tq;
  v.d = h.d;
  v.dv = h.dv;
  v.k_type = h.k_type;
  v.v_type = h.v_type;
  v.rows_adjacent = h.k_stride == h.d && h.v_stride == h.dv;
  v.spans = h.spans != nullptr;
  v.same_keys = h.mask == nullptr && h.causal_offset == kNoCausal && h.window_left < 0 &&
                h.window_right < 0;
  v.products = products;
  v.float_lanes = float_lanes;
  return v;
}

const std::vector<DecodeWalkRow>& DecodeWalks() {
  static const std::vector<DecodeWalkRow> rows = {
      {DecodeWalk::kAmxTiles, "amx-tiles",
       "groups of 8 or more rows on the amx dot path: the prefill tiles (kernels/amx)",
       AmxTilesDeclines},
      {DecodeWalk::kPairRow, "pair-row",
       "groups of 2, 4 or 8 bf16 rows, d = d_v of 2 or 4 vectors of pairs, rows adjacent: "
       "K and V a row at a time",
       PairRowDeclines},
      {DecodeWalk::kPairTiled, "pair-tiled",
       "groups on a bf16 dot path: each tile's scores, weights, then mix", PairTiledDeclines},
      {DecodeWalk::kRow, "row",
       "1, 2 or 4 rows, K and V of one type (q8_0 and q4_0: one row), d = d_v of 2, 4 or 8 "
       "vectors, rows adjacent: K and V a row at a time",
       RowDeclines},
      {DecodeWalk::kPipelined, "pipelined",
       "one row (2 or 4 in a run of views), K and V of one 16- or 32-bit type: a tile's mix "
       "beside the next tile's scores",
       PipelinedDeclines},
      {DecodeWalk::kTiled, "tiled", "every widened view: each tile's scores, weights, then mix",
       TiledDeclines},
  };
  return rows;
}

DecodeWalk ChooseDecodeWalk(const DecodeView& view, DecodeWalk forced) {
  const std::vector<DecodeWalkRow>& rows = DecodeWalks();
  size_t from = 0;
  while (forced != DecodeWalk::kAuto && from < rows.size() && rows[from].walk != forced) ++from;
  for (size_t i = from; i < rows.size(); ++i) {
    if (!rows[i].declines(view)) return rows[i].walk;
  }
  for (size_t i = 0; i < from; ++i) {
    if (!rows[i].declines(view)) return rows[i].walk;
  }
  return DecodeWalk::kTiled;  // unreachable: tiled or pair-tiled takes every view
}

std::string ExplainDecodeWalk(const DecodeView& view, DecodeWalk forced) {
  const DecodeWalk walk = ChooseDecodeWalk(view, forced);
  std::string text = DecodeWalkName(walk);
  if (forced != DecodeWalk::kAuto && forced != walk) {
    for (const DecodeWalkRow& row : DecodeWalks()) {
      if (row.walk == forced) {
        text += std::string(" (decode_walk ") + row.name + " declined: " + row.declines(view) +
                "; it takes " + row.takes + ")";
      }
    }
  }
  return text;
}

const char* DecodeWalkName(DecodeWalk walk) {
  for (const DecodeWalkRow& row : DecodeWalks()) {
    if (row.walk == walk) return row.name;
  }
  return "auto";
}

DecodeWalk ParseDecodeWalk(const std::string& name) {
  if (name.empty() || name == "auto") return DecodeWalk::kAuto;
  for (const DecodeWalkRow& row : DecodeWalks()) {
    if (name == row.name) return row.walk;
  }
  std::string names = "auto";
  for (const DecodeWalkRow& row : DecodeWalks()) names += std::string(", ") + row.name;
  throw Error("decode_walk", name, "attn: decode_walk must be one of " + names + ", got " + name);
}

}  // namespace attn::internal
