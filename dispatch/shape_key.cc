// Lookup keys and the bucketing of shapes (see dispatch/shape_key.h).
#include "dispatch/shape_key.h"

#include <algorithm>
#include <cmath>

#include "dispatch/tuning_file.h"

namespace attn::internal {

ShapeKey MakeShapeKey(int64_t q_len, int64_t kv_len, int64_t head_dim, Causal causal,
                      int threads, DType kv_type, DType q_type, int64_t window) {
  ShapeKey key;
  key.window = window;
  key.kv_type = kv_type;
  key.q_type = q_type;
  key.q_len = q_len;
  key.kv_len = kv_len;
  key.head_dim = head_dim;
  key.threads = threads;
  key.causal = causal != Causal::kNone && !(causal == Causal::kBottomRight && q_len == 1);
  return key;
}

int64_t WindowSpan(const Window& window, Causal causal, int64_t kv_len) {
  if (window.left < 0 || window.left >= kv_len) return 0;
  // A causal mask hides every key right of the diagonal.
  const int64_t right = causal != Causal::kNone ? 0 : window.right;
  if (right < 0 || right >= kv_len) return 0;  // reaches every key on the right
  const int64_t span = window.left + 1 + right;
  return span >= kv_len ? 0 : span;
}

std::string ShapeText(const ShapeKey& s) {
  return "T_q=" + std::to_string(s.q_len) + " T_k=" + std::to_string(s.kv_len) +
         " d=" + std::to_string(s.head_dim) + (s.causal ? " causal" : "") +
         " threads=" + std::to_string(s.threads) +
         (s.kv_type != DType::kF32 ? std::string(" kv=") + DTypeName(s.kv_type) : "") +
         (s.q_type != DType::kF32 ? std::string(" q=") + DTypeName(s.q_type) : "") +
         (s.window > 0 ? " window=" + std::to_string(s.window) : "");
}

bool SameShape(const ShapeKey& a, const ShapeKey& b) {
  return a.q_len == b.q_len && a.kv_len == b.kv_len && a.head_dim == b.head_dim &&
         a.causal == b.causal && a.threads == b.threads && a.kv_type == b.kv_type &&
         a.q_type == b.q_type && a.window == b.window;
}

BucketMatch FindBucket(const std::vector<TuningEntry>& entries, const ShapeKey& key) {
  auto log_ratio = [](int64_t a, int64_t b) {
    return std::fabs(std::log2(double(std::max<int64_t>(a, 1)) / double(std::max<int64_t>(b, 1))));
  };
  BucketMatch best;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ShapeKey& s = entries[i].shape;
    if (SameShape(s, key)) return BucketMatch{int(i), true, 0.0};
    if (s.threads != key.threads || s.causal != key.causal || s.kv_type != key.kv_type ||
        s.q_type != key.q_type) {
      continue;
    }
    if ((s.q_len == 1) != (key.q_len == 1)) continue;
    if ((s.window > 0) != (key.window > 0)) continue;
    const double dq = log_ratio(s.q_len, key.q_len);
    const double dk = log_ratio(s.kv_len, key.kv_len);
    const double dd = log_ratio(s.head_dim, key.head_dim);
    const double dw = key.window > 0 ? log_ratio(s.window, key.window) : 0.0;
    if (dq > 2.0 || dk > 2.0 || dd > 1.0 || dw > 2.0) continue;
    const double distance = dq + dk + 2.0 * dd + dw;
    if (best.index < 0 || distance < best.distance) best = BucketMatch{int(i), false, distance};
  }
  return best;
}

}  // namespace attn::internal
