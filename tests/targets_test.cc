// Runtime SIMD target selection: listing, forcing, and ATTN_TARGET.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "attn/attn.h"

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

}  // namespace
}  // namespace attn
