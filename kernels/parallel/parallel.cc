// Parallel kernel: the streaming kernel's per-head code spread over OpenMP
// threads.
//
// Work items are (head view, query block) pairs (kernel.h: HeadViews),
// scheduled dynamically (causal blocks differ in cost). When there are fewer items than threads
// (decode: one query, few heads) each item's visible key range is also split
// into tiles.kv_splits parts; every part runs the streaming kernel on its
// keys into a partial (out, lse) buffer, and the parts are merged through
// their log-sum-exp (flash-decoding), so all threads stay busy even for one
// head and one query. Memory: one StreamingScratch per thread, plus
// items·splits·q_block·(dv + 1) floats of partials when splitting.
// Called from inside the caller's own OpenMP parallel region it runs on the
// calling thread alone instead of oversubscribing.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/parallel/parallel.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "hwy/highway.h"
#include "kernels/common/merge.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/parallel/parallel.h"
#include "kernels/streaming/streaming-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// units * per_unit floats, or std::bad_alloc (reported as attn::Error
// "memory") when that count does not fit: never a wrapped size.
size_t PartialCount(int64_t units, int64_t per_unit) {
  int64_t count;
  if (__builtin_mul_overflow(units, per_unit, &count) ||
      uint64_t(count) > std::vector<float>().max_size()) {
    throw std::bad_alloc();
  }
  return size_t(count);
}

void ParallelAttentionImpl(const Problem& p, const internal::RunConfig& config) {
  const int64_t P = int64_t(PanelWidth());
  const int64_t q_block = std::max<int64_t>(P, (config.tiles.q_block + P - 1) / P * P);
  const internal::HeadViews views(p);
  const int64_t q_blocks = (views.rows() + q_block - 1) / q_block;
  const int64_t items = views.size() * q_blocks;
  const int splits = std::max(1, config.tiles.kv_splits);
  const int threads = omp_in_parallel() ? 1 : std::max(1, config.threads);
  const int64_t dv = p.ValueDim();

  // The item's rows, as a view of its head.
  auto item_view = [&](int64_t item) {
    const int64_t q0 = (item % q_blocks) * q_block;
    return views[item / q_blocks].Rows(q0, std::min(views.rows(), q0 + q_block));
  };
  // Exceptions must not escape an OpenMP region: keep the first, rethrow.
  std::exception_ptr error;

  if (splits == 1) {
#pragma omp parallel num_threads(threads)
    {
      thread_local StreamingScratch scratch;  // per thread, across calls
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < items; ++item) {
        try {
          StreamingHead(item_view(item), config.tiles, scratch);
        } catch (...) {
#pragma omp critical
          if (!error) error = std::current_exception();
        }
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }

  // Split-KV: partial results per (item, split), then a merge per item.
  const int64_t part_out = q_block * dv;
  std::vector<float> partial_out(PartialCount(items * splits, part_out));
  std::vector<float> partial_lse(PartialCount(items * splits, q_block));
#pragma omp parallel num_threads(threads)
  {
    thread_local StreamingScratch scratch;  // per thread, across calls
#pragma omp for schedule(dynamic, 1)
    for (int64_t unit = 0; unit < items * splits; ++unit) {
      try {
        const int64_t item = unit / splits, split = unit % splits;
        internal::HeadView view = item_view(item);
        // Keys visible to the item's last row; split those evenly.
        const int64_t key_end =
            std::min(view.tk, std::max<int64_t>(0, view.tq - 1 + view.causal_offset + 1));
        const int64_t k0 = key_end * split / splits, k1 = key_end * (split + 1) / splits;
        internal::HeadView part = view.Keys(k0, k1);
        part.out = &partial_out[size_t(unit * part_out)];
        part.out_stride = dv;
        part.lse = &partial_lse[size_t(unit * q_block)];
        part.lse_stride = 1;
        StreamingHead(part, config.tiles, scratch);
      } catch (...) {
#pragma omp critical
        if (!error) error = std::current_exception();
      }
    }
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      if (error) continue;
      const internal::HeadView view = item_view(item);
      internal::MergePartials(view.tq, dv, splits, &partial_out[size_t(item * splits * part_out)],
                              part_out, &partial_lse[size_t(item * splits * q_block)], q_block,
                              view.out, view.out_stride, view.lse, view.lse_stride);
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(ParallelAttentionImpl);
namespace internal {
void ParallelAttention(const Problem& p, const RunConfig& config) {
  HWY_DYNAMIC_DISPATCH(ParallelAttentionImpl)(p, config);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
