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
  // Storage unit: element_bytes bytes hold block_elements elements (1 for
  // float32 / bf16 / f16; 32 in 34 bytes for q8_0, 18 for q4_0).
  int64_t element_bytes = 4;
  int64_t block_elements = 1;
  int named_strides = 0;         // strides the caller set (not a row's implicit 1)
  uintptr_t begin = 0, end = 0;  // bytes

  // Same element mapping: same pointer, storage unit and the same stride in
  // every dim that has more than one index.
  bool SameAs(const StridedView& o) const;
  bool Overlaps(const StridedView& o) const { return begin < o.end && o.begin < end; }
};

// Checks `n` (extent, stride) dims: every stride >= 0 (named name +
// stride_names[i]; the innermost may be the implicit 1 of a contiguous row,
// named nullptr), and that the span in bytes fits in 64 bits. Elements are
// stored in units of block_elements elements in element_bytes bytes; the
// byte span is ceil(elements spanned / block_elements) units.
StridedView CheckStrides(const std::string& name, const void* data, int n, const int64_t* extents,
                         const int64_t* strides, const char* const* stride_names,
                         int64_t element_bytes = 4, int64_t block_elements = 1);
// CheckStrides for a tensor of element type `type` (checked by
// RequireDType first): for a block type (q8_0, q4_0) every named stride must also be a multiple
// of 32 (whole blocks), else Error (field name + stride_names[i]).
StridedView CheckTypedStrides(const std::string& name, const void* data, int n,
                              const int64_t* extents, const int64_t* strides,
                              const char* const* stride_names, DType type);
// Fails unless `type` is one of attn::DType's values (field name + ".dtype").
// q8_0 and q4_0 only where the tensor may hold them (blocks_ok: K, V, the
// page pools): elsewhere (Q, O, merge parts) an Error says they are for K
// and V only.
void RequireDType(const std::string& name, DType type, bool blocks_ok = false);
// A q8_0 or q4_0 tensor's rows: `cols` (field cols_field: head_dim for K,
// value_dim for V) must be a multiple of 32, else Error naming the field
// and value. Nothing for other types.
void RequireBlockCols(const std::string& tensor, DType type, const char* cols_field,
                      int64_t cols);
// A [batch, heads, rows, cols] tensor with contiguous rows (row_stride >=
// cols when rows > 1), or with cols == 0 a [batch, heads, rows] tensor of
// one float per row (lse). `data` must not be null. Elements of
// element_bytes bytes (4: float32; 2: bf16 / f16).
StridedView CheckRowTensor(const std::string& name, const void* data, int64_t batch,
                           int64_t heads, int64_t rows, int64_t cols, int64_t batch_stride,
                           int64_t head_stride, int64_t row_stride, int64_t element_bytes = 4);
// CheckRowTensor for a tensor with a dtype (Q, K, V, O, merge parts). With
// cols_field (K: "head_dim", V: "value_dim") the tensor may be q8_0 or
// q4_0, its cols and strides whole blocks (RequireBlockCols,
// CheckTypedStrides); without, a block type is an error (Q, O).
StridedView CheckTypedTensor(const std::string& name, const ConstTensor& t, int64_t batch,
                             int64_t heads, int64_t rows, int64_t cols,
                             const char* cols_field = nullptr);
// Fails when two indices of an output map to one element ("outputs", "rows").
void RequireNoSelfOverlap(const StridedView& v, const char* what);
// Fails when `output` overlaps `input`; with `alias_ok` it may instead be
// exactly the same tensor (in-place accumulation).
void RequireDisjoint(const StridedView& output, const StridedView& input, bool alias_ok);

// Throws attn::Error naming the first invalid field of the problem or the
// options. Reads no tensor data and writes nothing.
void Validate(const Problem& problem);
void ValidateOptions(const Options& options);
// The score modifier fields alone (window, softcap, sinks, alibi_slopes of
// p.batch x p.q_heads); the serving calls check theirs with it.
void ValidateScoreModifiers(const Problem& p);

}  // namespace attn::internal
