// The SIMD kernels' panel width on the current target, for the tile rule
// (dispatch/tiles.cc) and the tests: one Highway dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/common/panel_width.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
int PanelWidthImpl() { return int(PanelWidth()); }
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(PanelWidthImpl);
namespace internal {
int PanelWidth() { return HWY_DYNAMIC_DISPATCH(PanelWidthImpl)(); }
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
