// Validation of attn::Problem: every field, every stride, every byte count
// (computed with overflow checks, never wrapped), and output overlap.
#include "dispatch/validate.h"

#include "dispatch/dot_path.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "kernels/common/convert.h"  // IsBlockType
#include "kernels/decode/walk_table.h"  // ParseDecodeWalk

namespace attn::internal {

void Fail(const std::string& field, const std::string& value, const std::string& why) {
  throw Error(field, value, "attn: " + field + " " + why + ", got " + value);
}

void RequirePositive(const char* field, int64_t value) {
  if (value < 1) Fail(field, Str(value), "must be >= 1");
}

bool StridedView::SameAs(const StridedView& o) const {
  if (data != o.data || n != o.n || element_bytes != o.element_bytes ||
      block_elements != o.block_elements) {
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (extent[i] != o.extent[i]) return false;
    if (extent[i] > 1 && stride[i] != o.stride[i]) return false;
  }
  return true;
}

namespace {

std::string StridesText(const StridedView& v) {
  std::string text = "strides (";
  for (int i = 0; i < v.named_strides; ++i) text += (i ? "," : "") + Str(v.stride[i]);
  return text + ")";
}

// True when distinct indices of the tensor can map to the same element:
// sorted by stride, every stride must exceed the span of the inner dims.
bool SelfOverlaps(const StridedView& v) {
  int order[4] = {0, 1, 2, 3};
  const int n = std::min(v.n, 4);
  for (int i = 1; i < n; ++i) {  // insertion sort of at most 4 dims by stride
    for (int j = i; j > 0 && v.stride[order[j]] < v.stride[order[j - 1]]; --j) {
      std::swap(order[j], order[j - 1]);
    }
  }
  int64_t inner_span = 1;  // elements covered by the dims placed so far
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    if (v.extent[d] == 1) continue;
    if (v.stride[d] < inner_span) return true;
    inner_span = v.stride[d] * (v.extent[d] - 1) + inner_span;
  }
  return false;
}

}  // namespace

StridedView CheckStrides(const std::string& name, const void* data, int n, const int64_t* extents,
                         const int64_t* strides, const char* const* stride_names,
                         int64_t element_bytes, int64_t block_elements) {
  StridedView v;
  v.element_bytes = element_bytes;
  v.block_elements = block_elements;
  v.name = name;
  v.data = data;
  v.n = n;
  for (int i = 0; i < n; ++i) {
    if (stride_names[i] && strides[i] < 0) {
      Fail(name + stride_names[i], Str(strides[i]), "must be >= 0");
    }
    v.extent[i] = extents[i];
    v.stride[i] = strides[i];
    if (stride_names[i]) v.named_strides = i + 1;
  }
  // Index of the last element + 1, in elements, then in storage units
  // (blocks), then in bytes.
  int64_t last = 0, bytes = 0;
  bool overflow = false;
  for (int i = 0; i < n && !overflow; ++i) {
    int64_t offset;
    overflow = __builtin_mul_overflow(extents[i] - 1, strides[i], &offset) ||
               __builtin_add_overflow(last, offset, &last);
  }
  overflow = overflow || __builtin_add_overflow(last, int64_t{1}, &last);
  const int64_t units = overflow ? 0 : last / block_elements + (last % block_elements != 0);
  overflow = overflow || __builtin_mul_overflow(units, element_bytes, &bytes);
  if (overflow) {
    std::string shape = "[";
    for (int i = 0; i < n; ++i) shape += (i ? "," : "") + Str(extents[i]);
    Fail(name, shape + "] with " + StridesText(v), "spans more bytes than fit in 64 bits");
  }
  v.begin = reinterpret_cast<uintptr_t>(data);
  v.end = v.begin + uintptr_t(bytes);
  return v;
}

StridedView CheckTypedStrides(const std::string& name, const void* data, int n,
                              const int64_t* extents, const int64_t* strides,
                              const char* const* stride_names, DType type) {
  const int64_t block = DTypeBlockElements(type);
  for (int i = 0; i < n && block > 1; ++i) {
    if (stride_names[i] && strides[i] % block != 0) {
      Fail(name + stride_names[i], Str(strides[i]),
           "must be a multiple of " + Str(block) + " for " + DTypeName(type) +
               " (strides are in elements and must step whole blocks of " + Str(block) + ")");
    }
  }
  return CheckStrides(name, data, n, extents, strides, stride_names, DTypeBlockBytes(type), block);
}

