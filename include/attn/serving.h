// attn serving calls: many sequences of different lengths in one call, as an
// inference server batches them, with FlashAttention 2's conventions:
//
//   attn::VarlenAttention  ~ flash_attn_varlen_func: packed Q/K/V tokens
//                            [total_tokens, heads, d] with cumulative int32
//                            sequence offsets cu_seqlens_q / cu_seqlens_k;
//   attn::PagedAttention   ~ flash_attn_with_kvcache: K and V in fixed-size
//                            pages of one pool [num_blocks, block_size,
//                            kv_heads, d], an int32 block table [batch,
//                            max_blocks] and per-sequence cache lengths; the
//                            new tokens' k/v are optionally appended into the
//                            pages first, then attention runs.
//
// Conventions (both calls):
// - Sequence b has T_q(b) queries and T_k(b) keys. Either may be 0. T_q = 0:
//   nothing is read or written for it. T_k = 0 with T_q > 0: every query row
//   sees no key, and gets the fully masked row of attn::attention: output 0,
//   log-sum-exp -inf.
// - Causal masks are applied per sequence, on that sequence's own T_q and
//   T_k: Causal::kBottomRight (FlashAttention's `causal=True`): query i sees
//   keys j <= T_k - T_q + i, so the last query sees every key (prefill,
//   chunked prefill and decode alike); kTopLeft: j <= i. A row that sees no
//   key (bottom-right with T_q > T_k) is fully masked: 0 and -inf.
// - GQA: kv_heads divides q_heads; query head h reads K/V head
//   h / (q_heads / kv_heads). K and V are never copied or repeated.
// - Element types: Q, K, V (or the pools), the new k/v and O are each f32,
//   bf16 or f16, independently (attn::DType), with attn::attention's
//   precision contract (docs/precision.md); K, V, the pools and the new k/v
//   may also be q8_0 (ggml's blocks: head_dim / value_dim and their strides
//   multiples of 32, see attn::DType::kQ8_0). lse is float32.
// - Strides are in elements. The last dimension (d, d_v) is contiguous.
// - Errors: every invalid field throws attn::Error naming it and its value
//   (e.g. "attn: cu_seqlens_k[3] must be >= cu_seqlens_k[2] (70) (offsets
//   are non-decreasing), got 64"), before anything is written: not the
//   output, not the lse, not the pool.
// - Options: the kernel (every kernel of attn::Kernels(), or auto), threads
//   and tiles as for attn::attention. Threads spread the whole batch: one
//   work list over (sequence, kv head, query block, key range) items,
//   largest first, so one long sequence next to many short ones keeps every
//   thread busy (its keys are split, and the parts merged by log-sum-exp).
//   Tiles::q_block and kv_block apply to every kernel call; kv_splits is
//   not used (the keys are split across the whole batch instead).
//   Additive masks are not taken (neither FlashAttention call has one).
// - Score modifiers (window, softcap, alibi_slopes, sinks; attn.h "Score
//   modifiers") apply per sequence, on its own T_q and T_k, as
//   attn::attention applies them to one sequence.
#pragma once

#include <cstdint>
#include <optional>

#include "attn/attn.h"

namespace attn {

// A read-only packed tensor [tokens, heads, cols] (cols contiguous): token
// t, head h starts at element t * token_stride + h * head_stride. The
// tokens of all sequences follow each other (sequence b's token r is token
// cu_seqlens[b] + r). Dense [total, H, d] is token_stride = H * d,
// head_stride = d.
struct PackedTensor {
  const void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  DType dtype = DType::kF32;
};

// The writable counterpart, for O [total_q, q_heads, value_dim].
struct PackedOutput {
  void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  DType dtype = DType::kF32;
  operator PackedTensor() const { return {data, token_stride, head_stride, dtype}; }
};

// Optional log-sum-exp output lse[t][h] (natural log), float32; token t of
// the packed queries, query head h. FlashAttention's varlen layout
// [heads, total_q] is token_stride = 1, head_stride = total_q.
struct PackedLse {
  float* data = nullptr;  // nullptr: not requested
  int64_t token_stride = 0;
  int64_t head_stride = 1;
};

// ---- Variable-length batches ---------------------------------------------
struct VarlenProblem {
  int64_t batch = 0;     // sequences; cu_seqlens_q/_k have batch + 1 entries
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // must divide q_heads
  int64_t head_dim = 0;  // d, of Q and K
  std::optional<int64_t> value_dim;  // d_v; default head_dim

  // Cumulative offsets: sequence b's queries are tokens [cu_seqlens_q[b],
  // cu_seqlens_q[b+1]) of q; its keys tokens [cu_seqlens_k[b],
  // cu_seqlens_k[b+1]) of k and v. Each starts at 0 and is non-decreasing;
  // the last entry is the total token count of the packed tensors.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // FlashAttention's bounds on T_q(b) and T_k(b): when > 0 each length must
  // not exceed them (an error names the sequence); 0: not checked.
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;

  PackedTensor q;    // [total_q, q_heads, head_dim]
  PackedTensor k;    // [total_k, kv_heads, head_dim]
  PackedTensor v;    // [total_k, kv_heads, value_dim]
  PackedOutput out;  // [total_q, q_heads, value_dim]
  PackedLse lse;     // optional [total_q, q_heads]

  std::optional<float> scale;  // default 1/sqrt(head_dim)
  Causal causal = Causal::kNone;

