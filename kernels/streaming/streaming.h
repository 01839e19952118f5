#pragma once
#include "kernels/kernel.h"

namespace attn::internal {

// Streaming (online-softmax) kernel, single-threaded, on the current target.
void StreamingAttention(const Problem& problem, const RunConfig& config);
// Queries per panel of the SIMD kernels on the current target.
int PanelWidth();

}  // namespace attn::internal
