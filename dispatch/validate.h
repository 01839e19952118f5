#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include "attn/attn.h"

namespace attn::internal {

// A value as the error message prints it.
template <typename T>
std::string Str(T value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Throws attn::Error("attn: <field> <why>, got <value>").
[[noreturn]] void Fail(const std::string& field, const std::string& value,
                       const std::string& why);
void RequirePositive(const char* field, int64_t value);

// One strided tensor of up to 4 dims, as validated: its element
// mapping and the byte range it covers. The one checker of strided tensors
// (attention()'s Problem and MergeAttention's MergeProblem).
struct StridedView {
  std::string name;
  const void* data = nullptr;
  int n = 0;
  int64_t extent[4] = {}, stride[4] = {};
  int64_t element_bytes = 4;
  int named_strides = 0;         // strides the caller set (not a row's implicit 1)
  uintptr_t begin = 0, end = 0;  // bytes

  // Same element mapping: same pointer, element size and the same stride in
  // every dim that has more than one index.
  bool SameAs(const StridedView& o) const;
  bool Overlaps(const StridedView& o) const { return begin < o.end && o.begin < end; }
};

// Checks `n` (extent, stride) dims: every stride >= 0 (named name +
// stride_names[i]; the innermost may be the implicit 1 of a contiguous row,
// named nullptr), and that the span in bytes fits in 64 bits.
StridedView CheckStrides(const std::string& name, const void* data, int n, const int64_t* extents,
                         const int64_t* strides, const char* const* stride_names,
                         int64_t element_bytes = 4);
// Fails unless `type` is one of attn::DType's values (field name + ".dtype").
void RequireDType(const std::string& name, DType type);
// A [batch, heads, rows, cols] tensor with contiguous rows (row_stride >=
// cols when rows > 1), or with cols == 0 a [batch, heads, rows] tensor of
// one float per row (lse). `data` must not be null. Elements of
// element_bytes bytes (4: float32; 2: bf16 / f16).
StridedView CheckRowTensor(const std::string& name, const void* data, int64_t batch,
                           int64_t heads, int64_t rows, int64_t cols, int64_t batch_stride,
                           int64_t head_stride, int64_t row_stride, int64_t element_bytes = 4);
// CheckRowTensor for a tensor with a dtype (Q, K, V, O, merge parts).
StridedView CheckTypedTensor(const std::string& name, const ConstTensor& t, int64_t batch,
                             int64_t heads, int64_t rows, int64_t cols);
// Fails when two indices of an output map to one element ("outputs", "rows").
void RequireNoSelfOverlap(const StridedView& v, const char* what);
// Fails when `output` overlaps `input`; with `alias_ok` it may instead be
// exactly the same tensor (in-place accumulation).
void RequireDisjoint(const StridedView& output, const StridedView& input, bool alias_ok);

// Throws attn::Error naming the first invalid field of the problem or the
// options. Reads no tensor data and writes nothing.
void Validate(const Problem& problem);
void ValidateOptions(const Options& options);

}  // namespace attn::internal
