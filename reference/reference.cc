#include "reference/reference.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace attn::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// IEEE binary16 bits as a double: sign, 5-bit exponent biased by 15, 10-bit
// fraction, subnormals below 2^-14.
double HalfValue(uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int fraction = bits & 0x3ff;
  if (exponent == 0x1f) return fraction ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(double(fraction), -14 - 10);
  return sign * std::ldexp(double(1024 + fraction), exponent - 15 - 10);
}

// Element `index` of a tensor of type `type`, exactly, in double. Decoded
// here from the bit patterns' definition (binary16 above; bfloat16: the
// upper half of a binary32; ggml's q8_0: blocks of 34 bytes, a
// little-endian binary16 scale then 32 int8, element = int8 · scale;
// ggml's q4_0: blocks of 18 bytes, the scale then 16 bytes of nibbles,
// element = (nibble - 8) · scale), not with the kernels' conversions. For
// a block type, `index` counts elements from the start of a row of whole
// blocks (strides are multiples of 32).
double Element(const void* data, DType type, int64_t index) {
  if (type == DType::kF32) return double(static_cast<const float*>(data)[index]);
  if (type == DType::kQ8_0) {
    const unsigned char* block = static_cast<const unsigned char*>(data) + index / 32 * 34;
    const uint16_t scale_bits = uint16_t(block[0] | (block[1] << 8));
    const int byte = block[2 + index % 32];
    const int q = byte < 128 ? byte : byte - 256;  // two's complement int8
    return double(q) * HalfValue(scale_bits);
  }
  if (type == DType::kQ4_0) {  // 18 bytes: the scale, then nibbles, low ones first
    const unsigned char* block = static_cast<const unsigned char*>(data) + index / 32 * 18;
    const uint16_t scale_bits = uint16_t(block[0] | (block[1] << 8));
    const int c = int(index % 32);
    const int nibble = c < 16 ? block[2 + c] % 16 : block[2 + c - 16] / 16;
    return double(nibble - 8) * HalfValue(scale_bits);
  }
  const uint16_t bits = static_cast<const uint16_t*>(data)[index];
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  if (type == DType::kBF16) {
    const int exponent = (bits >> 7) & 0xff;
    const int fraction = bits & 0x7f;
    if (exponent == 0xff) return fraction ? kNaN : sign * kInf;
    if (exponent == 0) return sign * std::ldexp(double(fraction), -126 - 7);
    return sign * std::ldexp(double(128 + fraction), exponent - 127 - 7);
  }
  return HalfValue(bits);
}

// Pointer to element `offset` of a tensor of type `type` (q8_0, q4_0:
// `offset` is a multiple of 32, i.e. offset / 32 blocks of 34 or 18 bytes).
const void* Advance(const void* data, DType type, int64_t offset) {
  if (type == DType::kQ8_0) return static_cast<const char*>(data) + offset / 32 * 34;
  if (type == DType::kQ4_0) return static_cast<const char*>(data) + offset / 32 * 18;
  return static_cast<const char*>(data) + offset * (type == DType::kF32 ? 4 : 2);
}

bool CausallyVisible(const Problem& p, int64_t i, int64_t j) {
  switch (p.causal) {
    case Causal::kNone: return true;
    case Causal::kBottomRight: return j <= (p.kv_len - p.q_len) + i;
    case Causal::kTopLeft: return j <= i;
  }
  return true;
}

// attn.h "Score modifiers": the diagonal key of query row i.
int64_t Diagonal(const Problem& p, int64_t i) {
  return p.causal == Causal::kTopLeft ? i : i + p.kv_len - p.q_len;
}

bool InWindow(const Problem& p, int64_t i, int64_t j) {
  const int64_t diag = Diagonal(p, i);
  if (p.window.left >= 0 && j < diag - p.window.left) return false;
  if (p.window.right >= 0 && j > diag + p.window.right) return false;
  return true;
}

}  // namespace

