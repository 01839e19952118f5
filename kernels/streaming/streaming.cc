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

// Whether narrow view b reads the same token rows as narrow view a: the
// same keys, with b's K and V rows starting within a's (kv heads of one
// sequence in a token-major layout, b's after a's), so that the two take
// their tiles in turn (kernels/decode/heads.cc NarrowHeads) and read those rows from
// memory once.
bool SharesTokenRows(const internal::HeadView& a, const internal::HeadView& b) {
  if (a.tq > NarrowMaxRows() || b.tq > NarrowMaxRows()) return false;
  if (a.tk != b.tk || a.spans != b.spans || a.span_count != b.span_count ||
      a.span_shift != b.span_shift || a.k_type != b.k_type || a.v_type != b.v_type ||
      a.k_stride != b.k_stride || a.v_stride != b.v_stride) {
    return false;
  }
  const int64_t k_row = internal::BytesOf(a.k_type, a.k_stride);
  const int64_t v_row = internal::BytesOf(a.v_type, a.v_stride);
  const int64_t k_gap = static_cast<const char*>(b.k) - static_cast<const char*>(a.k);
  const int64_t v_gap = static_cast<const char*>(b.v) - static_cast<const char*>(a.v);
  return 0 <= k_gap && k_gap < k_row && 0 <= v_gap && v_gap < v_row;
}

// Views 0 .. count - 1 (view(i) makes view i) in order; runs of up to
// kNarrowMaxInterleavedViews narrow views sharing token rows with the run's
// first go through NarrowHeads, the others one at a time.
template <class MakeView>
void RunViews(int64_t count, const MakeView& view, const Tiles& tiles,
              StreamingScratch& scratch) {
  internal::HeadView run[kNarrowMaxInterleavedViews];
  NarrowScratch* scratches[kNarrowMaxInterleavedViews];
  // The view that ends a run starts the next one (built once: a span view
  // is made per call).
  internal::HeadView next;
  bool have_next = false;
  for (int64_t i = 0; i < count;) {
    run[0] = have_next ? next : view(i);
    have_next = false;
    int64_t n = 1;
    while (n < kNarrowMaxInterleavedViews && i + n < count) {
      next = view(i + n);
      if (!SharesTokenRows(run[0], next)) {
        have_next = true;
        break;
      }
      run[n++] = next;
    }
    if (n == 1) {
      StreamingHead(run[0], tiles, scratch);
    } else {
      for (int64_t j = 0; j < n; ++j) scratches[j] = &scratch.narrow(j);
      NarrowHeads(run, n, tiles, scratches);
    }
    i += n;
  }
}

void StreamingAttentionImpl(const Problem& p, const internal::RunConfig& config) {
  // Kept per thread across calls: short problems (T = 128 is ~80 us) would
  // otherwise spend a visible share in allocation. O(tile) memory per thread.
  thread_local StreamingScratch scratch;
  const internal::HeadViews views(p, config);
  RunViews(views.size(), [&](int64_t i) { return views[i]; }, config.tiles, scratch);
}

// The same on a problem of one batch entry whose keys are `spans` (kernel.h
// KeySpan, the rows of kv head 0; p.k and p.v are not read, but their head
// strides place the other kv heads' rows): one dispatch for the whole key
// list, however many pages it has.
void StreamingSpansAttentionImpl(const Problem& p, const internal::KeySpan* spans,
                                 int64_t span_count, const internal::RunConfig& config) {
  thread_local StreamingScratch scratch;
  const internal::HeadViews views(p, config);
  RunViews(
      views.size(),
      [&](int64_t i) { return internal::WithSpans(views[i], p, spans, span_count); },
      config.tiles, scratch);
}

// One view on the calling thread, for the parallel kernel's work items.
void StreamingViewImpl(const internal::HeadView& view, const Tiles& tiles) {
  thread_local StreamingScratch scratch;  // per thread (and target), across calls
  StreamingHead(view, tiles, scratch);
}
internal::ParallelTarget StreamingTargetImpl() {
  return internal::ParallelTarget{int(PanelWidth()), &StreamingViewImpl};
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(StreamingAttentionImpl);
HWY_EXPORT(StreamingSpansAttentionImpl);
HWY_EXPORT(StreamingTargetImpl);

namespace internal {
ParallelTarget StreamingTarget() { return HWY_DYNAMIC_DISPATCH(StreamingTargetImpl)(); }
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
