// attn::MergeAttention: validation of a MergeProblem (every field, stride,
// byte count and overlap, before anything is written), then the scalar
// log-sum-exp merge of kernels/common/merge.h per (batch, head).
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "dispatch/validate.h"
#include "kernels/common/merge.h"

namespace attn {
namespace {

using internal::Fail;
using internal::RequirePositive;
using internal::Str;

// One strided tensor: data, up to 4 (extent, stride) dims, and its name.
struct View {
  std::string name;
  const void* data = nullptr;
  int n = 0;
  int64_t extent[4] = {}, stride[4] = {};
  uintptr_t begin = 0, end = 0;  // byte range covered

  // Same element mapping: same pointer and the same stride in every dim
  // that has more than one index.
  bool SameAs(const View& o) const {
    if (data != o.data || n != o.n) return false;
    for (int i = 0; i < n; ++i) {
      if (extent[i] != o.extent[i]) return false;
      if (extent[i] > 1 && stride[i] != o.stride[i]) return false;
    }
    return true;
  }
  bool Overlaps(const View& o) const { return begin < o.end && o.begin < end; }
};

// Checks data, strides (>= 0; contiguous rows of `cols` floats need
// row_stride >= cols), and that the byte span fits in 64 bits; fills the range.
View CheckView(const std::string& name, const void* data, int64_t batch, int64_t heads,
               int64_t rows, int64_t cols, int64_t batch_stride, int64_t head_stride,
               int64_t row_stride) {
  if (data == nullptr) Fail(name + ".data", "null", "must not be null");
  const std::string fields[3] = {".batch_stride", ".head_stride", ".row_stride"};
  const int64_t strides[3] = {batch_stride, head_stride, row_stride};
  for (int i = 0; i < 3; ++i) {
    if (strides[i] < 0) Fail(name + fields[i], Str(strides[i]), "must be >= 0");
  }
  if (cols > 0 && rows > 1 && row_stride < cols) {
    Fail(name + ".row_stride", Str(row_stride),
         "must be >= the row length " + Str(cols) + " (rows are contiguous)");
  }
  View v;
  v.name = name;
  v.data = data;
  v.n = cols > 0 ? 4 : 3;
  const int64_t ext[4] = {batch, heads, rows, cols}, str[4] = {batch_stride, head_stride,
                                                                row_stride, 1};
  int64_t last = 0;
  for (int i = 0; i < v.n; ++i) {
    v.extent[i] = ext[i];
    v.stride[i] = str[i];
    int64_t offset;
    if (__builtin_mul_overflow(ext[i] - 1, str[i], &offset) ||
        __builtin_add_overflow(last, offset, &last)) {
      Fail(name, "strides (" + Str(batch_stride) + "," + Str(head_stride) + "," +
                     Str(row_stride) + ")",
           "span more bytes than fit in 64 bits");
    }
  }
  int64_t bytes;
  if (__builtin_mul_overflow(last + 1, int64_t{sizeof(float)}, &bytes)) {
    Fail(name, "strides (" + Str(batch_stride) + "," + Str(head_stride) + "," +
                   Str(row_stride) + ")",
         "span more bytes than fit in 64 bits");
  }
  v.begin = reinterpret_cast<uintptr_t>(data);
  v.end = v.begin + uintptr_t(bytes);
  return v;
}

// True when two distinct indices of the view map to one element (sorted by
// stride, every stride must exceed the span of the inner dims).
bool SelfOverlaps(const View& v) {
  int order[4] = {0, 1, 2, 3};
  for (int i = 0; i < v.n; ++i)
    for (int j = i + 1; j < v.n; ++j)
      if (v.stride[order[j]] < v.stride[order[i]]) std::swap(order[i], order[j]);
  int64_t inner_span = 1;
  for (int i = 0; i < v.n; ++i) {
    const int d = order[i];
    if (v.extent[d] == 1) continue;
    if (v.stride[d] < inner_span) return true;
    inner_span = v.stride[d] * (v.extent[d] - 1) + inner_span;
  }
  return false;
}

void RequireNoSelfOverlap(const View& v, const char* what) {
  if (SelfOverlaps(v)) {
    Fail(v.name, "strides (" + Str(v.stride[0]) + "," + Str(v.stride[1]) + "," +
                     Str(v.stride[2]) + ")",
         std::string("must not map two ") + what + " to one element");
  }
}

// An output may coincide exactly with an input of its own kind (in-place
// accumulation) but may not otherwise overlap it.
void RequireDisjoint(const View& output, const View& input, bool alias_ok) {
  if (alias_ok && output.SameAs(input)) return;
  if (output.Overlaps(input)) {
    Fail(output.name, "memory overlapping " + input.name,
         alias_ok ? "must be exactly the same tensor (data and strides) or not overlap it"
                  : "must not overlap any other tensor");
  }
}

}  // namespace

void MergeAttention(const MergeProblem& m) {
  RequirePositive("batch", m.batch);
  RequirePositive("q_heads", m.q_heads);
  RequirePositive("q_len", m.q_len);
  RequirePositive("value_dim", m.value_dim);
  if (m.n_parts < 1) Fail("n_parts", Str(m.n_parts), "must be >= 1");
  if (m.parts == nullptr) Fail("parts", "null", "must not be null");

  std::vector<View> part_out, part_lse;
  part_out.reserve(size_t(m.n_parts));
  part_lse.reserve(size_t(m.n_parts));
  for (int s = 0; s < m.n_parts; ++s) {
    const MergePart& part = m.parts[s];
    const std::string name = "parts[" + std::to_string(s) + "]";
    part_out.push_back(CheckView(name + ".out", part.out.data, m.batch, m.q_heads, m.q_len,
                                 m.value_dim, part.out.batch_stride, part.out.head_stride,
                                 part.out.row_stride));
    part_lse.push_back(CheckView(name + ".lse", part.lse.data, m.batch, m.q_heads, m.q_len, 0,
                                 part.lse.batch_stride, part.lse.head_stride,
                                 part.lse.row_stride));
  }
  const View out = CheckView("out", m.out.data, m.batch, m.q_heads, m.q_len, m.value_dim,
                             m.out.batch_stride, m.out.head_stride, m.out.row_stride);
  RequireNoSelfOverlap(out, "outputs");
  View lse;
  if (m.lse.data) {
    lse = CheckView("lse", m.lse.data, m.batch, m.q_heads, m.q_len, 0, m.lse.batch_stride,
                    m.lse.head_stride, m.lse.row_stride);
    RequireNoSelfOverlap(lse, "rows");
    RequireDisjoint(lse, out, false);
  }
  for (int s = 0; s < m.n_parts; ++s) {
    RequireDisjoint(out, part_out[size_t(s)], true);
    RequireDisjoint(out, part_lse[size_t(s)], false);
    if (m.lse.data) {
      RequireDisjoint(lse, part_lse[size_t(s)], true);
      RequireDisjoint(lse, part_out[size_t(s)], false);
    }
  }

  // Valid: merge each (batch, head)'s rows.
  std::vector<internal::PartialRows> rows(size_t(m.n_parts));
  std::vector<double> weights(size_t(m.n_parts));
  for (int64_t b = 0; b < m.batch; ++b) {
    for (int64_t h = 0; h < m.q_heads; ++h) {
      for (int s = 0; s < m.n_parts; ++s) {
        const MergePart& part = m.parts[s];
        internal::PartialRows& r = rows[size_t(s)];
        r.out = part.out.data + b * part.out.batch_stride + h * part.out.head_stride;
        r.out_stride = part.out.row_stride;
        r.lse = part.lse.data + b * part.lse.batch_stride + h * part.lse.head_stride;
        r.lse_stride = part.lse.row_stride;
      }
      float* o = m.out.data + b * m.out.batch_stride + h * m.out.head_stride;
      float* l = m.lse.data ? m.lse.data + b * m.lse.batch_stride + h * m.lse.head_stride
                            : nullptr;
      internal::MergePartialRows(m.q_len, m.value_dim, m.n_parts, rows.data(), weights.data(),
                                 o, m.out.row_stride, l, m.lse.row_stride);
    }
  }
}

}  // namespace attn
