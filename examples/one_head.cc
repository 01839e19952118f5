// One attention head: causal self-attention over T tokens of dimension d,
// dense row-major [T, d] buffers. The smallest complete use of attn.
#include <attn/attn.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int64_t T = 256, d = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> q(T * d), k(T * d), v(T * d), out(T * d);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);

  attn::Problem p;
  p.q_len = p.kv_len = T;
  p.head_dim = d;  // scale defaults to 1/sqrt(d)
  p.q = attn::DenseBHTD(q.data(), /*heads=*/1, T, d);
  p.k = attn::DenseBHTD(k.data(), 1, T, d);
  p.v = attn::DenseBHTD(v.data(), 1, T, d);
  p.out = attn::DenseBHTD(out.data(), 1, T, d);
  p.causal = attn::Causal::kBottomRight;
  try {
    attn::attention(p);  // kernel and SIMD target chosen for this shape and CPU
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }

  // Query 0 sees only key 0 under the causal mask, so its output is V's row 0:
  // a check that needs no reference implementation.
  double worst = 0;
  for (int64_t j = 0; j < d; ++j) worst = std::fmax(worst, std::fabs(out[j] - v[j]));
  std::printf("one_head: T=%lld d=%lld on %s, out[T-1][0..3] = %.4f %.4f %.4f %.4f, "
              "|out[0] - v[0]| = %.1e\n",
              (long long)T, (long long)d, attn::CurrentTarget().c_str(), out[(T - 1) * d],
              out[(T - 1) * d + 1], out[(T - 1) * d + 2], out[(T - 1) * d + 3], worst);
  return worst < 1e-6 ? 0 : 1;
}
