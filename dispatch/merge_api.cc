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
#include "kernels/common/convert.h"
#include "kernels/common/merge.h"

namespace attn {
namespace {

using internal::Fail;
using internal::RequirePositive;
using internal::Str;

using internal::CheckRowTensor;
using internal::CheckTypedTensor;
using internal::RequireDisjoint;
using internal::RequireNoSelfOverlap;
using View = internal::StridedView;

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
    part_out.push_back(
        CheckTypedTensor(name + ".out", part.out, m.batch, m.q_heads, m.q_len, m.value_dim));
    part_lse.push_back(CheckRowTensor(name + ".lse", part.lse.data, m.batch, m.q_heads, m.q_len, 0,
                                 part.lse.batch_stride, part.lse.head_stride,
                                 part.lse.row_stride));
  }
  const View out = CheckTypedTensor("out", m.out, m.batch, m.q_heads, m.q_len, m.value_dim);
  RequireNoSelfOverlap(out, "outputs");
  View lse;
  if (m.lse.data) {
    lse = CheckRowTensor("lse", m.lse.data, m.batch, m.q_heads, m.q_len, 0, m.lse.batch_stride,
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
        r.out = internal::ElementOffset(part.out.data, part.out.dtype,
                                        b * part.out.batch_stride + h * part.out.head_stride);
        r.out_type = part.out.dtype;
        r.out_stride = part.out.row_stride;
        r.lse = part.lse.data + b * part.lse.batch_stride + h * part.lse.head_stride;
        r.lse_stride = part.lse.row_stride;
      }
      void* o = internal::ElementOffset(m.out.data, m.out.dtype,
                                        b * m.out.batch_stride + h * m.out.head_stride);
      float* l = m.lse.data ? m.lse.data + b * m.lse.batch_stride + h * m.lse.head_stride
                            : nullptr;
      internal::MergePartialRows(m.q_len, m.value_dim, m.n_parts, rows.data(), weights.data(),
                                 o, m.out.dtype, m.out.row_stride, l, m.lse.row_stride);
    }
  }
}

}  // namespace attn
