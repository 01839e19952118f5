#pragma once
#include <cstdint>

namespace attn::internal {

// Merges `parts` partial attention results over disjoint key ranges into the
// result over their union, row by row:
//   lse = log Σ_s exp(lse_s),   out = Σ_s exp(lse_s - lse) · out_s.
// Part s of row i is out_parts[s*part_stride + i*dv .. +dv) and
// lse_parts[s*lse_part_stride + i]. A part with lse -inf (no visible key)
// has weight 0; all parts -inf gives out 0, lse -inf; a NaN lse gives NaN.
void MergePartials(int64_t rows, int64_t dv, int parts, const float* out_parts,
                   int64_t part_stride, const float* lse_parts, int64_t lse_part_stride,
                   float* out, int64_t out_stride, float* lse, int64_t lse_stride);

}  // namespace attn::internal
