// The bf16 dot-product path in force, and the CPU test behind it.
#include "dispatch/dot_path.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86
#include <cpuid.h>
#endif

namespace attn {
namespace internal {
namespace {

constexpr DotPath kAllPaths[] = {DotPath::kWiden, DotPath::kAvx512Bf16,
                                 DotPath::kAvx512Bf16Emulated};


std::once_flag g_env_once;
std::atomic<int> g_forced{-1};  // a DotPath, or -1: the default rule

bool Runnable(DotPath path, std::string* why) {
  switch (path) {
    case DotPath::kWiden:
    case DotPath::kAvx512Bf16Emulated:
      return true;
    case DotPath::kAvx512Bf16:
      if (!CpuHasAvx512Bf16()) {
        if (why) *why = "this CPU has no AVX512-BF16";
        return false;
      }
      if (CurrentTarget() != "AVX3") {
        if (why) *why = "the AVX512-BF16 path runs on the AVX3 target, the current one is " +
                        CurrentTarget();
        return false;
      }
      return true;
  }
  return false;
}

DotPath Parse(const std::string& name) {
  for (DotPath p : kAllPaths) {
    if (name == DotPathName(p)) return p;
  }
  std::string names = "auto";
  for (DotPath p : kAllPaths) names += std::string(", ") + DotPathName(p);
  throw Error("dot_path", name, "attn: dot path must be one of " + names + ", got " + name);
}

void ForceUnlocked(const std::string& name) {
  if (name.empty() || name == "auto") {
    g_forced.store(-1);
    return;
  }
  const DotPath path = Parse(name);
  std::string why;
  if (!Runnable(path, &why)) {
    throw Error("dot_path", name, "attn: dot path " + name + " cannot run here: " + why);
  }
  g_forced.store(int(path));
}

void InitOnce() {
  std::call_once(g_env_once, [] {
    const char* env = std::getenv("ATTN_DOT_PATH");
    if (env && *env) ForceUnlocked(env);
  });
}

}  // namespace

const char* DotPathName(DotPath path) {
  switch (path) {
    case DotPath::kWiden: return "widen";
    case DotPath::kAvx512Bf16: return "avx512bf16";
    case DotPath::kAvx512Bf16Emulated: return "avx512bf16-emulated";
  }
  return "?";
}

bool CpuHasAvx512Bf16() {
#if HWY_ARCH_X86
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
    return (eax & (1u << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

// Without ForceDotPath or ATTN_DOT_PATH: the instruction where it runs
// (AVX512-BF16 CPU, AVX3 target), else widen. Never the emulation, which
// is for tests (~10x slower than widening). The path rounds P to bf16
// (README "Precision"): an all-bf16 problem asks for bf16 arithmetic, and
// PyTorch's and oneDNN's bf16 attention round P the same way.
DotPath ActiveDotPath() {
  InitOnce();
  const int forced = g_forced.load();
  if (forced >= 0) return static_cast<DotPath>(forced);
  return Runnable(DotPath::kAvx512Bf16, nullptr) ? DotPath::kAvx512Bf16 : DotPath::kWiden;
}

std::string DotPathDeclines(const Problem& p) {
  if (p.q.dtype != DType::kBF16 || p.k.dtype != DType::kBF16 || p.v.dtype != DType::kBF16) {
    return std::string("the bf16 dot-product path needs bf16 Q, K and V, got ") +
           DTypeName(p.q.dtype) + "/" + DTypeName(p.k.dtype) + "/" + DTypeName(p.v.dtype);
  }
  const DotPath path = ActiveDotPath();
  if (path == DotPath::kWiden) return "the dot path in force is widen (ForceDotPath, ATTN_DOT_PATH)";
  std::string why;
  // A forced path can stop being runnable when the target is forced later.
  if (!Runnable(path, &why)) return std::string("dot path ") + DotPathName(path) + ": " + why;
  return "";
}

}  // namespace internal

std::vector<std::string> DotPaths() {
  std::vector<std::string> names;
  for (internal::DotPath p : internal::kAllPaths) names.push_back(internal::DotPathName(p));
  return names;
}

std::vector<std::string> SupportedDotPaths() {
  std::vector<std::string> names;
  for (internal::DotPath p : internal::kAllPaths) {
    if (internal::Runnable(p, nullptr)) names.push_back(internal::DotPathName(p));
  }
  return names;
}

std::string CurrentDotPath() { return internal::DotPathName(internal::ActiveDotPath()); }

void ForceDotPath(const std::string& name) {
  internal::InitOnce();
  internal::ForceUnlocked(name);
}

}  // namespace attn
