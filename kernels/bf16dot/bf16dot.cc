// The bf16 dot-product kernels' entry points: the streaming kernel and the
// parallel kernel's per-view function over bf16 pairs (head-body.h, and
// narrow-body.h for views of few rows), each
// in two copies, over the emulated instruction layer on every Highway
// target and over AVX512-BF16's vdpbf16ps on AVX3 (kernels/common/
// bf16dot-inl.h). Which copy runs is decided once per call by dispatch
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
#include "kernels/streaming/narrow-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

namespace emulated {
using Dot = EmulatedBf16Dot;
#include "kernels/bf16dot/narrow-body.h"  // NOLINT: included per layer
#include "kernels/bf16dot/head-body.h"  // NOLINT: included per layer
}  // namespace emulated

void Bf16DotViewEmulated(const internal::HeadView& view, const Tiles& tiles) {
  thread_local Bf16DotScratch scratch;  // per thread (and target), across calls
  emulated::Bf16DotHead(view, tiles, scratch);
}

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
#include "kernels/bf16dot/narrow-body.h"  // NOLINT: included per layer
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

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

internal::ParallelTarget Bf16DotTargetImpl(bool hardware) {
  return internal::ParallelTarget{int(PanelWidth()),
                                  hardware ? &Bf16DotViewHardware : &Bf16DotViewEmulated};
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(Bf16DotTargetImpl);

namespace internal {
ParallelTarget Bf16DotTarget(bool hardware) {
  return HWY_DYNAMIC_DISPATCH(Bf16DotTargetImpl)(hardware);
}

void Bf16DotStreamingAttention(const Problem& p, const RunConfig& config, bool hardware) {
  const ParallelTarget target = Bf16DotTarget(hardware);
  const HeadViews views(p, config.diag_shift);
  for (int64_t i = 0; i < views.size(); ++i) target.run_view(views[i], config.tiles);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
