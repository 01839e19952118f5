// The one internal interface every kernel implements.
//
// The public entry point (dispatch/api.cc) validates the attn::Problem,
// resolves defaults (scale, value_dim, tiles, threads) and hands the kernel a
// validated problem. Kernels see attention one head at a time through
// HeadView: plain pointers and row strides for a single (batch, head) pair,
// with the causal mask reduced to one offset. Sub-views over a range of
// query rows or keys (used for query blocks and split-KV) are again
// HeadViews, so each kernel's per-head code never needs to know about
// batches, GQA or layouts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attn/attn.h"
#include "kernels/common/convert.h"

namespace attn::internal {

// Visible(i, j) <=> j <= i + causal_offset. Without a causal mask the offset
// is "infinite" (every key visible).
inline constexpr int64_t kNoCausal = std::numeric_limits<int64_t>::max() / 4;

// Keys [begin, end) of a view whose keys are not evenly strided in memory
// (a paged KV cache's runs of consecutive pages): key `begin` is at k and v,
// the others at the view's k_stride / v_stride from it.
struct KeySpan {
  int64_t begin = 0, end = 0;
  const void* k = nullptr;
  const void* v = nullptr;
};

// Keys of a view that are contiguous in memory from one key on.
struct KeyRun {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t keys = 0;  // contiguous keys from there, to the view's end at most
};

// A decode walk (kernels/decode/walk_table.h: the rows, in the order
// tried); kAuto: the first row that takes the view.
enum class DecodeWalk : uint8_t { kAuto, kAmxTiles, kPairRow, kPairTiled, kRow, kPipelined, kTiled };

struct HeadView {
  // Q, K, V and O have element types q_type, k_type, v_type, out_type
  // (attn::DType); their strides and offsets are in elements of that type.
  const void* q = nullptr;  // [tq][d], row stride q_stride
  const void* k = nullptr;  // [tk][d], row stride k_stride
  const void* v = nullptr;  // [tk][dv], row stride v_stride
  void* out = nullptr;      // [tq][dv], row stride out_stride
  float* lse = nullptr;      // [tq], stride lse_stride; may be null
  const float* mask = nullptr;  // additive M[i][j]; may be null
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;
  int64_t lse_stride = 0, mask_row_stride = 0, mask_col_stride = 0;
  int64_t tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1.0f;
  int64_t causal_offset = kNoCausal;
  // Score modifiers (attn.h "Score modifiers"), in this view's coordinates:
  // row i's diagonal key is i + diag_offset.
  int64_t diag_offset = 0;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  float softcap = 0.0f;      // 0: none
  float alibi_slope = 0.0f;  // 0: none
  // The rows' sink logit, -inf for none. It is one virtual key: code that
  // splits the keys into sub-views (Keys) gives it to exactly one of them.
  float sink = -std::numeric_limits<float>::infinity();
  // Grouped-query decode views (rows are query heads): row r's sink is
  // row_sinks[r] instead.
  const float* row_sinks = nullptr;
  float Sink(int64_t r) const { return row_sinks ? row_sinks[r] : sink; }
  bool HasScoreModifiers() const {
    return window_left >= 0 || window_right >= 0 || softcap != 0.0f || alibi_slope != 0.0f ||
           sink != -std::numeric_limits<float>::infinity() || row_sinks;
  }
  // Row i sees no key before KeyBegin(i) (its window's left end), and none
  // from VisibleEnd(i) on (the causal limit and the window's right end);
  // both grow with i, so a block of rows needs [KeyBegin(first),
  // VisibleEnd(last)).
  int64_t KeyBegin(int64_t i) const {
    if (window_left < 0) return 0;
    return std::clamp<int64_t>(i + diag_offset - window_left, 0, tk);
  }
  int64_t VisibleEnd(int64_t i) const {
    const int64_t end = KeyEnd(i);
    if (window_right < 0) return end;
    return std::clamp<int64_t>(i + diag_offset + window_right + 1, 0, end);
  }
  // Whether the window lets row i see key j (the causal limit apart).
  bool InWindow(int64_t i, int64_t j) const {
    const int64_t diag = i + diag_offset;
    return (window_left < 0 || j >= diag - window_left) &&
           (window_right < 0 || j <= diag + window_right);
  }
  DType q_type = DType::kF32, k_type = DType::kF32, v_type = DType::kF32,
        out_type = DType::kF32;
  // Keys in spans (null: key j at k + j * k_stride, and v likewise): view
  // key j is key j + span_shift of spans[0 .. span_count), which cover it in
  // increasing order. The streaming kernel and the bf16 dot-product and
  // AMX kernels read spans (their key tiles span the spans' boundaries,
  // RunAt); the executor of the serving calls hands them to no other
  // kernel (KernelImpl::run_spans).
  const KeySpan* spans = nullptr;
  int64_t span_count = 0, span_shift = 0;
  // Bytes from a span's k (v) to this view's rows: spans give kv head 0's
  // rows, and the view of kv head g reads g head strides further.
  int64_t span_k_bytes = 0, span_v_bytes = 0;
  // The walk a narrow view tries first (RunConfig::decode_walk).
  DecodeWalk decode_walk = DecodeWalk::kAuto;

