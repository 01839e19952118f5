#include "reference/serving_reference.h"

#include <limits>

namespace attn::reference {
namespace {

// Element i of a typed buffer as float (exact), by the public conversions
// (q8_0: int8 · binary16 scale of block i / 32; q4_0: (nibble - 8) ·
// scale, the low nibbles first; exact in float).
float Load(const void* data, DType type, int64_t i) {
  if (type == DType::kF32) return static_cast<const float*>(data)[i];
  if (type == DType::kQ8_0) {
    const unsigned char* block = static_cast<const unsigned char*>(data) + i / 32 * 34;
    const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
    return float(static_cast<signed char>(block[2 + i % 32])) * scale;
  }
  if (type == DType::kQ4_0) {
    const unsigned char* block = static_cast<const unsigned char*>(data) + i / 32 * 18;
    const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
    const int c = int(i % 32);
    return float((c < 16 ? block[2 + c] & 15 : block[2 + c - 16] >> 4) - 8) * scale;
  }
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  return type == DType::kBF16 ? FromBFloat16Bits(bits) : FromFloat16Bits(bits);
}

// `x` as the pool's dtype would store it.
float RoundTo(DType type, float x) {
  if (type == DType::kBF16) return FromBFloat16Bits(BFloat16Bits(x));
  if (type == DType::kF16) return FromFloat16Bits(Float16Bits(x));
  return x;
}

const void* At(const void* data, DType type, int64_t offset) {
  if (type == DType::kQ8_0 || type == DType::kQ4_0) {
    return static_cast<const char*>(data) + offset / 32 * DTypeBlockBytes(type);
  }
  return static_cast<const char*>(data) + offset * DTypeSize(type);
}

std::vector<int64_t> Offsets(const int32_t* cu, int64_t len, int64_t batch) {
  std::vector<int64_t> o(size_t(batch) + 1);
  for (int64_t i = 0; i <= batch; ++i) o[size_t(i)] = cu ? cu[i] : i * len;
  return o;
}

// One sequence's dense result, stored at its packed rows.
void Store(const Result& r, int64_t q0, int64_t tq, int64_t heads, int64_t dv,
           PackedResult& into) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t c = 0; c < dv; ++c) {
        into.out[size_t(((q0 + i) * heads + h) * dv + c)] = r.out[size_t((h * tq + i) * dv + c)];
      }
      into.lse[size_t((q0 + i) * heads + h)] = r.lse[size_t(h * tq + i)];
    }
}

// A sequence with no keys: output 0; lse -inf, or the sink's logit (the
// only key of the normaliser).
void StoreEmpty(int64_t q0, int64_t tq, int64_t heads, int64_t dv, const SinkLogits& sinks,
                PackedResult& into) {
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < dv; ++c) into.out[size_t(((q0 + i) * heads + h) * dv + c)] = 0.0;
      into.lse[size_t((q0 + i) * heads + h)] =
          sinks.data ? double(sinks.data[h]) : -std::numeric_limits<double>::infinity();
    }
}

// Sequence b's score modifiers on its dense problem (one batch entry, so
// sequence b's ALiBi slopes start the slope array).
void SetModifiers(const Window& window, float softcap, const AlibiSlopes& alibi,
                  const SinkLogits& sinks, int64_t b, Problem& dense) {
  dense.window = window;
  dense.softcap = softcap;
  if (alibi.data) dense.alibi_slopes = {alibi.data + b * alibi.batch_stride, 0};
  dense.sinks = sinks;
}

Problem DenseOf(int64_t q_heads, int64_t kv_heads, int64_t d, int64_t dv,
                const std::optional<float>& scale, Causal causal, int64_t tq, int64_t tk) {
  Problem dense;
  dense.q_heads = q_heads;
  dense.kv_heads = kv_heads;
  dense.head_dim = d;
  dense.value_dim = dv;
  dense.scale = scale;
  dense.causal = causal;
  dense.q_len = tq;
  dense.kv_len = tk;
  return dense;
}

}  // namespace

void ForEachSequence(const VarlenProblem& p, const SequenceVisitor& fn) {
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = p.cu_seqlens_q[b], tq = p.cu_seqlens_q[b + 1] - q0;
    const int64_t k0 = p.cu_seqlens_k[b], tk = p.cu_seqlens_k[b + 1] - k0;
    if (tq == 0 || tk == 0) continue;
    // The packed rows are a dense problem through strides: no copy needed.
    Problem dense =
        DenseOf(p.q_heads, p.kv_heads, p.head_dim, p.ValueDim(), p.scale, p.causal, tq, tk);
    SetModifiers(p.window, p.softcap, p.alibi_slopes, p.sinks, b, dense);
    dense.q = {At(p.q.data, p.q.dtype, q0 * p.q.token_stride), 0, p.q.head_stride,
               p.q.token_stride, p.q.dtype};
    dense.k = {At(p.k.data, p.k.dtype, k0 * p.k.token_stride), 0, p.k.head_stride,
               p.k.token_stride, p.k.dtype};
    dense.v = {At(p.v.data, p.v.dtype, k0 * p.v.token_stride), 0, p.v.head_stride,
               p.v.token_stride, p.v.dtype};
    fn(b, q0, dense);
  }
}

