// attn::PagedAttention: validation of a PagedProblem (every field, table
// entry, length, stride, byte count and overlap, before anything is
// written: output, lse or pool), the append of the new tokens into their
// pages, then the serving executor with each sequence's keys as segments:
// runs of physically consecutive pages, read in place (no gather).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
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
using internal::RequirePositive;
using internal::Str;
using internal::StridedView;

// Batch + 1 offsets: from the array when given, else uniform `len` per
// sequence (field `len_name`).
std::vector<int64_t> Counts(const char* cu_name, const int32_t* cu, const char* len_name,
                            int64_t len, int64_t batch) {
  if (cu) return internal::CheckOffsets(cu_name, cu, batch);
  if (len < 0) Fail(len_name, Str(len), std::string("must be >= 0 (used when ") + cu_name +
                                            " is null)");
  std::vector<int64_t> offsets(size_t(batch) + 1);
  for (int64_t i = 0; i <= batch; ++i) offsets[size_t(i)] = i * len;
  return offsets;
}

// A pool may be q8_0 (a llama.cpp-style cache): rows of whole blocks, the
// row length named by cols_field.
StridedView CheckPool(const std::string& name, const PagePool& pool, int64_t num_blocks,
                      int64_t block_size, int64_t heads, int64_t cols, const char* cols_field) {
  internal::RequireDType(name, pool.dtype, /*blocks_ok=*/true);
  internal::RequireBlockCols(name, pool.dtype, cols_field, cols);
  if (pool.data == nullptr) Fail(name + ".data", "null", "must not be null");
  static const char* const kNames[4] = {".block_stride", ".row_stride", ".head_stride", nullptr};
  const int64_t extents[4] = {num_blocks, block_size, heads, cols};
  const int64_t strides[4] = {pool.block_stride, pool.row_stride, pool.head_stride, 1};
  return internal::CheckTypedStrides(name, pool.data, 4, extents, strides, kNames, pool.dtype);
}

// New tokens bound for a q8_0 or q4_0 pool are quantised (QuantizeQ8_0's
// or QuantizeQ4_0's rule) unless they are of the pool's type already (then
// their blocks are copied): every block of them must be quantisable,
// checked before anything is written.
void CheckQuantisable(const char* name, const PackedTensor& t, int64_t tokens, int64_t heads,
                      int64_t cols, const char* pool, DType pool_type) {
  if (t.dtype == pool_type) return;
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = i * t.token_stride + h * t.head_stride;
      for (int64_t c = 0; c < cols; ++c) {
        values[size_t(c)] = internal::LoadElement(t.data, t.dtype, base + c);
      }
      for (int64_t c = 0; c < cols; c += DTypeBlockElements(pool_type)) {
        const int64_t bad = internal::BlockUnfitOf(pool_type, values.data() + c);
        if (bad < 0) continue;
        Fail(std::string(name) + "[" + Str(i) + "][" + Str(h) + "][" + Str(c + bad) + "]",
             Str(values[size_t(c + bad)]),
             std::string("must be finite, with ") + internal::BlockScaleBound(pool_type) +
                 ", to be quantised into the " + DTypeName(pool_type) + " " + pool);
      }
    }
}

// Row `src` (cols elements of t) into the pool row at element offset `dst`.
void AppendRow(const PagePool& pool, int64_t dst, const PackedTensor& t, int64_t src,
               int64_t cols, std::vector<float>& row) {
  if (!internal::IsBlockType(pool.dtype)) {
    for (int64_t c = 0; c < cols; ++c) {
      internal::StoreElement(pool.data, pool.dtype, dst + c,
                             internal::LoadElement(t.data, t.dtype, src + c));
    }
    return;
  }
  void* out = internal::ElementOffset(pool.data, pool.dtype, dst);
  if (t.dtype == pool.dtype) {  // the same blocks, byte for byte
    std::memcpy(out, internal::ElementOffset(t.data, t.dtype, src),
                size_t(internal::BytesOf(pool.dtype, cols)));
    return;
  }
  row.resize(size_t(cols));
  for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = internal::LoadElement(t.data, t.dtype, src + c);
  for (int64_t c = 0; c < cols; c += DTypeBlockElements(pool.dtype)) {
    internal::QuantizeBlockOf(pool.dtype, row.data() + c,
                              static_cast<char*>(out) + internal::BytesOf(pool.dtype, c));
  }
}

