// attn::PagedAttention (attn/serving.h): every kernel variant of the table
// on every supported target against the float64 reference (each sequence's
// keys gathered from its pages into a dense copy, in the reference only),
// within the kernels' bound; block sizes 1, 16 and 128, shuffled and
// consecutive block tables, pages shared by two sequences (prefix caching,
// read-only), appends of new tokens (decode and chunked prefill) with the
// pool checked afterwards, empty sequences, GQA, bf16 / f16 pools, every
// causal alignment, lse, the score modifiers per sequence (sliding-window
// decode with sinks, a window split over threads, softcap, ALiBi); the
// bound failing for a wrong table (two entries
// swapped, one index off by one); and every invalid field named, with
// nothing written (output, lse or pool).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/serving_reference.h"
#include "tests/serving_test_util.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

struct PagedCase {
  std::string name;
  std::vector<int> cached;  // cache_seqlens
  std::vector<int> fresh;   // new tokens appended per sequence
  std::vector<int> tq;      // queries per sequence; empty: q_len for all
  int64_t q_len = 1;
  int64_t block_size = 16;
  int64_t q_heads = 4, kv_heads = 2, d = 32, dv = 0;
  Causal causal = Causal::kBottomRight;
  DType q_type = DType::kF32, pool_type = DType::kF32, new_type = DType::kF32,
        out_type = DType::kF32;
  bool shuffle = true;        // blocks in random order (else consecutive: one segment per run)
  bool share_prefix = false;  // sequence 1 reads sequence 0's first full pages
  ServingModifiers mods;
  uint64_t seed = 1;
};
void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

std::vector<int32_t> Cumulative(const std::vector<int>& lens) {
  std::vector<int32_t> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  return cu;
}

struct OwnedPaged {
  PagedCase c;
  int64_t num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> table, cache, cu_q, cu_new;
  Buffer k_pool, v_pool, k_new, v_new, q, out;
  Buffer k_after, v_after;  // the pools as the append must leave them
  std::vector<float> lse;
  ServingModifierArrays mod_arrays;
  PagedProblem p;

  void Clear() {
    for (size_t i = 0; i < out.f.size(); ++i) out.Set(i, kServingSentinel);
    std::fill(lse.begin(), lse.end(), kServingSentinel);
  }
};

