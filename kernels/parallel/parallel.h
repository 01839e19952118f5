#pragma once
#include "kernels/kernel.h"

namespace attn::internal {

// Parallel kernel: OpenMP over (batch, head, query block [, key split]).
void ParallelAttention(const Problem& problem, const RunConfig& config);

}  // namespace attn::internal
