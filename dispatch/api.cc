// The public entry point: validate, resolve defaults, pick a kernel, run.
#include <omp.h>

#include <new>
#include <string>

#include "attn/attn.h"
#include "dispatch/registry.h"
#include "dispatch/targets.h"
#include "dispatch/tiles.h"
#include "dispatch/validate.h"
#include "kernels/naive/naive.h"
#include "kernels/streaming/streaming.h"

namespace attn {

Tiles DefaultTiles(int64_t q_len, int64_t kv_len, int64_t head_dim) {
  internal::InitTargetsOnce();
  internal::TileInputs in;
  in.q_len = q_len;
  in.kv_len = kv_len;
  in.head_dim = in.value_dim = head_dim;
  in.panel_width = internal::PanelWidth();
  in.threads = 1;
  return internal::ChooseTiles(in);
}

void attention(const Problem& p, const Options& options) {
  internal::InitTargetsOnce();
  internal::ValidateOptions(options);
  internal::Validate(p);

  internal::RunConfig config;
  config.threads = options.threads > 0 ? options.threads
                   : omp_in_parallel()  ? 1
                                        : omp_get_max_threads();
  KernelId kernel = options.kernel;
  if (kernel == KernelId::kAuto) kernel = internal::DefaultKernel(p, config.threads);
  if (kernel == KernelId::kNaive &&
      internal::NaiveScratchBytes(p.q_len, p.kv_len) > internal::kNaiveMaxScratchBytes) {
    throw Error("kernel", "naive",
                "attn: kernel naive would materialise " + std::to_string(p.q_len) + " x " +
                    std::to_string(p.kv_len) + " scores (over " +
                    std::to_string(internal::kNaiveMaxScratchBytes >> 20) +
                    " MiB); use streaming or auto, got naive");
  }
  internal::TileInputs in;
  in.q_len = p.q_len;
  in.kv_len = p.kv_len;
  in.head_dim = p.head_dim;
  in.value_dim = p.ValueDim();
  in.heads = p.batch * p.q_heads;
  in.panel_width = internal::PanelWidth();
  in.threads = config.threads;
  config.tiles = internal::ResolveTiles(options.tiles, in);
  if (kernel != KernelId::kParallel) config.threads = 1;

  try {
    internal::FindKernel(kernel).run(p, config);
  } catch (const std::bad_alloc&) {
    throw Error("memory", "exhausted",
                std::string("attn: kernel ") + KernelName(kernel) +
                    " could not allocate its scratch memory, got exhausted");
  }
}

}  // namespace attn
