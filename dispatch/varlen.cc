// attn::VarlenAttention: validation of a VarlenProblem (every field, offset,
// stride, byte count and overlap, before anything is written), then the
// serving executor with one key segment per sequence: its packed K/V rows,
// addressed in place (dispatch/serving_run.h).
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "attn/serving.h"
#include "dispatch/serving_run.h"
#include "dispatch/serving_validate.h"
#include "dispatch/targets.h"
#include "dispatch/validate.h"
#include "kernels/common/convert.h"

namespace attn {
namespace {

using internal::Fail;
using internal::Str;
using internal::StridedView;

// The longest of the batch's lengths must not exceed a given bound.
void CheckMaxLen(const char* field, int64_t bound, const std::vector<int64_t>& cu,
                 const char* offsets) {
  if (bound < 0) Fail(field, Str(bound), "must be >= 0 (0: not checked)");
  if (bound == 0) return;
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t len = cu[b + 1] - cu[b];
    if (len > bound) {
      Fail(field, Str(bound),
           "must be >= every sequence's length; sequence " + Str(b) + " has " + Str(len) +
               " (" + offsets + "[" + Str(b + 1) + "] - " + offsets + "[" + Str(b) + "])");
    }
  }
}

// A dense bf16 copy [tokens, heads, cols] of `t`, rounded to nearest even
// (Options::round_inputs_to_bf16; attention() makes the same copies).
PackedTensor Bf16Copy(const PackedTensor& t, int64_t tokens, int64_t heads, int64_t cols,
                      std::vector<uint16_t>& storage) {
  if (t.dtype == DType::kBF16) return t;
  storage.resize(size_t(tokens * heads * cols));
  uint16_t* dst = storage.data();
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < cols; ++c) {
        *dst++ = BFloat16Bits(
            internal::LoadElement(t.data, t.dtype, i * t.token_stride + h * t.head_stride + c));
      }
  return {storage.data(), heads * cols, cols, DType::kBF16};
}

}  // namespace

void VarlenAttention(const VarlenProblem& p, const Options& options) {
  internal::InitTargetsOnce();
  internal::ValidateOptions(options);
  internal::CheckServingShape(p.batch, p.q_heads, p.kv_heads, p.head_dim, p.value_dim, p.scale);
  const int64_t d = p.head_dim, dv = p.ValueDim();
  const std::vector<int64_t> cu_q = internal::CheckOffsets("cu_seqlens_q", p.cu_seqlens_q, p.batch);
  const std::vector<int64_t> cu_k = internal::CheckOffsets("cu_seqlens_k", p.cu_seqlens_k, p.batch);
  CheckMaxLen("max_seqlen_q", p.max_seqlen_q, cu_q, "cu_seqlens_q");
  CheckMaxLen("max_seqlen_k", p.max_seqlen_k, cu_k, "cu_seqlens_k");
  internal::CheckServingModifiers(p.batch, p.q_heads, p.window, p.softcap, p.alibi_slopes,
                                  p.sinks);
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();

  const StridedView q = internal::CheckPacked("q", p.q, total_q, p.q_heads, d);
  const StridedView k = internal::CheckPacked("k", p.k, total_k, p.kv_heads, d, "head_dim");
  const StridedView v = internal::CheckPacked("v", p.v, total_k, p.kv_heads, dv,
                                              p.value_dim ? "value_dim" : "head_dim");
  const StridedView out = internal::CheckPacked("out", p.out, total_q, p.q_heads, dv);
  internal::RequireNoSelfOverlap(out, "outputs");
  for (const StridedView* in : {&q, &k, &v}) internal::RequireDisjoint(out, *in, false);
  if (p.lse.data) {
    const StridedView lse = internal::CheckPackedLse("lse", p.lse, total_q, p.q_heads);
    internal::RequireNoSelfOverlap(lse, "rows");
    for (const StridedView* in : {&q, &k, &v, &out}) internal::RequireDisjoint(lse, *in, false);
  }
  if (options.round_inputs_to_bf16 && p.q_heads > 0 && total_q > 0 && total_k > 0) {
    // Copies of what is not bf16 yet, then the same call on them.
    std::vector<uint16_t> storage[3];
    VarlenProblem rounded = p;
    try {
      rounded.q = Bf16Copy(p.q, total_q, p.q_heads, d, storage[0]);
      rounded.k = Bf16Copy(p.k, total_k, p.kv_heads, d, storage[1]);
      rounded.v = Bf16Copy(p.v, total_k, p.kv_heads, dv, storage[2]);
    } catch (const std::bad_alloc&) {
      throw Error("memory", "exhausted",
                  "attn: round_inputs_to_bf16 could not allocate the bf16 copies of q, k, v, "
                  "got exhausted");
    }
    Options plain = options;
    plain.round_inputs_to_bf16 = false;
    VarlenAttention(rounded, plain);
    return;
  }

  internal::ServingBatch b;
  b.q_heads = p.q_heads;
  b.kv_heads = p.kv_heads;
  b.d = d;
  b.dv = dv;
  Problem scale_of;  // attention()'s default: 1/sqrt(d)
  scale_of.head_dim = d;
  scale_of.scale = p.scale;
  b.scale = scale_of.Scale();
  b.causal = p.causal;
  b.q_type = p.q.dtype;
  b.k_type = p.k.dtype;
  b.v_type = p.v.dtype;
  b.out_type = p.out.dtype;
  b.q_row = p.q.token_stride;
  b.q_head = p.q.head_stride;
  b.k_row = p.k.token_stride;
  b.k_head = p.k.head_stride;
  b.v_row = p.v.token_stride;
  b.v_head = p.v.head_stride;
  b.out_row = p.out.token_stride;
  b.out_head = p.out.head_stride;
  b.lse_row = p.lse.token_stride;
  b.lse_head = p.lse.head_stride;
  b.window = p.window;
  b.softcap = p.softcap;
  b.alibi = p.alibi_slopes.data;
  b.alibi_batch_stride = p.alibi_slopes.batch_stride;
  b.sinks = p.sinks.data;
  b.seqs.resize(size_t(p.batch));
  b.segments.reserve(size_t(p.batch));
  for (int64_t i = 0; i < p.batch; ++i) {
    internal::ServingSeq& s = b.seqs[size_t(i)];
    const int64_t q0 = cu_q[size_t(i)], k0 = cu_k[size_t(i)];
    s.tq = cu_q[size_t(i) + 1] - q0;
    s.tk = cu_k[size_t(i) + 1] - k0;
    if (s.tq == 0) continue;
    s.q = internal::ElementOffset(p.q.data, p.q.dtype, q0 * p.q.token_stride);
    s.out = internal::ElementOffset(p.out.data, p.out.dtype, q0 * p.out.token_stride);
    s.lse = p.lse.data ? p.lse.data + q0 * p.lse.token_stride : nullptr;
    s.seg_begin = b.segments.size();
    if (s.tk > 0) {
      b.segments.push_back({0, s.tk,
                            internal::ElementOffset(p.k.data, p.k.dtype, k0 * p.k.token_stride),
                            internal::ElementOffset(p.v.data, p.v.dtype, k0 * p.v.token_stride)});
    }
    s.seg_end = b.segments.size();
  }
  internal::RunServing(b, options);
}

}  // namespace attn
