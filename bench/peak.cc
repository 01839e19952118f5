// FP32 FMA peak probe (see peak.h), compiled once per Highway target.
//
// Each thread runs kChains independent dependency chains acc = acc·a + b.
// With FMA latency L cycles and F FMA ports a core needs L·F chains in flight
// to saturate (Zen 3 / Skylake: 4·2 = 8); 12 covers that and, with a and b,
// still fits the 16 vector registers of AVX2. a = 1 - 2^-20 and b = 2^-20
// keep every chain near its fixed point 1.0, so values stay finite and normal.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stddef.h>
#include <stdint.h>

#include "hwy/highway.h"
#include "kernels/common/amx-inl.h"      // the AMX tile layer (AVX3)
#include "kernels/common/bf16dot-inl.h"  // the vdpbf16ps layer (AVX3)

HWY_BEFORE_NAMESPACE();
namespace attn_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `iters` x kChains vector FMAs; returns the sum of every lane so the
// work is observable.
float FmaChainsImpl(int64_t iters, float a_scalar, float b_scalar) {
  const hn::ScalableTag<float> df;
  const auto a = hn::Set(df, a_scalar);
  const auto b = hn::Set(df, b_scalar);
  // Twelve named accumulators (not an array) so they surely live in registers.
  auto c0 = hn::Set(df, 0.50f), c1 = hn::Set(df, 0.51f), c2 = hn::Set(df, 0.52f);
  auto c3 = hn::Set(df, 0.53f), c4 = hn::Set(df, 0.54f), c5 = hn::Set(df, 0.55f);
  auto c6 = hn::Set(df, 0.56f), c7 = hn::Set(df, 0.57f), c8 = hn::Set(df, 0.58f);
  auto c9 = hn::Set(df, 0.59f), c10 = hn::Set(df, 0.60f), c11 = hn::Set(df, 0.61f);
  for (int64_t i = 0; i < iters; ++i) {
    c0 = hn::MulAdd(c0, a, b);
    c1 = hn::MulAdd(c1, a, b);
    c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b);
    c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b);
    c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b);
    c10 = hn::MulAdd(c10, a, b);
    c11 = hn::MulAdd(c11, a, b);
  }
  const auto s = hn::Add(
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
      hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  return hn::GetLane(hn::SumOfLanes(df, s));
}

size_t LanesImpl() { return hn::Lanes(hn::ScalableTag<float>()); }