  // Where key j is, and how many keys follow it contiguously. *hint (start
  // at 0) keeps the last span found: callers walk keys in increasing order,
  // so the search is amortised O(1) per call.
  KeyRun RunAt(int64_t j, int64_t* hint) const {
    if (!spans) return {KRow(j), VRow(j), tk - j};
    const int64_t s = j + span_shift;
    int64_t i = *hint;
    if (i >= span_count || spans[i].begin > s) i = 0;
    while (spans[i].end <= s) ++i;
    *hint = i;
    const int64_t at = s - spans[i].begin;
    return {ElementOffset(static_cast<const char*>(spans[i].k) + span_k_bytes, k_type,
                          at * k_stride),
            ElementOffset(static_cast<const char*>(spans[i].v) + span_v_bytes, v_type,
                          at * v_stride),
            std::min(spans[i].end - s, tk - j)};
  }

  const void* QRow(int64_t i) const { return ElementOffset(q, q_type, i * q_stride); }
  const void* KRow(int64_t j) const { return ElementOffset(k, k_type, j * k_stride); }
  const void* VRow(int64_t j) const { return ElementOffset(v, v_type, j * v_stride); }
  void* OutRow(int64_t i) const { return ElementOffset(out, out_type, i * out_stride); }

  bool Visible(int64_t i, int64_t j) const { return j <= i + causal_offset; }
  // Row i sees keys [0, KeyEnd(i)) (its causal limit, within [0, tk]); the
  // keys a block of rows needs are those of its last row.
  int64_t KeyEnd(int64_t i) const { return std::min(tk, std::max<int64_t>(0, i + causal_offset + 1)); }

  // Rows [begin, end) of the queries (and outputs).
  HeadView Rows(int64_t begin, int64_t end) const;
  // Keys [begin, end): scores and outputs as if only those keys existed.
  HeadView Keys(int64_t begin, int64_t end) const;
};

// How an all-bf16 problem multiplies (attn.h "bf16 dot-product paths";
// chosen per call by dispatch/dot_path.h).
enum class DotPath {
  kWiden,               // widened to float32: the exact path of every type mix
  kAvx512Bf16,          // vdpbf16ps, AVX3 target, CPU with AVX512-BF16
  kAvx512Bf16Emulated,  // the same kernels over the portable emulation
  kAmx,                 // AMX tiles (tdpbf16ps), AVX3 target, CPU and OS with AMX-BF16
  kAmxEmulated,         // the AMX kernels over the emulated tiles
  kArmBfdot,            // BFDOT (FEAT_BF16), NEON target on aarch64
  kArmBfdotEmulated,    // the bf16 dot-product kernels over BFDOT's emulation
};

// A resolved run request: tiles with no zero fields, threads >= 1, and the
// call's dot path (what the bf16 dot-product rows run: hardware or emulated
// instructions).
struct RunConfig {
  Tiles tiles;
  int threads = 1;
  DotPath dot_path = DotPath::kWiden;
  // Added to every row's diagonal key (attn.h "Score modifiers": the window
  // and ALiBi positions), which the problem's causal alignment puts at
  // i + T_k - T_q or i. 0 for attention(); the serving executor runs
  // sub-problems over a sequence's key and row ranges whose diagonals are
  // the sequence's, not the sub-problem's own.
  int64_t diag_shift = 0;
  // Options::decode_walk: the walk the narrow views try first
  // (kernels/decode/walk_table.h); kAuto, the table's order.
  DecodeWalk decode_walk = DecodeWalk::kAuto;
};

// The (batch b, query head h) view of a validated problem. GQA maps query
// head h to key/value head h / (q_heads / kv_heads). diag_shift
// (RunConfig::diag_shift) moves every row's diagonal key by that many keys.
HeadView MakeHeadView(const Problem& p, int64_t b, int64_t h, int64_t diag_shift);

// The independent units of work of a validated problem, as views: one per
// (batch, query head); or, for grouped-query decode (T_q = 1, query heads
// sharing K/V, every key visible to the single query), one per (batch, kv
// head) whose rows are the group's query heads. Then one SIMD panel serves
// the whole group and each K/V row is read once per group instead of once
// per query head: decode is bound by reading K and V, and GQA divides that.
class HeadViews {
 public:
  // The call's diag_shift and decode_walk (RunConfig) go to every view.
  HeadViews(const Problem& problem, const RunConfig& config);
  int64_t size() const { return count_; }
  HeadView operator[](int64_t index) const;
  bool grouped() const { return grouped_; }
  int64_t rows() const { return rows_; }  // rows per view