std::string Entry(int64_t b, int64_t page) {
  return "block_table[" + Str(b) + "][" + Str(page) + "]";
}

}  // namespace

void PagedAttention(const PagedProblem& p, const Options& options) {
  internal::InitTargetsOnce();
  internal::ValidateOptions(options);
  if (options.round_inputs_to_bf16) {
    Fail("round_inputs_to_bf16", "true",
         "is not taken by PagedAttention (it would copy the whole pool; keep the pool in bf16)");
  }
  internal::CheckServingShape(p.batch, p.q_heads, p.kv_heads, p.head_dim, p.value_dim, p.scale);
  internal::CheckServingModifiers(p.batch, p.q_heads, p.window, p.softcap, p.alibi_slopes,
                                  p.sinks);
  const int64_t d = p.head_dim, dv = p.ValueDim(), bs = p.block_size;
  RequirePositive("num_blocks", p.num_blocks);
  RequirePositive("block_size", p.block_size);
  RequirePositive("max_blocks", p.max_blocks);
  if (p.block_table_stride < 0 || (p.batch > 1 && p.block_table_stride != 0 &&
                                   p.block_table_stride < p.max_blocks)) {
    Fail("block_table_stride", Str(p.block_table_stride),
         "must be 0 (dense) or >= max_blocks (" + Str(p.max_blocks) + ")");
  }
  const int64_t table_stride = p.block_table_stride ? p.block_table_stride : p.max_blocks;
  if (p.block_table == nullptr) Fail("block_table", "null", "must not be null");
  if (p.cache_seqlens == nullptr) Fail("cache_seqlens", "null", "must not be null");
  int64_t capacity;
  if (__builtin_mul_overflow(p.max_blocks, bs, &capacity)) {
    Fail("max_blocks", Str(p.max_blocks), "times block_size (" + Str(bs) + ") overflows");
  }

  const std::vector<int64_t> cu_q = Counts("cu_seqlens_q", p.cu_seqlens_q, "q_len", p.q_len, p.batch);
  const std::vector<int64_t> cu_new =
      Counts("cu_seqlens_new", p.cu_seqlens_new, "new_len", p.new_len, p.batch);
  const int64_t total_q = cu_q.back(), total_new = cu_new.back();

  // Lengths, table entries, and the pages each sequence appends into.
  std::vector<int64_t> cache(size_t(p.batch)), tk(size_t(p.batch));
  std::vector<std::tuple<int64_t, int64_t, int64_t>> written;  // (block, sequence, page)
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t c = p.cache_seqlens[b];
    const std::string field = "cache_seqlens[" + Str(b) + "]";
    if (c < 0) Fail(field, Str(c), "must be >= 0");
    const int64_t fresh = cu_new[size_t(b) + 1] - cu_new[size_t(b)];
    const int64_t keys = c + fresh;
    if (keys > capacity) {
      Fail(field, Str(c),
           "plus the sequence's " + Str(fresh) + " new tokens must be <= max_blocks * block_size (" +
               Str(capacity) + "): the block table gives no page beyond");
    }
    cache[size_t(b)] = c;
    tk[size_t(b)] = keys;
    const int32_t* row = p.block_table + b * table_stride;
    for (int64_t page = 0; page * bs < keys; ++page) {
      if (row[page] < 0 || row[page] >= p.num_blocks) {
        Fail(Entry(b, page), Str(row[page]),
             "must be a block of the pool, in [0, num_blocks = " + Str(p.num_blocks) +
                 ") (sequence " + Str(b) + " has " + Str(keys) + " tokens)");
      }
      if (fresh > 0 && (page + 1) * bs > c) written.emplace_back(row[page], b, page);
    }
  }
  std::sort(written.begin(), written.end());
  for (size_t i = 1; i < written.size(); ++i) {
    const auto& [block, b, page] = written[i];
    const auto& [prev_block, prev_b, prev_page] = written[i - 1];
    if (block != prev_block) continue;
    Fail(Entry(b, page), Str(block),
         "must not be a page " + Entry(prev_b, prev_page) +
             " also appends into (two appends into one page; each sequence's new tokens need "
             "pages of their own)");
  }

  const char* const dv_field = p.value_dim ? "value_dim" : "head_dim";
  const StridedView kc =
      CheckPool("k_cache", p.k_cache, p.num_blocks, bs, p.kv_heads, d, "head_dim");
  const StridedView vc = CheckPool("v_cache", p.v_cache, p.num_blocks, bs, p.kv_heads, dv, dv_field);
  const StridedView q = internal::CheckPacked("q", p.q, total_q, p.q_heads, d);
  const StridedView kn =
      internal::CheckPacked("k_new", p.k_new, total_new, p.kv_heads, d, "head_dim");
  const StridedView vn =
      internal::CheckPacked("v_new", p.v_new, total_new, p.kv_heads, dv, dv_field);
  const StridedView out = internal::CheckPacked("out", p.out, total_q, p.q_heads, dv);
  internal::RequireNoSelfOverlap(out, "outputs");
  for (const StridedView* in : {&q, &kn, &vn, &kc, &vc}) internal::RequireDisjoint(out, *in, false);
  if (p.lse.data) {
    const StridedView lse = internal::CheckPackedLse("lse", p.lse, total_q, p.q_heads);
    internal::RequireNoSelfOverlap(lse, "rows");
    for (const StridedView* in : {&q, &kn, &vn, &kc, &vc, &out}) {
      internal::RequireDisjoint(lse, *in, false);
    }
  }
  if (total_new > 0) {
    // The pools are written: no slot may be two, and no input may move
    // under the append (nor K under V's append).
    internal::RequireNoSelfOverlap(kc, "tokens");
    internal::RequireNoSelfOverlap(vc, "tokens");
    internal::RequireDisjoint(kc, vc, false);
    for (const StridedView* in : {&q, &kn, &vn}) {
      internal::RequireDisjoint(kc, *in, false);
      internal::RequireDisjoint(vc, *in, false);
    }
    if (internal::IsBlockType(p.k_cache.dtype)) {
      CheckQuantisable("k_new", p.k_new, total_new, p.kv_heads, d, "k_cache", p.k_cache.dtype);
    }
    if (internal::IsBlockType(p.v_cache.dtype)) {
      CheckQuantisable("v_new", p.v_new, total_new, p.kv_heads, dv, "v_cache", p.v_cache.dtype);
    }
  }

  internal::ServingBatch batch;
  batch.q_heads = p.q_heads;
  batch.kv_heads = p.kv_heads;
  batch.d = d;
  batch.dv = dv;
  Problem scale_of;  // attention()'s default: 1/sqrt(d)
  scale_of.head_dim = d;
  scale_of.scale = p.scale;
  batch.scale = scale_of.Scale();
  batch.causal = p.causal;
  batch.q_type = p.q.dtype;
  batch.k_type = p.k_cache.dtype;
  batch.v_type = p.v_cache.dtype;
  batch.out_type = p.out.dtype;
  batch.q_row = p.q.token_stride;
  batch.q_head = p.q.head_stride;
  batch.k_row = p.k_cache.row_stride;
  batch.k_head = p.k_cache.head_stride;
  batch.v_row = p.v_cache.row_stride;
  batch.v_head = p.v_cache.head_stride;
  batch.out_row = p.out.token_stride;
  batch.out_head = p.out.head_stride;
  batch.lse_row = p.lse.token_stride;
  batch.lse_head = p.lse.head_stride;
  batch.window = p.window;
  batch.softcap = p.softcap;
  batch.alibi = p.alibi_slopes.data;
  batch.alibi_batch_stride = p.alibi_slopes.batch_stride;
  batch.sinks = p.sinks.data;
  batch.key_granule = bs;
  // Consecutive blocks n, n + 1 continue each other's keys when a block is
  // exactly block_size rows (dense pools): such runs are one segment.
  const bool blocks_chain = p.k_cache.block_stride == bs * p.k_cache.row_stride &&
                            p.v_cache.block_stride == bs * p.v_cache.row_stride;
  batch.seqs.resize(size_t(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    internal::ServingSeq& s = batch.seqs[size_t(b)];
    const int64_t q0 = cu_q[size_t(b)];
    s.tq = cu_q[size_t(b) + 1] - q0;
    s.tk = tk[size_t(b)];
    if (s.tq == 0) continue;
    s.q = internal::ElementOffset(p.q.data, p.q.dtype, q0 * p.q.token_stride);
    s.out = internal::ElementOffset(p.out.data, p.out.dtype, q0 * p.out.token_stride);
    s.lse = p.lse.data ? p.lse.data + q0 * p.lse.token_stride : nullptr;
    s.seg_begin = batch.segments.size();
    const int32_t* row = p.block_table + b * table_stride;
    for (int64_t page = 0; page * bs < s.tk; ++page) {
      const int64_t end = std::min(s.tk, (page + 1) * bs);
      if (blocks_chain && batch.segments.size() > s.seg_begin && row[page] == row[page - 1] + 1) {
        batch.segments.back().end = end;
        continue;
      }
      batch.segments.push_back(
          {page * bs, end,
           internal::ElementOffset(p.k_cache.data, p.k_cache.dtype,
                                   int64_t(row[page]) * p.k_cache.block_stride),
           internal::ElementOffset(p.v_cache.data, p.v_cache.dtype,
                                   int64_t(row[page]) * p.v_cache.block_stride)});
    }
    s.seg_end = batch.segments.size();
  }

  // The append, once nothing can fail any more: token t of sequence b goes
  // to slot t % block_size of block block_table[b][t / block_size], rounded
  // to the pool's type (a q8_0 pool: quantised per block, QuantizeQ8_0).
  auto append = [&] {
    std::vector<float> row_values;  // a new row, for quantising into a q8_0 pool
    for (int64_t b = 0; b < p.batch; ++b) {
      const int32_t* row = p.block_table + b * table_stride;
      for (int64_t i = cu_new[size_t(b)]; i < cu_new[size_t(b) + 1]; ++i) {
        const int64_t t = cache[size_t(b)] + (i - cu_new[size_t(b)]);
        const int64_t block = row[t / bs], slot = t % bs;
        for (int64_t g = 0; g < p.kv_heads; ++g) {
          const int64_t kdst = block * p.k_cache.block_stride + slot * p.k_cache.row_stride +
                               g * p.k_cache.head_stride;
          const int64_t vdst = block * p.v_cache.block_stride + slot * p.v_cache.row_stride +
                               g * p.v_cache.head_stride;
          const int64_t ksrc = i * p.k_new.token_stride + g * p.k_new.head_stride;
          const int64_t vsrc = i * p.v_new.token_stride + g * p.v_new.head_stride;
          AppendRow(p.k_cache, kdst, p.k_new, ksrc, d, row_values);
          AppendRow(p.v_cache, vdst, p.v_new, vsrc, dv, row_values);
        }
      }
    }
  };
  internal::RunServing(batch, options, append);
}

}  // namespace attn
