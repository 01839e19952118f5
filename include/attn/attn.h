// attn: SIMD CPU kernels for scaled dot-product attention.
//
//   O = softmax(Q·Kᵀ · scale + M) · V        (row softmax, row max subtracted)
//
// One problem description (attn::Problem) and one entry point
// (attn::attention) serve every kernel. Q, K, V and O are each float32,
// bfloat16 or float16 (IEEE binary16), independently (attn::DType), and K
// and V may also be ggml's 8-bit q8_0 blocks (a llama.cpp KV cache, read in
// place); the mask
// and lse are float32 and every kernel accumulates in float32 (the
// precision contract is in the README). Tensors are addressed through
// element strides, so [B,H,T,d], [B,T,H,d] and padded rows (a KV cache with
// spare capacity) all work without copies. The innermost dimension (d or
// d_v) must be contiguous.
//
// Errors: every invalid field throws attn::Error, whose message names the
// field and its value (e.g. "attn: q_len must be >= 1, got 0"). Validation
// happens before any work: on error nothing is written to `out` or `lse`.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn {

// Element type of Q, K, V and O. Values are the C API's attn_dtype_t.
enum class DType : int {
  kF32 = 0,   // IEEE binary32
  kBF16 = 1,  // bfloat16: the top 16 bits of a binary32 (8-bit exponent)
  kF16 = 2,   // IEEE binary16 (5-bit exponent, 10 mantissa bits)
  // ggml's q8_0 (llama.cpp's 8-bit KV cache), for K and V only: a row of n
  // elements is n / 32 blocks of 34 bytes, each an IEEE binary16 scale s
  // (little-endian) followed by 32 int8 values q[0..31]; element i of a
  // block is q[i] · s (exact in float32: 8 x 11 significant bits). The
  // row's length (head_dim for K, value_dim for V) must be a multiple of
  // 32. Strides stay in elements and must be multiples of 32 (whole
  // blocks): an offset of e elements is e / 32 · 34 bytes (DTypeBytes).
  // Q and O can never be q8_0 (attn::Error naming q.dtype / out.dtype).
  kQ8_0 = 3,
  // ggml's q4_0 (llama.cpp's 4-bit KV cache, `--cache-type-k q4_0`), for K
  // and V only, in blocks of 32 as q8_0: each 18 bytes, an IEEE binary16
  // scale d (little-endian) followed by 16 bytes whose low nibbles hold
  // elements 0-15 and high nibbles elements 16-31; element i is
  // (n_i - 8) · d for its nibble n_i in 0..15 (exact in float32). Row
  // lengths and strides as for q8_0 (multiples of 32; an offset of e
  // elements is e / 32 · 18 bytes).
  kQ4_0 = 4,
};
// "f32", "bf16", "f16", "q8_0", "q4_0"; "?" for a value outside the enum.
const char* DTypeName(DType type);
// Parses "f32", "bf16", "f16", "q8_0" or "q4_0" (also "float32", "bfloat16",
// "float16"); throws Error (field "dtype") naming the accepted names.
DType ParseDType(const std::string& name);
// Bytes per element: 4 or 2; 0 for q8_0 and q4_0, whose elements come in blocks
// (DTypeBlockBytes), and for a value outside the enum.
int DTypeSize(DType type);
// The storage unit of a type: DTypeBlockElements elements in
// DTypeBlockBytes bytes. 1 element in 4 or 2 bytes for f32 / bf16 / f16;
// 32 in 34 for q8_0, 32 in 18 for q4_0 (0 and 0 outside the enum).
int DTypeBlockElements(DType type);
int DTypeBlockBytes(DType type);
// Bytes of `elements` consecutive elements (a multiple of
// DTypeBlockElements): elements / block elements · block bytes.
int64_t DTypeBytes(DType type, int64_t elements);

