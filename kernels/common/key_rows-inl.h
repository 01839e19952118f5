// Walking a view's K and V rows in key order, dense or paged: the cursor
// across the view's runs (a paged cache's pages, HeadView::RunAt), and the
// policy that requests rows into the cache ahead of the passes that read
// them (how far, which lines of a row). Shared by the decode walks.
#if defined(ATTN_KERNELS_COMMON_KEY_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_KEY_ROWS_INL_H_
#undef ATTN_KERNELS_COMMON_KEY_ROWS_INL_H_
#else
#define ATTN_KERNELS_COMMON_KEY_ROWS_INL_H_
#endif

#include <stdint.h>

#include <algorithm>

#include "attn/attn.h"  // DType
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common/convert.h"  // BytesOf
#include "kernels/kernel.h"          // HeadView, KeyRun

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Requests V rows [j, j + count) into the cache. The mix reads each V row in
// column chunks at the row stride; for V not in cache that access pattern
// waits on memory once per row (decode with K/V in DRAM was slower without
// this: docs/performance.md), while the score pass reads K sequentially
// and the hardware prefetcher keeps up with it.
// Requests the cache lines of one row of row_bytes bytes: every 64 bytes,
// and its last byte, whose line a row not aligned to 64 bytes also touches.
HWY_INLINE void PrefetchRowLines(const char* HWY_RESTRICT row, int64_t row_bytes) {
  for (int64_t byte = 0; byte < row_bytes; byte += 64) hwy::Prefetch(row + byte);
  hwy::Prefetch(row + row_bytes - 1);
}

// Rows are `stride` elements of `type` apart, `cols` elements long.
HWY_INLINE void PrefetchRows(const void* HWY_RESTRICT rows, DType type, int64_t stride,
                             int64_t count, int64_t cols) {
  const char* HWY_RESTRICT base = static_cast<const char*>(rows);
  const int64_t row_step = internal::BytesOf(type, stride), row_bytes = internal::BytesOf(type, cols);
  for (int64_t j = 0; j < count; ++j) PrefetchRowLines(base + j * row_step, row_bytes);
}

// K rows are requested this many keys ahead of the score pass (into the
// next tile; never past the view's last key): 16 keys beat both the
// hardware prefetcher alone and farther distances (docs/performance.md).
// Chosen for float32 K: the distance is in bytes ahead (16 keys of float32
// rows), so a 16-bit K is requested 32 keys ahead, a q8_0 K 60
// (KeyPrefetchDistance; any whole number of q8_0 blocks).
constexpr int64_t kKeyPrefetchDistance = 16;
HWY_INLINE int64_t KeyPrefetchDistance(DType k_type) {
  return kKeyPrefetchDistance * internal::BytesOf(DType::kF32, 32) / internal::BytesOf(k_type, 32);
}

// Requests K rows KeyPrefetchDistance keys ahead of the score pass, wherever
// those keys are: in the run being scored or in a later one (a page further
// on: with 16-token pages of a 16-bit K, 32 keys ahead is two pages on).
// Requesting only the next run's first keys at the start of each run, as
// the q8_0 path still does, left paged decode (kv heads side by side)
// further below the contiguous layout's rate (docs/performance.md;
// docs/serving.md).
class KeyPrefetcher {
 public:
  KeyPrefetcher(const internal::HeadView& h, int64_t key_end)
      : h_(h), key_end_(key_end), ahead_(KeyPrefetchDistance(h.k_type)) {}
  // K rows of view keys [key + ahead, key + ahead + count), of the run
  // holding the first of them.
  HWY_INLINE void Request(int64_t key, int64_t count) {
    const int64_t first = key + ahead_;
    if (first + count > key_end_) return;
    const internal::KeyRun run = h_.RunAt(first, &hint_);
    PrefetchRows(run.k, h_.k_type, h_.k_stride, std::min(count, run.keys), h_.d);
  }

 private:
  const internal::HeadView& h_;
  int64_t key_end_, ahead_, hint_ = 0;
};

// The rows of a view's keys in increasing order, one a step, K's or V's,
// across the view's runs (a paged cache's pages: RunAt) or along its stride.
class KeyRowCursor {
 public:
  KeyRowCursor(const internal::HeadView& h, bool values) : h_(&h), values_(values) {
    step_ = values ? internal::BytesOf(h.v_type, h.v_stride)
                   : internal::BytesOf(h.k_type, h.k_stride);
  }
  void Seek(int64_t key) {
    key_ = key;
    left_ = 0;
  }
  int64_t key() const { return key_; }
  // Whether keys key() .. key() + n - 1 are contiguous at the row stride.
  HWY_INLINE bool Contiguous(int64_t n) {
    Load();
    return left_ >= n;
  }
  // The row of key(); then key() moves on n keys (n <= 1, or Contiguous(n)).
  HWY_INLINE const char* Next(int64_t n = 1) {
    Load();
    const char* row = row_;
    row_ += n * step_;
    left_ -= n;
    key_ += n;
    return row;
  }

 private:
  HWY_INLINE void Load() {
    if (left_ > 0) return;
    const internal::KeyRun run = h_->RunAt(key_, &hint_);
    row_ = static_cast<const char*>(values_ ? run.v : run.k);
    left_ = run.keys;
  }

  const internal::HeadView* h_;
  bool values_;
  const char* row_ = nullptr;
  int64_t step_ = 0, key_ = 0, left_ = 0, hint_ = 0;
};

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
