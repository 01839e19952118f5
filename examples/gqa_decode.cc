// Multi-head grouped-query attention with a KV cache: prefill a prompt, then
// decode token by token, appending each new key/value to the cache. The cache
// is allocated once at full capacity; attn reads just its first kv_len rows
// through the strides, so nothing is copied or reallocated per step.
#include <attn/attn.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int64_t kQHeads = 8, kKvHeads = 2, kDim = 64;  // 4 query heads share a KV head
constexpr int64_t kCapacity = 128, kPrompt = 16, kSteps = 32;

// KV cache [kv_heads, capacity, d]: a head's rows are contiguous, so a
// prefix of them is a valid tensor for any length <= capacity.
struct KvCache {
  std::vector<float> k = std::vector<float>(kKvHeads * kCapacity * kDim);
  std::vector<float> v = std::vector<float>(kKvHeads * kCapacity * kDim);
  int64_t len = 0;

  float* Row(std::vector<float>& t, int64_t head, int64_t pos) {
    return &t[(head * kCapacity + pos) * kDim];
  }
  attn::ConstTensor View(const std::vector<float>& t) const {
    return attn::DenseBHTD(t.data(), kKvHeads, kCapacity, kDim);
  }
};

// Stand-in for a model's projections: fills one position's q, k and v.
void Project(std::mt19937& rng, int64_t rows, float* q, KvCache& cache) {
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < rows * kQHeads * kDim; ++i) q[i] = normal(rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < kKvHeads; ++h)
      for (int64_t j = 0; j < kDim; ++j) {
        cache.Row(cache.k, h, cache.len + r)[j] = normal(rng);
        cache.Row(cache.v, h, cache.len + r)[j] = normal(rng);
      }
  cache.len += rows;
}

// Attention of `rows` new queries ([rows, q_heads, d], token-major as a model
// produces them) against the whole cache.
void Attend(const float* q, int64_t rows, const KvCache& cache, float* out) {
  attn::Problem p;
  p.q_heads = kQHeads;
  p.kv_heads = kKvHeads;
  p.q_len = rows;
  p.kv_len = cache.len;
  p.head_dim = kDim;
  p.q = attn::DenseBTHD(q, kQHeads, rows, kDim);
  p.k = cache.View(cache.k);
  p.v = cache.View(cache.v);
  p.out = attn::DenseBTHD(out, kQHeads, rows, kDim);
  // The new queries are the last positions: query i sees the cache up to
  // itself. For a single decode query this is every cached key.
  p.causal = attn::Causal::kBottomRight;
  attn::attention(p);
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  KvCache cache;
  std::vector<float> q(kPrompt * kQHeads * kDim), out(kPrompt * kQHeads * kDim);
  try {
    Project(rng, kPrompt, q.data(), cache);
    Attend(q.data(), kPrompt, cache, out.data());  // prefill
    double checksum = 0;
    for (int64_t step = 0; step < kSteps; ++step) {
      Project(rng, 1, q.data(), cache);  // one new token
      Attend(q.data(), 1, cache, out.data());
      for (int64_t i = 0; i < kQHeads * kDim; ++i) checksum += out[i];
    }
    if (!std::isfinite(checksum)) return 1;
    std::printf("gqa_decode: %lld query heads over %lld KV heads, prompt %lld + %lld decode "
                "steps, cache %lld/%lld rows, checksum %.6f\n",
                (long long)kQHeads, (long long)kKvHeads, (long long)kPrompt, (long long)kSteps,
                (long long)cache.len, (long long)kCapacity, checksum);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
