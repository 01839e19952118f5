// The public entry point: validate, resolve defaults, pick a kernel, run.
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "dispatch/kernel_table.h"
#include "dispatch/targets.h"
#include "dispatch/tiles.h"
#include "dispatch/tuning.h"
#include "dispatch/validate.h"
#include "kernels/decode/walk_table.h"
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

namespace {

// A dense bf16 copy of `t` ([batch, heads, rows, cols]), rounded to nearest
// even (exact for bf16 input).
ConstTensor RoundedToBf16(const ConstTensor& t, int64_t batch, int64_t heads, int64_t rows,
                          int64_t cols, std::vector<uint16_t>& storage) {
  storage.resize(size_t(batch * heads * rows * cols));
  uint16_t* dst = storage.data();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t base = b * t.batch_stride + h * t.head_stride + r * t.row_stride;
        for (int64_t c = 0; c < cols; ++c) {
          *dst++ = BFloat16Bits(internal::LoadElement(t.data, t.dtype, base + c));
        }
      }
  return DenseBHTD(static_cast<const void*>(storage.data()), DType::kBF16, heads, rows, cols);
}

// Options::round_inputs_to_bf16: `p` with bf16 copies of its non-bf16 Q, K
// and V (in `storage`), else `p` itself.
struct RoundedInputs {
  std::vector<uint16_t> storage[3];
  Problem problem;
};
const Problem& MaybeRoundInputs(const Problem& p, const Options& options, RoundedInputs& r) {
  if (!options.round_inputs_to_bf16) return p;
  if (p.q.dtype == DType::kBF16 && p.k.dtype == DType::kBF16 && p.v.dtype == DType::kBF16) return p;
  r.problem = p;
  if (p.q.dtype != DType::kBF16) {
    r.problem.q = RoundedToBf16(p.q, p.batch, p.q_heads, p.q_len, p.head_dim, r.storage[0]);
  }
  if (p.k.dtype != DType::kBF16) {
    r.problem.k = RoundedToBf16(p.k, p.batch, p.kv_heads, p.kv_len, p.head_dim, r.storage[1]);
  }
  if (p.v.dtype != DType::kBF16) {
    r.problem.v = RoundedToBf16(p.v, p.batch, p.kv_heads, p.kv_len, p.ValueDim(), r.storage[2]);
  }
  return r.problem;
}

}  // namespace

void attention(const Problem& problem, const Options& options) {
  internal::InitTargetsOnce();
  internal::ValidateOptions(options);
  internal::Validate(problem);
  RoundedInputs rounded;
  const Problem& p = [&]() -> const Problem& {
    try {
      return MaybeRoundInputs(problem, options, rounded);
    } catch (const std::bad_alloc&) {
      throw Error("memory", "exhausted",
                  "attn: round_inputs_to_bf16 could not allocate the bf16 copies of q, k, v, "
                  "got exhausted");
    }
  }();

  internal::RunConfig config;
  config.threads = internal::ResolveThreads(options.threads);
  const internal::DotPathRequest dot = internal::RequestedDotPath(p, options.dot_path);
  const internal::TileInputs in = internal::TileInputsFor(p, config.threads, dot.path);
  config.dot_path = dot.path;
  config.decode_walk = internal::ParseDecodeWalk(options.decode_walk);
  KernelId kernel = options.kernel;
  if (kernel == KernelId::kAuto) {
    // The tuning table's entry (or bucket) for the shape, else the default
    // rule; an all-bf16 entry may name the dot path too.
    const AutoChoice choice = internal::ChooseAuto(p, in, options.tiles, false, dot);
    kernel = choice.kernel;
    config.tiles = choice.tiles;
    config.dot_path = internal::ChosenDotPath(choice, dot.path);
  } else {
    config.tiles = internal::ResolveTiles(options.tiles, in);
  }
  // The first row of the table for this kernel that takes the problem
  // (throws, naming the kernel and why, when none does).
  const internal::KernelImpl& impl = internal::ImplFor(kernel, p, config.dot_path);
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
