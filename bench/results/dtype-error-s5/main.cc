#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "attn/attn.h"
#include "reference/reference.h"
using namespace attn;
int main() {
  struct S { int T, d; Causal c; } shapes[] = {{512,64,Causal::kNone},{512,128,Causal::kNone},{2048,128,Causal::kNone},{2048,128,Causal::kTopLeft}};
  for (auto s : shapes) for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) for (DType ot : {DType::kF32, t}) {
    if (t == DType::kF32 && ot != DType::kF32) continue;
    const int64_t n = int64_t(s.T) * s.d;
    std::mt19937 rng(1); std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> f[3]; std::vector<uint16_t> h[3];
    for (int i = 0; i < 3; ++i) { f[i].resize(n); h[i].resize(n); for (auto& x : f[i]) x = g(rng);
      for (int64_t j = 0; j < n; ++j) { h[i][j] = t == DType::kBF16 ? BFloat16Bits(f[i][j]) : Float16Bits(f[i][j]); } }
    std::vector<float> out(n); std::vector<uint16_t> out16(n);
    Problem p; p.q_len = p.kv_len = s.T; p.head_dim = s.d; p.causal = s.c;
    auto in = [&](int i) { return t == DType::kF32 ? DenseBHTD(f[i].data(), 1, s.T, s.d) : DenseBHTD(static_cast<const void*>(h[i].data()), t, 1, s.T, s.d); };
    p.q = in(0); p.k = in(1); p.v = in(2);
    p.out = ot == DType::kF32 ? DenseBHTD(out.data(), 1, s.T, s.d) : DenseBHTD(static_cast<void*>(out16.data()), ot, 1, s.T, s.d);
    Options o; o.threads = 1; attention(p, o);
    auto ref = reference::Attention(p);
    double maxerr = 0, maxref = 0, sq = 0;
    for (int64_t j = 0; j < n; ++j) { double got = ot == DType::kF32 ? out[j] : ot == DType::kBF16 ? FromBFloat16Bits(out16[j]) : FromFloat16Bits(out16[j]);
      double e = std::fabs(got - ref.out[j]); maxerr = std::max(maxerr, e); maxref = std::max(maxref, std::fabs(ref.out[j])); sq += e*e; }
    std::printf("T=%d d=%d causal=%d in=%s out=%s: max|err| %.3g  rms %.3g  max|ref| %.3g\n", s.T, s.d, int(s.c), DTypeName(t), DTypeName(ot), maxerr, std::sqrt(sq / n), maxref);
  }
}