// ggml's q8_0 quantiser, exactly its reference (quantize_row_q8_0_ref):
// for each block of 32 values, amax = max |x|, s = amax / 127, and
// q[i] = roundf(x[i] / s) (x[i] · (1 / s) in float32, rounded half away
// from zero; 0 when s is 0), the scale stored as s rounded to binary16 (to
// nearest even). `n` must be a multiple of 32 (Error field "n") and every
// x finite with a block's scale within binary16's range, amax < 65520 · 127
// (Error field "x[i]" naming the first offender); `out` receives
// n / 32 · 34 bytes, nothing when an Error is thrown.
void QuantizeQ8_0(const float* x, int64_t n, void* out);
// The values of n elements of q8_0 blocks (n a multiple of 32, Error field
// "n"): out[i] = q[i] · s, exactly.
void DequantizeQ8_0(const void* blocks, int64_t n, float* out);
// ggml's q4_0 quantiser, exactly its reference (quantize_row_q4_0_ref): for
// each block of 32 values, max = the value of largest magnitude (the first
// of ties), d = max / -8, n[i] = min(15, trunc(x[i] · (1 / d) + 8.5)) (0..15;
// 8 when d is 0), d stored rounded to binary16 (to nearest even). Errors
// as QuantizeQ8_0's, the scale bound |max| < 65520 · 8; `out` receives
// n / 32 · 18 bytes, nothing when an Error is thrown.
void QuantizeQ4_0(const float* x, int64_t n, void* out);
// The values of n elements of q4_0 blocks (n a multiple of 32, Error field
// "n"): out[i] = (n_i - 8) · d, exactly.
void DequantizeQ4_0(const void* blocks, int64_t n, float* out);

// Conversions between float and the 16-bit types' bit patterns, as the
// kernels do them: widening is exact; narrowing rounds to nearest, ties to
// even, keeps ±0, ±inf and NaN (quiet), and overflows to ±inf (f16 above
// 65520). For filling inputs and reading outputs.
uint16_t BFloat16Bits(float value);
uint16_t Float16Bits(float value);
float FromBFloat16Bits(uint16_t bits);
float FromFloat16Bits(uint16_t bits);

// A read-only tensor of logical shape [batch, heads, rows, cols] with cols
// contiguous, of element type `dtype`. Strides are in elements (not bytes)
// and may be 0 (broadcast) for batch/heads; for q8_0 they are multiples of
// 32 (whole blocks; see DType::kQ8_0).
struct ConstTensor {
  const void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  DType dtype = DType::kF32;
};

// The writable counterpart, for O. Converts to ConstTensor, so that
// DenseBHTD(non_const_pointer, ...) also serves for Q, K and V.
struct Tensor {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  DType dtype = DType::kF32;
  operator ConstTensor() const { return {data, batch_stride, head_stride, row_stride, dtype}; }
};

// Dense row-major [B, H, T, cols] strides; float32 unless a dtype is given.
ConstTensor DenseBHTD(const float* data, int64_t heads, int64_t rows,
                      int64_t cols);
Tensor DenseBHTD(float* data, int64_t heads, int64_t rows, int64_t cols);
ConstTensor DenseBHTD(const void* data, DType dtype, int64_t heads, int64_t rows,
                      int64_t cols);
Tensor DenseBHTD(void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols);
// Dense row-major [B, T, H, cols] strides (the "sequence-major" layout).
ConstTensor DenseBTHD(const float* data, int64_t heads, int64_t rows,
                      int64_t cols);
Tensor DenseBTHD(float* data, int64_t heads, int64_t rows, int64_t cols);
ConstTensor DenseBTHD(const void* data, DType dtype, int64_t heads, int64_t rows,
                      int64_t cols);
Tensor DenseBTHD(void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols);

// Causal masking. A masked (query i, key j) pair is removed from the softmax
// entirely (as if its score were -inf).
enum class Causal {
  kNone,
  // Query i sees keys j <= (kv_len - q_len) + i: the last query sees every
  // key. This is what KV-cache prefill/decode needs (queries are the newest
  // positions). Equal to top-left when q_len == kv_len.
  kBottomRight,
  // Query i sees keys j <= i (PyTorch's is_causal=True alignment).
  kTopLeft,
};

