// The state of a decode (narrow) view's rows, shared by every decode walk
// (kernels/streaming, kernels/bf16dot) and the AMX kernel's rows: the
// per-thread scratch (scaled query rows, two score buffers, unnormalised
// output rows), each row's running softmax state, the online-softmax step
// over a tile of scores, and the finish that writes a row's output and
// lse. Memory: rows·(d + 2·kv_block + dv) floats of scratch.
#if defined(ATTN_KERNELS_COMMON_NARROW_STATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_NARROW_STATE_INL_H_
#undef ATTN_KERNELS_COMMON_NARROW_STATE_INL_H_
#else
#define ATTN_KERNELS_COMMON_NARROW_STATE_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attn/attn.h"  // DType
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/common/convert.h"           // StoreElement
#include "kernels/common/microkernels-inl.h"  // DF, VF, PanelWidth
#include "kernels/common/scratch.h"           // GrowScratch
#include "kernels/common/softmax-inl.h"       // ExpNonPositive, MarkHidden, FinishRow
#include "kernels/kernel.h"                   // HeadView

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Views of at most NarrowMaxRows() query rows take the narrow path: half a
// panel, up to which it decoded from DRAM faster than the panels
// (docs/performance.md); at 12 of 16 rows the panel is 3/4 full and does
// about the FMA work of three 4-row groups.
HWY_INLINE int64_t NarrowMaxRows() { return int64_t(PanelWidth()) / 2; }

// Rows sharing each loaded K vector and V vector in the micro-kernels
// (R·KB and R·CV accumulators fit 16 registers for R <= 4).
constexpr int64_t kNarrowGroupRows = 4;

// At most this many views take their tiles in turn (NarrowHeads): a round
// of tiles is then at most 8 x (16 KiB of V + its K), 256-384 KiB, within
// the L2 of every CPU attn is tuned on (512 KiB a core on Zen 3, 1 MiB on
// Zen 4 / Zen 5, 2 MiB on Sapphire Rapids), so the rows one view leaves in
// L2 are still there for the next.
constexpr int64_t kNarrowMaxInterleavedViews = 8;

// Running softmax state of one row.
struct NarrowRowStats {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  bool nan = false;
};

// Keys [at, at + keys) of a tile, contiguous in memory from k and v; K rows
// contiguous from k for k_ahead keys (>= keys: the prefetch may run past
// the tile, never past the run). For q8_0 K, when the run ends within the
// view, next_k is the next run's first K row and next_keys its length
// (prefetched while this run is scored), else null; other K types are
// requested ahead across runs by KeyPrefetcher, so their chunks leave it
// null and skip that second RunAt per run.
struct NarrowChunk {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t at = 0, keys = 0, k_ahead = 0;
  const void* next_k = nullptr;
  int64_t next_keys = 0;
};

// Per-thread buffers of the narrow path.
class NarrowScratch {
 public:
  void Reserve(int64_t rows, int64_t d, int64_t kv_block, int64_t dv) {
    const int64_t N = int64_t(hn::Lanes(DF()));
    q_stride_ = RoundUp(d, N);
    s_stride_ = RoundUp(kv_block, N);
    o_stride_ = RoundUp(dv, N);
    internal::GrowScratch(q_, q_size_, size_t(rows * q_stride_));
    // Two score buffers: the pipelined walk (NarrowPipelinedTile) scores
    // one tile while it mixes the previous one.
    rows_ = rows;
    score_buffer_ = 0;
    internal::GrowScratch(s_, s_size_, size_t(2 * rows * s_stride_));
    internal::GrowScratch(o_, o_size_, size_t(rows * o_stride_));
    if (stats_.size() < size_t(rows)) stats_.resize(size_t(rows));
  }
  float* q(int64_t r) const { return q_.get() + r * q_stride_; }  // scaled query row
  // Scores / weights of row r: entry j is the tile's key j + score_at.
  float* s(int64_t r) const {
    return s_.get() + (score_buffer_ * rows_ + r) * s_stride_ + score_at_;
  }
  // Which of the two score buffers s() gives (0 or 1).
  void SetScoreBuffer(int64_t buffer) { score_buffer_ = buffer; }
  // The score and mix passes index their keys from 0; a tile made of
  // several runs of keys (KeyRun: a paged cache's pages) runs them once per
  // run, with the run's first key at tile position `at`.
  void SetScoreAt(int64_t at) { score_at_ = at; }
  float* o(int64_t r) const { return o_.get() + r * o_stride_; }  // unnormalised output
  NarrowRowStats* stats() { return stats_.data(); }
  std::vector<NarrowChunk>& chunks() { return chunks_; }