  // Score modifiers (attn.h "Score modifiers"), per sequence on its own
  // T_q(b) and T_k(b): row i's diagonal key is i + T_k(b) - T_q(b) (causal
  // kNone or kBottomRight, FlashAttention's) or i (kTopLeft). window and
  // softcap as FlashAttention's window_size and softcap; alibi_slopes[b *
  // batch_stride + h] (b the sequence; batch_stride 0: shared); sinks[h]
  // one logit per query head joining every row's normaliser (a fully
  // masked row, T_k(b) = 0 included, gets output 0 and lse sink[h]).
  Window window;
  float softcap = 0.0f;
  AlibiSlopes alibi_slopes;
  SinkLogits sinks;

  int64_t ValueDim() const { return value_dim ? *value_dim : head_dim; }
};

// Attention of every sequence on its own keys. Throws attn::Error on
// invalid input (nothing written). Options::round_inputs_to_bf16 is taken
// (bf16 copies of the packed q, k, v, as attn::attention makes them).
void VarlenAttention(const VarlenProblem& problem, const Options& options = {});

// ---- Paged KV cache -------------------------------------------------------
// One page pool [num_blocks, block_size, kv_heads, cols] (cols contiguous):
// block n, slot s, head g starts at element n * block_stride + s *
// row_stride + g * head_stride. Dense is block_stride = block_size *
// kv_heads * cols, row_stride = kv_heads * cols, head_stride = cols. The
// pool is written only when new tokens are appended (PagedProblem::k_new).
struct PagePool {
  void* data = nullptr;
  int64_t block_stride = 0;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
  DType dtype = DType::kF32;
};

struct PagedProblem {
  int64_t batch = 0;  // sequences
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // must divide q_heads
  int64_t head_dim = 0;
  std::optional<int64_t> value_dim;

  int64_t num_blocks = 0;  // pages in the pool, >= 1
  int64_t block_size = 0;  // tokens per page, >= 1 (any size: 1, 16, 128 ...)
  PagePool k_cache;        // [num_blocks, block_size, kv_heads, head_dim]
  PagePool v_cache;        // [num_blocks, block_size, kv_heads, value_dim]

  // block_table[b * block_table_stride + p] (p < max_blocks) is the pool
  // block holding sequence b's tokens [p * block_size, (p + 1) * block_size).
  // Only the entries of pages a sequence uses (its first ceil(T_k(b) /
  // block_size)) are read, and each must be in [0, num_blocks); the rest
  // may hold anything (-1, say). Blocks may be shared between sequences
  // (prefix caching): they are read in place by each, never copied.
  const int32_t* block_table = nullptr;
  int64_t max_blocks = 0;          // entries per sequence, >= 1
  int64_t block_table_stride = 0;  // elements between rows; 0: max_blocks

  // cache_seqlens[b]: tokens of sequence b already in its pages (>= 0).
  const int32_t* cache_seqlens = nullptr;

  // Queries: packed [total_q, q_heads, head_dim]. With cu_seqlens_q (batch
  // + 1 offsets, as VarlenProblem's) sequence b has its own T_q(b) (chunked
  // prefill next to decode in one call); without it every sequence has
  // q_len queries and sequence b's start at token b * q_len (FlashAttention's
  // [batch, seqlen_q, heads, d] is the packed layout with q_len = seqlen_q).
  PackedTensor q;
  const int32_t* cu_seqlens_q = nullptr;
  int64_t q_len = 0;  // used when cu_seqlens_q is null

  // Optional new tokens, appended into the pages at positions
  // [cache_seqlens[b], cache_seqlens[b] + T_new(b)) before attention (k_new
  // and v_new both, or neither): packed [total_new, kv_heads, head_dim /
  // value_dim] with cu_seqlens_new or a uniform new_len, like the queries.
  // Values are rounded once to the pool's dtype (to nearest even); into a
  // q8_0 pool they are quantised per block as attn::QuantizeQ8_0 does (and
  // must be quantisable: finite, |x| < 65520 · 127, else an Error naming
  // the element), or copied block for block when k_new / v_new are q8_0
  // too. All
  // appends complete before any attention reads, so a sequence reading a
  // page another sequence appends into sees the appended tokens; but no
  // page may be appended into by two sequences (an error). The pools must
  // then not overlap the new tokens or q, and k_cache and v_cache must not
  // overlap each other (separate pools).
  PackedTensor k_new;
  PackedTensor v_new;
  const int32_t* cu_seqlens_new = nullptr;
  int64_t new_len = 0;  // used when cu_seqlens_new is null

  // T_k(b) = cache_seqlens[b] + T_new(b), at most max_blocks * block_size.
  PackedOutput out;  // [total_q, q_heads, value_dim]; must not overlap the pool
  PackedLse lse;     // optional [total_q, q_heads]

  std::optional<float> scale;  // default 1/sqrt(head_dim)
  Causal causal = Causal::kNone;

  // Score modifiers (attn.h "Score modifiers"), per sequence on its own
  // T_q(b) and T_k(b): row i's diagonal key is i + T_k(b) - T_q(b) (causal
  // kNone or kBottomRight, FlashAttention's) or i (kTopLeft). window and
  // softcap as FlashAttention's window_size and softcap; alibi_slopes[b *
  // batch_stride + h] (b the sequence; batch_stride 0: shared); sinks[h]
  // one logit per query head joining every row's normaliser (a fully
  // masked row, T_k(b) = 0 included, gets output 0 and lse sink[h]).
  Window window;
  float softcap = 0.0f;
  AlibiSlopes alibi_slopes;
  SinkLogits sinks;

  int64_t ValueDim() const { return value_dim ? *value_dim : head_dim; }
};

// Appends (when k_new is given), then attention of every sequence over its
// T_k(b) cached keys, read from the pages in place. Throws attn::Error on
// invalid input, before anything (pool included) is written.
// Options::round_inputs_to_bf16 is an error here (it would copy the pool;
// keep the pool in bf16 instead).
void PagedAttention(const PagedProblem& problem, const Options& options = {});

}  // namespace attn
