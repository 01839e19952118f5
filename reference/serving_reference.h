// The float64 reference of the serving calls (attn/serving.h), built on the
// dense reference: each sequence is a dense batch-1 problem, its keys
// gathered from the pages (and the new tokens) into a dense copy. The
// reference may copy; the library reads pages in place. Assumes a valid
// problem (the library's validation).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"

namespace attn::reference {

// out dense [total_q][q_heads][value_dim], lse dense [total_q][q_heads], in
// packed token order.
struct PackedResult {
  std::vector<double> out;
  std::vector<double> lse;
};

PackedResult VarlenAttention(const VarlenProblem& problem);

// Attention after the append, computed without writing the pool: keys
// below cache_seqlens[b] come from the pages, the rest from k_new / v_new
// rounded to the pool's dtype (as the append stores them).
PackedResult PagedAttention(const PagedProblem& problem);

// Calls fn(b, q0, dense) for each sequence b with queries and keys: dense
// is the batch-1 problem the reference computes for it (q, k, v, lengths,
// causal, scale and score modifiers set; out and lse not), q0 its first
// packed query row. Its tensors live until fn returns. The tests run the
// naive kernel on these problems: its own error, measured outside the
// serving executor, is the yardstick of every serving call.
using SequenceVisitor = std::function<void(int64_t b, int64_t q0, const Problem& dense)>;
void ForEachSequence(const VarlenProblem& problem, const SequenceVisitor& fn);
void ForEachSequence(const PagedProblem& problem, const SequenceVisitor& fn);

// Sequence b's T_k keys after the append, gathered dense [T_k][kv_heads][cols]
// as floats (exact: every pool value is a float); `values` selects V.
std::vector<float> GatherPagedKeys(const PagedProblem& problem, int64_t b, bool values);

}  // namespace attn::reference
