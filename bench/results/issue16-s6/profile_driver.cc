// One attention call per shape, instrumented by callgrind (--instr-atstart=no).
#include <attn/attn.h>
#include <valgrind/callgrind.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  int H = atoi(argv[1]), Tq = atoi(argv[2]), Tk = atoi(argv[3]), d = atoi(argv[4]);
  bool causal = argc > 5 && std::string(argv[5]) == "causal";
  std::vector<float> q(size_t(H) * Tq * d), k(size_t(H) * Tk * d), v(size_t(H) * Tk * d), o(size_t(H) * Tq * d);
  unsigned s = 1;
  auto rnd = [&] { s = s * 1664525u + 1013904223u; return float(int(s >> 9) - (1 << 22)) / float(1 << 22); };
  for (auto* x : {&q, &k, &v}) for (float& f : *x) f = rnd();
  attn::Problem p;
  p.q_heads = p.kv_heads = H; p.q_len = Tq; p.kv_len = Tk; p.head_dim = d;
  p.causal = causal ? attn::Causal::kBottomRight : attn::Causal::kNone;
  p.q = attn::DenseBHTD(q.data(), H, Tq, d); p.k = attn::DenseBHTD(k.data(), H, Tk, d);
  p.v = attn::DenseBHTD(v.data(), H, Tk, d); p.out = attn::DenseBHTD(o.data(), H, Tq, d);
  attn::Options opt; opt.kernel = attn::KernelId::kStreaming; opt.threads = 1;
  attn::attention(p, opt);  // warm-up: scratch allocation, dispatch
  CALLGRIND_START_INSTRUMENTATION;
  attn::attention(p, opt);
  CALLGRIND_STOP_INSTRUMENTATION;
  std::printf("%g\n", o[0]);
}
