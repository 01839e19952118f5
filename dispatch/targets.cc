// Runtime SIMD target selection through Highway. Every SIMD kernel is
// compiled for all of HWY_TARGETS; Highway's dispatch picks the best one the
// CPU supports. Forcing a target narrows Highway's view of the supported set
// (hwy::SetSupportedTargetsForTest), which every HWY_DYNAMIC_DISPATCH honours.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "dispatch/targets.h"
#include "hwy/highway.h"
#include "hwy/targets.h"

namespace attn {
namespace {

std::vector<int64_t> TargetBits(int64_t mask) {
  std::vector<int64_t> bits;
  for (int64_t bit = 1; bit != 0 && bit <= mask; bit <<= 1) {
    if (mask & bit) bits.push_back(bit);
  }
  return bits;
}

std::vector<std::string> Names(int64_t mask) {
  std::vector<std::string> names;
  for (int64_t bit : TargetBits(mask)) names.push_back(hwy::TargetName(bit));
  return names;
}

std::once_flag g_env_once;
int64_t g_cpu_targets = 0;  // what the CPU supports, captured before forcing
// The targets Highway dispatches to now: g_cpu_targets, or the forced one.
// Kept here because hwy::SupportedTargets() runs CPUID on every call, and in
// a virtual machine CPUID traps to the hypervisor: `auto` with a tuning
// table names the target on every call, and that cost ~25 us a call (15%
// of a T = 128 head) on the development VM.
std::atomic<int64_t> g_active_targets{0};

void ForceTargetUnlocked(const std::string& name) {
  if (name.empty() || name == "auto") {
    hwy::SetSupportedTargetsForTest(0);
    g_active_targets.store(g_cpu_targets);
    return;
  }
  for (int64_t bit : TargetBits(HWY_TARGETS)) {
    if (name != hwy::TargetName(bit)) continue;
    if ((g_cpu_targets & bit) == 0) {
      throw Error("target", name, "attn: target " + name + " is not supported by this CPU");
    }
    hwy::SetSupportedTargetsForTest(bit);
    g_active_targets.store(bit);
    return;
  }
  std::string known;
  for (const std::string& n : Names(HWY_TARGETS)) known += " " + n;
  throw Error("target", name, "attn: unknown target " + name + " (compiled:" + known + ")");
}

}  // namespace

namespace internal {
void InitTargetsOnce() {
  std::call_once(g_env_once, [] {
    g_cpu_targets = hwy::SupportedTargets();
    g_active_targets.store(g_cpu_targets);
    const char* env = std::getenv("ATTN_TARGET");
    if (env && *env) ForceTargetUnlocked(env);
  });
}
}  // namespace internal

std::vector<std::string> CompiledTargets() { return Names(HWY_TARGETS); }

std::vector<std::string> SupportedTargets() {
  internal::InitTargetsOnce();
  return Names(g_cpu_targets & HWY_TARGETS);
}

std::string CurrentTarget() {
  internal::InitTargetsOnce();
  const int64_t usable = g_active_targets.load() & HWY_TARGETS;
  return usable ? hwy::TargetName(usable & -usable) : "none";
}

void ForceTarget(const std::string& name) {
  internal::InitTargetsOnce();
  ForceTargetUnlocked(name);
}

}  // namespace attn
