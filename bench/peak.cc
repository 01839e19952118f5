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

}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/peak.h"

namespace attn_bench {
HWY_EXPORT(FmaChainsImpl);
HWY_EXPORT(LanesImpl);

namespace {

constexpr int kChains = 12;  // must match FmaChainsImpl
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

// `threads` threads each run `iters` iterations, released together.
Timing TimeConcurrent(int threads, int64_t iters) {
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
      sums[size_t(t)] = RunChains(iters);
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

}  // namespace

size_t PeakProbeLanes() { return HWY_DYNAMIC_DISPATCH(LanesImpl)(); }

Peak MeasurePeak(int threads, double seconds, int repeats) {
  threads = std::max(1, threads);
  const double flops_per_iter = 2.0 * kChains * double(PeakProbeLanes());
  // Calibrate on one thread: grow until a run takes >= 20 ms of CPU time.
  int64_t iters = 1 << 16;
  double t = 0.0;
  for (;;) {
    t = TimeConcurrent(1, iters).cpu[0];
    if (t >= 0.02 || iters >= (int64_t{1} << 40)) break;
    iters *= 4;
  }
  iters = std::max<int64_t>(1, int64_t(double(iters) * seconds / t));
  const double flops = flops_per_iter * double(iters);
  Peak best;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const Timing timing = TimeConcurrent(threads, iters);
    double sum = 0.0;
    for (double c : timing.cpu) sum += flops / std::max(c, 1e-9) * 1e-9;
    best.gflops = std::max(best.gflops, sum);
    best.wall_gflops = std::max(best.wall_gflops, flops * threads / timing.wall * 1e-9);
  }
  return best;
}

}  // namespace attn_bench
#endif  // HWY_ONCE
