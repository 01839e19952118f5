// Scalar log-sum-exp merge of partial results (split-KV / flash-decoding).
// Cost O(parts·rows·dv), negligible next to the partial attentions.
#include "kernels/common/merge.h"

#include <cmath>
#include <limits>

namespace attn::internal {

void MergePartials(int64_t rows, int64_t dv, int parts, const float* out_parts,
                   int64_t part_stride, const float* lse_parts, int64_t lse_part_stride,
                   float* out, int64_t out_stride, float* lse, int64_t lse_stride) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < rows; ++i) {
    float max = -kInf;
    bool nan = false;
    for (int s = 0; s < parts; ++s) {
      const float l = lse_parts[s * lse_part_stride + i];
      nan |= std::isnan(l);
      max = l > max ? l : max;
    }
    float* o = out + i * out_stride;
    if (nan || max == -kInf) {
      for (int64_t c = 0; c < dv; ++c) o[c] = nan ? kNaN : 0.0f;
      if (lse) lse[i * lse_stride] = nan ? kNaN : -kInf;
      continue;
    }
    float total = 0.0f;
    for (int s = 0; s < parts; ++s) total += std::exp(lse_parts[s * lse_part_stride + i] - max);
    for (int64_t c = 0; c < dv; ++c) o[c] = 0.0f;
    for (int s = 0; s < parts; ++s) {
      const float l = lse_parts[s * lse_part_stride + i];
      if (l == -kInf) continue;  // empty part: its output is never read
      const float w = std::exp(l - max) / total;
      const float* part = out_parts + s * part_stride + i * dv;
      for (int64_t c = 0; c < dv; ++c) o[c] += w * part[c];
    }
    if (lse) lse[i * lse_stride] = max + std::log(total);
  }
}

}  // namespace attn::internal
