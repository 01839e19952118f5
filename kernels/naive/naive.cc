// Naive kernel: the seed's function in scalar float32, one head at a time.
// bf16/f16 inputs are widened (exactly) to float32 first, per head; a
// bf16/f16 output row is rounded once from the float32 result.
//
// Algorithm: materialise the whole T_q x T_k score matrix S = Q·Kᵀ, scale
// it, apply the mask, softmax each row (row max subtracted first), then
// O = P·V. Memory traffic: S is written and read twice (4·T_q·T_k bytes per
// pass), K and V are re-read from memory for every query row. It is the
// simple, obviously right baseline that every other kernel is tested and
// benchmarked against; it is not dispatched per SIMD target on purpose. It
// declines score matrices over 1 GiB (dispatch/kernel_table.cc).
#include "kernels/kernel.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace attn::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The rows of a [rows][cols] tensor as float32: in place when it is
// float32, else widened into `copy`. Returns the rows and sets *stride.
const float* FloatRows(const void* data, DType type, int64_t rows, int64_t cols,
                       int64_t row_stride, std::vector<float>& copy, int64_t* stride) {
  if (type == DType::kF32) {
    *stride = row_stride;
    return static_cast<const float*>(data);
  }
  copy.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) copy[size_t(r * cols + c)] = LoadElement(data, type, r * row_stride + c);
  }
  *stride = cols;
  return copy.data();
}

struct NaiveScratch {
  std::vector<float> scores, q, k, v, out_row;
};

void NaiveHead(const HeadView& h, NaiveScratch& scratch) {
  std::vector<float>& scores = scratch.scores;
  scores.resize(h.tq * h.tk);
  int64_t q_stride, k_stride, v_stride;
  const float* hq = FloatRows(h.q, h.q_type, h.tq, h.d, h.q_stride, scratch.q, &q_stride);
  const float* hk = FloatRows(h.k, h.k_type, h.tk, h.d, h.k_stride, scratch.k, &k_stride);
  const float* hv = FloatRows(h.v, h.v_type, h.tk, h.dv, h.v_stride, scratch.v, &v_stride);
  scratch.out_row.resize(size_t(h.dv));
  for (int64_t i = 0; i < h.tq; ++i) {
    const float* q = hq + i * q_stride;
    float* s = &scores[i * h.tk];
    for (int64_t j = 0; j < h.tk; ++j) {
      // A hidden key's score is -inf whatever Q·K is, so its dot product is
      // skipped. Said explicitly: the compiler used to drop it only while
      // nothing opaque (std::tanh of the soft-cap) followed it, and a causal
      // naive run became 1.6x slower when that line came (attn-bench
      // naive/T:2048/d:128/causal:1, Zen 5).
      if (!h.Visible(i, j) || !h.InWindow(i, j)) {
        s[j] = -kInf;
        continue;
      }
      const float* k = hk + j * k_stride;
      float dot = 0.0f;
      for (int64_t c = 0; c < h.d; ++c) dot += q[c] * k[c];
      float x = dot * h.scale;
      if (h.softcap != 0.0f) x = h.softcap * std::tanh(x / h.softcap);
      if (h.alibi_slope != 0.0f) x -= h.alibi_slope * float(std::llabs(i + h.diag_offset - j));
      if (h.mask) x += h.mask[i * h.mask_row_stride + j * h.mask_col_stride];
      s[j] = x;
    }
  }
  for (int64_t i = 0; i < h.tq; ++i) {
    float* s = &scores[i * h.tk];
    // Written to out directly when it is float32, else rounded from o below.
    float* o = h.out_type == DType::kF32 ? static_cast<float*>(h.OutRow(i)) : scratch.out_row.data();
    // The sink is one more key (score h.sink, value 0): it joins the max
    // and the sum, never the mix.
    float max = h.sink;
    bool has_nan = false;
    for (int64_t j = 0; j < h.tk; ++j) {
      has_nan |= std::isnan(s[j]);
      max = s[j] > max ? s[j] : max;
    }
    float lse;
    if (has_nan || max == kInf) {  // softmax undefined: propagate NaN
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (int64_t c = 0; c < h.dv; ++c) o[c] = nan;
      lse = nan;
    } else if (max == -kInf) {  // fully masked row
      for (int64_t c = 0; c < h.dv; ++c) o[c] = 0.0f;
      lse = -kInf;
    } else {
      float sum = h.sink == -kInf ? 0.0f : std::exp(h.sink - max);
      for (int64_t j = 0; j < h.tk; ++j) {
        // A masked key's weight is -0, so the mix below can skip it (its
        // value is never read) without skipping visible keys whose weight
        // merely underflowed to +0.
        s[j] = s[j] == -kInf ? -0.0f : std::exp(s[j] - max);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < h.dv; ++c) o[c] = 0.0f;
      for (int64_t j = 0; j < h.tk; ++j) {
        if (std::signbit(s[j])) continue;  // masked key
        const float w = s[j] * inv;
        const float* v = hv + j * v_stride;
        for (int64_t c = 0; c < h.dv; ++c) o[c] += w * v[c];
      }
      lse = max + std::log(sum);
    }
    if (h.lse) h.lse[i * h.lse_stride] = lse;
    if (h.out_type != DType::kF32) {
      for (int64_t c = 0; c < h.dv; ++c) StoreElement(h.OutRow(i), h.out_type, c, o[c]);
    }
  }
}

}  // namespace

void NaiveAttention(const Problem& p, const RunConfig& config) {
  NaiveScratch scratch;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.q_heads; ++h) NaiveHead(MakeHeadView(p, b, h, config.diag_shift), scratch);
  }
}

}  // namespace attn::internal
