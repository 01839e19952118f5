// Shared test helpers: random problems with owned buffers, comparison
// against the float64 reference, and the error bound every kernel test uses.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"

namespace attn::test {

enum class Layout { kBHTD, kBTHD };

struct Shape {
  int64_t batch = 1, q_heads = 1, kv_heads = 1;
  int64_t tq = 1, tk = 1, d = 1, dv = 0;  // dv 0: = d
  Causal causal = Causal::kNone;
  bool additive_mask = false;   // random finite mask with some -inf entries
  int fully_masked_rows = 0;    // rows of the additive mask set to all -inf
  float magnitude = 1.0f;       // Q and K entries uniform in ±magnitude
  Layout layout = Layout::kBHTD;
  int64_t row_padding = 0;      // extra elements after every row of Q, K, V, O
  uint64_t seed = 1;
  // Element types. A 16-bit tensor holds the random float values rounded to
  // it (the reference reads the rounded values); a q8_0 or q4_0 K or V (d,
  // dv and row_padding multiples of 32) holds them quantised by ggml's rule
  // (QuantizeBlocksForTest), its padding blocks filled with NaN scales.
  DType q_type = DType::kF32, k_type = DType::kF32, v_type = DType::kF32,
        out_type = DType::kF32;
  std::string Name() const;
};
inline void PrintTo(const Shape& s, std::ostream* os) { *os << s.Name(); }

// A problem with its own buffers (the Problem points into them): q, k, v,
// out for float32 tensors, the *16 buffers (bit patterns) for bf16 / f16,
// the *8 buffers (ggml's blocks) for a q8_0 or q4_0 K / V; q, k, v then hold the
// values those bytes decode to.
struct OwnedProblem {
  Shape shape;
  std::vector<float> q, k, v, mask, out, lse;
  std::vector<uint16_t> q16, k16, v16, out16;
  std::vector<uint8_t> k8, v8;
  Problem problem;
  // Fills out/lse with a sentinel so that untouched entries are detectable.
  void ClearOutputs();
};
OwnedProblem MakeProblem(const Shape& shape);

// The data of a float32 tensor (the tests that build their own problems).
inline const float* F32(const ConstTensor& t) { return static_cast<const float*>(t.data); }
inline float* F32(const Tensor& t) { return static_cast<float*>(t.data); }
inline float* F32Mutable(const ConstTensor& t) {
  return const_cast<float*>(static_cast<const float*>(t.data));
}

// Element `offset` (in elements) of a tensor of any dtype, as float.
float ElementAt(const ConstTensor& t, int64_t offset);

// ggml's quantize_row_q8_0_ref, written here from its definition for
// making test inputs (n a multiple of 32; x finite): per block of 32,
// amax = max |x|, d = amax / 127, q = roundf(x / d) (x · (1 / d)), d
// stored as binary16. tests/quant_kv_test.cc checks attn::QuantizeQ8_0 against
// values computed by hand, not against this.
void QuantizeForTest(const float* x, int64_t n, uint8_t* out);
// Element i of q8_0 blocks, decoded from the layout (binary16 scale, int8).
float DecodeQ8_0ForTest(const uint8_t* blocks, int64_t i);
// ggml's quantize_row_q4_0_ref, written here from its definition: per block
// of 32, max = the value of largest |x| (the first), d = max / -8, nibble =
// min(15, trunc(x · (1 / d) + 8.5)), elements 0-15 in the low nibbles, d
// stored as binary16. tests/q4_test.cc checks attn::QuantizeQ4_0 against
// values computed by hand, not against this.
void QuantizeQ4_0ForTest(const float* x, int64_t n, uint8_t* out);
// Element i of q4_0 blocks, decoded from the layout (binary16 scale, nibbles).
float DecodeQ4_0ForTest(const uint8_t* blocks, int64_t i);
// The two above for a block type (kQ8_0 or kQ4_0).
void QuantizeBlocksForTest(DType type, const float* x, int64_t n, uint8_t* out);
float DecodeBlockForTest(DType type, const uint8_t* blocks, int64_t i);

// Largest |out - ref| over all outputs (read through the problem's strides)
// and over lse. NaN in both counts as equal; NaN in one only, or a mismatch
// of infinities, counts as +inf.
struct Errors {
  double out = 0.0;
  double lse = 0.0;
};
Errors MaxErrors(const Problem& p, const reference::Result& ref);

// The bound a kernel's error must meet on a problem (see test_util.cc for
// the justification): a few times the naive float32 kernel's own error on
// the same input, plus a floor of a few ULPs of the output magnitude (one
// ULP of the output type for a bf16 / f16 output).
struct Bound {
  double out = 0.0;
  double lse = 0.0;
};
Bound BoundFromNaive(const Errors& naive, const Problem& p, const reference::Result& ref);

// One way of running the library in a test: a kernel of the table (or
// auto), a thread count and tiles.
struct Variant {
  std::string name;  // "streaming/ragged", "parallel/t2/split3/ragged", "auto/t2"
  Options options;
};
Variant MakeVariant(const std::string& name, KernelId kernel, int threads, Tiles tiles = {});
// The variants every kernel test runs, derived from attn::Kernels() so that
// a new kernel is tested without an edit here:
// - every kernel at its default tiles on one thread ("naive", "parallel/t1");
// - every kernel that reads tiles, with small ragged ones ("…/ragged":
//   q_block 1, kv_block 7: partial panels and many key tiles, every tail);
// - every threaded kernel on 2 threads ("parallel/t2") and, if it splits
//   keys, with split-KV and ragged tiles ("parallel/t2/split3/ragged":
//   q_block 1, kv_block 5, 3 splits);
// - `extra_threads` > 2: the threaded kernels on that many threads too, with
//   and without 4 splits (more threads than work items);
// - auto on 1 and 2 threads.
std::vector<Variant> KernelVariants(int extra_threads = 0);

// The targets the per-target tests iterate: SupportedTargets(), or those
// named in the environment variable ATTN_TEST_TARGETS (comma-separated,
// e.g. "SVE2_128,SVE"), so that a rerun at another SIMD vector length
// under an emulator (.ci/arm.sh) repeats only the targets whose code
// depends on it; a name with a leading '-' is removed ("-EMU128": every
// supported target but EMU128, as the ASan run of .ci/reliability.sh
// takes them). A name to test that this CPU does not run, or an empty
// list, is a test failure.
std::vector<std::string> TestTargets();

// The kernel tests' core: the naive kernel's error on `owned` gives the
// bound (BoundFromNaive); then every variant on every target of
// TestTargets() must meet it. `after(where)` runs after each variant (extra
// checks on owned's buffers); `where` is "<target> <variant>".
void ExpectVariantsWithinNaiveBound(OwnedProblem& owned, const std::vector<Variant>& variants,
                                    const std::function<void(const std::string&)>& after = {});

// Runs `kernel` with `options` on `owned` (outputs cleared first) and
// returns its errors against `ref`.
Errors RunAndCompare(OwnedProblem& owned, const reference::Result& ref, const Options& options);

// The bound of the bf16 dot-product paths (docs/precision.md; derived in
// tests/bf16dot_test.cc): per output element B32 + 2^-8 · ref(|V|), with
// B32 the float32 kernels' bound (BoundFromNaive) on the same all-bf16
// problem and ref(|V|) the float64 reference with |V| in place of V; lse
// within B32's lse bound.
struct Bf16DotBound {
  double b32 = 0, lse = 0;
  reference::Result abs_v;
};
Bf16DotBound MakeBf16DotBound(OwnedProblem& o, const reference::Result& ref);
// The first element of o's outputs outside the bound, described, or "".
std::string FirstBf16DotViolation(const OwnedProblem& o, const reference::Result& ref,
                                  const Bf16DotBound& bound);

}  // namespace attn::test
