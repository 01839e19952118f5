// Bounded memory (issue 7): the streaming and parallel kernels allocate
// O(tile x threads) scratch, never O(T_q x T_k) or even O(T_k), and an
// allocation failure is an attn::Error with field "memory", not a crash.
//
// How it is measured: this binary replaces the C allocator (malloc, free,
// calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc, pvalloc)
// with counting wrappers around glibc's __libc_* functions. Executable
// symbols interpose on shared libraries, so the count sees every heap
// allocation of the process: operator new (std::vector), Highway's
// hwy::AllocateAligned (inside libhwy.so, which calls malloc), libgomp's and
// libstdc++'s own. The wrappers also enforce a cap: while a cap is set, an
// allocation that would raise the live heap above it fails (returns null)
// exactly as malloc does when memory runs out.
//
// Not built with sanitizers (ASan/TSan own malloc).
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "kernels/kernel.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

// ---- the counting allocator -----------------------------------------------

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {

std::atomic<int64_t> g_live{0};   // bytes currently allocated (usable sizes)
std::atomic<int64_t> g_peak{0};   // high-water mark of g_live since Reset
std::atomic<int64_t> g_cap{std::numeric_limits<int64_t>::max()};
// Single allocations of at least this many bytes fail (failure injection).
std::atomic<int64_t> g_fail_from{std::numeric_limits<int64_t>::max()};
std::atomic<int64_t> g_failed{0};  // allocations refused

// Whether an allocation of n bytes must fail: over the cap on the live heap,
// or at least g_fail_from bytes.
bool OverCap(size_t n) {
  const int64_t cap = g_cap.load(std::memory_order_relaxed);
  const int64_t fail_from = g_fail_from.load(std::memory_order_relaxed);
  if (cap == std::numeric_limits<int64_t>::max() && fail_from == cap) return false;
  if (n >= size_t(fail_from) || n > size_t(cap) ||
      g_live.load(std::memory_order_relaxed) + int64_t(n) > cap) {
    g_failed.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void* Counted(void* p) {
  if (!p) return p;
  const int64_t live = g_live.fetch_add(int64_t(malloc_usable_size(p))) +
                       int64_t(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void Uncount(void* p) {
  if (p) g_live.fetch_sub(int64_t(malloc_usable_size(p)));
}

}  // namespace

extern "C" {
void* malloc(size_t n) {
  if (OverCap(n)) {
    errno = ENOMEM;
    return nullptr;
  }
  return Counted(__libc_malloc(n));
}
void free(void* p) {
  Uncount(p);
  __libc_free(p);
}
void* calloc(size_t n, size_t size) {
  if (size && n > std::numeric_limits<size_t>::max() / size) return nullptr;
  if (OverCap(n * size)) {
    errno = ENOMEM;
    return nullptr;
  }
  return Counted(__libc_calloc(n, size));
}
void* realloc(void* p, size_t n) {
  if (!p) return malloc(n);
  if (n == 0) {
    free(p);
    return nullptr;
  }
  if (OverCap(n)) {
    errno = ENOMEM;
    return nullptr;
  }
  const int64_t old = int64_t(malloc_usable_size(p));
  void* q = __libc_realloc(p, n);
  if (!q) return nullptr;
  g_live.fetch_sub(old);
  return Counted(q);
}
void* memalign(size_t alignment, size_t n) {
  if (OverCap(n)) {
    errno = ENOMEM;
    return nullptr;
  }
  return Counted(__libc_memalign(alignment, n));
}
void* aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }
int posix_memalign(void** out, size_t alignment, size_t n) {
  void* p = memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) { return memalign(size_t(sysconf(_SC_PAGESIZE)), n); }
void* pvalloc(size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return memalign(page, (n + page - 1) / page * page);
}
}  // extern "C"

namespace attn::test {
namespace {

// Live heap bytes added at the peak of fn() over what was live before it,
// with allocations beyond `cap_extra` more bytes refused.
template <typename Fn>
int64_t PeakExtraBytes(Fn&& fn, int64_t cap_extra = std::numeric_limits<int64_t>::max() / 2) {
  const int64_t base = g_live.load();
  g_peak.store(base);
  g_cap.store(base + cap_extra);
  fn();
  g_cap.store(std::numeric_limits<int64_t>::max());
  return g_peak.load() - base;
}

// One head of T_q x T_k with d = d_v = 64, values generated directly (the
// test_util generator would be slow at 65536 x 64 x 3 floats... and fine,
// but this keeps the setup cost out of the timing).
struct Long {
  int64_t tq, tk, d = 64;
  std::vector<float> q, k, v, out, lse;
  Problem p;
  Long(int64_t tq_, int64_t tk_) : tq(tq_), tk(tk_) {
    q.resize(size_t(tq * d));
    k.resize(size_t(tk * d));
    v.resize(size_t(tk * d));
    out.assign(size_t(tq * d), -1.0f);
    lse.assign(size_t(tq), -1.0f);
    uint32_t s = 1;
    auto rnd = [&] {
      s = s * 1664525u + 1013904223u;
      return float(int32_t(s >> 8) % 2001 - 1000) / 1000.0f;
    };
    for (float& x : q) x = rnd();
    for (float& x : k) x = rnd();
    for (float& x : v) x = rnd();
    p.q_len = tq;
    p.kv_len = tk;
    p.head_dim = d;
    p.q = DenseBHTD(q.data(), 1, tq, d);
    p.k = DenseBHTD(k.data(), 1, tk, d);
    p.v = DenseBHTD(v.data(), 1, tk, d);
    p.out = DenseBHTD(out.data(), 1, tq, d);
    p.lse = LseOutput{lse.data(), 0, tq, 1};
    p.causal = Causal::kBottomRight;
  }
  // K and V as bf16 (a 16-bit KV cache), same values rounded.
  std::vector<uint16_t> k16, v16;
  void UseBF16KV() {
    auto narrow = [](const std::vector<float>& from, std::vector<uint16_t>& to) {
      to.resize(from.size());
      for (size_t i = 0; i < from.size(); ++i) to[i] = BFloat16Bits(from[i]);
    };
    narrow(k, k16);
    narrow(v, v16);
    p.k = DenseBHTD(k16.data(), DType::kBF16, 1, tk, d);
    p.v = DenseBHTD(v16.data(), DType::kBF16, 1, tk, d);
  }
  // The reference on a sample of rows (the full float64 reference at
  // 65536^2 would take minutes): rows restricted to `rows` queries at the
  // end, which see the most keys.
  void CheckLastRows(int64_t rows) {
    Problem tail = p;
    tail.q_len = rows;
    tail.q = ConstTensor{test::F32(p.q) + (tq - rows) * d, 0, 0, d};
    tail.out = Tensor{test::F32(p.out) + (tq - rows) * d, 0, 0, d};
    tail.lse = LseOutput{p.lse.data + (tq - rows), 0, 0, 1};
    // Bottom-right causal on the tail alone is the same alignment: its last
    // query still sees every key.
    const reference::Result ref = reference::Attention(tail);
    EXPECT_EQ(oracle::Check(tail, ref), "");
  }
};

// The bound, derived from the tile rule the kernels use on the running
// target (ExplainChoice: the tiles attention() would resolve; PanelWidth():
// P, 16 rows on AVX2, 32 on AVX-512, 8 on SSE4/EMU128) and the scratch each
// kernel's header documents:
// - a panel worker (streaming-inl.h StreamingScratch): Qt and Ot of one query
//   block, q_block x (d + dv), one score tile kv_block x P, and three
//   statistics per row of the block;
// - a narrow worker (narrow-inl.h NarrowScratch, views of at most P/2 rows):
//   per row, the scaled query, one tile of scores and the output, each padded
//   to whole vectors (at most P lanes); a worker keeps both;
// - split-KV (parallel.cc): kv_splits partial outputs and lse per item.
// At 512 x 65536, d = 64 that is 149 KiB per thread on AVX2 (256-row
// blocks; 139 KiB of it the panel worker's) and 300 KiB on AVX-512 (512-row
// blocks).
//
// On top, kSlackPerThread for what is not a tile: allocator and alignment
// headers, OpenMP's per-thread state, the HeadViews, the error strings.
// Measured on AMD EPYC Zen 3 (AVX2), 2026-12-01: 1.5 KiB per thread beyond
// the panel worker's tiles (streaming 143880 bytes against 142336; parallel
// on two threads 287720 against 284672; the narrow scratch is not used at
// these shapes); ATTN_TARGET=SSE4 and EMU128 (8-row panels) the same
// 1.5 KiB. 32 KiB leaves 20x that, and is an
// eighth of one float per key (65536 x 4 = 256 KiB): a kernel that allocated
// anything proportional to T_k (one row of scores, a per-key statistic, let
// alone T_q x T_k: 16 GiB at 65536^2) fails with attn::Error("memory") under
// the cap. .ci/planted_bug.sh memory shows it: a per-key vector of floats
// planted in StreamingHead fails both 65536-key tests.
constexpr int64_t kSlackPerThread = 32 << 10;
constexpr int64_t kT = 65536;
static_assert(2 * kSlackPerThread < kT * int64_t(sizeof(float)),
              "the slack must stay below one float per key, even for two threads");

struct ScratchBound {
  int64_t tiles_bytes = 0;  // what the tile rule sizes, over all threads
  int64_t cap = 0;          // tiles_bytes + kSlackPerThread per thread
  std::string how;          // the inputs, for the failure message
};

ScratchBound ScratchBoundFor(const Problem& p, const Options& o) {
  const AutoChoice c = ExplainChoice(p, o);
  const int64_t P = internal::PanelWidth();
  const int64_t d = p.head_dim, dv = p.ValueDim();
  const int64_t q_block = (c.tiles.q_block + P - 1) / P * P;
  const int64_t kv_block = c.tiles.kv_block;
  // With a bf16 / f16 K or V the panel worker also keeps the widened tile
  // (streaming-inl.h ReserveWidened: kv_block x (d + dv) floats).
  const bool widened = p.k.dtype != DType::kF32 || p.v.dtype != DType::kF32;
  const int64_t panel_worker =
      q_block * (d + dv) + kv_block * P + 3 * q_block + (widened ? kv_block * (d + dv) : 0);
  const int64_t narrow_worker = (P / 2) * (d + kv_block + dv + 3 * P);
  // Only threaded kernels run several workers and split keys. A worker
  // keeps both its panel and its narrow scratch (a ragged last block of at
  // most P/2 rows takes the narrow path); split-KV keeps kv_splits partial
  // outputs and lse per item (work item x query block).
  const bool threaded = GetKernelInfo(o.kernel).threaded;
  const int64_t threads = threaded ? std::max(1, c.threads) : 1;
  int64_t floats = threads * (panel_worker + narrow_worker);
  if (threaded && c.tiles.kv_splits > 1) {
    const int64_t items = internal::WorkItems(p) * ((p.q_len + q_block - 1) / q_block);
    floats += items * int64_t(c.tiles.kv_splits) * q_block * (dv + 1);
  }
  ScratchBound b;
  b.tiles_bytes = floats * int64_t(sizeof(float));
  b.cap = b.tiles_bytes + threads * kSlackPerThread;
  b.how = "target " + CurrentTarget() + ", panel " + std::to_string(P) + ", q_block " +
          std::to_string(c.tiles.q_block) + ", kv_block " + std::to_string(kv_block) +
          ", kv_splits " + std::to_string(c.tiles.kv_splits) + ", threads " +
          std::to_string(threads) + ": tiles " + std::to_string(b.tiles_bytes) + " bytes";
  // Far below anything proportional to T_k: under an eighth of K alone.
  EXPECT_LT(b.cap, p.kv_len * d * int64_t(sizeof(float)) / 8) << b.how;
  return b;
}


// A tiny first call: the one-time initialisation (target choice, tuning
// lookup, OpenMP's thread pool) is not what is measured.
void WarmUp(int threads) {
  std::vector<float> q(8, 0.5f), k(8, 0.25f), v(8, 1.0f), out(8);
  Problem p;
  p.q_len = p.kv_len = 2;
  p.head_dim = 4;
  p.q = DenseBHTD(q.data(), 1, 2, 4);
  p.k = DenseBHTD(k.data(), 1, 2, 4);
  p.v = DenseBHTD(v.data(), 1, 2, 4);
  p.out = DenseBHTD(out.data(), 1, 2, 4);
  Options o;
  o.kernel = KernelId::kParallel;
  o.threads = threads;
  attention(p, o);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(Memory, StreamingAt65536KeysAllocatesOnlyTiles) {
  // 512 queries x 65536 keys (the last 512 rows of a causal 65536^2 head,
  // so every query sees ~65k keys): an O(T_q x T_k) kernel would need
  // 128 MiB here, and 16 GiB for the whole head.
  ClearTuning();
  WarmUp(1);
  Long l(512, kT);
  Options o;
  o.kernel = KernelId::kStreaming;
  const ScratchBound bound = ScratchBoundFor(l.p, o);
  const auto start = std::chrono::steady_clock::now();
  const int64_t extra = PeakExtraBytes([&] { attention(l.p, o); }, bound.cap);
  std::printf("streaming, 512 x 65536, d 64: peak extra heap %lld bytes (%s), %.2f s\n",
              (long long)extra, bound.how.c_str(), Seconds(start));
  EXPECT_LE(extra, bound.cap) << bound.how;
  EXPECT_EQ(g_failed.load(), 0) << "allocations refused under the cap of " << bound.cap
                                 << " bytes (" << bound.how << ")";
  l.CheckLastRows(8);
}

TEST(Memory, StreamingWithABF16CacheAt65536KeysAllocatesOnlyTiles) {
  // As above with K and V in bf16: the widened key tile is O(kv_block·d).
  ClearTuning();
  WarmUp(1);
  Long l(512, kT);
  l.UseBF16KV();
  Options o;
  o.kernel = KernelId::kStreaming;
  const ScratchBound bound = ScratchBoundFor(l.p, o);
  const int64_t extra = PeakExtraBytes([&] { attention(l.p, o); }, bound.cap);
  std::printf("streaming, bf16 K/V, 512 x 65536, d 64: peak extra heap %lld bytes (%s)\n",
              (long long)extra, bound.how.c_str());
  EXPECT_LE(extra, bound.cap) << bound.how;
  EXPECT_EQ(g_failed.load(), 0) << "allocations refused under the cap of " << bound.cap
                                 << " bytes (" << bound.how << ")";
  l.CheckLastRows(8);
}

TEST(Memory, ParallelAt65536SquaredCausalAllocatesOnlyTilesPerThread) {
  // The whole causal 65536 x 65536 head on 2 threads: 16 GiB of scores if
  // materialised; here a few tiles per thread.
  ClearTuning();
  WarmUp(2);
  Long l(kT, kT);
  Options o;
  o.kernel = KernelId::kParallel;
  o.threads = 2;
  const ScratchBound bound = ScratchBoundFor(l.p, o);
  const auto start = std::chrono::steady_clock::now();
  const int64_t extra = PeakExtraBytes([&] { attention(l.p, o); }, bound.cap);
  std::printf("parallel, 2 threads, 65536^2 causal, d 64: peak extra heap %lld bytes (%s), %.2f s\n",
              (long long)extra, bound.how.c_str(), Seconds(start));
  EXPECT_LE(extra, bound.cap) << bound.how;
  EXPECT_EQ(g_failed.load(), 0) << "allocations refused under the cap of " << bound.cap
                                 << " bytes (" << bound.how << ")";
  l.CheckLastRows(4);
}

TEST(Memory, SplitKVDecodeAt65536KeysAllocatesOnlyTilesPerThread) {
  // One query, 65536 keys, 2 threads: split-KV partials are
  // splits x q_block x (d_v + 1) floats, not proportional to T_k.
  ClearTuning();
  WarmUp(2);
  Long l(1, kT);
  Options o;
  o.kernel = KernelId::kParallel;
  o.threads = 2;
  o.tiles.kv_splits = 8;
  const ScratchBound bound = ScratchBoundFor(l.p, o);
  const int64_t extra = PeakExtraBytes([&] { attention(l.p, o); }, bound.cap);
  std::printf("parallel split-KV decode, 1 x 65536: peak extra heap %lld bytes (%s)\n",
              (long long)extra, bound.how.c_str());
  EXPECT_LE(extra, bound.cap) << bound.how;
  l.CheckLastRows(1);
}

// Runs fn() with every single allocation of 16 KiB or more failing, as
// when the machine is out of memory for anything but small objects (the
// error message itself still needs a few bytes).
constexpr int64_t kFailFrom = 16 << 10;
template <typename Fn>
void WithLargeAllocationsFailing(Fn&& fn) {
  g_fail_from.store(kFailFrom);
  fn();
  g_fail_from.store(std::numeric_limits<int64_t>::max());
}

// Allocation failure: every kernel's scratch allocation (16 KiB and more at
// this shape, on every target) fails. The call must throw attn::Error with
// field "memory" (std::bad_alloc never escapes), and leave the process able
// to run the next call normally once memory is back. Each kernel runs on a
// fresh thread so that no scratch kept from an earlier call (thread_local)
// hides the allocation.
TEST(Memory, AllocationFailureIsAClearError) {
  ClearTuning();
  WarmUp(2);
  Shape s;
  s.q_heads = 2;
  s.tq = 48;
  s.tk = 1000;
  s.d = 256;  // a head dim no earlier call used: scratch must grow
  OwnedProblem o = MakeProblem(s);
  const reference::Result ref = reference::Attention(o.problem);
  struct Case {
    std::string name;
    KernelId kernel;
    int threads;
    int q_block;
  };
  // Every kernel of the table (threaded ones on 2 threads with 256-row query
  // blocks), and auto.
  std::vector<Case> cases;
  for (const KernelInfo& k : Kernels()) {
    cases.push_back({std::string(k.name) + (k.threaded ? "/t2" : ""), k.id, k.threaded ? 2 : 1,
                     k.threaded ? 256 : 0});
  }
  cases.push_back({"auto", KernelId::kAuto, 1, 0});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Options opt;
    opt.kernel = c.kernel;
    opt.threads = c.threads;
    opt.tiles.q_block = c.q_block;
    std::string field, what;
    bool other = false;
    std::thread([&] {
      g_failed.store(0);
      WithLargeAllocationsFailing([&] {
        try {
          attention(o.problem, opt);
        } catch (const Error& e) {
          field = e.field();
          what = e.what();
        } catch (...) {
          other = true;
        }
      });
    }).join();
    EXPECT_FALSE(other) << "an exception other than attn::Error escaped";
    EXPECT_EQ(field, "memory") << what;
    EXPECT_NE(what.find(KernelName(c.kernel == KernelId::kAuto ? KernelId::kStreaming : c.kernel)),
              std::string::npos) << what;
    EXPECT_GT(g_failed.load(), 0);
    // Memory is back: the same call on a fresh thread works.
    std::thread([&] {
      o.ClearOutputs();
      attention(o.problem, opt);
    }).join();
    EXPECT_EQ(oracle::Check(o.problem, ref), "");
  }
}

// After a failed scratch growth the thread's scratch must still be usable:
// StreamingScratch::Grow once replaced its buffer with the null result but
// kept the old size, so the next smaller call dereferenced null.
TEST(Memory, ScratchIsUsableAfterAFailedGrowth) {
  ClearTuning();
  Shape small;
  small.tq = 40;
  small.tk = 60;
  small.d = 32;
  OwnedProblem a = MakeProblem(small);
  Shape big = small;
  big.d = 256;  // larger scratch than `small` needs (>= 16 KiB)
  OwnedProblem b = MakeProblem(big);
  const reference::Result ref = reference::Attention(a.problem);
  Options opt;
  opt.kernel = KernelId::kStreaming;
  std::thread([&] {
    attention(a.problem, opt);  // scratch sized for d = 32
    std::string field;
    WithLargeAllocationsFailing([&] {
      try {
        attention(b.problem, opt);  // growth fails
      } catch (const Error& e) {
        field = e.field();
      }
    });
    EXPECT_EQ(field, "memory");
    a.ClearOutputs();
    attention(a.problem, opt);
  }).join();
  EXPECT_EQ(oracle::Check(a.problem, ref), "");
}

}  // namespace
}  // namespace attn::test