// Additive float mask M[b][h][i][j], added to the scaled scores. Entries may
// be -inf. Any stride may be 0 to broadcast (e.g. one [T_q, T_k] mask shared
// by every batch and head: batch_stride = head_stride = 0).
struct AdditiveMask {
  const float* data = nullptr;  // nullptr: no additive mask
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// ---- Score modifiers (FlashAttention 2's conventions) ----------------------
// Positions: query row i's "diagonal" key is i + T_k - T_q (bottom-right
// alignment, FlashAttention's, used when causal is kNone or kBottomRight)
// or i (kTopLeft). Writing diag(i) for it:
// - Sliding window: key j is visible only if diag(i) - left <= j <= diag(i)
//   + right; -1 leaves that side unbounded. With causal, j <= diag(i) holds
//   as well (so right > 0 changes nothing). Keys outside are masked (-inf).
struct Window {
  int64_t left = -1;   // >= 0, or -1: unbounded
  int64_t right = -1;  // >= 0, or -1: unbounded
};
// - Soft-capping (Problem::softcap, 0 = none): the scaled score s becomes
//   cap · tanh(s / cap), before the ALiBi bias and the additive mask.
// - ALiBi: the bias -slope · |diag(i) - j| is added to the (capped) score.
//   One float32 slope per query head: slope[b * batch_stride + h], with
//   batch_stride 0 (the same slopes for every batch) or >= q_heads.
struct AlibiSlopes {
  const float* data = nullptr;  // nullptr: no ALiBi
  int64_t batch_stride = 0;
};
// - Attention sinks (gpt-oss): one float32 logit per query head, sink[h],
//   that joins each row's softmax normaliser and contributes no value: a
//   virtual key with score sink[h] (not scaled, capped or biased) and V = 0.
//   The lse counts it: lse = log(Σ_visible exp(s_j) + exp(sink)), so a row
//   whose keys are all masked has output 0 and lse = sink. As a key, it is
//   merged like one: when a problem's keys are split into parts
//   (split-KV, MergeAttention, ring attention), exactly one part may carry
//   the sinks, the others none, and the merge is exact. -inf is no sink.
struct SinkLogits {
  const float* data = nullptr;  // nullptr: no sinks
  int64_t size = 0;             // must be q_heads
};

// Read-only log-sum-exp values lse[b][h][i] (an input of MergeAttention).
// Strides in elements; may be 0 to broadcast.
struct ConstLse {
  const float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 1;
};

// Optional per-row log-sum-exp output: lse[b][h][i] = log Σ_j exp(s_ij) over
// the visible keys, with s the scaled, masked scores (natural log). A fully
// masked row gets -inf (and output 0). Converts to ConstLse.
struct LseOutput {
  float* data = nullptr;  // nullptr: not requested
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t row_stride = 1;
  operator ConstLse() const { return {data, batch_stride, head_stride, row_stride}; }
};

struct Problem {
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // must divide q_heads (GQA; 1 = MQA)
  int64_t q_len = 0;     // T_q
  int64_t kv_len = 0;    // T_k
  int64_t head_dim = 0;  // d, of Q and K
  std::optional<int64_t> value_dim;  // d_v; default: head_dim

  ConstTensor q;  // [batch, q_heads, q_len, head_dim]
  ConstTensor k;  // [batch, kv_heads, kv_len, head_dim]
  ConstTensor v;  // [batch, kv_heads, kv_len, value_dim]
  Tensor out;     // [batch, q_heads, q_len, value_dim]

  std::optional<float> scale;  // default 1/sqrt(head_dim)
  Causal causal = Causal::kNone;
  AdditiveMask mask;
  LseOutput lse;

  // Score modifiers (see "Score modifiers" above); the defaults change
  // nothing.
  Window window;
  float softcap = 0.0f;  // 0: none; else finite and > 0
  AlibiSlopes alibi_slopes;
  SinkLogits sinks;
  bool HasScoreModifiers() const {
    return window.left >= 0 || window.right >= 0 || softcap != 0.0f || alibi_slopes.data ||
           sinks.data;
  }