void MakePaged(const PagedCase& c, OwnedPaged& o) {
  o.c = c;
  const int64_t batch = int64_t(c.cached.size()), bs = c.block_size;
  const int64_t dv = c.dv ? c.dv : c.d;
  std::mt19937_64 rng(c.seed);
  // Pages per sequence, and which of sequence 0's sequence 1 shares.
  std::vector<int64_t> pages(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    pages[size_t(b)] = (c.cached[size_t(b)] + c.fresh[size_t(b)] + bs - 1) / bs;
    o.max_blocks = std::max(o.max_blocks, pages[size_t(b)]);
  }
  const int64_t shared =
      c.share_prefix ? std::min(c.cached[0], c.cached[1]) / bs : 0;  // full, never appended into
  int64_t used = 0;
  for (int64_t n : pages) used += n;
  o.num_blocks = used - shared + 3;  // 3 spare blocks nobody uses
  o.max_blocks += 2;                 // entries past a sequence's pages are -1
  std::vector<int32_t> order(size_t(o.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  if (c.shuffle) std::shuffle(order.begin(), order.end(), rng);
  o.table.assign(size_t(batch * o.max_blocks), -1);
  size_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t page = 0; page < pages[size_t(b)]; ++page) {
      o.table[size_t(b * o.max_blocks + page)] =
          b == 1 && page < shared ? o.table[size_t(page)] : order[next++];
    }
  }
  o.cache.assign(c.cached.begin(), c.cached.end());
  o.cu_new = Cumulative(c.fresh);
  o.cu_q = c.tq.empty() ? std::vector<int32_t>{} : Cumulative(c.tq);
  const int64_t total_q = c.tq.empty() ? batch * c.q_len : o.cu_q.back();
  const int64_t total_new = o.cu_new.back();

  // Pools: random values in the cached slots, NaN everywhere else (a slot
  // past a sequence's keys, a spare block): a kernel reading one would turn
  // its rows to NaN.
  const int64_t k_block = bs * c.kv_heads * c.d, v_block = bs * c.kv_heads * dv;
  o.k_pool.Resize(c.pool_type, size_t(o.num_blocks * k_block), std::nanf(""));
  o.v_pool.Resize(c.pool_type, size_t(o.num_blocks * v_block), std::nanf(""));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < c.cached[size_t(b)]; ++t) {
      const int64_t block = o.table[size_t(b * o.max_blocks + t / bs)], slot = t % bs;
      for (int64_t i = 0; i < c.kv_heads * c.d; ++i) {
        o.k_pool.Set(size_t(block * k_block + slot * c.kv_heads * c.d + i), u(rng));
      }
      for (int64_t i = 0; i < c.kv_heads * dv; ++i) {
        o.v_pool.Set(size_t(block * v_block + slot * c.kv_heads * dv + i), u(rng));
      }
    }
  }
  o.k_new.Random(c.new_type, size_t(total_new * c.kv_heads * c.d), rng, 1.0f);
  o.v_new.Random(c.new_type, size_t(total_new * c.kv_heads * dv), rng, 1.0f);
  o.q.Random(c.q_type, size_t(total_q * c.q_heads * c.d), rng, 1.0f);
  o.out.Resize(c.out_type, size_t(total_q * c.q_heads * dv), kServingSentinel);
  o.lse.assign(size_t(total_q * c.q_heads), kServingSentinel);
  // The expected pools after the append.
  o.k_after = o.k_pool;
  o.v_after = o.v_pool;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < c.fresh[size_t(b)]; ++i) {
      const int64_t t = c.cached[size_t(b)] + i, n = o.cu_new[size_t(b)] + i;
      const int64_t block = o.table[size_t(b * o.max_blocks + t / bs)], slot = t % bs;
      for (int64_t j = 0; j < c.kv_heads * c.d; ++j) {
        o.k_after.Set(size_t(block * k_block + slot * c.kv_heads * c.d + j),
                      o.k_new.Get(size_t(n * c.kv_heads * c.d + j)));
      }
      for (int64_t j = 0; j < c.kv_heads * dv; ++j) {
        o.v_after.Set(size_t(block * v_block + slot * c.kv_heads * dv + j),
                      o.v_new.Get(size_t(n * c.kv_heads * dv + j)));
      }
    }
  }

  PagedProblem& p = o.p;
  p.batch = batch;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.d;
  if (c.dv) p.value_dim = c.dv;
  p.num_blocks = o.num_blocks;
  p.block_size = bs;
  p.k_cache = {o.k_pool.data(), k_block, c.kv_heads * c.d, c.d, c.pool_type};
  p.v_cache = {o.v_pool.data(), v_block, c.kv_heads * dv, dv, c.pool_type};
  p.block_table = o.table.data();
  p.max_blocks = o.max_blocks;
  p.cache_seqlens = o.cache.data();
  p.q = {o.q.data(), c.q_heads * c.d, c.d, c.q_type};
  p.cu_seqlens_q = c.tq.empty() ? nullptr : o.cu_q.data();
  p.q_len = c.q_len;
  p.k_new = {o.k_new.data(), c.kv_heads * c.d, c.d, c.new_type};
  p.v_new = {o.v_new.data(), c.kv_heads * dv, dv, c.new_type};
  p.cu_seqlens_new = o.cu_new.data();
  p.out = {o.out.data(), c.q_heads * dv, dv, c.out_type};
  p.lse = {o.lse.data(), c.q_heads, 1};
  p.causal = c.causal;
  o.mod_arrays.Apply(c.mods, p.batch, c.q_heads, c.seed, p);
}

