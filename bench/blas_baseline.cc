#include "bench/blas_baseline.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn_bench {

void BlasAttention(const float* q, const float* k, const float* v, float* s, float* out,
                   int64_t q_len, int64_t kv_len, int64_t d, bool causal, int threads) {
  openblas_set_num_threads(threads);
  const float scale = 1.0f / std::sqrt(float(d));
  const int m = int(q_len), n = int(kv_len), kd = int(d);
  // S = scale · Q·Kᵀ
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kd, scale, q, kd, k, kd, 0.0f, s,
              n);
  // Causal mask + row softmax (max subtracted); masked entries become 0.
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int i = 0; i < m; ++i) {
    float* row = s + int64_t(i) * n;
    const int visible = causal ? std::min(n, i + (n - m) + 1) : n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < visible; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = visible > 0 ? 1.0f / sum : 0.0f;
    for (int j = 0; j < visible; ++j) row[j] *= inv;
    for (int j = std::max(visible, 0); j < n; ++j) row[j] = 0.0f;
  }
  // O = P·V
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, kd, n, 1.0f, s, n, v, kd, 0.0f, out,
              kd);
}

}  // namespace attn_bench
