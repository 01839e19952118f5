// The bf16 dot-product kernels (bf16dot.cc), as dispatch sees them.
#pragma once

#include "attn/attn.h"
#include "kernels/kernel.h"

namespace attn::internal {

// The bf16 dot-product kernel on the current target: over AVX512-BF16
// (`hardware`, AVX3 only) or over the emulated instruction. Q, K and V
// must be bf16 (dispatch/dot_path.cc).
ParallelTarget Bf16DotTarget(bool hardware);
void Bf16DotStreamingAttention(const Problem& problem, const RunConfig& config, bool hardware);

}  // namespace attn::internal
