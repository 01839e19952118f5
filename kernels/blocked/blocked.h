#pragma once
#include "kernels/kernel.h"

namespace attn::internal {

// Blocked kernel: SIMD, exact two-pass softmax over whole score rows.
void BlockedAttention(const Problem& problem, const RunConfig& config);

}  // namespace attn::internal
