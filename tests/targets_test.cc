// Runtime SIMD target selection: listing, forcing, and ATTN_TARGET.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "tests/test_util.h"

namespace attn {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Targets, SupportedAreCompiledAndCurrentIsSupported) {
  const std::vector<std::string> compiled = CompiledTargets();
  const std::vector<std::string> supported = SupportedTargets();
  ASSERT_FALSE(supported.empty());
  for (const std::string& t : supported) EXPECT_TRUE(Contains(compiled, t)) << t;
  EXPECT_TRUE(Contains(supported, CurrentTarget())) << CurrentTarget();
}

TEST(Targets, ForcingEachSupportedTargetMakesItCurrent) {
  if (std::getenv("ATTN_TARGET")) GTEST_SKIP() << "runs without ATTN_TARGET (see TargetsEnv)";
  const std::string best = CurrentTarget();
  for (const std::string& t : SupportedTargets()) {
    ForceTarget(t);
    EXPECT_EQ(CurrentTarget(), t);
  }
  ForceTarget("auto");
  EXPECT_EQ(CurrentTarget(), best);
  // The best supported target is the first in Highway's order (best first).
  EXPECT_EQ(best, SupportedTargets().front());
}

// ATTN_TEST_TARGETS narrows the targets the kernel tests iterate
// (test::TestTargets; .ci/arm.sh at 128 and 256 bits): unset, every
// supported target; set, those it names, in its order; a name this CPU does
// not run, or nothing left, fails the test rather than testing nothing.
TEST(Targets, TestTargetsFollowsAttnTestTargets) {
  const char* saved = std::getenv("ATTN_TEST_TARGETS");
  const std::string before = saved ? saved : "";
  const std::vector<std::string> supported = SupportedTargets();
  unsetenv("ATTN_TEST_TARGETS");
  EXPECT_EQ(test::TestTargets(), supported);
  const std::string lowest = supported.back();
  setenv("ATTN_TEST_TARGETS", lowest.c_str(), 1);
  EXPECT_EQ(test::TestTargets(), std::vector<std::string>{lowest});
  if (supported.size() > 1) {
    const std::string two = lowest + "," + supported.front();
    setenv("ATTN_TEST_TARGETS", two.c_str(), 1);
    EXPECT_EQ(test::TestTargets(), (std::vector<std::string>{lowest, supported.front()}));
  }
  const std::string unknown = "NOT_A_TARGET," + lowest;
  setenv("ATTN_TEST_TARGETS", unknown.c_str(), 1);
  EXPECT_NONFATAL_FAILURE(test::TestTargets(), "names NOT_A_TARGET");
  setenv("ATTN_TEST_TARGETS", ",", 1);
  EXPECT_NONFATAL_FAILURE(test::TestTargets(), "leaves no target to test");
  // Removals: from every supported target, or from the names given; a
  // removed name need not run here.
  std::vector<std::string> but_lowest(supported.begin(), supported.end() - 1);
  const std::string remove_lowest = "-" + lowest + ",-NOT_A_TARGET";
  setenv("ATTN_TEST_TARGETS", remove_lowest.c_str(), 1);
  if (but_lowest.empty()) {
    EXPECT_NONFATAL_FAILURE(test::TestTargets(), "leaves no target to test");
  } else {
    EXPECT_EQ(test::TestTargets(), but_lowest);
    const std::string named = supported.front() + "," + lowest + ",-" + lowest;
    setenv("ATTN_TEST_TARGETS", named.c_str(), 1);
    EXPECT_EQ(test::TestTargets(), std::vector<std::string>{supported.front()});
  }
  if (saved) {
    setenv("ATTN_TEST_TARGETS", before.c_str(), 1);
  } else {
    unsetenv("ATTN_TEST_TARGETS");
  }
}

}  // namespace
}  // namespace attn