StridedView CheckRowTensor(const std::string& name, const void* data, int64_t batch,
                           int64_t heads, int64_t rows, int64_t cols, int64_t batch_stride,
                           int64_t head_stride, int64_t row_stride, int64_t element_bytes) {
  if (data == nullptr) Fail(name + ".data", "null", "must not be null");
  static const char* const kNames[4] = {".batch_stride", ".head_stride", ".row_stride", nullptr};
  const int64_t extents[4] = {batch, heads, rows, cols};
  const int64_t strides[4] = {batch_stride, head_stride, row_stride, 1};
  for (int i = 0; i < 3; ++i) {
    if (strides[i] < 0) Fail(name + kNames[i], Str(strides[i]), "must be >= 0");
  }
  if (cols > 0 && rows > 1 && row_stride < cols) {
    Fail(name + ".row_stride", Str(row_stride),
         "must be >= the row length " + Str(cols) + " (rows are contiguous)");
  }
  return CheckStrides(name, data, cols > 0 ? 4 : 3, extents, strides, kNames, element_bytes);
}

void RequireDType(const std::string& name, DType type, bool blocks_ok) {
  if (DTypeBlockElements(type) == 0) {
    Fail(name + ".dtype", Str(static_cast<int>(type)),
         blocks_ok ? "must be f32 (0), bf16 (1), f16 (2), q8_0 (3) or q4_0 (4)"
                   : "must be f32 (0), bf16 (1) or f16 (2)");
  }
  if (IsBlockType(type) && !blocks_ok) {
    Fail(name + ".dtype", DTypeName(type),
         std::string("must be f32, bf16 or f16 (") + DTypeName(type) +
             " is an element type for K and V only)");
  }
}

void RequireBlockCols(const std::string& tensor, DType type, const char* cols_field,
                      int64_t cols) {
  if (!IsBlockType(type) || cols % DTypeBlockElements(type) == 0) return;
  Fail(cols_field, Str(cols),
       "must be a multiple of 32 when " + tensor + ".dtype is " + DTypeName(type) +
           " (its rows are blocks of 32)");
}

StridedView CheckTypedTensor(const std::string& name, const ConstTensor& t, int64_t batch,
                             int64_t heads, int64_t rows, int64_t cols, const char* cols_field) {
  RequireDType(name, t.dtype, cols_field != nullptr);
  if (cols_field) RequireBlockCols(name, t.dtype, cols_field, cols);
  if (t.data == nullptr) Fail(name + ".data", "null", "must not be null");
  static const char* const kNames[4] = {".batch_stride", ".head_stride", ".row_stride", nullptr};
  const int64_t extents[4] = {batch, heads, rows, cols};
  const int64_t strides[4] = {t.batch_stride, t.head_stride, t.row_stride, 1};
  for (int i = 0; i < 3; ++i) {
    if (strides[i] < 0) Fail(name + kNames[i], Str(strides[i]), "must be >= 0");
  }
  if (cols > 0 && rows > 1 && t.row_stride < cols) {
    Fail(name + ".row_stride", Str(t.row_stride),
         "must be >= the row length " + Str(cols) + " (rows are contiguous)");
  }
  return CheckTypedStrides(name, t.data, cols > 0 ? 4 : 3, extents, strides, kNames, t.dtype);
}

void RequireNoSelfOverlap(const StridedView& v, const char* what) {
  if (SelfOverlaps(v)) {
    Fail(v.name, StridesText(v), std::string("must not map two ") + what + " to one element");
  }
}

void RequireDisjoint(const StridedView& output, const StridedView& input, bool alias_ok) {
  if (alias_ok && output.SameAs(input)) return;
  if (output.Overlaps(input)) {
    Fail(output.name, "memory overlapping " + input.name,
         alias_ok ? "must be exactly the same tensor (data and strides) or not overlap it"
                  : "must not overlap any other tensor");
  }
}

// attn.h "Score modifiers". Reads the sink and slope arrays (a few floats
// per head), allocating nothing on a valid problem.
void ValidateScoreModifiers(const Problem& p) {
  if (p.window.left < -1) Fail("window.left", Str(p.window.left), "must be >= 0 or -1 (unbounded)");
  if (p.window.right < -1) {
    Fail("window.right", Str(p.window.right), "must be >= 0 or -1 (unbounded)");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) {
    Fail("softcap", Str(p.softcap), "must be finite and >= 0 (0 = none)");
  }
  if (p.sinks.data) {
    if (p.sinks.size != p.q_heads) {
      Fail("sinks.size", Str(p.sinks.size), "must be q_heads (" + Str(p.q_heads) + ")");
    }
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const float s = p.sinks.data[h];
      if (std::isnan(s) || s == std::numeric_limits<float>::infinity()) {
        Fail("sinks[" + Str(h) + "]", Str(s), "must be finite or -inf (no sink)");
      }
    }
  } else if (p.sinks.size != 0) {
    Fail("sinks.size", Str(p.sinks.size), "must be 0 when sinks.data is null");
  }
  if (p.alibi_slopes.data) {
    const int64_t bs = p.alibi_slopes.batch_stride;
    if (bs != 0 && bs < p.q_heads) {
      Fail("alibi_slopes.batch_stride", Str(bs),
           "must be 0 (shared by every batch) or >= q_heads (" + Str(p.q_heads) + ")");
    }
    for (int64_t b = 0; b < (bs ? p.batch : 1); ++b)
      for (int64_t h = 0; h < p.q_heads; ++h) {
        const float slope = p.alibi_slopes.data[b * bs + h];
        if (!std::isfinite(slope)) {
          Fail("alibi_slopes[" + Str(b * bs + h) + "]", Str(slope), "must be finite");
        }
      }
  }
}

