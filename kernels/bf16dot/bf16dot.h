// The bf16 dot-product kernels (bf16dot.cc), as dispatch sees them.
#pragma once

#include "attn/attn.h"
#include "kernels/kernel.h"

namespace attn::internal {

// The pair dot-product instruction layer a bf16 dot-product kernel runs
// over (kernels/common/bf16dot-inl.h).
enum class PairDotLayer {
  kAvx512Bf16Emulated,  // vdpbf16ps's semantics, portable: every target
  kAvx512Bf16,          // vdpbf16ps: AVX3 target, CPU with AVX512-BF16
  kArmBfdotEmulated,    // Arm BFDOT's semantics (round to odd), portable: every target
  kArmBfdot,            // BFDOT: NEON target on aarch64, CPU with FEAT_BF16
};

// The layer of a bf16 dot path (kAvx512Bf16*, kArmBfdot*; dispatch/
// dot_path.h IsPairDotPath).
PairDotLayer PairDotLayerOf(DotPath path);

// The bf16 dot-product kernel on the current target over `layer`. Q, K and
// V must be bf16, and a hardware layer must run here (dispatch/
// dot_path.cc decides).
ParallelTarget Bf16DotTarget(PairDotLayer layer);
void Bf16DotStreamingAttention(const Problem& problem, const RunConfig& config,
                               PairDotLayer layer);

}  // namespace attn::internal
