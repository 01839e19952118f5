// Validation of attn::Problem: every field, every stride, every byte count
// (computed with overflow checks, never wrapped), and output overlap.
#include "dispatch/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace attn::internal {

void Fail(const std::string& field, const std::string& value, const std::string& why) {
  throw Error(field, value, "attn: " + field + " " + why + ", got " + value);
}

void RequirePositive(const char* field, int64_t value) {
  if (value < 1) Fail(field, Str(value), "must be >= 1");
}

namespace {

void RequireNonNegative(const std::string& field, int64_t value) {
  if (value < 0) Fail(field, Str(value), "must be >= 0");
}

// One dimension of a strided tensor: extent and element stride.
struct Dim {
  int64_t extent;
  int64_t stride;
};

// Index of the last element + 1 (in elements), with overflow detection.
// Returns false on overflow.
bool SpanElements(const Dim* dims, int n, int64_t* span) {
  int64_t last = 0;
  for (int i = 0; i < n; ++i) {
    int64_t offset;
    if (__builtin_mul_overflow(dims[i].extent - 1, dims[i].stride, &offset) ||
        __builtin_add_overflow(last, offset, &last)) {
      return false;
    }
  }
  int64_t bytes;
  if (__builtin_add_overflow(last, int64_t{1}, span) ||
      __builtin_mul_overflow(*span, int64_t{sizeof(float)}, &bytes)) {
    return false;
  }
  return true;
}

// True when distinct indices of the tensor can map to the same element:
// sorted by stride, every stride must exceed the span of the inner dims.
bool SelfOverlaps(Dim* dims, int n) {
  std::sort(dims, dims + n, [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t inner_span = 1;  // elements covered by the dims placed so far
  for (int i = 0; i < n; ++i) {
    if (dims[i].extent == 1) continue;
    if (dims[i].stride < inner_span) return true;
    inner_span = dims[i].stride * (dims[i].extent - 1) + inner_span;
  }
  return false;
}

struct Range {
  const char* name;
  uintptr_t begin, end;  // bytes
};

bool Overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

// Validates the strides of one tensor and returns its byte range.
Range CheckTensor(const char* name, const void* data, int64_t batch, int64_t heads,
                  int64_t rows, int64_t cols, int64_t batch_stride,
                  int64_t head_stride, int64_t row_stride) {
  const std::string n = name;
  if (data == nullptr) Fail(n + ".data", "null", "must not be null");
  RequireNonNegative(n + ".batch_stride", batch_stride);
  RequireNonNegative(n + ".head_stride", head_stride);
  RequireNonNegative(n + ".row_stride", row_stride);
  if (rows > 1 && row_stride < cols) {
    Fail(n + ".row_stride", Str(row_stride),
         "must be >= the row length " + Str(cols) + " (rows are contiguous)");
  }
  const Dim dims[4] = {{batch, batch_stride}, {heads, head_stride}, {rows, row_stride}, {cols, 1}};
  int64_t span;
  if (!SpanElements(dims, 4, &span)) {
    Fail(n, "[" + Str(batch) + "," + Str(heads) + "," + Str(rows) + "," + Str(cols) + "]",
         "spans more bytes than fit in 64 bits");
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  return Range{name, begin, begin + uintptr_t(span) * sizeof(float)};
}

}  // namespace

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

  const Range q = CheckTensor("q", p.q.data, p.batch, p.q_heads, p.q_len, p.head_dim,
                              p.q.batch_stride, p.q.head_stride, p.q.row_stride);
  const Range k = CheckTensor("k", p.k.data, p.batch, p.kv_heads, p.kv_len, p.head_dim,
                              p.k.batch_stride, p.k.head_stride, p.k.row_stride);
  const Range v = CheckTensor("v", p.v.data, p.batch, p.kv_heads, p.kv_len, dv,
                              p.v.batch_stride, p.v.head_stride, p.v.row_stride);
  const Range out = CheckTensor("out", p.out.data, p.batch, p.q_heads, p.q_len, dv,
                                p.out.batch_stride, p.out.head_stride, p.out.row_stride);
  {
    Dim dims[4] = {{p.batch, p.out.batch_stride}, {p.q_heads, p.out.head_stride},
                   {p.q_len, p.out.row_stride}, {dv, 1}};
    if (SelfOverlaps(dims, 4)) {
      Fail("out", "strides (" + Str(p.out.batch_stride) + "," + Str(p.out.head_stride) + "," +
                      Str(p.out.row_stride) + ")",
           "must not map two outputs to one element");
    }
  }

  Range ranges[6] = {q, k, v, out};
  int n_ranges = 4;
  if (p.mask.data) {
    RequireNonNegative("mask.batch_stride", p.mask.batch_stride);
    RequireNonNegative("mask.head_stride", p.mask.head_stride);
    RequireNonNegative("mask.row_stride", p.mask.row_stride);
    RequireNonNegative("mask.col_stride", p.mask.col_stride);
    const Dim dims[4] = {{p.batch, p.mask.batch_stride}, {p.q_heads, p.mask.head_stride},
                         {p.q_len, p.mask.row_stride}, {p.kv_len, p.mask.col_stride}};
    int64_t span;
    if (!SpanElements(dims, 4, &span)) Fail("mask", "strides", "span more bytes than fit in 64 bits");
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p.mask.data);
    ranges[n_ranges++] = Range{"mask", begin, begin + uintptr_t(span) * sizeof(float)};
  }
  if (p.lse.data) {
    RequireNonNegative("lse.batch_stride", p.lse.batch_stride);
    RequireNonNegative("lse.head_stride", p.lse.head_stride);
    RequireNonNegative("lse.row_stride", p.lse.row_stride);
    Dim dims[3] = {{p.batch, p.lse.batch_stride}, {p.q_heads, p.lse.head_stride},
                   {p.q_len, p.lse.row_stride}};
    int64_t span;
    if (!SpanElements(dims, 3, &span)) Fail("lse", "strides", "span more bytes than fit in 64 bits");
    if (SelfOverlaps(dims, 3)) {
      Fail("lse", "strides (" + Str(p.lse.batch_stride) + "," + Str(p.lse.head_stride) + "," +
                      Str(p.lse.row_stride) + ")",
           "must not map two rows to one element");
    }
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p.lse.data);
    ranges[n_ranges++] = Range{"lse", begin, begin + uintptr_t(span) * sizeof(float)};
  }
  // Outputs may not overlap any input or each other: the kernels read inputs
  // after writing outputs, so an alias would silently corrupt the result.
  for (int w = 3; w < n_ranges; ++w) {
    const bool writable = w == 3 || std::string(ranges[w].name) == "lse";
    if (!writable) continue;
    for (int r = 0; r < n_ranges; ++r) {
      if (r == w) continue;
      if (Overlap(ranges[w], ranges[r])) {
        Fail(ranges[w].name, "memory overlapping " + std::string(ranges[r].name),
             "must not overlap any other tensor");
      }
    }
  }
}

void ValidateOptions(const Options& o) {
  const int kernel = static_cast<int>(o.kernel);
  if (kernel < static_cast<int>(KernelId::kAuto) || kernel > static_cast<int>(KernelId::kParallel)) {
    Fail("kernel", Str(kernel), "must name a kernel");
  }
  if (o.threads < 0) Fail("threads", Str(o.threads), "must be >= 0 (0 = OpenMP default)");
  if (o.tiles.q_block < 0) Fail("tiles.q_block", Str(o.tiles.q_block), "must be >= 0");
  if (o.tiles.kv_block < 0) Fail("tiles.kv_block", Str(o.tiles.kv_block), "must be >= 0");
  if (o.tiles.kv_splits < 0) Fail("tiles.kv_splits", Str(o.tiles.kv_splits), "must be >= 0");
}

}  // namespace attn::internal
