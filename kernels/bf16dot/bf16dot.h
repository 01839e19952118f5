// The bf16 dot-product kernels (bf16dot.cc), as dispatch sees them.
#pragma once

#include "attn/attn.h"
#include "kernels/kernel.h"

namespace attn::internal {

// What a threaded kernel needs from the chosen SIMD target: the panel width
// (q_block is rounded up to it) and the single-threaded kernel on one view,
// with the calling thread's scratch (kernels/parallel/parallel.cc).
struct ParallelTarget {
  int panel_width;
  void (*run_view)(const HeadView& view, const Tiles& tiles);
};

// The bf16 dot-product kernel on the current target: over AVX512-BF16
// (`hardware`, AVX3 only) or over the emulated instruction. Q, K and V
// must be bf16 (dispatch/dot_path.cc).
ParallelTarget Bf16DotTarget(bool hardware);
void Bf16DotStreamingAttention(const Problem& problem, const RunConfig& config, bool hardware);

// The parallel kernel over a given per-view function (parallel.cc).
void ParallelAttentionWith(const ParallelTarget& target, const Problem& problem,
                           const RunConfig& config);

}  // namespace attn::internal
