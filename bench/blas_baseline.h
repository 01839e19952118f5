// The "blas" baseline row of attn-bench: the straightforward algorithm on
// OpenBLAS (two sgemm calls around a materialised T_q x T_k score matrix).
#pragma once

#include <cstdint>

namespace attn_bench {

// One head, dense row-major q[T_q][d], k[T_k][d], v[T_k][d], out[T_q][d];
// s is T_q x T_k scratch. Causal: query i sees keys j <= i (T_q == T_k here).
//   S = scale · Q·Kᵀ (sgemm), causal mask, row softmax with the row max
//   subtracted (rows split over `threads` OpenMP threads), O = P·V (sgemm).
// OpenBLAS is set to `threads` threads (openblas_set_num_threads).
void BlasAttention(const float* q, const float* k, const float* v, float* s, float* out,
                   int64_t q_len, int64_t kv_len, int64_t d, bool causal, int threads);

}  // namespace attn_bench
