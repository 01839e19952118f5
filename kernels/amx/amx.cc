// The AMX kernels' entry points: the streaming kernel and the parallel
// kernel's per-view function (head-body.h), each in two copies, over the
// emulated tiles on every Highway target and over AMX's tdpbf16ps on AVX3
// (kernels/common/amx-inl.h). Which copy runs is decided once per call by
// dispatch (dispatch/dot_path.cc: the kernel table's AMX rows decline
// unless an AMX dot path is active), then one Highway dispatch picks the
// target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/amx/amx.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <limits>

#include "hwy/highway.h"
#include "kernels/amx/amx.h"
#include "kernels/amx/pack-inl.h"
#include "kernels/common/amx-inl.h"
#include "kernels/common/mca_markers.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/modifiers-inl.h"
#include "kernels/common/narrow_state-inl.h"
#include "kernels/common/pairs-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/common/stage_clock.h"
#include "kernels/common/widen-inl.h"
#include "kernels/decode/walk_table.h"  // ChooseDecodeWalk
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

namespace emulated {
using Amx = EmulatedAmx;
#define ATTN_AMX_LAYER_NAME "emulated"  // names head-body.h's llvm-mca regions
#include "kernels/amx/head-body.h"  // NOLINT: included per layer
#undef ATTN_AMX_LAYER_NAME
}  // namespace emulated

// attn-bench's stage rows on a CPU without AMX (AmxRun::exclude_tiles): no
// tile instruction runs; each tile store writes as many zero bytes as the
// tile holds, so the stages between the products see their memory traffic.
// Results are not attention: only the stage clock reads this layer's runs.
struct ExcludedAmx : EmulatedAmx {
  static void Configure(const internal::AmxTileConfig&) {}
  static void Release() {}
  template <int T>
  static void Zero() {}
  template <int T>
  static void Load(const void*, int64_t) {}
  template <int T>
  static void Store(void* base, int64_t stride) {
    for (int r = 0; r < internal::kAmxMaxRows; ++r) {
      memset(static_cast<uint8_t*>(base) + r * stride, 0, internal::kAmxMaxRowBytes);
    }
  }
  template <int C, int A, int B>
  static void DotBf16() {}
};
namespace excluded {
using Amx = ExcludedAmx;
#define ATTN_AMX_LAYER_NAME "excluded"
#include "kernels/amx/head-body.h"  // NOLINT: included per layer
#undef ATTN_AMX_LAYER_NAME
}  // namespace excluded

// Views of more than NarrowMaxRows() rows take the tiles; narrow views
// (decode, GQA groups) as the decode walk table says (walk_table.cc
// "amx-tiles": groups of 8 rows or more), the others the bf16 dot-product
// kernel's pair walks (vdpbf16ps, or its emulation, with the same
// arithmetic as the tiles: pairs summed in float32, P rounded to bf16).
bool AmxTakesView(const internal::HeadView& view) {
  if (view.tq > NarrowMaxRows()) return true;
  const internal::DecodeView facts =
      internal::DescribeDecodeView(view, NarrowMaxRows(), internal::DecodeProducts::kAmx);
  return internal::ChooseDecodeWalk(facts, view.decode_walk) == internal::DecodeWalk::kAmxTiles;
}

void AmxViewEmulated(const internal::HeadView& view, const Tiles& tiles) {
  if (!AmxTakesView(view)) return internal::Bf16DotTarget(internal::PairDotLayer::kAvx512Bf16Emulated).run_view(view, tiles);
  thread_local AmxScratch scratch;  // per thread (and target), across calls
  emulated::AmxHead(view, tiles, scratch);
}
// The same with the run's explicit choices (AmxHeads).
void AmxHeadsEmulated(const internal::HeadView& view, const Tiles& tiles,
                        const internal::AmxRun& run) {
  thread_local AmxScratch scratch;
  if (run.exclude_tiles) return excluded::AmxHead(view, tiles, scratch, run);
  emulated::AmxHead(view, tiles, scratch, run);
}

#ifndef ATTN_HAVE_AMX_TILES
void AmxViewHardware(const internal::HeadView&, const Tiles&) {
  // dispatch/dot_path.cc offers the hardware path only on AVX3.
  HWY_ABORT("attn: the AMX layer is not compiled for target %s", hwy::TargetName(HWY_TARGET));
}
void AmxHeadsHardware(const internal::HeadView&, const Tiles&, const internal::AmxRun&) {
  HWY_ABORT("attn: the AMX layer is not compiled for target %s", hwy::TargetName(HWY_TARGET));
}
#endif  // else defined in the AMX region below

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#ifdef ATTN_HAVE_AMX_TILES
// The hardware copy, in the amx-tile/amx-bf16 region of amx-inl.h.
ATTN_BEGIN_AMX
namespace attn {
namespace HWY_NAMESPACE {
namespace hardware {
using Amx = HardwareAmx;
#define ATTN_AMX_LAYER_NAME "hardware"
#include "kernels/amx/head-body.h"  // NOLINT: included per layer
#undef ATTN_AMX_LAYER_NAME
}  // namespace hardware

void AmxViewHardware(const internal::HeadView& view, const Tiles& tiles) {
  if (!AmxTakesView(view)) return internal::Bf16DotTarget(internal::PairDotLayer::kAvx512Bf16).run_view(view, tiles);
  thread_local AmxScratch scratch;
  hardware::AmxHead(view, tiles, scratch);
}
void AmxHeadsHardware(const internal::HeadView& view, const Tiles& tiles,
                        const internal::AmxRun& run) {
  thread_local AmxScratch scratch;
  hardware::AmxHead(view, tiles, scratch, run);
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_POP_ATTRIBUTES
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

internal::ParallelTarget AmxTargetImpl(bool hardware) {
  // Work items of whole 32-row query groups.
  return internal::ParallelTarget{int(kAmxGroupRows),
                                  hardware ? &AmxViewHardware : &AmxViewEmulated};
}

void AmxHeadsImpl(const Problem& p, const internal::RunConfig& config, bool hardware,
                    const internal::AmxRun& run) {
  const internal::HeadViews views(p, config);
  for (int64_t i = 0; i < views.size(); ++i) {
    if (hardware) {
      AmxHeadsHardware(views[i], config.tiles, run);
    } else {
      AmxHeadsEmulated(views[i], config.tiles, run);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(AmxTargetImpl);
HWY_EXPORT(AmxHeadsImpl);

namespace internal {
ParallelTarget AmxTarget(bool hardware) { return HWY_DYNAMIC_DISPATCH(AmxTargetImpl)(hardware); }

void AmxStreamingAttention(const Problem& p, const RunConfig& config, bool hardware) {
  const ParallelTarget target = AmxTarget(hardware);
  const HeadViews views(p, config);
  for (int64_t i = 0; i < views.size(); ++i) target.run_view(views[i], config.tiles);
}

void AmxHeads(const Problem& p, const RunConfig& config, bool hardware, const AmxRun& run) {
  HWY_DYNAMIC_DISPATCH(AmxHeadsImpl)(p, config, hardware, run);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
