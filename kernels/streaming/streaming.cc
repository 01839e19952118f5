// Streaming kernel entry point: one Highway dispatch per call, then every
// head runs in the chosen target's code (see streaming-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/streaming/streaming.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/kernel.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/streaming/streaming-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

void StreamingAttentionImpl(const Problem& p, const internal::RunConfig& config) {
  // Kept per thread across calls: short problems (T = 128 is ~80 us) would
  // otherwise spend a visible share in allocation. O(tile) memory per thread.
  thread_local StreamingScratch scratch;
  const internal::HeadViews views(p);
  for (int64_t i = 0; i < views.size(); ++i) StreamingHead(views[i], config.tiles, scratch);
}

// The same on a problem of one batch entry and one kv head whose keys are
// `spans` (kernel.h KeySpan; p.k and p.v are not read): one dispatch for
// the whole key list, however many pages it has.
void StreamingSpansAttentionImpl(const Problem& p, const internal::KeySpan* spans,
                                 int64_t span_count, const internal::RunConfig& config) {
  thread_local StreamingScratch scratch;
  const internal::HeadViews views(p);
  for (int64_t i = 0; i < views.size(); ++i) {
    internal::HeadView view = views[i];
    view.spans = spans;
    view.span_count = span_count;
    StreamingHead(view, config.tiles, scratch);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(StreamingAttentionImpl);
HWY_EXPORT(StreamingSpansAttentionImpl);

namespace internal {
void StreamingAttention(const Problem& p, const RunConfig& config) {
  HWY_DYNAMIC_DISPATCH(StreamingAttentionImpl)(p, config);
}
void StreamingSpansAttention(const Problem& p, const KeySpan* spans, int64_t span_count,
                             const RunConfig& config) {
  HWY_DYNAMIC_DISPATCH(StreamingSpansAttentionImpl)(p, spans, span_count, config);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
