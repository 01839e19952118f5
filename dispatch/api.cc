// The public entry point: validate, resolve defaults, pick a kernel, run.
#include <new>
#include <string>

#include "attn/attn.h"
#include "dispatch/registry.h"
#include "dispatch/targets.h"
#include "dispatch/tiles.h"
#include "dispatch/tuning.h"
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
  config.threads = internal::ResolveThreads(options.threads);
  const internal::TileInputs in = internal::TileInputsFor(p, config.threads);
  KernelId kernel = options.kernel;
  if (kernel == KernelId::kAuto) {
    // The tuning table's entry (or bucket) for the shape, else the default rule.
    const AutoChoice choice = internal::ChooseAuto(in, p.causal, options.tiles);
    kernel = choice.kernel;
    config.tiles = choice.tiles;
  } else {
    config.tiles = internal::ResolveTiles(options.tiles, in);
  }
  if (kernel == KernelId::kNaive &&
      internal::NaiveScratchBytes(p.q_len, p.kv_len) > internal::kNaiveMaxScratchBytes) {
    throw Error("kernel", "naive",
                "attn: kernel naive would materialise " + std::to_string(p.q_len) + " x " +
                    std::to_string(p.kv_len) + " scores (over " +
                    std::to_string(internal::kNaiveMaxScratchBytes >> 20) +
                    " MiB); use streaming or auto, got naive");
  }
  config.tiles = internal::ClampTiles(config.tiles, in);
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
