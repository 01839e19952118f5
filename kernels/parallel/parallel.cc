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
//
// The OpenMP regions live here, in ordinary code, not in Highway's
// per-target code: clang outlines a region into a function of its own that
// does not inherit the target("avx2,...") attribute of the function around
// it, and then fails to compile the SIMD code inlined into it ("Cannot
// select: X86ISD::VRNDSCALE"). The per-view function is the streaming
// kernel's (StreamingTarget), looked up once per call (one dynamic
// dispatch), before the parallel loop, and called per work item.
#include <omp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <vector>

#include "kernels/common/merge.h"
#include "kernels/kernel.h"

namespace attn {
namespace internal {
namespace {

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

// Runs body() inside an OpenMP region, which no exception may leave: the
// first one any thread throws is kept in *error for the caller to rethrow.
template <class Body>
void KeepFirstException(std::exception_ptr* error, const Body& body) {
  try {
    body();
  } catch (...) {
#pragma omp critical
    if (!*error) *error = std::current_exception();
  }
}

}  // namespace

void ParallelAttention(const Problem& p, const RunConfig& config) {
  // One dispatch per call: every work item runs the same target's code.
  ParallelAttentionWith(StreamingTarget(), p, config);
}

void ParallelAttentionWith(const ParallelTarget& target, const Problem& p,
                           const RunConfig& config) {
  const int64_t P = target.panel_width;
  const int64_t q_block = std::max<int64_t>(P, (config.tiles.q_block + P - 1) / P * P);
  const HeadViews views(p, config);
  const int64_t q_blocks = (views.rows() + q_block - 1) / q_block;
  const int64_t items = views.size() * q_blocks;
  const int splits = std::max(1, config.tiles.kv_splits);
  // No more threads than units of work: a thread with none would still
  // join every barrier. With one unit (or one thread) the region runs on the
  // calling thread alone (`if` clause), with no wake-up of the others.
  const int64_t units = items * splits;
  const int threads = omp_in_parallel()
                          ? 1
                          : int(std::clamp<int64_t>(units, 1, std::max(1, config.threads)));
  const int64_t dv = p.ValueDim();

  // The item's rows, as a view of its head.
  auto item_view = [&](int64_t item) {
    const int64_t q0 = (item % q_blocks) * q_block;
    return views[item / q_blocks].Rows(q0, std::min(views.rows(), q0 + q_block));
  };
  std::exception_ptr error;  // the first exception of any thread (KeepFirstException)

  if (splits == 1) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int64_t item = 0; item < items; ++item) {
      KeepFirstException(&error, [&] { target.run_view(item_view(item), config.tiles); });
    }
    if (error) std::rethrow_exception(error);
    return;
  }

  // Split-KV: partial results per (item, split), then a merge per item.
  const int64_t part_out = q_block * dv;
  std::vector<float> partial_out(PartialCount(items * splits, part_out));
  std::vector<float> partial_lse(PartialCount(items * splits, q_block));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t unit = 0; unit < items * splits; ++unit) {
      KeepFirstException(&error, [&] {
        const int64_t item = unit / splits, split = unit % splits;
        HeadView view = item_view(item);
        // Keys visible to the item's rows (from its first row's window
        // start to its last row's limit); split those evenly.
        const int64_t key_begin = view.KeyBegin(0), key_end = view.VisibleEnd(view.tq - 1);
        const int64_t span = std::max<int64_t>(0, key_end - key_begin);
        const int64_t k0 = key_begin + span * split / splits;
        const int64_t k1 = key_begin + span * (split + 1) / splits;
        HeadView part = view.Keys(k0, k1);
        // The sink is one virtual key: split 0 alone carries it (even when
        // several splits start at the same key), so the merge counts it once.
        if (split > 0) {
          part.sink = -std::numeric_limits<float>::infinity();
          part.row_sinks = nullptr;
        }
        part.out = &partial_out[size_t(unit * part_out)];
        part.out_type = DType::kF32;  // partials stay float32 until merged
        part.out_stride = dv;
        part.lse = &partial_lse[size_t(unit * q_block)];
        part.lse_stride = 1;
        target.run_view(part, config.tiles);
      });
    }
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      if (error) continue;
      const HeadView view = item_view(item);
      MergePartials(view.tq, dv, splits, &partial_out[size_t(item * splits * part_out)], part_out,
                    &partial_lse[size_t(item * splits * q_block)], q_block, view.out,
                    view.out_type, view.out_stride, view.lse, view.lse_stride);
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace internal
}  // namespace attn
