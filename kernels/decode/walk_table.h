// The decode walk table: every way the narrow path (views of at most one
// vector of query rows: decode, GQA groups) walks a view's keys, listed once
// in the order tried, each row declining with a reason, as the kernel table
// (dispatch/kernel_table.h) lists kernels. The streaming, parallel,
// bf16 dot-product and AMX kernels all take their walk from here
// (ChooseDecodeWalk); ExplainChoice names it (AutoChoice::decode_walk), and
// Options::decode_walk forces one. Adding a walk: docs/adding-a-kernel.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "kernels/kernel.h"  // HeadView, DecodeWalk

namespace attn::internal {

// How the kernel running a view multiplies: widened to float32, bf16 pairs
// (vdpbf16ps, BFDOT or their emulations), or AMX tiles.
enum class DecodeProducts : uint8_t { kWidened, kPairs, kAmx };

// What the table reads of a view, and of the target and layer that run it.
struct DecodeView {
  int64_t rows = 1, d = 0, dv = 0;
  DType k_type = DType::kF32, v_type = DType::kF32;
  bool rows_adjacent = true;  // k_stride == d and v_stride == dv
  bool spans = false;         // keys in pages (HeadView::spans)
  bool same_keys = true;      // no mask, causal limit or window: every row sees every key
  bool in_run = false;        // one of several views sharing token rows (NarrowHeads)
  DecodeProducts products = DecodeProducts::kWidened;
  int64_t float_lanes = 4;         // float32 lanes of the target's vectors
  bool pair_row_compiled = false;  // the layer has the pair row walk (AVX3: vdpbf16ps, its emulation)
};

// The facts of HeadView h on a target of `float_lanes` float32 lanes.
DecodeView DescribeDecodeView(const HeadView& h, int64_t float_lanes, DecodeProducts products);

struct DecodeWalkRow {
  DecodeWalk walk;
  const char* name;   // Options::decode_walk's value
  const char* takes;  // one line: the views it takes (in a declined walk's explanation)
  // nullptr when the walk takes the view, else why not (a fixed sentence:
  // choosing allocates nothing).
  const char* (*declines)(const DecodeView& view);
};

// Every row, in the order tried.
const std::vector<DecodeWalkRow>& DecodeWalks();

// The walk that runs `view`: the first row from `forced` on (from the top
// for kAuto) that takes it; where none from there does, the first from the
// top (a forced walk that declines a view leaves it to the table).
DecodeWalk ChooseDecodeWalk(const DecodeView& view, DecodeWalk forced = DecodeWalk::kAuto);
// The chosen walk's name, and where a forced walk declined, why.
std::string ExplainDecodeWalk(const DecodeView& view, DecodeWalk forced);

const char* DecodeWalkName(DecodeWalk walk);  // "auto" for kAuto
// "" or "auto" is kAuto; an unknown name throws Error (field "decode_walk").
DecodeWalk ParseDecodeWalk(const std::string& name);

}  // namespace attn::internal
