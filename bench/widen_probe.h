// Widening probe for attn-bench's widen/ rows (bench/README.md): the
// arithmetic of a decode step per element of a K/V type, loaded from L1,
// widened exactly as the kernels widen it and multiplied into float32
// accumulators, on the SIMD target Highway picks at run time (the same
// dispatch and ATTN_TARGET narrowing as the kernels). Memory is out of the
// picture, so elements per second here bound a decode step that reads the
// type from DRAM: if they fall short of the read bandwidth, so does decode.
#pragma once

#include <cstdint>

#include "attn/attn.h"  // DType

namespace attn_bench {

// Elements of a probe row: 8 vectors of the current target's float lanes.
int64_t WidenProbeRowElements();

// `passes` times over `keys` rows of `type` (row_bytes bytes apart, each
// WidenProbeRowElements() long; q8_0 rows are 34-byte blocks of 32), the
// dot product of every row with `query_rows` (1 or 4) float32 query rows
// of q (query_rows x WidenProbeRowElements() floats, aligned to the
// vector). Returns the sum of the accumulators, or -1 for q8_0 on a target
// whose vectors do not tile a 32-element block. keys: a multiple of 8.
float WidenDot(attn::DType type, int query_rows, const void* rows, int64_t row_bytes, int64_t keys,
               const float* q, int64_t passes);

}  // namespace attn_bench