void Validate(const Problem& p) {
  RequirePositive("batch", p.batch);
  RequirePositive("q_heads", p.q_heads);
  RequirePositive("kv_heads", p.kv_heads);
  if (p.q_heads % p.kv_heads != 0) {
    Fail("kv_heads", Str(p.kv_heads), "must divide q_heads (" + Str(p.q_heads) + ")");
  }
  RequirePositive("q_len", p.q_len);
  RequirePositive("kv_len", p.kv_len);
  RequirePositive("head_dim", p.head_dim);
  if (p.value_dim) RequirePositive("value_dim", *p.value_dim);
  const int64_t dv = p.ValueDim();
  if (p.scale && !std::isfinite(*p.scale)) Fail("scale", Str(*p.scale), "must be finite");

  ValidateScoreModifiers(p);

  const StridedView q = CheckTypedTensor("q", p.q, p.batch, p.q_heads, p.q_len, p.head_dim);
  // K and V may be q8_0 or q4_0 blocks (rows of whole blocks), Q and O not.
  const StridedView k =
      CheckTypedTensor("k", p.k, p.batch, p.kv_heads, p.kv_len, p.head_dim, "head_dim");
  const StridedView v = CheckTypedTensor("v", p.v, p.batch, p.kv_heads, p.kv_len, dv,
                                         p.value_dim ? "value_dim" : "head_dim");
  const StridedView out = CheckTypedTensor("out", p.out, p.batch, p.q_heads, p.q_len, dv);
  RequireNoSelfOverlap(out, "outputs");

  // No heap allocation on a valid problem (every call validates; decode
  // calls are a few microseconds).
  StridedView inputs[4] = {q, k, v};
  int n_inputs = 3;
  if (p.mask.data) {
    static const char* const kNames[4] = {".batch_stride", ".head_stride", ".row_stride",
                                          ".col_stride"};
    const int64_t extents[4] = {p.batch, p.q_heads, p.q_len, p.kv_len};
    const int64_t strides[4] = {p.mask.batch_stride, p.mask.head_stride, p.mask.row_stride,
                                p.mask.col_stride};
    inputs[n_inputs++] = CheckStrides("mask", p.mask.data, 4, extents, strides, kNames);
  }
  // Outputs may not overlap any input or each other: the kernels read inputs
  // after writing outputs, so an alias would silently corrupt the result.
  if (p.lse.data) {
    const StridedView lse = CheckRowTensor("lse", p.lse.data, p.batch, p.q_heads, p.q_len, 0,
                                           p.lse.batch_stride, p.lse.head_stride,
                                           p.lse.row_stride);
    RequireNoSelfOverlap(lse, "rows");
    for (int i = 0; i < n_inputs; ++i) RequireDisjoint(out, inputs[i], false);
    RequireDisjoint(out, lse, false);
    for (int i = 0; i < n_inputs; ++i) RequireDisjoint(lse, inputs[i], false);
  } else {
    for (int i = 0; i < n_inputs; ++i) RequireDisjoint(out, inputs[i], false);
  }
}

void ValidateOptions(const Options& o) {
  bool known = o.kernel == KernelId::kAuto;
  for (const KernelInfo& k : Kernels()) known = known || k.id == o.kernel;
  if (!known) Fail("kernel", Str(static_cast<int>(o.kernel)), "must name a kernel");
  if (o.threads < 0) Fail("threads", Str(o.threads), "must be >= 0 (0 = OpenMP default)");
  if (o.tiles.q_block < 0) Fail("tiles.q_block", Str(o.tiles.q_block), "must be >= 0");
  if (o.tiles.kv_block < 0) Fail("tiles.kv_block", Str(o.tiles.kv_block), "must be >= 0");
  if (o.tiles.kv_splits < 0) Fail("tiles.kv_splits", Str(o.tiles.kv_splits), "must be >= 0");
  // A named path must exist and run here (Error field "dot_path").
  if (!o.dot_path.empty()) CallDotPath(o.dot_path);
  ParseDecodeWalk(o.decode_walk);  // Error field "decode_walk"
}

}  // namespace attn::internal