// Σ of `streams` equal parts of p[0..n) read concurrently: each step loads
// 4 vectors (128 B at AVX2) from every part, four accumulators per step so
// the loop is bound by loads, not by add latency. n is a multiple of
// streams x 4 vectors. One stream is a plain sequential read; several
// streams keep several of the core's hardware prefetch streams busy at
// once, which is how a decode step reads (K and V rows, GQA groups).
float SumStreamsImpl(const float* HWY_RESTRICT p, int64_t n, int64_t streams) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t part = n / streams;
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  for (int64_t i = 0; i + 4 * N <= part; i += 4 * N) {
    for (int64_t s = 0; s < streams; ++s) {
      const float* HWY_RESTRICT q = p + s * part + i;
      s0 = hn::Add(s0, hn::LoadU(df, q));
      s1 = hn::Add(s1, hn::LoadU(df, q + N));
      s2 = hn::Add(s2, hn::LoadU(df, q + 2 * N));
      s3 = hn::Add(s3, hn::LoadU(df, q + 3 * N));
    }
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();

// The bf16 dot-product peak: kChains independent chains of the bf16
// kernels' instruction, acc = PairDot(acc, a, b) with a = (1, 1) and
// b = (2^-20, -2^-20), so every step adds 2^-20 and takes it away again:
// exact for acc near 0.5, so the chains stay put. Each instruction is
// 4 FLOPs a float lane (two products, two sums). Only AVX3 has the
// instruction (bf16dot-inl.h); other targets return -1 (no such peak).
#ifdef ATTN_HAVE_AVX512BF16_DOT
ATTN_BEGIN_AVX512BF16
namespace attn_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
float Bf16DotChainsImpl(int64_t iters, uint32_t a_pair, uint32_t b_pair) {
  using Dot = attn::HWY_NAMESPACE::Avx512Bf16Dot;
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const auto a = hn::Set(du, a_pair);
  const auto b = hn::Set(du, b_pair);
  auto c0 = hn::Set(df, 0.50f), c1 = hn::Set(df, 0.51f), c2 = hn::Set(df, 0.52f);
  auto c3 = hn::Set(df, 0.53f), c4 = hn::Set(df, 0.54f), c5 = hn::Set(df, 0.55f);
  auto c6 = hn::Set(df, 0.56f), c7 = hn::Set(df, 0.57f), c8 = hn::Set(df, 0.58f);
  auto c9 = hn::Set(df, 0.59f), c10 = hn::Set(df, 0.60f), c11 = hn::Set(df, 0.61f);
  for (int64_t i = 0; i < iters; ++i) {
    c0 = Dot::PairDot(c0, a, b);
    c1 = Dot::PairDot(c1, a, b);
    c2 = Dot::PairDot(c2, a, b);
    c3 = Dot::PairDot(c3, a, b);
    c4 = Dot::PairDot(c4, a, b);
    c5 = Dot::PairDot(c5, a, b);
    c6 = Dot::PairDot(c6, a, b);
    c7 = Dot::PairDot(c7, a, b);
    c8 = Dot::PairDot(c8, a, b);
    c9 = Dot::PairDot(c9, a, b);
    c10 = Dot::PairDot(c10, a, b);
    c11 = Dot::PairDot(c11, a, b);
  }
  const auto s = hn::Add(
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
      hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  return hn::GetLane(hn::SumOfLanes(df, s));
}
}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_POP_ATTRIBUTES
#else
HWY_BEFORE_NAMESPACE();
namespace attn_bench {
namespace HWY_NAMESPACE {
float Bf16DotChainsImpl(int64_t, uint32_t, uint32_t) { return -1.0f; }
}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();
#endif

// The AMX peak: four independent tdpbf16ps accumulators (tiles 0-3, each
// 16 x 16 float32 += 16 x 32 bf16 times 32 x 16 bf16: 16384 FLOPs), enough
// to cover the instruction's latency at one issue per 16 cycles (Sapphire
// Rapids: ~52 cycles latency). A is 1.0, B alternates ±2^-20 along K, so the
// sums stay 0. Through the library's own tile layer (amx-inl.h); other
// targets return -1 (no such peak).
#ifdef ATTN_HAVE_AMX_TILES
ATTN_BEGIN_AMX
namespace attn_bench {
namespace HWY_NAMESPACE {
float AmxChainsImpl(int64_t iters) {
  using Amx = attn::HWY_NAMESPACE::HardwareAmx;
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3F80u;                         // 1.0
    b[i] = (i % 2) ? 0xB580u : 0x3580u;     // -2^-20 : 2^-20
  }
  Amx::Configure(attn::internal::FullAmxTiles());
  Amx::Zero<0>();
  Amx::Zero<1>();
  Amx::Zero<2>();
  Amx::Zero<3>();
  Amx::Load<4>(a, 64);
  Amx::Load<5>(a, 64);
  Amx::Load<6>(b, 64);
  Amx::Load<7>(b, 64);
  for (int64_t i = 0; i < iters; ++i) {
    Amx::DotBf16<0, 4, 6>();
    Amx::DotBf16<1, 4, 7>();
    Amx::DotBf16<2, 5, 6>();
    Amx::DotBf16<3, 5, 7>();
  }
  float total = 0.0f;
  Amx::Store<0>(c, 64);
  total += c[0];
  Amx::Store<3>(c, 64);
  total += c[255];
  Amx::Release();
  return total;
}
}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_POP_ATTRIBUTES
#else
HWY_BEFORE_NAMESPACE();
namespace attn_bench {
namespace HWY_NAMESPACE {
float AmxChainsImpl(int64_t) { return -1.0f; }
}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();
#endif

#if HWY_ONCE
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <string>

#include "attn/attn.h"
#include "bench/peak.h"
#include "hwy/aligned_allocator.h"

namespace attn_bench {
HWY_EXPORT(FmaChainsImpl);
HWY_EXPORT(LanesImpl);
HWY_EXPORT(SumStreamsImpl);
HWY_EXPORT(Bf16DotChainsImpl);
HWY_EXPORT(AmxChainsImpl);

namespace {

constexpr int kChains = 12;  // must match FmaChainsImpl
// The read probe tries 1, 2, 4 and 8 concurrent streams per thread and
// keeps the best. Measured on AMD EPYC Zen 3 (one core, 2 x 256 MiB, a busy
// 2-core VM, so only the ordering is firm): 1 stream 10-12 GB/s, 2 streams
// 10-13, 4 streams 13-14, 8 streams 14-15; software prefetch 256 B-4 KiB
// ahead of each stream never helped (up to -40% at 8 streams), so the probe
// issues none. The best reader is several streams, not one.
constexpr int64_t kMaxReadStreams = 8;
constexpr float kTiny = 1.0f / 1048576.0f;  // 2^-20

volatile float g_sink;  // keeps the probe's result observable

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

float RunChains(int64_t iters) {
  // Through volatile reads so the compiler cannot see constant operands.
  volatile float a = 1.0f - kTiny, b = kTiny;
  return HWY_DYNAMIC_DISPATCH(FmaChainsImpl)(iters, a, b);
}

struct Timing {
  double wall = 0.0;               // common start signal -> last thread done
  std::vector<double> cpu;         // each thread's own CPU seconds
};

// `threads` threads each run work(t), released together.
template <class Work>
Timing TimeConcurrent(int threads, const Work& work) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<float> sums(size_t(threads), 0.0f);
  Timing timing;
  timing.cpu.assign(size_t(threads), 0.0);
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      const double c0 = ThreadCpuSeconds();
      sums[size_t(t)] = work(t);
      timing.cpu[size_t(t)] = ThreadCpuSeconds() - c0;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  timing.wall = std::chrono::duration<double>(Clock::now() - t0).count();
  float total = 0.0f;
  for (float s : sums) total += s;
  g_sink = total;
  return timing;
}

float RunBf16DotChains(int64_t iters) {
  volatile uint32_t a = 0x3F803F80u;  // (1, 1)
  volatile uint32_t b = 0xB5803580u;  // (2^-20, -2^-20)
  return HWY_DYNAMIC_DISPATCH(Bf16DotChainsImpl)(iters, a, b);
}

// The probe shared by both peaks: calibrate `chains(iters)` on one thread to
// ~20 ms, then the best of `repeats` concurrent runs of `seconds` each.
template <class Chains>
Peak MeasureChains(int threads, double seconds, int repeats, double flops_per_iter,
                   const Chains& chains) {
  threads = std::max(1, threads);
  int64_t iters = 1 << 16;
  double t = 0.0;
  for (;;) {
    t = TimeConcurrent(1, [&](int) { return chains(iters); }).cpu[0];
    if (t >= 0.02 || iters >= (int64_t{1} << 40)) break;
    iters *= 4;
  }
  iters = std::max<int64_t>(1, int64_t(double(iters) * seconds / t));
  const double flops = flops_per_iter * double(iters);
  Peak best;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const Timing timing = TimeConcurrent(threads, [&](int) { return chains(iters); });
    double sum = 0.0;
    for (double c : timing.cpu) sum += flops / std::max(c, 1e-9) * 1e-9;
    best.gflops = std::max(best.gflops, sum);
    best.wall_gflops = std::max(best.wall_gflops, flops * threads / timing.wall * 1e-9);
  }
  return best;
}

}  // namespace

size_t PeakProbeLanes() { return HWY_DYNAMIC_DISPATCH(LanesImpl)(); }

double MeasureClockGhz(double seconds, int repeats) {
  double best = 0.0;
  volatile uint64_t step_source = 3;
  for (int r = 0; r < repeats; ++r) {
    int64_t iters = 1 << 20;
    for (;;) {
      // A register operand, not an immediate: Intel's Golden Cove cores
      // fold chains of adds of immediates at rename (17 "GHz" measured).
      uint64_t x = uint64_t(r), step = step_source;
      const double c0 = ThreadCpuSeconds();
      for (int64_t i = 0; i < iters; ++i) {
        // Eight dependent adds a pass; the empty asm keeps them in a chain
        // the compiler can neither fold nor vectorise.
        for (int u = 0; u < 8; ++u) {
          x += step;
          asm volatile("" : "+r"(x), "+r"(step));
        }
      }
      const double dt = ThreadCpuSeconds() - c0;
      g_sink = float(x & 1u);
      if (dt >= seconds || iters >= (int64_t(1) << 40)) {
        if (dt > 0.0) best = std::max(best, 8.0 * double(iters) / dt * 1e-9);
        break;
      }
      iters *= 2;
    }
  }
  return best;
}

Peak MeasurePeak(int threads, double seconds, int repeats) {
  // An FMA is 2 FLOPs a lane.
  return MeasureChains(threads, seconds, repeats, 2.0 * kChains * double(PeakProbeLanes()),
                       [](int64_t iters) { return RunChains(iters); });
}

Peak MeasureBf16DotPeak(int threads, double seconds, int repeats) {
  // Only where the library itself would run the instruction: the CPU has
  // it and the current target is AVX3 (else the probe would be SIGILL).
  const std::vector<std::string> paths = attn::SupportedDotPaths();
  if (std::find(paths.begin(), paths.end(), "avx512bf16") == paths.end()) return Peak();
  // Two products and two sums a float lane.
  return MeasureChains(threads, seconds, repeats, 4.0 * kChains * double(PeakProbeLanes()),
                       [](int64_t iters) { return RunBf16DotChains(iters); });
}

Peak MeasureAmxPeak(int threads, double seconds, int repeats) {
  // Only where the library itself would run AMX: the CPU has it, the OS
  // granted the tile state to this process, the current target is AVX3.
  const std::vector<std::string> paths = attn::SupportedDotPaths();
  if (std::find(paths.begin(), paths.end(), "amx") == paths.end()) return Peak();
  // Four tdpbf16ps an iteration, 16 x 16 x 32 multiply-adds each.
  return MeasureChains(threads, seconds, repeats, 4.0 * 16 * 16 * 32 * 2,
                       [](int64_t iters) { return HWY_DYNAMIC_DISPATCH(AmxChainsImpl)(iters); });
}

Peak MeasureReadBandwidth(int threads, size_t bytes, int repeats) {
  threads = std::max(1, threads);
  const int64_t lanes = int64_t(PeakProbeLanes());
  // Whole groups of 4 vectors per stream, for every stream count.
  const int64_t unit = kMaxReadStreams * 4 * lanes;
  const int64_t per_thread = int64_t(bytes / sizeof(float)) / threads / unit * unit;
  if (per_thread <= 0) return Peak();
  hwy::AlignedFreeUniquePtr<float[]> data = hwy::AllocateAligned<float>(size_t(per_thread * threads));
  if (!data) return Peak();
  // Each thread first-touches its own slice (NUMA-local pages on big hosts).
  TimeConcurrent(threads, [&](int t) {
    float* slice = data.get() + int64_t(t) * per_thread;
    std::fill(slice, slice + per_thread, 1.0f);
    return 0.0f;
  });
  const double slice_bytes = double(per_thread) * sizeof(float);
  Peak best;
  // Rounds alternate the stream counts, so that a burst of load from
  // elsewhere lowers one round of each rather than all of one count.
  for (int r = 0; r < std::max(1, repeats); ++r) {
    for (int64_t streams = 1; streams <= kMaxReadStreams; streams *= 2) {
      const Timing timing = TimeConcurrent(threads, [&](int t) {
        return HWY_DYNAMIC_DISPATCH(SumStreamsImpl)(data.get() + int64_t(t) * per_thread,
                                                    per_thread, streams);
      });
      double sum = 0.0;
      for (double c : timing.cpu) sum += slice_bytes / std::max(c, 1e-9) * 1e-9;
      if (sum > best.gflops) {
        best.gflops = sum;
        best.streams = int(streams);
      }
      best.wall_gflops = std::max(best.wall_gflops, slice_bytes * threads / timing.wall * 1e-9);
    }
  }
  return best;
}

}  // namespace attn_bench
#endif  // HWY_ONCE
