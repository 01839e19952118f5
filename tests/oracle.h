// The hostile-input oracle shared by tests/hostile_test.cc and the fuzzer
// (tests/fuzz/attn_fuzz.cc): checks a kernel's output against the float64
// reference when the inputs may hold NaN, Inf, denormals or huge values,
// and decides, independently of dispatch/validate.cc, whether a problem is
// valid by the documented rules.
//
// What a kernel must do, element by element (row i of head (b, h), value
// column c):
// in every row float32 can evaluate without overflow (RowIsFloat32Safe; in
// other rows any value is accepted: overflow gives NaN, or turns a score
// into -inf so that a NaN in V is never read):
//   reference NaN        -> NaN (NaN is never dropped), except where the
//                           reference is NaN only because float64
//                           underflowed to 0 the weight of a visible key
//                           whose V is +-Inf (0 * inf) and float32 may keep
//                           it positive: then that Inf, or NaN
//                           (oracle.cc InfMayStandForNaN gives the rule)
//   reference +-Inf      -> the same Inf, or NaN (an Inf in V times a weight
//                           that underflowed to 0 in float32 is NaN; in
//                           float64 the weight is tiny but not 0)
//   reference lse -Inf   -> a fully masked row: out exactly 0, lse -Inf
//   reference finite     -> finite and within the analytical bound below
//
// The analytical bound (per row, no dependence on another kernel): with
// u = 2^-24, A = |scale| * max_j sum_c |q_ic||k_jc| and M = max_j |m_ij|,
// every float32 score s - max is off by at most
//   delta = 2 * ((d + 4) u A + 4 u (A + M)) + d * 2^-126   (absolute)
// so every unnormalised weight by a factor e^delta (1 + eps_exp), with
// eps_exp = 1e-6 for the kernels' exp. The weights' relative error is then
//   rel = 2 (e^delta (1 + eps_exp) - 1) + T_k (eps_exp + 2u) + 16u
// (the T_k term covers the summation and the streaming kernel's rescales),
// the output is a convex combination of V rows, so
//   |out - ref| <= rel * max|V|,   |lse - ref| <= delta + rel + 4u |lse|.
// For ordinary inputs (|q|, |k| ~ 1, d = 64, T_k = 100) rel is ~2e-4: far
// below what an off-by-one key or column costs (~1/T_k of max|V|).
#pragma once

#include <cstdint>
#include <string>

#include "attn/attn.h"
#include "reference/reference.h"

namespace attn::oracle {

// Empty when the outputs of `p` (already computed by a kernel) satisfy the
// rules above against `ref` (reference::Attention(p)); else one line naming
// the first offending element, the two values and the bound.
std::string Check(const Problem& p, const reference::Result& ref);

// True when float32 can evaluate row i of head (b, h) without overflow:
// every |scale * q|, every sum_c |q_c k_c| and |scale| times it, and
// |score| + |mask| stay below 1e37, and max|V| * T_k below 1e37 (the
// streaming kernel's unnormalised accumulator holds up to T_k * max|V|),
// and no q_c != 0 whose float32 product with the scale underflows to 0 meets
// an infinite k (the kernels fold the scale into Q: 0 * inf = NaN, where
// the reference has scale * (+-inf) = +-inf).
bool RowIsFloat32Safe(const Problem& p, int64_t b, int64_t h, int64_t i);

// The documented validity rules of attn::attention (docs/api.md "Conventions",
// include/attn/attn.h), re-derived: sizes >= 1, kv_heads divides q_heads,
// scale finite, non-null data, strides >= 0, rows contiguous (row_stride >=
// cols when rows > 1), byte spans that fit in int64, no output mapping two
// elements to one, no output byte range overlapping another tensor's, and
// options threads/tiles >= 0. Empty when valid, else the rule broken.
std::string ValidityViolation(const Problem& p, const Options& o);

}  // namespace attn::oracle
