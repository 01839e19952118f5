// First use from many threads at once (issue 7): the library's one-time
// initialisation (SIMD target choice and ATTN_TARGET, the tuning-file load
// from ATTN_TUNING_FILE, Highway's dispatch tables) must happen exactly once
// and be race-free when the very first calls of a process come from many
// threads simultaneously.
//
// This is its own test binary, and every test below must be the first thing
// in its process to touch the library: ctest runs each test case in a
// separate process (gtest_discover_tests), and a test finding the library
// already used (when the binary is run by hand with several tests) skips
// itself. Under the TSan build (.ci/run) races in the initialisation are
// reported by ThreadSanitizer; in every build the results are checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

std::atomic<bool> g_used{false};

// True the first time only: the library has not been touched yet.
bool FirstUse() { return !g_used.exchange(true); }

// Redirects this process's stderr into a file for the scope's lifetime and
// returns what was written.
class CaptureStderr {
 public:
  CaptureStderr() : path_("/tmp/attn-first-use-" + std::to_string(getpid()) + ".txt") {
    std::fflush(stderr);
    saved_ = dup(2);
    FILE* f = std::fopen(path_.c_str(), "w");
    dup2(fileno(f), 2);
    std::fclose(f);
  }
  std::string Finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream in(path_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(path_.c_str());
    return text;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Threads that all start together, each making one first-use-sensitive call.
// Returns the number of calls whose result failed the oracle.
int HammerFirstUse(int threads) {
  Shape s;
  s.q_heads = 2;
  s.tq = 33;
  s.tk = 65;
  s.d = 24;
  s.causal = Causal::kBottomRight;
  std::vector<OwnedProblem> problems;
  for (int t = 0; t < threads; ++t) problems.push_back(MakeProblem(s));
  const reference::Result ref = reference::Attention(problems[0].problem);
  std::atomic<int> ready{0}, bad{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load()) {
      }
      try {
        switch (t % 6) {
          case 4:  // the other first-use entry points, racing the calls
            (void)CurrentTuning();
            (void)CurrentTarget();
            return;
          case 5:
            (void)DefaultTiles(100, 100, 64);
            (void)ExplainChoice(33, 65, 24);
            return;
          default: {
            Options o;  // auto, streaming, parallel with and without OpenMP
            o.kernel = t % 4 == 0 ? KernelId::kAuto
                       : t % 4 == 1 ? KernelId::kStreaming
                                    : KernelId::kParallel;
            o.threads = t % 4 == 3 ? 2 : (t % 4 == 0 ? 0 : 1);
            attention(problems[size_t(t)].problem, o);
            if (!oracle::Check(problems[size_t(t)].problem, ref).empty()) ++bad;
          }
        }
      } catch (...) {
        ++bad;
      }
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go = true;
  for (std::thread& t : pool) t.join();
  return bad.load();
}

TEST(FirstUse, ManyThreadsAtOnceLoadTheTuningFileOnce) {
  if (!FirstUse()) GTEST_SKIP() << "the library was used earlier in this process; run alone";
  // A corrupt tuning file: the first-use load must read it once, warn once
  // and fall back to the default rule for every thread.
  const std::string path = "/tmp/attn-first-use-bad-" + std::to_string(getpid()) + ".json";
  { std::ofstream(path) << "{ this is not json"; }
  setenv("ATTN_TUNING_FILE", path.c_str(), 1);
  CaptureStderr capture;
  const int bad = HammerFirstUse(12);
  const std::string err = capture.Finish();
  std::remove(path.c_str());
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(CountLines(err, "attn: warning: ignoring tuning file"), 1) << err;
  const TuningStatus status = CurrentTuning();
  EXPECT_FALSE(status.loaded);
  EXPECT_NE(status.warning.find(path), std::string::npos) << status.warning;
}

TEST(FirstUse, ManyThreadsAtOnceHonourAForcedTarget) {
  if (!FirstUse()) GTEST_SKIP() << "the library was used earlier in this process; run alone";
  // The worst target this CPU supports, named through the environment the
  // way a user would, and applied once at first use.
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  ASSERT_NE(usable, 0);
  int64_t worst = 0;
  for (int64_t bit = 1; bit != 0 && bit <= usable; bit <<= 1) {
    if (usable & bit) worst = bit;
  }
  const std::string name = hwy::TargetName(worst);
  setenv("ATTN_TARGET", name.c_str(), 1);
  setenv("ATTN_TUNING_FILE", "", 1);
  EXPECT_EQ(HammerFirstUse(12), 0);
  EXPECT_EQ(CurrentTarget(), name);
}

TEST(FirstUse, ManyThreadsAtOnceWithTheDefaults) {
  if (!FirstUse()) GTEST_SKIP() << "the library was used earlier in this process; run alone";
  setenv("ATTN_TUNING_FILE", "", 1);
  EXPECT_EQ(HammerFirstUse(16), 0);
  EXPECT_EQ(CurrentTarget(), SupportedTargets().front());
}

}  // namespace
}  // namespace attn::test
