// The public entry point: validate, resolve defaults, pick a kernel, run.
#include <new>
#include <string>

#include "attn/attn.h"
#include "dispatch/kernel_table.h"
#include "dispatch/targets.h"
#include "dispatch/tiles.h"
#include "dispatch/tuning.h"
#include "dispatch/validate.h"
#include "kernels/kernel.h"

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
    const AutoChoice choice = internal::ChooseAuto(p, in, options.tiles);
    kernel = choice.kernel;
    config.tiles = choice.tiles;
  } else {
    config.tiles = internal::ResolveTiles(options.tiles, in);
  }
  // The first row of the table for this kernel that takes the problem
  // (throws, naming the kernel and why, when none does).
  const internal::KernelImpl& impl = internal::ImplFor(kernel, p);
  config.tiles = internal::ClampTiles(config.tiles, in);
  if (!impl.info.threaded) config.threads = 1;

  try {
    impl.run(p, config);
  } catch (const std::bad_alloc&) {
    throw Error("memory", "exhausted",
                std::string("attn: kernel ") + KernelName(kernel) +
                    " could not allocate its scratch memory, got exhausted");
  }
}

}  // namespace attn
