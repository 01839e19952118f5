// The bf16 dot-product kernels' entry points: the streaming kernel and the
// parallel kernel's per-view function over bf16 pairs (head-body.h, and
// kernels/decode's pair walks for views of few rows), each in one copy per instruction
// layer (kernels/common/bf16dot-inl.h): the emulations of vdpbf16ps and of
// Arm's BFDOT on every Highway target, AVX512-BF16's vdpbf16ps on AVX3 and
// BFDOT on NEON (aarch64). Which copy runs is decided once per call by dispatch
// (dispatch/dot_path.cc: the kernel table's bf16 rows decline unless a
// dot path is active), then one Highway dispatch picks the target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/bf16dot/bf16dot.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>

#include <algorithm>

#include "hwy/highway.h"
#include "kernels/bf16dot/bf16dot.h"
#include "kernels/bf16dot/pack-inl.h"
#include "kernels/common/bf16dot-inl.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/modifiers-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/common/widen-inl.h"
#include "kernels/kernel.h"
#include "kernels/decode/blocks-inl.h"  // NarrowMixTile, NarrowSoftmaxRow (pair walks)
#include "kernels/decode/row-inl.h"     // kGroupPrefetchBytes (pair row walk)
#include "kernels/decode/walk-inl.h"    // NarrowHead (one-row views)
#include "kernels/decode/walk_table.h"  // ChooseDecodeWalk

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

namespace emulated {
using Dot = EmulatedBf16Dot;
ATTN_DEFINE_WITH_TILE_SIZE  // vec_array-inl.h: with this layer's instructions
constexpr bool kPairRowWalkLayer = true;  // pair_row-body.h: tests the hardware layer's walk
#include "kernels/decode/pair_blocks-body.h"  // NOLINT: included per layer
#include "kernels/decode/pair_tiled-body.h"   // NOLINT: included per layer
#include "kernels/decode/pair_row-body.h"     // NOLINT: included per layer
#include "kernels/decode/pair_head-body.h"    // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"  // NOLINT: included per layer
}  // namespace emulated

namespace arm_emulated {
using Dot = EmulatedArmBfdot;
ATTN_DEFINE_WITH_TILE_SIZE  // vec_array-inl.h: with this layer's instructions
constexpr bool kPairRowWalkLayer = false;  // as BFDOT's NEON layer
#include "kernels/decode/pair_blocks-body.h"  // NOLINT: included per layer
#include "kernels/decode/pair_tiled-body.h"   // NOLINT: included per layer
#include "kernels/decode/pair_row-body.h"     // NOLINT: included per layer
#include "kernels/decode/pair_head-body.h"    // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"  // NOLINT: included per layer
}  // namespace arm_emulated

void Bf16DotViewEmulated(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;  // per thread (and target), across calls
  emulated::Bf16DotHead(view, tiles, scratch);
}

void Bf16DotViewArmEmulated(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;
  arm_emulated::Bf16DotHead(view, tiles, scratch);
}

#ifndef ATTN_HAVE_ARM_BFDOT
void Bf16DotViewArm(const internal::HeadView&, const Tiles&) {
  // Bf16DotTarget (below) runs BFDOT through NEON's copy only.
  HWY_ABORT("attn: the Arm BFDOT layer is not compiled for target %s",
            hwy::TargetName(HWY_TARGET));
}
#endif  // else defined in the +bf16 region below