  int64_t ValueDim() const { return value_dim ? *value_dim : head_dim; }
  float Scale() const;
};

enum class KernelId {
  kAuto,       // the tuning table's choice for the shape, else a default rule
  kNaive,      // scalar float32, materialises the T_q x T_k scores
  kBlocked,    // SIMD, whole score rows of a query panel in scratch
  kStreaming,  // SIMD online softmax (flash attention), O(tile) memory
  kParallel,   // OpenMP over heads x query blocks, split-KV for decode
};
// "auto" or the kernel's name in Kernels().
const char* KernelName(KernelId id);
// Parses "auto" or a kernel's name; throws Error listing the names.
KernelId ParseKernel(const std::string& name);

// What a kernel is, as the kernel table (dispatch/kernel_table.cc) lists it
// once: tests, the tuner, attn-bench and the Python package all follow it.
struct KernelInfo {
  KernelId id = KernelId::kNaive;
  const char* name = "";     // KernelName(id); tuning files, Python, attn-bench rows
  const char* summary = "";  // one line
  bool simd = true;          // false: scalar code (slow; benchmarks keep its shapes small)
  bool threaded = false;     // runs Options::threads threads; the others run one
  // The Tiles fields it reads (the tuner varies only these).
  bool uses_q_block = false, uses_kv_block = false, uses_kv_splits = false;
};
// Every kernel once (kAuto is not one), in the table's order: fastest first.
// `auto` without a tuning table runs the first that supports the problem (a
// threaded one only with more than one thread); naive, the simple reference
// every other kernel is tested against, is last.
const std::vector<KernelInfo>& Kernels();
// The entry of `id`; throws Error (field "kernel") for kAuto or a value
// outside the enum.
const KernelInfo& GetKernelInfo(KernelId id);
// Whether `kernel` can compute `problem` (one that attention() accepts); if
// not and `why` is given, a sentence saying why (e.g. the naive kernel's
// score matrix would exceed 1 GiB). kAuto supports every valid problem.
bool KernelSupports(KernelId kernel, const Problem& problem, std::string* why = nullptr);

// Tile and loop parameters of the SIMD kernels. Zero fields mean "choose the
// default for this shape and target" (attn::DefaultTiles).
struct Tiles {
  int q_block = 0;   // query rows per block (rounded up to the panel width)
  int kv_block = 0;  // keys per streamed tile
  int kv_splits = 0; // parallel kernel: key-range splits per (head, q block)
};

struct Options {
  KernelId kernel = KernelId::kAuto;
  int threads = 0;  // 0: OpenMP's default (omp_get_max_threads)
  Tiles tiles;      // overrides; zero fields = default
  // Opt-in to bf16 arithmetic for float32 / f16 inputs: Q, K and V that are
  // not bf16 are first rounded to bf16 (to nearest even; into copies, O(size
  // of Q, K, V) extra memory and one pass over them), and the call computes
  // attention of those bf16 values on the dot path in force ("bf16
  // dot-product paths" below: avx512bf16 / amx where they run). Without it
  // an input is never rounded (exact widening). Meant for prefill: a decode
  // step would copy its whole KV cache; keep such a cache in bf16 instead.
  bool round_inputs_to_bf16 = false;
  // The bf16 dot-product path of this call when Q, K and V are all bf16
  // (after round_inputs_to_bf16), by name ("bf16 dot-product paths" below:
  // "widen", "avx512bf16", "amx", their "-emulated" forms); "" or "auto":
  // ForceDotPath / ATTN_DOT_PATH if set, else the tuning table's entry for
  // the shape (attn-tune times the paths this CPU has), else the default
  // rule. A name that cannot run here is an Error (field "dot_path").
  std::string dot_path;
  // The decode walk the narrow views (decode, GQA groups: at most one
  // vector of query rows) try first, by name ("auto" or "": the table's
  // order; "amx-tiles", "pair-row", "pair-tiled", "row", "pipelined",
  // "tiled"; docs/decode-walks.md). A view the named walk declines takes the
  // table's choice; ExplainChoice says which ran and why. For tests and the
  // tuner: every walk gives results within the same bound. An unknown name
  // is an Error (field "decode_walk").
  std::string decode_walk;
};

// Computes attention; throws attn::Error on invalid input (nothing written).
void attention(const Problem& problem, const Options& options = {});

class Error : public std::invalid_argument {
 public:
  Error(std::string field, std::string value, const std::string& message)
      : std::invalid_argument(message),
        field_(std::move(field)),
        value_(std::move(value)) {}
  const std::string& field() const { return field_; }
  const std::string& value() const { return value_; }