HeadStages Stages(const Problem& p, int64_t b, int64_t h) {
  const int64_t tq = p.q_len, tk = p.kv_len, d = p.head_dim, dv = p.ValueDim();
  const int64_t kv_h = h / (p.q_heads / p.kv_heads);
  const void* q = Advance(p.q.data, p.q.dtype, b * p.q.batch_stride + h * p.q.head_stride);
  const void* k = Advance(p.k.data, p.k.dtype, b * p.k.batch_stride + kv_h * p.k.head_stride);
  const void* v = Advance(p.v.data, p.v.dtype, b * p.v.batch_stride + kv_h * p.v.head_stride);
  const double scale = p.Scale();
  const double cap = p.softcap;
  const double slope =
      p.alibi_slopes.data ? double(p.alibi_slopes.data[b * p.alibi_slopes.batch_stride + h]) : 0.0;
  // The sink: one more key with this score and value 0 (-inf: none).
  const double sink = p.sinks.data ? double(p.sinks.data[h]) : -kInf;

  HeadStages s;
  s.q_len = tq;
  s.kv_len = tk;
  s.value_dim = dv;
  s.scores.assign(tq * tk, 0.0);
  s.scaled.assign(tq * tk, 0.0);
  s.masked.assign(tq * tk, 0.0);
  s.weights.assign(tq * tk, 0.0);
  s.out.assign(tq * dv, 0.0);
  s.lse.assign(tq, 0.0);

  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t j = 0; j < tk; ++j) {
      double dot = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        dot += Element(q, p.q.dtype, i * p.q.row_stride + c) *
               Element(k, p.k.dtype, j * p.k.row_stride + c);
      }
      const int64_t ij = i * tk + j;
      s.scores[ij] = dot;
      s.scaled[ij] = dot * scale;
      double masked = s.scaled[ij];
      if (cap > 0.0) masked = cap * std::tanh(masked / cap);
      masked -= slope * double(std::llabs(Diagonal(p, i) - j));
      if (p.mask.data) {
        masked += double(p.mask.data[b * p.mask.batch_stride + h * p.mask.head_stride +
                                     i * p.mask.row_stride + j * p.mask.col_stride]);
      }
      if (!CausallyVisible(p, i, j) || !InWindow(p, i, j)) masked = -kInf;
      s.masked[ij] = masked;
    }

    const double* row = &s.masked[i * tk];
    double max = sink;
    bool has_nan = false;
    for (int64_t j = 0; j < tk; ++j) {
      if (std::isnan(row[j])) has_nan = true;
      if (row[j] > max) max = row[j];
    }
    double* w = &s.weights[i * tk];
    double* o = &s.out[i * dv];
    if (has_nan || max == kInf) {
      // NaN scores, or +inf - +inf: the softmax is undefined.
      for (int64_t j = 0; j < tk; ++j) w[j] = kNaN;
      for (int64_t c = 0; c < dv; ++c) o[c] = kNaN;
      s.lse[i] = kNaN;
      continue;
    }
    if (max == -kInf) {  // fully masked: weights and out stay 0
      s.lse[i] = -kInf;
      continue;
    }
    double sum = sink == -kInf ? 0.0 : std::exp(sink - max);
    for (int64_t j = 0; j < tk; ++j) {
      w[j] = std::exp(row[j] - max);
      sum += w[j];
    }
    for (int64_t j = 0; j < tk; ++j) w[j] /= sum;
    s.lse[i] = max + std::log(sum);
    for (int64_t j = 0; j < tk; ++j) {
      if (row[j] == -kInf) continue;  // a masked key's value is never read
      for (int64_t c = 0; c < dv; ++c) o[c] += w[j] * Element(v, p.v.dtype, j * p.v.row_stride + c);
    }
  }
  return s;
}

Result Attention(const Problem& p) {
  const int64_t dv = p.ValueDim();
  Result r;
  r.out.reserve(p.batch * p.q_heads * p.q_len * dv);
  r.lse.reserve(p.batch * p.q_heads * p.q_len);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.q_heads; ++h) {
      HeadStages s = Stages(p, b, h);
      r.out.insert(r.out.end(), s.out.begin(), s.out.end());
      r.lse.insert(r.lse.end(), s.lse.begin(), s.lse.end());
    }
  }
  return r;
}

}  // namespace attn::reference
