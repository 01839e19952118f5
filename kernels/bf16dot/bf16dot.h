// The bf16 dot-product kernels (bf16dot.cc), as dispatch sees them.
#pragma once

#include "attn/attn.h"
#include "hwy/highway.h"  // HWY_TARGETS, HWY_NEON
#include "kernels/kernel.h"

// Whether the BFDOT layer is compiled: NEON's copy only, with GCC (the
// +bf16 region of kernels/common/bf16dot-inl.h). Bf16DotTarget runs it
// whatever the current target, and dispatch/dot_path.cc offers the bfdot
// path only where it is.
#if HWY_ARCH_ARM_A64 && (HWY_TARGETS & HWY_NEON) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_ARM_BFDOT_COMPILED 1
#else
#define ATTN_ARM_BFDOT_COMPILED 0
#endif

namespace attn::internal {

// The pair dot-product instruction layer a bf16 dot-product kernel runs
// over (kernels/common/bf16dot-inl.h).
// The layer of a bf16 dot path (kAvx512Bf16*, kArmBfdot*; dispatch/
// dot_path.h IsPairDotPath).
PairDotLayer PairDotLayerOf(DotPath path);

// The bf16 dot-product kernel on the current target over `layer`. Q, K and
// V must be bf16, and a hardware layer must run here (dispatch/
// dot_path.cc decides).
void Bf16DotStreamingAttention(const Problem& problem, const RunConfig& config,
                               PairDotLayer layer);

}  // namespace attn::internal
