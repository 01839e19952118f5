#include "dispatch/serving_validate.h"

#include <cmath>

namespace attn::internal {

void CheckServingShape(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                       const std::optional<int64_t>& value_dim, const std::optional<float>& scale) {
  RequirePositive("batch", batch);
  RequirePositive("q_heads", q_heads);
  RequirePositive("kv_heads", kv_heads);
  if (q_heads % kv_heads != 0) {
    Fail("kv_heads", Str(kv_heads), "must divide q_heads (" + Str(q_heads) + ")");
  }
  RequirePositive("head_dim", head_dim);
  if (value_dim) RequirePositive("value_dim", *value_dim);
  if (scale && !std::isfinite(*scale)) Fail("scale", Str(*scale), "must be finite");
}

std::vector<int64_t> CheckOffsets(const char* name, const int32_t* cu, int64_t batch) {
  if (cu == nullptr) Fail(name, "null", "must not be null (batch + 1 int32 offsets)");
  std::vector<int64_t> offsets(size_t(batch) + 1);
  for (int64_t i = 0; i <= batch; ++i) {
    offsets[size_t(i)] = cu[i];
    const std::string field = std::string(name) + "[" + Str(i) + "]";
    if (i == 0 && cu[0] != 0) Fail(field, Str(cu[0]), "must be 0 (offsets start at 0)");
    if (i > 0 && cu[i] < cu[i - 1]) {
      Fail(field, Str(cu[i]),
           "must be >= " + std::string(name) + "[" + Str(i - 1) + "] (" + Str(cu[i - 1]) +
               ") (offsets are non-decreasing)");
    }
  }
  return offsets;
}

StridedView CheckPacked(const std::string& name, const PackedTensor& t, int64_t tokens,
                        int64_t heads, int64_t cols, const char* cols_field) {
  RequireDType(name, t.dtype, cols_field != nullptr);
  if (cols_field) RequireBlockCols(name, t.dtype, cols_field, cols);
  StridedView empty;
  empty.name = name;
  if (tokens == 0) return empty;
  if (t.data == nullptr) Fail(name + ".data", "null", "must not be null");
  static const char* const kNames[3] = {".token_stride", ".head_stride", nullptr};
  const int64_t extents[3] = {tokens, heads, cols};
  const int64_t strides[3] = {t.token_stride, t.head_stride, 1};
  return CheckTypedStrides(name, t.data, 3, extents, strides, kNames, t.dtype);
}

void CheckServingModifiers(int64_t batch, int64_t q_heads, const Window& window, float softcap,
                           const AlibiSlopes& alibi_slopes, const SinkLogits& sinks) {
  Problem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.window = window;
  p.softcap = softcap;
  p.alibi_slopes = alibi_slopes;
  p.sinks = sinks;
  ValidateScoreModifiers(p);
}

StridedView CheckPackedLse(const std::string& name, const PackedLse& lse, int64_t tokens,
                           int64_t heads) {
  StridedView empty;
  empty.name = name;
  if (tokens == 0) return empty;
  static const char* const kNames[2] = {".token_stride", ".head_stride"};
  const int64_t extents[2] = {tokens, heads};
  const int64_t strides[2] = {lse.token_stride, lse.head_stride};
  return CheckStrides(name, lse.data, 2, extents, strides, kNames, 4);
}

}  // namespace attn::internal
