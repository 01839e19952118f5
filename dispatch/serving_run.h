// The executor shared by attn::VarlenAttention and attn::PagedAttention:
// a validated batch of sequences, each with its packed query rows and its
// keys as contiguous segments (the whole packed range for varlen; runs of
// physically consecutive pages for a paged cache), run through the kernel
// table's existing whole-problem entry points on sub-problems built from
// pointers and strides, never by copying K or V.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attn/attn.h"

namespace attn::internal {

// Keys [begin, end) of one sequence, contiguous at the batch's k_row /
// v_row strides: key `begin`, kv head 0 is at k (and v).
struct KeySegment {
  int64_t begin = 0, end = 0;
  const void* k = nullptr;
  const void* v = nullptr;
};

struct ServingSeq {
  int64_t tq = 0, tk = 0;
  const void* q = nullptr;  // query row 0, head 0
  void* out = nullptr;      // output row 0, head 0
  float* lse = nullptr;     // lse of row 0, head 0; null: not requested
  size_t seg_begin = 0, seg_end = 0;  // its keys: segments[seg_begin, seg_end), in key order
};

struct ServingBatch {
  int64_t q_heads = 1, kv_heads = 1, d = 0, dv = 0;
  float scale = 1.0f;
  Causal causal = Causal::kNone;
  DType q_type = DType::kF32, k_type = DType::kF32, v_type = DType::kF32,
        out_type = DType::kF32;
  // Element strides between rows (tokens) and heads.
  int64_t q_row = 0, q_head = 0, k_row = 0, k_head = 0, v_row = 0, v_head = 0;
  int64_t out_row = 0, out_head = 0, lse_row = 0, lse_head = 0;
  // Score modifiers (attn.h "Score modifiers"), per sequence: row i's
  // diagonal key is i + T_k - T_q (kNone, kBottomRight) or i (kTopLeft) of
  // its own lengths. ALiBi: sequence b, query head h's slope is
  // alibi[b * alibi_batch_stride + h]; sinks: [q_heads] (null: none).
  Window window;
  float softcap = 0.0f;
  const float* alibi = nullptr;
  int64_t alibi_batch_stride = 0;
  const float* sinks = nullptr;
  // Key-range splits for threads fall on multiples of this (the page size:
  // a page is never cut into two kernel calls).
  int64_t key_granule = 1;
  std::vector<ServingSeq> seqs;
  std::vector<KeySegment> segments;
};

// Runs every sequence of a validated batch with `options` (kernel, threads,
// tiles; already validated). Writes only the outputs and lse. Throws
// attn::Error ("memory") when scratch cannot be allocated, and the kernel
// table's attn::Error when the chosen kernel declines a sequence; both
// before anything is written. `before_write` (may be empty) runs once the
// plan can no longer fail, before the first output is written: the paged
// call appends its new tokens there, so an error leaves the pool as it was.
void RunServing(const ServingBatch& batch, const Options& options,
                const std::function<void()>& before_write = {});

}  // namespace attn::internal