 private:
  const Problem* problem_;
  int64_t diag_shift_;
  DecodeWalk decode_walk_;
  bool grouped_;
  int64_t count_, rows_;
};

// Every kernel: computes the whole (validated) problem.
using KernelFn = void (*)(const Problem& problem, const RunConfig& config);

// What the parallel kernel needs from the chosen SIMD target: the panel
// width (q_block is rounded up to it) and a single-threaded kernel on one
// view, with the calling thread's scratch: the streaming kernel's, or the
// bf16 dot-product kernel's (kernels/bf16dot/bf16dot.h).
struct ParallelTarget {
  int panel_width;
  void (*run_view)(const HeadView& view, const Tiles& tiles);
};
// The streaming kernel's per-view function on the current target
// (kernels/streaming/streaming.cc), which the parallel kernel spreads over
// threads.
ParallelTarget StreamingTarget();
// The bf16 dot-product kernel's, per instruction layer
// (kernels/bf16dot/bf16dot.cc): the AMX kernel hands it the narrow views
// the decode walk table gives the pair walks.
enum class PairDotLayer {
  kAvx512Bf16Emulated,  // vdpbf16ps's semantics, portable: every target
  kAvx512Bf16,          // vdpbf16ps: AVX3 target, CPU with AVX512-BF16
  kArmBfdotEmulated,    // Arm BFDOT's semantics (round to odd), portable: every target
  kArmBfdot,            // BFDOT: NEON's kernels on aarch64, CPU with FEAT_BF16
};
ParallelTarget Bf16DotTarget(PairDotLayer layer);
// The parallel kernel over `target`'s per-view function (kernels/parallel/).
void ParallelAttentionWith(const ParallelTarget& target, const Problem& problem,
                           const RunConfig& config);

// View `view` of `problem` (one of its HeadViews) with its keys in `spans`
// (kv head 0's rows; the problem's k and v, which the view's head offsets
// are taken from, are not read).
HeadView WithSpans(HeadView view, const Problem& problem, const KeySpan* spans,
                   int64_t span_count);
// `target`'s per-view function over every view of a problem whose keys are
// `spans`, one view after another on the calling thread (the serving
// executor's items each run on one thread): the span entry point of the
// bf16 dot-product and AMX rows (dispatch/kernel_table.h run_spans).
void SpansAttentionWith(const ParallelTarget& target, const Problem& problem,
                        const KeySpan* spans, int64_t span_count, const RunConfig& config);

// The independent units of work of a problem (HeadViews(problem).size():
// one per (batch, query head), or per kv head for grouped-query decode),
// which the tile rule's split-KV divides among threads.
int64_t WorkItems(const Problem& problem);

// Query rows per panel of the SIMD kernels on the current target (two
// vectors of floats: 8 on SSE4/EMU128, 16 on AVX2, 32 on AVX-512): the unit
// of the tile rule's q_block (kernels/common/panel_width.cc).
int PanelWidth();

}  // namespace attn::internal
