#pragma once
#include "kernels/kernel.h"

namespace attn::internal {

// Bytes of score scratch the naive kernel needs for one head.
int64_t NaiveScratchBytes(int64_t q_len, int64_t kv_len);
// Largest score matrix the naive kernel agrees to materialise.
inline constexpr int64_t kNaiveMaxScratchBytes = int64_t{1} << 30;

void NaiveAttention(const Problem& problem, const RunConfig& config);

}  // namespace attn::internal
