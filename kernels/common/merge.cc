// Scalar log-sum-exp merge of partial results (split-KV / flash-decoding,
// and the public attn::MergeAttention). Cost O(parts·rows·dv), negligible
// next to the partial attentions.
#include "kernels/common/merge.h"

#include "kernels/common/convert.h"

#include <cmath>
#include <limits>
#include <vector>

namespace attn::internal {
namespace {

// Row i of part s: out_at(s, i, c) -> its element c, lse_at(s, i).
// Acc is the type of the weights and sums. For each output element the sum
// over parts runs in part order, and all of a row's inputs are read before
// its outputs are written (in-place safe for an exact alias).
template <typename Acc, typename OutAt, typename LseAt>
void MergeRows(int64_t rows, int64_t dv, int parts, OutAt out_at, LseAt lse_at, Acc* w,
               void* out, DType out_type, int64_t out_stride, float* lse, int64_t lse_stride) {
  constexpr Acc kInf = std::numeric_limits<Acc>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    Acc max = -kInf;
    bool nan = false;
    for (int s = 0; s < parts; ++s) {
      const Acc l = Acc(lse_at(s, i));
      nan |= std::isnan(l);
      max = l > max ? l : max;
    }
    void* o = ElementOffset(out, out_type, i * out_stride);
    if (nan || max == -kInf) {
      const float fill = nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      for (int64_t c = 0; c < dv; ++c) StoreElement(o, out_type, c, fill);
      if (lse) lse[i * lse_stride] = nan ? fill : -std::numeric_limits<float>::infinity();
      continue;
    }
    Acc total = 0;
    for (int s = 0; s < parts; ++s) total += std::exp(Acc(lse_at(s, i)) - max);
    for (int s = 0; s < parts; ++s) {
      const Acc l = Acc(lse_at(s, i));
      // An empty part (lse -inf) is marked -1: its output is never read.
      // (An underflowed weight, 0, still multiplies its output: NaN there
      // propagates, as in the reference.)
      w[s] = l == -kInf ? Acc(-1) : std::exp(l - max) / total;
    }
    const Acc row_lse = max + std::log(total);
    for (int64_t c = 0; c < dv; ++c) {
      Acc acc = 0;
      for (int s = 0; s < parts; ++s) {
        if (!(w[s] < Acc(0))) acc += w[s] * Acc(out_at(s, i, c));
      }
      StoreElement(o, out_type, c, float(acc));
    }
    if (lse) lse[i * lse_stride] = float(row_lse);
  }
}

}  // namespace

void MergePartials(int64_t rows, int64_t dv, int parts, const float* out_parts,
                   int64_t part_stride, const float* lse_parts, int64_t lse_part_stride,
                   void* out, DType out_type, int64_t out_stride, float* lse,
                   int64_t lse_stride) {
  float stack_w[64];
  std::vector<float> heap_w(parts > 64 ? size_t(parts) : 0);
  float* w = parts > 64 ? heap_w.data() : stack_w;
  MergeRows<float>(
      rows, dv, parts,
      [&](int s, int64_t i, int64_t c) { return out_parts[s * part_stride + i * dv + c]; },
      [&](int s, int64_t i) { return lse_parts[s * lse_part_stride + i]; }, w, out, out_type,
      out_stride, lse, lse_stride);
}

void MergePartialRows(int64_t rows, int64_t dv, int parts, const PartialRows* partials,
                      double* weights, void* out, DType out_type, int64_t out_stride,
                      float* lse, int64_t lse_stride) {
  MergeRows<double>(
      rows, dv, parts,
      [&](int s, int64_t i, int64_t c) {
        const PartialRows& p = partials[s];
        return LoadElement(p.out, p.out_type, i * p.out_stride + c);
      },
      [&](int s, int64_t i) { return partials[s].lse[i * partials[s].lse_stride]; }, weights,
      out, out_type, out_stride, lse, lse_stride);
}

}  // namespace attn::internal