// The result of each sequence's dense problem at its packed rows; 0 and
// lse -inf (or the sinks) for a sequence with queries but no keys.
template <class ServingProblem>
PackedResult PackedFromSequences(const ServingProblem& p, const std::vector<int64_t>& cu_q,
                    const std::vector<int64_t>& tk) {
  const int64_t dv = p.ValueDim();
  const int64_t total_q = cu_q.back();
  PackedResult r;
  r.out.assign(size_t(total_q * p.q_heads * dv), 0.0);
  r.lse.assign(size_t(total_q * p.q_heads), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = cu_q[size_t(b)], tq = cu_q[size_t(b) + 1] - q0;
    if (tq > 0 && tk[size_t(b)] == 0) StoreEmpty(q0, tq, p.q_heads, dv, p.sinks, r);
  }
  ForEachSequence(p, [&](int64_t, int64_t q0, const Problem& dense) {
    Store(Attention(dense), q0, dense.q_len, p.q_heads, dv, r);
  });
  return r;
}

PackedResult VarlenAttention(const VarlenProblem& p) {
  std::vector<int64_t> cu_q(size_t(p.batch) + 1), tk(size_t(p.batch));
  for (int64_t b = 0; b <= p.batch; ++b) cu_q[size_t(b)] = p.cu_seqlens_q[b];
  for (int64_t b = 0; b < p.batch; ++b) tk[size_t(b)] = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  return PackedFromSequences(p, cu_q, tk);
}

std::vector<float> GatherPagedKeys(const PagedProblem& p, int64_t b, bool values) {
  const int64_t cols = values ? p.ValueDim() : p.head_dim;
  const PagePool& pool = values ? p.v_cache : p.k_cache;
  const PackedTensor& fresh = values ? p.v_new : p.k_new;
  const std::vector<int64_t> cu_new = Offsets(p.cu_seqlens_new, p.new_len, p.batch);
  const int64_t cached = p.cache_seqlens[b];
  const int64_t tk = cached + cu_new[size_t(b) + 1] - cu_new[size_t(b)];
  const int64_t stride = p.block_table_stride ? p.block_table_stride : p.max_blocks;
  std::vector<float> keys(size_t(tk * p.kv_heads * cols));
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<unsigned char> blocks(static_cast<size_t>(cols / 32 * 34));
  for (int64_t t = 0; t < tk; ++t)
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      float* key = &keys[size_t((t * p.kv_heads + g) * cols)];
      if (t < cached) {
        const int64_t block = p.block_table[b * stride + t / p.block_size];
        const void* start = At(pool.data, pool.dtype,
                               block * pool.block_stride + (t % p.block_size) * pool.row_stride +
                                   g * pool.head_stride);
        for (int64_t c = 0; c < cols; ++c) key[c] = Load(start, pool.dtype, c);
        continue;
      }
      const int64_t i = cu_new[size_t(b)] + (t - cached);
      const void* start = At(fresh.data, fresh.dtype, i * fresh.token_stride + g * fresh.head_stride);
      for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = Load(start, fresh.dtype, c);
      const bool blocks_pool = pool.dtype == DType::kQ8_0 || pool.dtype == DType::kQ4_0;
      if (blocks_pool && fresh.dtype != pool.dtype) {
        // Quantised as the pool stores it (QuantizeQ8_0 / QuantizeQ4_0,
        // tested on their own against ggml's reference values in
        // tests/quant_kv_test.cc and tests/q4_test.cc), then read back.
        if (pool.dtype == DType::kQ8_0) {
          QuantizeQ8_0(row.data(), cols, blocks.data());
          DequantizeQ8_0(blocks.data(), cols, row.data());
        } else {
          QuantizeQ4_0(row.data(), cols, blocks.data());
          DequantizeQ4_0(blocks.data(), cols, row.data());
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        key[c] = blocks_pool ? row[size_t(c)] : RoundTo(pool.dtype, row[size_t(c)]);
      }
    }
  return keys;
}

// Sequence b's keys: cached plus new.
int64_t PagedKeys(const PagedProblem& p, const std::vector<int64_t>& cu_new, int64_t b) {
  return p.cache_seqlens[b] + cu_new[size_t(b) + 1] - cu_new[size_t(b)];
}

void ForEachSequence(const PagedProblem& p, const SequenceVisitor& fn) {
  const std::vector<int64_t> cu_q = Offsets(p.cu_seqlens_q, p.q_len, p.batch);
  const std::vector<int64_t> cu_new = Offsets(p.cu_seqlens_new, p.new_len, p.batch);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = cu_q[size_t(b)], tq = cu_q[size_t(b) + 1] - q0;
    const int64_t tk = PagedKeys(p, cu_new, b);
    if (tq == 0 || tk == 0) continue;
    const std::vector<float> k = GatherPagedKeys(p, b, false), v = GatherPagedKeys(p, b, true);
    Problem dense =
        DenseOf(p.q_heads, p.kv_heads, p.head_dim, p.ValueDim(), p.scale, p.causal, tq, tk);
    SetModifiers(p.window, p.softcap, p.alibi_slopes, p.sinks, b, dense);
    dense.q = {At(p.q.data, p.q.dtype, q0 * p.q.token_stride), 0, p.q.head_stride,
               p.q.token_stride, p.q.dtype};
    dense.k = DenseBTHD(k.data(), p.kv_heads, tk, p.head_dim);
    dense.v = DenseBTHD(v.data(), p.kv_heads, tk, p.ValueDim());
    fn(b, q0, dense);
  }
}

PackedResult PagedAttention(const PagedProblem& p) {
  const std::vector<int64_t> cu_q = Offsets(p.cu_seqlens_q, p.q_len, p.batch);
  const std::vector<int64_t> cu_new = Offsets(p.cu_seqlens_new, p.new_len, p.batch);
  std::vector<int64_t> tk(size_t(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) tk[size_t(b)] = PagedKeys(p, cu_new, b);
  return PackedFromSequences(p, cu_q, tk);
}

}  // namespace attn::reference
