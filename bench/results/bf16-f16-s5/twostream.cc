// Diagnostic (not part of attn): single-core read bandwidth of one stream vs
// two streams read alternately in chunks (decode's K tile, then V tile).
#include <immintrin.h>
#include <time.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
static double Cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static float Sum(const float* p, size_t n, __m256& a0, __m256& a1, __m256& a2, __m256& a3) {
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  return 0;
}
volatile float sink;
int main(int argc, char** argv) {
  const size_t bytes = size_t(128) << 20;  // per buffer
  const size_t n = bytes / 4;
  float* a = static_cast<float*>(aligned_alloc(64, bytes));
  float* b = static_cast<float*>(aligned_alloc(64, bytes));
  std::fill(a, a + n, 1.0f); std::fill(b, b + n, 1.0f);
  const size_t chunks[] = {0, 256, 1024, 4096, 8192, 16384, 65536};
  for (int round = 0; round < 5; ++round) {
    for (size_t c : chunks) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const double t0 = Cpu();
      if (c == 0) {  // one stream: a then b, 256 MiB
        Sum(a, n, a0, a1, a2, a3); Sum(b, n, a0, a1, a2, a3);
      } else {
        const size_t cf = c / 4;
        for (size_t i = 0; i < n; i += cf) { Sum(a + i, cf, a0, a1, a2, a3); Sum(b + i, cf, a0, a1, a2, a3); }
      }
      const double t = Cpu() - t0;
      float s[8]; _mm256_storeu_ps(s, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); sink = s[0];
      std::printf("round %d %s chunk %6zu B: %.2f GB/s\n", round, c ? "two streams" : "one stream ", c, 2.0 * bytes / t * 1e-9);
    }
  }
}
