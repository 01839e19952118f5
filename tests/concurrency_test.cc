// Concurrency (issue 7): many user threads calling attn::attention at once,
// with and without OpenMP threads inside each call, from inside a user's own
// OpenMP region, and while another thread swaps the tuning table. Every
// result must be bit-identical to the same configuration run alone: the
// kernels' results do not depend on thread timing (each output row is
// computed by one thread in a fixed order; split-KV merges in a fixed
// order), so any difference is a race on shared state or scratch.
//
// The TSan build (cmake/Sanitizers.cmake, .ci/run) runs this file under
// ThreadSanitizer with libomp + Archer, so races inside the OpenMP regions
// are reported as well. tests/first_use_test.cc covers the very first call
// of a process.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

// A few problem shapes: prefill, decode (split-KV), GQA with a mask.
std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  Shape s;
  s.tq = 45;
  s.tk = 77;
  s.d = 24;
  s.causal = Causal::kBottomRight;
  s.seed = 11;
  shapes.push_back(s);
  s = Shape{};
  s.q_heads = 4;
  s.kv_heads = 1;
  s.tq = 1;
  s.tk = 700;
  s.d = 32;
  s.seed = 12;
  shapes.push_back(s);
  s = Shape{};
  s.batch = 2;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.tq = 19;
  s.tk = 33;
  s.d = 16;
  s.dv = 12;
  s.additive_mask = true;
  s.fully_masked_rows = 2;
  s.seed = 13;
  shapes.push_back(s);
  return shapes;
}

// Expected outputs (out ++ lse) of every (shape, variant), computed one call
// at a time before any thread starts.
struct Fixture {
  std::vector<OwnedProblem> problems;
  std::vector<Variant> variants = KernelVariants();
  std::vector<std::vector<std::vector<float>>> expected;  // [shape][variant]

  Fixture() {
    for (const Shape& s : Shapes()) problems.push_back(MakeProblem(s));
    for (OwnedProblem& o : problems) {
      const reference::Result ref = reference::Attention(o.problem);
      expected.emplace_back();
      for (const Variant& v : variants) {
        o.ClearOutputs();
        attention(o.problem, v.options);
        EXPECT_EQ(oracle::Check(o.problem, ref), "") << v.name;
        std::vector<float> e = o.out;
        e.insert(e.end(), o.lse.begin(), o.lse.end());
        expected.back().push_back(std::move(e));
      }
    }
  }

  // One call of (shape, variant) into the caller's own output buffers;
  // returns true when the result is bit-identical to the expected one.
  bool RunOnce(size_t shape, size_t variant, std::vector<float>& out, std::vector<float>& lse) const {
    const OwnedProblem& o = problems[shape];
    out.assign(o.out.size(), -1.0f);
    lse.assign(o.lse.size(), -1.0f);
    Problem p = o.problem;
    p.out.data = out.data();
    p.lse.data = lse.data();
    attention(p, variants[variant].options);
    const std::vector<float>& e = expected[shape][variant];
    return std::memcmp(out.data(), e.data(), out.size() * sizeof(float)) == 0 &&
           std::memcmp(lse.data(), e.data() + out.size(), lse.size() * sizeof(float)) == 0;
  }
};

// N user threads x M calls each, every thread cycling through every shape
// and variant (so that at any moment calls with and without OpenMP inside,
// of different kernels and tile sizes, run side by side).
TEST(Concurrency, ManyUserThreadsCallAtOnce) {
  const Fixture f;
  constexpr int kThreads = 6, kCalls = 18;
  std::atomic<int> mismatches{0}, errors{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      std::vector<float> out, lse;
      for (int call = 0; call < kCalls; ++call) {
        const size_t shape = size_t(t + call) % f.problems.size();
        const size_t variant = size_t(t * 7 + call) % f.variants.size();
        try {
          if (!f.RunOnce(shape, variant, out, lse)) ++mismatches;
        } catch (...) {
          ++errors;
        }
      }
    });
  }
  go = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

// Without OpenMP inside: every call single-threaded, only user threads.
TEST(Concurrency, ManyUserThreadsSingleThreadedCalls) {
  const Fixture f;
  constexpr int kThreads = 8, kCalls = 12;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out, lse;
      for (int call = 0; call < kCalls; ++call) {
        const size_t shape = size_t(t + call) % f.problems.size();
        size_t variant = size_t(t + 3 * call) % f.variants.size();
        if (f.variants[variant].options.threads != 1) variant = 4;  // parallel/t1
        if (!f.RunOnce(shape, variant, out, lse)) ++mismatches;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Called from inside the caller's own OpenMP parallel region, the parallel
// kernel runs on the calling thread alone (no nested teams), and results are
// unchanged.
TEST(Concurrency, CallsFromInsideAUserOpenMPRegion) {
  const Fixture f;
  std::atomic<int> mismatches{0}, calls{0};
#pragma omp parallel num_threads(3)
  {
    std::vector<float> out, lse;
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < 27; ++i) {
      const size_t shape = size_t(i) % f.problems.size();
      const size_t variant = size_t(i / 3) % f.variants.size();
      if (!f.RunOnce(shape, variant, out, lse)) ++mismatches;
      ++calls;
    }
  }
  EXPECT_EQ(calls.load(), 27);
  EXPECT_EQ(mismatches.load(), 0);
}

// One thread swaps the process's tuning table (to "none" by two routes)
// while the others run auto: the table is read under a mutex as a shared
// pointer, so readers never see a half-installed table.
TEST(Concurrency, TuningTableSwapsDuringCalls) {
  ClearTuning();  // the expected results below are the default rule's
  const Fixture f;
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  std::thread swapper([&] {
    int i = 0;
    while (!done.load()) {
      if (i++ % 2) {
        ClearTuning();
      } else {
        LoadTuningFile("/nonexistent/attn-tuning.json");  // warns, installs none
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out, lse;
      for (int call = 0; call < 12; ++call) {
        const size_t shape = size_t(t + call) % f.problems.size();
        const size_t variant = (call % 2) ? 7 : 8;  // auto/t1, auto/t2
        if (!f.RunOnce(shape, variant, out, lse)) ++mismatches;
        (void)CurrentTuning();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  swapper.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace attn::test