 private:
  std::string field_;
  std::string value_;
};

// ---- Merging partial results ---------------------------------------------
// Attention over keys A ∪ B (disjoint) from attention over A and over B:
// given each part's output O_s and log-sum-exp lse_s (attn::attention with
// `lse` requested, K/V pointing at that key range), per (batch, head, row)
//   lse = log Σ_s exp(lse_s),   O = Σ_s exp(lse_s - lse) · O_s
// which is exactly the softmax over the union, up to rounding. This is
// split-KV decoding (the parallel kernel does it internally) and the
// building block of sequence parallelism across machines (ring attention
// over MPI/NCCL: each rank attends to its key block, then the partial
// (O, lse) pairs are merged). Causal masks compose: parts that every query
// row sees entirely need no mask, and the part holding the last keys uses
// Causal::kBottomRight with its own kv_len.
//
// Conventions:
// - A part whose lse is -inf for a row (no visible key: fully masked, or an
//   empty key range) contributes nothing; its output row is not read (it may
//   hold anything, even NaN).
// - Every part -inf for a row: output row 0, lse -inf (the fully masked row
//   of attn::attention).
// - A NaN lse in any part makes the row's output and lse NaN; +inf (not a
//   valid log-sum-exp) also gives NaN. NaN in a contributing part's output
//   propagates through the sum.
// - Weights and sums are computed in double, outputs rounded once to their
//   element type (each part's and the output's dtype may differ).
struct MergePart {
  ConstTensor out;  // [batch, q_heads, q_len, value_dim], rows contiguous
  ConstLse lse;     // [batch, q_heads, q_len]; required
};

struct MergeProblem {
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t q_len = 0;
  int64_t value_dim = 0;
  const MergePart* parts = nullptr;  // n_parts entries
  int n_parts = 0;                   // >= 1
  // [batch, q_heads, q_len, value_dim]. May be exactly one part's `out`
  // (same data and strides) for in-place accumulation (acc = merge(acc,
  // next)); any other overlap with an input is an error.
  Tensor out;
  // Optional merged log-sum-exp. May be exactly one part's `lse` (same data
  // and strides); any other overlap is an error.
  LseOutput lse;
};

// Merges the parts into `out` (and `lse`). Throws attn::Error naming the
// first invalid field (e.g. "attn: parts[1].lse.data must not be null, got
// null") before writing anything. Single-threaded; O(parts·rows·value_dim).
void MergeAttention(const MergeProblem& problem);

// ---- SIMD targets (Highway) ----------------------------------------------
// Names such as "AVX2", "AVX3", "SSE4", "EMU128".
std::vector<std::string> CompiledTargets();
std::vector<std::string> SupportedTargets();  // compiled and runnable here
// The target the SIMD kernels use now.
std::string CurrentTarget();
// Forces a target for the whole process ("" or "auto": best supported).
// Throws Error for an unknown or unsupported name. The environment variable
// ATTN_TARGET is applied the same way at first use.
void ForceTarget(const std::string& name);

// ---- bf16 dot-product paths ------------------------------------------------
// How the SIMD kernels multiply when Q, K and V are all bf16 (any output
// type). Every other type mix is widened exactly to float32.
//   "widen"                the same exact widening;
//   "avx512bf16"           AVX512-BF16's vdpbf16ps (AVX3 target, a CPU with
//                          the instruction): bf16 products accumulated in
//                          float32, softmax in float32, the weights P
//                          rounded to bf16 before P·V (docs/precision.md);
//                          the default where it runs, else widen;
//   "avx512bf16-emulated"  the same kernels over a portable emulation of the
//                          instruction, bit-exact on normal values, on any
//                          target and CPU: what tests run where the
//                          instruction is missing; slow.
//   "amx"                  AMX tiles: tdpbf16ps for Q·Kᵀ and P·V (AVX3
//                          target, a CPU with AMX-BF16 and an OS that grants
//                          the tile state; the precision of "avx512bf16");
//                          the default where it runs;
//   "amx-emulated"         the AMX kernels over portable emulated tiles, on
//                          any target and CPU; for tests, very slow.
//   "bfdot"                Arm's BFDOT (aarch64 with FEAT_BF16; NEON's
//                          kernels on any target, SVE's too): the kernels
//                          of "avx512bf16" with each pair's two products
//                          summed, then added to the accumulator,
//                          rounded to odd (the instruction's); the
//                          default where it runs;
//   "bfdot-emulated"       the same kernels over a portable emulation of
//                          BFDOT, bit-exact on normal values, on any target
//                          and CPU; for tests, slow.
// Decode on avx512bf16 and amx: a GQA group's view (2 to 16 query heads of
// one kv head) multiplies on bf16 pairs with vdpbf16ps (P rounded to bf16;
// on amx too, whose 16-row tiles would be mostly padding); a view of one
// query row takes the widened narrow path (the faster on the CPUs measured).
std::vector<std::string> DotPaths();           // every name above
std::vector<std::string> SupportedDotPaths();  // those that can run here now
std::string CurrentDotPath();                  // the path in force
// Forces a path for the whole process ("" or "auto": the default, never the
// emulation; "widen" turns the bf16 paths off). Throws
// Error (field "dot_path") for an unknown name or one that cannot run here.
// The environment variable ATTN_DOT_PATH is applied the same way at first use.
void ForceDotPath(const std::string& name);

// The tile defaults the SIMD kernels use for a shape on the current target.
Tiles DefaultTiles(int64_t q_len, int64_t kv_len, int64_t head_dim);

}  // namespace attn

// Variable-length batches and paged KV caches (attn::VarlenAttention,
// attn::PagedAttention; FlashAttention's varlen and kvcache conventions).
#include "attn/serving.h"
