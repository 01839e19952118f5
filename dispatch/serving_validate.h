// Validation pieces shared by attn::VarlenAttention and attn::PagedAttention
// (on top of dispatch/validate.h's strided-tensor checks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/serving.h"
#include "dispatch/validate.h"

namespace attn::internal {

// The head and dimension fields every serving problem has: batch >= 1,
// q_heads, kv_heads dividing it, head_dim, value_dim, a finite scale.
void CheckServingShape(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                       const std::optional<int64_t>& value_dim, const std::optional<float>& scale);

// Reads batch + 1 cumulative offsets: `cu` not null, cu[0] == 0, each entry
// >= the one before (error names the entry, e.g. "cu_seqlens_k[3]").
std::vector<int64_t> CheckOffsets(const char* name, const int32_t* cu, int64_t batch);

// A packed [tokens, heads, cols] tensor (dtype, strides >= 0, span in 64
// bits). Zero tokens: nothing is read or written, the data pointer may be
// null and the view is empty (overlaps nothing). With cols_field (K and V:
// "head_dim", "value_dim") it may be q8_0 or q4_0, with cols and strides of
// whole blocks; without, a block type is an error (Q, O).
StridedView CheckPacked(const std::string& name, const PackedTensor& t, int64_t tokens,
                        int64_t heads, int64_t cols, const char* cols_field = nullptr);
// The score modifier fields (attn.h), as attn::attention checks them, with
// `batch` sequences for the ALiBi slopes' batch stride.
void CheckServingModifiers(int64_t batch, int64_t q_heads, const Window& window, float softcap,
                           const AlibiSlopes& alibi_slopes, const SinkLogits& sinks);
// The float32 lse [tokens, heads].
StridedView CheckPackedLse(const std::string& name, const PackedLse& lse, int64_t tokens,
                           int64_t heads);

}  // namespace attn::internal