// Every V value the call reads (gathered), for the bound's floor.
std::vector<float> AllV(const OwnedPaged& o) {
  std::vector<float> v;
  for (int64_t b = 0; b < o.p.batch; ++b) {
    const std::vector<float> s = reference::GatherPagedKeys(o.p, b, true);
    v.insert(v.end(), s.begin(), s.end());
  }
  return v;
}

Errors RunPaged(OwnedPaged& o, const reference::PackedResult& ref, const Options& options) {
  o.Clear();
  PagedAttention(o.p, options);
  return PackedErrors(o.out, o.lse, ref);
}

bool SameBits(const Buffer& a, const Buffer& b) {
  if (a.type != b.type) return false;
  if (a.type != DType::kF32) return a.bits == b.bits;
  return a.f.size() == b.f.size() &&
         std::memcmp(a.f.data(), b.f.data(), a.f.size() * sizeof(float)) == 0;
}

class PagedTest : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedTest, EveryVariantOnEveryTargetIsWithinTheBound) {
  OwnedPaged o;
  MakePaged(GetParam(), o);
  // Before any call: the reference reads the new tokens from k_new / v_new.
  const reference::PackedResult ref = reference::PagedAttention(o.p);
  const std::vector<float> all_v = AllV(o);
  const bool all_bf16 = o.c.q_type == DType::kBF16 && o.c.pool_type == DType::kBF16;
  bool checked_pool = false;
  ExpectServingVariantsWithinBound(
      [&](const Options& options) {
        const Errors e = RunPaged(o, ref, options);
        if (!checked_pool) {
          // The append wrote exactly the new tokens' slots (NaN bit
          // patterns and all: the rest of the pool is untouched).
          EXPECT_TRUE(SameBits(o.k_pool, o.k_after));
          EXPECT_TRUE(SameBits(o.v_pool, o.v_after));
          checked_pool = true;
        }
        return e;
      },
      DenseNaiveErrors(o.p, ref),
      [&](const Errors& naive) {
        return PackedBound(naive, ref, all_v, o.p.ValueDim(), o.c.out_type, all_bf16);
      });
  // Appending the same tokens again (every call above did) changes nothing.
  EXPECT_TRUE(SameBits(o.k_pool, o.k_after));
  EXPECT_TRUE(SameBits(o.v_pool, o.v_after));
}

