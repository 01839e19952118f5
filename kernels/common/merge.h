#pragma once
#include <cstdint>

#include "attn/attn.h"  // DType

namespace attn::internal {

// Merges `parts` partial attention results over disjoint key ranges into the
// result over their union, row by row:
//   lse = log Σ_s exp(lse_s),   out = Σ_s exp(lse_s - lse) · out_s.
// Part s of row i is out_parts[s*part_stride + i*dv .. +dv) and
// lse_parts[s*lse_part_stride + i]. A part with lse -inf (no visible key)
// has weight 0 and its output is not read; all parts -inf gives out 0,
// lse -inf; a NaN lse gives NaN. float arithmetic (split-KV inside the
// parallel kernel); `out` of element type out_type (rounded once).
void MergePartials(int64_t rows, int64_t dv, int parts, const float* out_parts,
                   int64_t part_stride, const float* lse_parts, int64_t lse_part_stride,
                   void* out, DType out_type, int64_t out_stride, float* lse,
                   int64_t lse_stride);

// One partial result seen as rows: row i's dv outputs (of element type
// out_type) start at element i*out_stride of out (contiguous), its
// log-sum-exp is lse[i*lse_stride].
struct PartialRows {
  const void* out = nullptr;
  DType out_type = DType::kF32;
  int64_t out_stride = 0;
  const float* lse = nullptr;
  int64_t lse_stride = 0;
};

// The same merge over parts with arbitrary row strides (attn::MergeAttention),
// with the weights and sums in double. Each output row is written only after
// all of that row's inputs are read, so `out` may be exactly one part's rows
// (same pointer and stride) and `lse` exactly one part's lse: in-place
// accumulation. `weights` is scratch for `parts` doubles. lse may be null.
void MergePartialRows(int64_t rows, int64_t dv, int parts, const PartialRows* partials,
                      double* weights, void* out, DType out_type, int64_t out_stride,
                      float* lse, int64_t lse_stride);

}  // namespace attn::internal