#ifndef ATTN_HAVE_AVX512BF16_DOT
void Bf16DotViewHardware(const internal::HeadView&, const Tiles&) {
  // dispatch/dot_path.cc offers the hardware path only on AVX3.
  HWY_ABORT("attn: the AVX512-BF16 layer is not compiled for target %s",
            hwy::TargetName(HWY_TARGET));
}
#endif  // else defined in the avx512bf16 region below (no declaration here:
        // GCC would take one with other target attributes for an overload)

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#ifdef ATTN_HAVE_AVX512BF16_DOT
// The hardware copy, in the avx512bf16 region of bf16dot-inl.h.
ATTN_BEGIN_AVX512BF16
namespace attn {
namespace HWY_NAMESPACE {
namespace hardware {
using Dot = Avx512Bf16Dot;
ATTN_DEFINE_WITH_TILE_SIZE  // vec_array-inl.h: with this layer's instructions
constexpr bool kPairRowWalkLayer = true;
#include "kernels/decode/pair_blocks-body.h"  // NOLINT: included per layer
#include "kernels/decode/pair_tiled-body.h"   // NOLINT: included per layer
#include "kernels/decode/pair_row-body.h"     // NOLINT: included per layer
#include "kernels/decode/pair_head-body.h"    // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"  // NOLINT: included per layer
}  // namespace hardware

void Bf16DotViewHardware(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;
  hardware::Bf16DotHead(view, tiles, scratch);
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_POP_ATTRIBUTES
#endif

#ifdef ATTN_HAVE_ARM_BFDOT
// The BFDOT copy, in the +bf16 region of bf16dot-inl.h.
ATTN_BEGIN_ARM_BF16
namespace attn {
namespace HWY_NAMESPACE {
namespace arm_hardware {
using Dot = NeonBfdot;
ATTN_DEFINE_WITH_TILE_SIZE  // vec_array-inl.h: with this layer's instructions
constexpr bool kPairRowWalkLayer = false;
#include "kernels/decode/pair_blocks-body.h"  // NOLINT: included per layer
#include "kernels/decode/pair_tiled-body.h"   // NOLINT: included per layer
#include "kernels/decode/pair_row-body.h"     // NOLINT: included per layer
#include "kernels/decode/pair_head-body.h"    // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"  // NOLINT: included per layer
}  // namespace arm_hardware

void Bf16DotViewArm(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;
  arm_hardware::Bf16DotHead(view, tiles, scratch);
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
ATTN_END_ARM_BF16
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

internal::ParallelTarget Bf16DotTargetImpl(internal::PairDotLayer layer) {
  using L = internal::PairDotLayer;
  void (*run)(const internal::HeadView&, const Tiles&) = &Bf16DotViewEmulated;
  switch (layer) {
    case L::kAvx512Bf16Emulated: run = &Bf16DotViewEmulated; break;
    case L::kAvx512Bf16: run = &Bf16DotViewHardware; break;
    case L::kArmBfdotEmulated: run = &Bf16DotViewArmEmulated; break;
    case L::kArmBfdot: run = &Bf16DotViewArm; break;
  }
  return internal::ParallelTarget{int(PanelWidth()), run};
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(Bf16DotTargetImpl);

namespace internal {
ParallelTarget Bf16DotTarget(PairDotLayer layer) {
#if ATTN_ARM_BFDOT_COMPILED
  // BFDOT's layer is compiled for NEON only (its +bf16 region), and every
  // aarch64 CPU runs NEON: on a CPU whose best target is SVE or SVE2 (with
  // FEAT_BF16: Graviton 3 and 4, Grace, Axion), the bfdot path runs NEON's
  // kernels rather than leaving all-bf16 problems to widening.
  if (layer == PairDotLayer::kArmBfdot) return N_NEON::Bf16DotTargetImpl(layer);
#endif
  return HWY_DYNAMIC_DISPATCH(Bf16DotTargetImpl)(layer);
}

PairDotLayer PairDotLayerOf(DotPath path) {
  switch (path) {
    case DotPath::kAvx512Bf16: return PairDotLayer::kAvx512Bf16;
    case DotPath::kArmBfdot: return PairDotLayer::kArmBfdot;
    case DotPath::kArmBfdotEmulated: return PairDotLayer::kArmBfdotEmulated;
    default: return PairDotLayer::kAvx512Bf16Emulated;
  }
}

void Bf16DotStreamingAttention(const Problem& p, const RunConfig& config, PairDotLayer layer) {
  const ParallelTarget target = Bf16DotTarget(layer);
  const HeadViews views(p, config);
  for (int64_t i = 0; i < views.size(); ++i) target.run_view(views[i], config.tiles);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