std::vector<PagedCase> Cases() {
  std::vector<PagedCase> cases;
  uint64_t seed = 900;
  auto add = [&](PagedCase c) {
    c.seed = seed++;
    cases.push_back(c);
  };
  {
    PagedCase c;  // continuous-batching decode step: one new token per sequence
    c.name = "decode_bs16_shuffled";
    c.cached = {37, 0, 100, 15, 16};
    c.fresh = {1, 1, 1, 1, 1};
    add(c);
  }
  {
    PagedCase c;  // one token per page; a sequence without keys (0 / -inf)
    c.name = "bs1_varlen_queries_empty";
    c.block_size = 1;
    c.cached = {5, 9, 0};
    c.fresh = {2, 0, 0};
    c.tq = {2, 1, 3};
    add(c);
  }
  {
    PagedCase c;  // big pages, consecutive blocks (runs of pages are one segment)
    c.name = "bs128_consecutive_chunked_prefill";
    c.block_size = 128;
    c.shuffle = false;
    c.cached = {300, 5};
    c.fresh = {20, 3};
    c.tq = {20, 3};
    add(c);
  }
  {
    PagedCase c;  // prefix caching: sequence 1 reads sequence 0's first pages
    c.name = "shared_prefix_no_append";
    c.cached = {64, 80, 40};
    c.fresh = {0, 0, 0};
    c.q_len = 2;
    c.causal = Causal::kNone;
    c.share_prefix = true;
    add(c);
  }
  {
    PagedCase c;  // shared prefix, appends into private pages, top-left
    c.name = "shared_prefix_append_topleft";
    c.cached = {40, 35, 7};
    c.fresh = {3, 2, 1};
    c.tq = {3, 2, 1};
    c.causal = Causal::kTopLeft;
    c.share_prefix = true;
    add(c);
  }
  {
    PagedCase c;  // bf16 pool, f32 queries and new tokens (rounded into the pool)
    c.name = "bf16_pool_f32_queries";
    c.cached = {50, 17, 90};
    c.fresh = {1, 2, 1};
    c.tq = {1, 2, 1};
    c.pool_type = DType::kBF16;
    add(c);
  }
  {
    PagedCase c;  // all bf16: the bf16 dot-product rows where they run
    c.name = "all_bf16";
    c.cached = {50, 17, 200};
    c.fresh = {8, 1, 1};
    c.tq = {8, 1, 1};
    c.q_type = c.pool_type = c.new_type = c.out_type = DType::kBF16;
    add(c);
  }
  {
    PagedCase c;  // f16 everywhere, GQA 8:1, d != d_v
    c.name = "f16_gqa8";
    c.cached = {10, 33, 2};
    c.fresh = {4, 1, 8};
    c.tq = {4, 1, 8};
    c.q_heads = 8;
    c.kv_heads = 1;
    c.dv = 16;
    c.q_type = c.pool_type = c.new_type = c.out_type = DType::kF16;
    add(c);
  }
  {
    // One long sequence next to short ones: with threads, its pages are
    // split into parts (6000 keys x 2 heads x d 64: ~3 MFLOP, three times
    // the executor's minimum per item), merged by log-sum-exp.
    PagedCase c;
    c.name = "long_next_to_short";
    c.cached = {6000, 3, 50, 0};
    c.fresh = {1, 1, 1, 1};
    c.q_heads = 2;
    c.kv_heads = 1;
    c.d = 64;
    add(c);
  }
  {
    // Chunked prefill next to decode: causal rows over several pages
    // (each page splits into a bottom-right and a fully visible step).
    PagedCase c;
    c.name = "mixed_prefill_decode";
    c.cached = {100, 500, 31};
    c.fresh = {64, 1, 1};
    c.tq = {64, 1, 1};
    add(c);
  }
  {
    // The streaming kernel's span path (tiles following pages, one online
    // softmax across them): a GQA group of 4 rows at d = 128, key tiles of
    // two or more 16-token pages, lengths ragged around page and tile ends
    // (long enough for threads to split them into parts).
    PagedCase c;
    c.name = "decode_gqa4_d128_bs16_ragged";
    c.cached = {1000, 256, 31, 1999, 17};
    c.fresh = {1, 1, 1, 1, 0};
    c.q_heads = 16;
    c.kv_heads = 4;
    c.d = 128;
    c.pool_type = DType::kBF16;
    add(c);
  }
  {
    // One token per page: every key its own span; a group of 8 rows (two
    // row groups of the narrow path on AVX-512, wide panels elsewhere).
    PagedCase c;
    c.name = "decode_gqa8_bs1_f16_pool";
    c.block_size = 1;
    c.cached = {300, 77, 1};
    c.fresh = {1, 1, 1};
    c.q_heads = 8;
    c.kv_heads = 1;
    c.pool_type = DType::kF16;
    add(c);
  }
  {
    // Big shuffled pages with partial last pages, prefix shared.
    PagedCase c;
    c.name = "decode_bs128_shared_prefix";
    c.block_size = 128;
    c.cached = {700, 300, 129};
    c.fresh = {1, 1, 1};
    c.share_prefix = true;
    c.q_heads = 8;
    c.kv_heads = 2;
    c.d = 64;
    add(c);
  }
  // Score modifiers, each sequence on its own lengths.
  using Alibi = ServingModifiers::Alibi;
  {
    // Sliding-window decode with sinks (gpt-oss's layers) and ALiBi: the
    // window's first key mid page; a sequence of one key.
    PagedCase c;
    c.name = "decode_window_sinks_alibi";
    c.cached = {300, 40, 129, 0};
    c.fresh = {1, 1, 1, 1};
    c.mods.window = {127, 0};
    c.mods.sinks = true;
    c.mods.alibi = Alibi::kPerSequence;  // distances from the sequence's last key, page by page
    add(c);
  }
  {
    // One long sequence's window (keys 4010..12000, from mid page) split
    // into parts over threads (~4 MFLOP), sinks in part 0 only, per-sequence
    // slopes (each part's ALiBi distances are from the sequence's diagonal).
    PagedCase c;
    c.name = "long_window_sinks_alibi_split";
    c.cached = {12000, 3, 50, 0};
    c.fresh = {1, 1, 1, 1};
    c.q_heads = 2;
    c.kv_heads = 1;
    c.d = 64;
    c.mods.window = {7990, 0};
    c.mods.sinks = true;
    c.mods.alibi = Alibi::kPerSequence;
    add(c);
  }
  {
    PagedCase c;  // chunked prefill over big pages: window, softcap, shared slopes
    c.name = "bs128_chunked_prefill_window_softcap_alibi";
    c.block_size = 128;
    c.shuffle = false;
    c.cached = {300, 5};
    c.fresh = {20, 3};
    c.tq = {20, 3};
    c.mods.window = {50, 0};
    c.mods.softcap = 0.3f;
    c.mods.alibi = Alibi::kShared;
    add(c);
  }
  {
    // The span path from a window's first key (mid page, mid tile).
    PagedCase c;
    c.name = "decode_gqa4_d128_bs16_window_sinks";
    c.cached = {1000, 256, 31, 1999, 17};
    c.fresh = {1, 1, 1, 1, 0};
    c.q_heads = 16;
    c.kv_heads = 4;
    c.d = 128;
    c.pool_type = DType::kBF16;
    c.mods.window = {200, 0};
    c.mods.sinks = true;
    add(c);
  }
  {
    // One token per page; a sequence without keys and rows a window of 1
    // leaves without keys: output 0, lse sink[h]. Top-left diagonals.
    PagedCase c;
    c.name = "bs1_topleft_window_sinks_empty";
    c.block_size = 1;
    c.cached = {5, 9, 0};
    c.fresh = {2, 0, 0};
    c.tq = {2, 1, 3};
    c.causal = Causal::kTopLeft;
    c.mods.window = {1, -1};
    c.mods.sinks = true;
    add(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// All-bf16 pages on every bf16 dot-product path this machine can run (the
// emulated ones on every target). The paths' rows of the kernel table read
// a sequence's pages in one call (their span entry point: key tiles that
// span pages, one online softmax across them): decode and GQA
// groups (the narrow path, NarrowHead and PairNarrowHead) and chunked
// prefill of more rows than half a panel (Bf16DotHead, AmxHead), pages of
// 1 (decode), 16 and 128 tokens in shuffled order, ragged lengths, a window.
TEST(Paged, AllBf16OnEveryDotPath) {
  std::vector<PagedCase> cases;
  for (int64_t block_size : {1, 16, 128}) {
    PagedCase c;
    c.name = "all_bf16_paths_decode_bs" + std::to_string(block_size);
    c.block_size = block_size;
    c.cached = {40, 7, 90};
    c.fresh = {3, 1, 1};
    c.tq = {3, 1, 1};
    c.q_type = c.pool_type = c.new_type = c.out_type = DType::kBF16;
    cases.push_back(c);
    if (block_size == 1) continue;  // one-key tiles: decode shows them
    // Chunked prefill: 20 and 41 new rows over 150 and 9 cached keys
    // (wide views on every target: more rows than half a 32-row panel).
    c.name = "all_bf16_paths_prefill_bs" + std::to_string(block_size);
    c.cached = {150, 9, 0};
    c.fresh = {20, 41, 2};
    c.tq = {20, 41, 2};
    c.d = 40;  // odd pairs: d a multiple of 2 but not of a vector
    if (block_size == 16) c.mods.window = {60, -1};
    cases.push_back(c);
  }
  for (const PagedCase& c : cases) {
   for (const std::string& path : SupportedDotPaths()) {
    SCOPED_TRACE(c.name + " " + path);
    ForceDotPath(path);
    OwnedPaged o;
    MakePaged(c, o);
    const reference::PackedResult ref = reference::PagedAttention(o.p);
    const std::vector<float> all_v = AllV(o);
    ExpectServingVariantsWithinBound(
        [&](const Options& options) { return RunPaged(o, ref, options); },
        DenseNaiveErrors(o.p, ref),
        [&](const Errors& naive) {
          return PackedBound(naive, ref, all_v, o.p.ValueDim(), c.out_type, true);
        },
        0);
   }
  }
  ForceDotPath("auto");
}

// Token-major pages ([num_blocks, block_size, kv_heads, d]: the kv heads of
// a token in one row) run every kv head of a sequence in one kernel call,
// whose narrow views take their tiles in turn (narrow-inl.h NarrowHeads;
// 9 kv heads: a run of 8 and one alone); head-major pages
// ([num_blocks, kv_heads, block_size, d]) one kv head a call. Each view does
// the same operations either way, so the two layouts must give the same
// bits, on every target and every kernel with a span entry point, for
// decode and for a few causal rows; and both are within the float64 bound
// (EveryVariantOnEveryTargetIsWithinTheBound runs token-major pages).
TEST(Paged, TokenMajorPagesGiveTheBitsOfHeadMajorPages) {
  for (bool modifiers : {false, true}) {
    SCOPED_TRACE(modifiers ? "window, softcap, slopes, sinks" : "no modifiers");
    PagedCase c;
    c.name = "token_major";
    c.cached = {200, 33, 1, 70};
    c.fresh = {0, 0, 0, 0};
    c.tq = {1, 3, 1, 2};
    c.q_heads = 18;
    c.kv_heads = 9;
    c.pool_type = DType::kBF16;
    if (modifiers) {
      c.mods.window = {40, 0};
      c.mods.softcap = 0.3f;
      c.mods.alibi = ServingModifiers::Alibi::kPerSequence;
      c.mods.sinks = true;
    }
    OwnedPaged o;
    MakePaged(c, o);
    const int64_t bs = c.block_size, d = c.d, h = c.kv_heads;
    Buffer k_heads = o.k_pool, v_heads = o.v_pool;
    for (int64_t n = 0; n < o.num_blocks; ++n) {
      for (int64_t slot = 0; slot < bs; ++slot) {
        for (int64_t g = 0; g < h; ++g) {
          for (int64_t i = 0; i < d; ++i) {
            const size_t token_major = size_t(((n * bs + slot) * h + g) * d + i);
            const size_t head_major = size_t(((n * h + g) * bs + slot) * d + i);
            k_heads.Set(head_major, o.k_pool.Get(token_major));
            v_heads.Set(head_major, o.v_pool.Get(token_major));
          }
        }
      }
    }
    PagedProblem heads = o.p;
    heads.k_cache = {k_heads.data(), bs * h * d, d, bs * d, c.pool_type};
    heads.v_cache = {v_heads.data(), bs * h * d, d, bs * d, c.pool_type};
    for (const std::string& target : TestTargets()) {
      ForceTarget(target);
      for (KernelId kernel : {KernelId::kStreaming, KernelId::kParallel}) {
        for (int threads : {1, 2}) {
          SCOPED_TRACE(target + " kernel " + std::to_string(int(kernel)) + " threads " +
                       std::to_string(threads));
          Options options;
          options.kernel = kernel;
          options.threads = threads;
          // One key tile for both layouts: head-major views (rows adjacent)
          // take the row walk, whose default tile is longer than the
          // pipelined walk's of token-major views (narrow-inl.h
          // NarrowRowWalks); at equal tiles the walks give the same bits.
          options.tiles.kv_block = 32;
          o.Clear();
          PagedAttention(heads, options);
          const Buffer out_heads = o.out;
          const std::vector<float> lse_heads = o.lse;
          o.Clear();
          PagedAttention(o.p, options);
          EXPECT_TRUE(SameBits(o.out, out_heads));
          EXPECT_EQ(std::memcmp(o.lse.data(), lse_heads.data(), o.lse.size() * sizeof(float)), 0);
          // Rows were written (the sentinel is gone).
          EXPECT_NE(o.lse[0], kServingSentinel);
        }
      }
    }
    ForceTarget("auto");
  }
}

// The bound sees a wrong block table: two entries swapped, or one page's
// block index off by one (the planted bug), for every kernel.
TEST(Paged, BoundFailsForASwappedOrOffByOneBlockTable) {
  PagedCase c;
  c.name = "wrong_table";
  c.cached = {70, 40};
  c.fresh = {0, 0};
  c.q_len = 3;
  c.causal = Causal::kNone;
  OwnedPaged o;
  MakePaged(c, o);
  const reference::PackedResult ref = reference::PagedAttention(o.p);
  const Bound bound = PackedBound(DenseNaiveErrors(o.p, ref), ref, AllV(o), o.p.ValueDim(),
                                  c.out_type, false);
  const std::vector<int32_t> right = o.table;
  std::vector<int32_t> swapped = right, off_by_one = right;
  // Sequence 0's page 0 and sequence 1's page 0 (both full). (Two pages of
  // one sequence swapped are the same keys in another order: without a
  // causal mask the result is the same, the permutation invariance of
  // attention.)
  std::swap(swapped[0], swapped[size_t(o.max_blocks)]);
  // Sequence 1's page 1 (full: tokens 16..31) reads the next block instead,
  // one holding other keys (or NaN): a valid index, a wrong page.
  off_by_one[size_t(o.max_blocks + 1)] =
      (off_by_one[size_t(o.max_blocks + 1)] + 1) % int32_t(o.num_blocks);
  for (const std::vector<int32_t>* wrong : {&swapped, &off_by_one}) {
    o.p.block_table = wrong->data();
    for (const KernelInfo& k : Kernels()) {
      Options options;
      options.kernel = k.id;
      options.threads = 2;
      const Errors e = RunPaged(o, ref, options);
      EXPECT_GT(e.out, bound.out) << k.name << (wrong == &swapped ? " swapped" : " off by one");
    }
  }
}

// Every invalid field is named with its value, and nothing is written: not
// the output, not the lse, not the pool.
TEST(Paged, ErrorsNameTheFieldAndWriteNothing) {
  PagedCase c;
  c.name = "errors";
  c.cached = {20, 5};
  c.fresh = {2, 1};
  c.tq = {2, 1};
  c.shuffle = false;  // sequence 0: blocks 0, 1; sequence 1: block 2
  OwnedPaged o;
  MakePaged(c, o);
  const Buffer k_before = o.k_pool, v_before = o.v_pool;
  auto expect = [&](const std::string& field, const std::string& value,
                    const std::function<void(PagedProblem&)>& edit, Options options = {}) {
    SCOPED_TRACE(field);
    PagedProblem bad = o.p;
    edit(bad);
    o.Clear();
    ExpectError(field, value, [&] { PagedAttention(bad, options); });
    for (size_t i = 0; i < o.out.f.size(); ++i) ASSERT_EQ(o.out.Get(i), kServingSentinel);
    for (float x : o.lse) ASSERT_EQ(x, kServingSentinel);
    ASSERT_TRUE(SameBits(o.k_pool, k_before));
    ASSERT_TRUE(SameBits(o.v_pool, v_before));
  };
  const int64_t mb = o.max_blocks;
  std::vector<int32_t> outside = o.table, shared_append = o.table, bad_cu{0, 3, 2},
                       one_start{1, 3, 4}, long_cache{int32_t(mb * 16), 5}, negative{20, -1};
  outside[1] = int32_t(o.num_blocks);
  shared_append[size_t(mb)] = o.table[1];  // sequence 1 appends into sequence 0's page 1
  expect("block_table[0][1]", std::to_string(o.num_blocks), [&](PagedProblem& p) { p.block_table = outside.data(); });
  expect("block_table[1][0]", std::to_string(o.table[1]),
         [&](PagedProblem& p) { p.block_table = shared_append.data(); });
  expect("cache_seqlens[0]", std::to_string(mb * 16), [&](PagedProblem& p) { p.cache_seqlens = long_cache.data(); });
  expect("cache_seqlens[1]", "-1", [&](PagedProblem& p) { p.cache_seqlens = negative.data(); });
  expect("block_size", "0", [](PagedProblem& p) { p.block_size = 0; });
  expect("num_blocks", "0", [](PagedProblem& p) { p.num_blocks = 0; });
  expect("max_blocks", "0", [](PagedProblem& p) { p.max_blocks = 0; });
  expect("block_table_stride", "1", [](PagedProblem& p) { p.block_table_stride = 1; });
  expect("block_table", "null", [](PagedProblem& p) { p.block_table = nullptr; });
  expect("cache_seqlens", "null", [](PagedProblem& p) { p.cache_seqlens = nullptr; });
  expect("cu_seqlens_q[2]", "2", [&](PagedProblem& p) { p.cu_seqlens_q = bad_cu.data(); });
  expect("cu_seqlens_new[0]", "1", [&](PagedProblem& p) { p.cu_seqlens_new = one_start.data(); });
  expect("q_len", "-1", [](PagedProblem& p) {
    p.cu_seqlens_q = nullptr;
    p.q_len = -1;
  });
  expect("k_new.data", "null", [](PagedProblem& p) { p.k_new.data = nullptr; });
  expect("v_cache.dtype", "9", [](PagedProblem& p) { p.v_cache.dtype = static_cast<DType>(9); });
  expect("k_cache.data", "null", [](PagedProblem& p) { p.k_cache.data = nullptr; });
  expect("k_cache.row_stride", "-2", [](PagedProblem& p) { p.k_cache.row_stride = -2; });
  expect("out", "", [&](PagedProblem& p) { p.out.data = o.v_pool.data(); });  // inside the pool
  expect("lse", "", [&](PagedProblem& p) { p.lse.data = static_cast<float*>(o.k_pool.data()); });
  expect("k_cache", "", [&](PagedProblem& p) { p.k_new.data = o.k_pool.data(); });  // appends over its source
  expect("kv_heads", "3", [](PagedProblem& p) { p.kv_heads = 3; });
  const float sinks[4] = {0.0f, 0.0f, 0.0f, std::numeric_limits<float>::infinity()};
  expect("window.left", "-2", [](PagedProblem& p) { p.window.left = -2; });
  expect("softcap", "inf", [](PagedProblem& p) { p.softcap = std::numeric_limits<float>::infinity(); });
  expect("sinks.size", "2", [&](PagedProblem& p) { p.sinks = {sinks, 2}; });
  expect("sinks[3]", "inf", [&](PagedProblem& p) { p.sinks = {sinks, 4}; });
  Options round;
  round.round_inputs_to_bf16 = true;
  expect("round_inputs_to_bf16", "true", [](PagedProblem&) {}, round);
}

}  // namespace
}  // namespace attn::test
