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
constexpr bool kPairRowWalkLayer = true;  // pair_row-body.h: tests the hardware layer's walk
#include "kernels/bf16dot/layer-body.h"  // NOLINT: included per layer
}  // namespace emulated

namespace arm_emulated {
using Dot = EmulatedArmBfdot;
constexpr bool kPairRowWalkLayer = false;  // as BFDOT's NEON layer
#include "kernels/bf16dot/layer-body.h"  // NOLINT: included per layer
}  // namespace arm_emulated

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#ifdef ATTN_HAVE_HARDWARE_BF16_DOT
// The hardware copy (vdpbf16ps on AVX3, BFDOT on NEON), in its attribute
// region of bf16dot-inl.h.
ATTN_BEGIN_HARDWARE_BF16
namespace attn::HWY_NAMESPACE::hardware {
using Dot = HardwareBf16Dot;
constexpr bool kPairRowWalkLayer = true;  // compiled on AVX3 only (pair_row-body.h)
#include "kernels/bf16dot/layer-body.h"  // NOLINT: included per layer
}  // namespace attn::HWY_NAMESPACE::hardware
ATTN_END_HARDWARE_BF16
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// A hardware layer on a target without it: dispatch/dot_path.cc offers
// vdpbf16ps only on AVX3, and Bf16DotTarget (below) runs BFDOT through
// NEON's copy only.
void LayerNotCompiled(const internal::HeadView&, const Tiles&) {
  HWY_ABORT("attn: this bf16 layer is not compiled for target %s", hwy::TargetName(HWY_TARGET));
}

internal::ParallelTarget Bf16DotTargetImpl(internal::PairDotLayer layer) {
  using L = internal::PairDotLayer;
  void (*run)(const internal::HeadView&, const Tiles&) = &emulated::LayerView;
  switch (layer) {
    case L::kAvx512Bf16Emulated: run = &emulated::LayerView; break;
    case L::kArmBfdotEmulated: run = &arm_emulated::LayerView; break;
#ifdef ATTN_HAVE_AVX512BF16_DOT
    case L::kAvx512Bf16: run = &hardware::LayerView; break;
#endif
#ifdef ATTN_HAVE_ARM_BFDOT
    case L::kArmBfdot: run = &hardware::LayerView; break;
#endif
    default: run = &LayerNotCompiled; break;
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
