// The lookup key of a call in a tuning table, and the shape bucketing that
// finds the nearest tuned shape (dispatch/shape_key.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace attn::internal {

// The lookup key of a call. `causal` is true when some visible key is masked
// for some query: bottom-right causal with q_len == 1 masks nothing, so it
// shares the non-causal entries (which is what decode needs).
// kv_type is K's element type: a bf16 / f16 KV cache halves the bytes decode
// reads and adds the panel kernels' tile widening, so it is tuned apart
// (a tuning file without the field is float32). q_type is Q's: with Q, K
// and V all bf16 the bf16 dot-product paths apply (attn.h), which a table
// tunes apart as well (absent: float32). `window` is the span of a sliding
// window (WindowSpan): a windowed call reads O(T·W) keys, not O(T²), so
// its best tiles and kernel are not those of the full shape, and a table
// keeps windowed entries apart (a tuning file without the field: 0, none).
struct ShapeKey {
  int64_t q_len = 1, kv_len = 1, head_dim = 1;
  bool causal = false;
  int threads = 1;
  DType kv_type = DType::kF32;
  DType q_type = DType::kF32;
  int64_t window = 0;
};
ShapeKey MakeShapeKey(int64_t q_len, int64_t kv_len, int64_t head_dim, Causal causal, int threads,
                      DType kv_type = DType::kF32, DType q_type = DType::kF32,
                      int64_t window = 0);

// The most keys one query row's sliding window spans (attn.h Window):
// left + 1 + right, where a causal mask bounds the right side at the
// diagonal (right = 0) and an unbounded right side without one reaches
// every key. 0 when the window hides no key a row would otherwise read
// (no window, a span of at least kv_len) or when its left side is unbounded:
// such a window reads as many keys as its shape without it (causal-like),
// and shares that shape's entries.
int64_t WindowSpan(const Window& window, Causal causal, int64_t kv_len);

// "T_q=.. T_k=.. d=..[ causal] threads=..[ kv=bf16][ q=bf16][ window=W]", for
// messages.
std::string ShapeText(const ShapeKey& shape);
bool SameShape(const ShapeKey& a, const ShapeKey& b);

struct TuningEntry;
// Shape bucketing. Among entries with the same threads, the same causal
// flag, the same kv_type and q_type and the same kind (decode q_len == 1, or
// not), windowed (window > 0) or not, an entry is in the key's bucket when
// T_q and T_k are each within a factor of 4 of the key's, d within a factor
// of 2 and a window span within a factor of 4. The nearest by
//   |log2(T_q'/T_q)| + |log2(T_k'/T_k)| + 2·|log2(d'/d)| + |log2(W'/W)|
// wins (d weighs double: it changes the kernels' register and cache use more
// than T does); ties go to the entry listed first. An identical shape is an
// exact match. The factor-4 reach in T makes a grid with T spaced by 4
// (1..16k) cover every T from 1 to 64k.
struct BucketMatch {
  int index = -1;        // into the entries; -1: no entry in the bucket
  bool exact = false;
  double distance = 0.0;
};
BucketMatch FindBucket(const std::vector<TuningEntry>& entries, const ShapeKey& key);

}  // namespace attn::internal