 private:
  static int64_t RoundUp(int64_t x, int64_t n) { return (std::max<int64_t>(x, 1) + n - 1) / n * n; }
  hwy::AlignedFreeUniquePtr<float[]> q_, s_, o_;
  size_t q_size_ = 0, s_size_ = 0, o_size_ = 0;
  int64_t q_stride_ = 0, s_stride_ = 0, o_stride_ = 0, score_at_ = 0;
  int64_t rows_ = 0, score_buffer_ = 0;
  std::vector<NarrowRowStats> stats_;
  std::vector<NarrowChunk> chunks_;
};

// Online-softmax step for one row's tile of scores (keys valid entries,
// padded with -inf to whole vectors): weights exp(s - max) in place, and the
// row's accumulator rescaled only when its max grew.
HWY_INLINE void NarrowSoftmaxRow(float* HWY_RESTRICT s, int64_t keys, NarrowRowStats& stats,
                                 float* HWY_RESTRICT o, int64_t dv) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t padded = (keys + N - 1) / N * N;
  for (int64_t j = keys; j < padded; ++j) s[j] = neg_inf;
  VF m = hn::Set(df, neg_inf);
  for (int64_t j = 0; j < padded; j += N) m = hn::Max(m, hn::Load(df, s + j));
  // A NaN score may or may not win the max; either way x below is NaN in
  // that lane (or in all), the flag is set and the row comes out NaN.
  const float tile_max = hn::GetLane(hn::MaxOfLanes(df, m));
  const float new_max = std::max(stats.max, tile_max);
  const float base = new_max == neg_inf ? 0.0f : new_max;
  const VF vbase = hn::Set(df, base);
  VF sum = hn::Zero(df);
  auto nan = hn::FirstN(df, 0);
  for (int64_t j = 0; j < padded; j += N) {
    const VF score = hn::Load(df, s + j);
    const VF x = hn::Sub(score, vbase);
    nan = hn::Or(nan, hn::IsNaN(x));
    // A key the row cannot see gets -0 and is never read in the mix.
    const VF e = MarkHidden(score, ExpNonPositive(x));
    hn::Store(e, df, s + j);
    sum = hn::Add(sum, e);
  }
  if (!hn::AllFalse(df, nan)) stats.nan = true;
  if (new_max > stats.max && stats.sum > 0.0f) {
    const float alpha = std::exp(stats.max - base);
    stats.sum *= alpha;
    for (int64_t c = 0; c < dv; ++c) o[c] *= alpha;
  }
  stats.sum += hn::GetLane(hn::SumOfLanes(df, sum));
  stats.max = new_max;
}

// Row r of the view's output and lse from its unnormalised output o and
// its softmax state (fully masked rows 0 / -inf, NaN rows NaN / NaN).
HWY_INLINE void FinishNarrowRow(const internal::HeadView& h, int64_t r,
                                const float* HWY_RESTRICT o, const NarrowRowStats& stats) {
  void* HWY_RESTRICT out = h.OutRow(r);
  const RowFinish f = FinishRow(stats.max, stats.sum, stats.nan, h.Sink(r));
  if (h.out_type == DType::kF32) {
    float* HWY_RESTRICT out32 = static_cast<float*>(out);
    for (int64_t c = 0; c < h.dv; ++c) out32[c] = f.empty ? 0.0f : o[c] * f.inv;
  } else {
    for (int64_t c = 0; c < h.dv; ++c) {
      internal::StoreElement(out, h.out_type, c, f.empty ? 0.0f : o[c] * f.inv);
    }
  }
  if (h.lse) h.lse[r * h.lse_stride] = f.lse;
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
