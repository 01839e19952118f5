#include "kernels/kernel.h"

namespace attn::internal {

HeadView HeadView::Rows(int64_t begin, int64_t end) const {
  HeadView view = *this;
  view.q = QRow(begin);
  view.out = OutRow(begin);
  if (lse) view.lse = lse + begin * lse_stride;
  if (mask) view.mask = mask + begin * mask_row_stride;
  view.tq = end - begin;
  // Row i of the sub-view is row begin + i of this view.
  if (causal_offset != kNoCausal) view.causal_offset = causal_offset + begin;
  view.diag_offset = diag_offset + begin;
  if (row_sinks) view.row_sinks = row_sinks + begin;
  return view;
}

HeadView HeadView::Keys(int64_t begin, int64_t end) const {
  HeadView view = *this;
  view.k = KRow(begin);
  view.v = VRow(begin);
  if (mask) view.mask = mask + begin * mask_col_stride;
  view.tk = end - begin;
  // Key j of the sub-view is key begin + j of this view.
  if (causal_offset != kNoCausal) view.causal_offset = causal_offset - begin;
  view.diag_offset = diag_offset - begin;
  view.span_shift = span_shift + begin;
  return view;
}

HeadView MakeHeadView(const Problem& p, int64_t b, int64_t h, int64_t diag_shift) {
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t kv_h = h / group;
  HeadView view;
  view.q_type = p.q.dtype;
  view.k_type = p.k.dtype;
  view.v_type = p.v.dtype;
  view.out_type = p.out.dtype;
  view.q = ElementOffset(p.q.data, p.q.dtype, b * p.q.batch_stride + h * p.q.head_stride);
  view.k = ElementOffset(p.k.data, p.k.dtype, b * p.k.batch_stride + kv_h * p.k.head_stride);
  view.v = ElementOffset(p.v.data, p.v.dtype, b * p.v.batch_stride + kv_h * p.v.head_stride);
  view.out = ElementOffset(p.out.data, p.out.dtype, b * p.out.batch_stride + h * p.out.head_stride);
  view.q_stride = p.q.row_stride;
  view.k_stride = p.k.row_stride;
  view.v_stride = p.v.row_stride;
  view.out_stride = p.out.row_stride;
  if (p.lse.data) {
    view.lse = p.lse.data + b * p.lse.batch_stride + h * p.lse.head_stride;
    view.lse_stride = p.lse.row_stride;
  }
  if (p.mask.data) {
    view.mask = p.mask.data + b * p.mask.batch_stride + h * p.mask.head_stride;
    view.mask_row_stride = p.mask.row_stride;
    view.mask_col_stride = p.mask.col_stride;
  }
  view.tq = p.q_len;
  view.tk = p.kv_len;
  view.d = p.head_dim;
  view.dv = p.ValueDim();
  view.scale = p.Scale();
  switch (p.causal) {
    case Causal::kNone: view.causal_offset = kNoCausal; break;
    case Causal::kBottomRight: view.causal_offset = p.kv_len - p.q_len; break;
    case Causal::kTopLeft: view.causal_offset = 0; break;
  }
  view.diag_offset = (p.causal == Causal::kTopLeft ? 0 : p.kv_len - p.q_len) + diag_shift;
  view.window_left = p.window.left;
  view.window_right = p.window.right;
  view.softcap = p.softcap;
  if (p.alibi_slopes.data) view.alibi_slope = p.alibi_slopes.data[b * p.alibi_slopes.batch_stride + h];
  if (p.sinks.data) view.sink = p.sinks.data[h];
  return view;
}

HeadViews::HeadViews(const Problem& p, const RunConfig& config)
    : problem_(&p), diag_shift_(config.diag_shift), decode_walk_(config.decode_walk) {
  const int64_t group = p.q_heads / p.kv_heads;
  // Top-left causal at T_q = 1 hides keys >= 1 from the query: rows of a
  // group view would need different limits, so only these two qualify.
  // Rows of a group view are heads: sinks go per row (HeadView::row_sinks);
  // per-head ALiBi slopes and a window's limits are per view, so those
  // problems are not grouped.
  grouped_ = p.q_len == 1 && group > 1 &&
             (p.causal == Causal::kNone || p.causal == Causal::kBottomRight) &&
             p.window.left < 0 && p.window.right < 0 && !p.alibi_slopes.data;
  count_ = p.batch * (grouped_ ? p.kv_heads : p.q_heads);
  rows_ = grouped_ ? group : p.q_len;
}

HeadView HeadViews::operator[](int64_t index) const {
  const Problem& p = *problem_;
  if (!grouped_) {
    HeadView view = MakeHeadView(p, index / p.q_heads, index % p.q_heads, diag_shift_);
    view.decode_walk = decode_walk_;
    return view;
  }
  const int64_t b = index / p.kv_heads, kv_h = index % p.kv_heads;
  const int64_t group = p.q_heads / p.kv_heads;
  // Row r of the view is query head kv_h * group + r (its only query row).
  HeadView view = MakeHeadView(p, b, kv_h * group, diag_shift_);
  view.decode_walk = decode_walk_;
  view.tq = group;
  view.q_stride = p.q.head_stride;
  view.out_stride = p.out.head_stride;
  view.lse_stride = p.lse.head_stride;
  view.mask_row_stride = p.mask.head_stride;
  view.causal_offset = kNoCausal;  // T_q = 1, bottom-right: every key visible
  if (p.sinks.data) view.row_sinks = p.sinks.data + kv_h * group;
  return view;
}

int64_t WorkItems(const Problem& problem) { return HeadViews(problem, RunConfig()).size(); }

HeadView WithSpans(HeadView view, const Problem& p, const KeySpan* spans, int64_t span_count) {
  view.spans = spans;
  view.span_count = span_count;
  view.span_k_bytes = static_cast<const char*>(view.k) - static_cast<const char*>(p.k.data);
  view.span_v_bytes = static_cast<const char*>(view.v) - static_cast<const char*>(p.v.data);
  return view;
}

void SpansAttentionWith(const ParallelTarget& target, const Problem& p, const KeySpan* spans,
                        int64_t span_count, const RunConfig& config) {
  const HeadViews views(p, config);
  for (int64_t i = 0; i < views.size(); ++i) {
    target.run_view(WithSpans(views[i], p, spans, span_count), config.tiles);
  }
}

}  // namespace attn::internal
