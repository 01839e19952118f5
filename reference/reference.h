// The scalar float64 reference: exactly the formula, stage by stage, in
// double precision. It is the oracle of every test and of the autotuner's
// correctness check, so it is written for clarity, shares no code with the
// kernels (it does its own stride arithmetic) and is never fast.
//
//   scores  = Q·Kᵀ                      (inputs of any dtype, exactly in double)
//   scaled  = scores · scale
//   masked  = cap·tanh(scaled / cap) (soft-capping, if any) - slope·|diag(i) - j|
//             (ALiBi, if any) + M, and -inf where the causal mask or the
//             sliding window hides the key (attn.h "Score modifiers")
//   weights = softmax(masked) per row, with the row max subtracted first
//   out     = weights · V
//   lse     = max + log Σ exp(masked - max)
//   with a sink logit (attn.h), one more key of that score and value 0
//   joins the max and the sums (so the row's weights sum to less than 1).
//
// Conventions (the kernels follow them):
// - A fully masked row (every entry -inf) has weights 0, out 0, lse -inf.
// - A row whose masked scores contain NaN, or +inf (so that x - max is
//   inf - inf), has NaN weights, out and lse: NaN propagates, never
//   disappears. NaN or Inf in V propagates through the mix as in IEEE math,
//   except at masked keys (-inf score): their values are never read.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/attn.h"

namespace attn::reference {

// All five stages for one (batch, query head) pair; matrices are dense
// row-major [q_len][kv_len] (out: [q_len][value_dim]).
struct HeadStages {
  int64_t q_len = 0, kv_len = 0, value_dim = 0;
  std::vector<double> scores, scaled, masked, weights, out;
  std::vector<double> lse;  // [q_len]
};
HeadStages Stages(const Problem& problem, int64_t batch, int64_t q_head);

// The whole problem: out dense [batch][q_heads][q_len][value_dim], lse dense
// [batch][q_heads][q_len]. Assumes the problem is valid (attn::Validate).
struct Result {
  std::vector<double> out;
  std::vector<double> lse;
};
Result Attention(const Problem& problem);

}  // namespace attn::reference
