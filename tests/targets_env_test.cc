// ATTN_TARGET is read once per process, at first use, so these cases run as
// processes of their own, registered in tests/CMakeLists.txt with the
// environment each needs (and not through test discovery).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attn/attn.h"

namespace attn {
namespace {

// Run with ATTN_TARGET=<t> and ATTN_EXPECT_TARGET=<t>: the variable takes
// effect at first use, before any explicit call.
TEST(TargetsEnv, EnvironmentVariableForcesTargetAtFirstUse) {
  const char* expected = std::getenv("ATTN_EXPECT_TARGET");
  ASSERT_NE(expected, nullptr) << "run me with ATTN_EXPECT_TARGET set";
  EXPECT_EQ(CurrentTarget(), expected);
}

// Run with ATTN_TARGET=NOPE: the first call reports the bad value.
TEST(TargetsEnv, BadEnvironmentValueIsAClearError) {
  const char* env = std::getenv("ATTN_TARGET");
  ASSERT_TRUE(env && std::string(env) == "NOPE") << "run me with ATTN_TARGET=NOPE";
  try {
    CurrentTarget();
    FAIL() << "expected attn::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "target");
    EXPECT_EQ(e.value(), "NOPE");
    EXPECT_NE(std::string(e.what()).find("NOPE"), std::string::npos);
  }
}

}  // namespace
}  // namespace attn
