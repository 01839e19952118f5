// Loading a tuning file made by attn-tune, and asking what `auto` will run.
//
//   attn-tune --quick --output my-tuning.json   # once per machine
//   ./tuning_file my-tuning.json
//
// Without an argument the library's own first-use rule applies
// ($ATTN_TUNING_FILE, else the per-user cache). A file that does not fit
// this machine is ignored with a warning: a table changes speed, never
// results, so the program runs either way.
#include <attn/attn.h>
#include <attn/tuning.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  const attn::TuningStatus status =
      argc > 1 ? attn::LoadTuningFile(argv[1]) : attn::CurrentTuning();
  std::printf("tuning: %s (%zu entries) from '%s'%s%s\n",
              status.loaded ? "loaded" : "none", status.entries, status.path.c_str(),
              status.warning.empty() ? "" : "; ", status.warning.c_str());

  struct Shape {
    int64_t q_len, kv_len, head_dim;
  };
  for (const Shape s : {Shape{64, 64, 64}, Shape{1, 4096, 128}, Shape{2048, 2048, 128}}) {
    const attn::AutoChoice c = attn::ExplainChoice(s.q_len, s.kv_len, s.head_dim);
    std::printf("  Tq=%-5lld Tk=%-5lld d=%-4lld -> %-9s q_block=%d kv_block=%d (%s): %s\n",
                (long long)s.q_len, (long long)s.kv_len, (long long)s.head_dim,
                attn::KernelName(c.kernel), c.tiles.q_block, c.tiles.kv_block,
                c.source.c_str(), c.reason.c_str());
  }

  // And a call that follows the table.
  const int64_t T = 64, d = 64;
  std::vector<float> x(T * d, 0.5f), out(T * d);
  attn::Problem p;
  p.q_len = p.kv_len = T;
  p.head_dim = d;
  p.q = p.k = p.v = attn::DenseBHTD(x.data(), 1, T, d);
  p.out = attn::DenseBHTD(out.data(), 1, T, d);
  attn::attention(p);  // KernelId::kAuto
  // Every value is 0.5, so every output is 0.5 whatever the weights.
  std::printf("auto call: out[0][0] = %.3f\n", out[0]);
  return out[0] == 0.5f ? 0 : 1;
}
