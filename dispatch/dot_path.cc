// The bf16 dot-product path in force, and the CPU test behind it.
#include "dispatch/dot_path.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "hwy/highway.h"
#include "kernels/bf16dot/bf16dot.h"  // ATTN_ARM_BFDOT_COMPILED

#if HWY_ARCH_X86
#include <cpuid.h>
#endif
#if HWY_ARCH_ARM_A64 && defined(__linux__)
#include <sys/auxv.h>
#endif
#if HWY_ARCH_X86_64 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace attn {
namespace internal {
namespace {

constexpr DotPath kAllPaths[] = {DotPath::kWiden,      DotPath::kAvx512Bf16,
                                 DotPath::kAvx512Bf16Emulated, DotPath::kAmx,
                                 DotPath::kAmxEmulated, DotPath::kArmBfdot,
                                 DotPath::kArmBfdotEmulated};

std::once_flag g_env_once;
std::atomic<int> g_forced{-1};  // a DotPath, or -1: the default rule

bool Runnable(DotPath path, std::string* why) {
  switch (path) {
    case DotPath::kWiden:
    case DotPath::kAvx512Bf16Emulated:
    case DotPath::kAmxEmulated:
    case DotPath::kArmBfdotEmulated:
      return true;
    case DotPath::kArmBfdot: {
      if (!CpuHasArmBf16()) {
        if (why) *why = "this CPU has no FEAT_BF16 (BFDOT)";
        return false;
      }
      // Its kernels are NEON's whatever the current target (SVE and SVE2
      // included: kernels/bf16dot/bf16dot.cc, Bf16DotTarget), and every
      // aarch64 CPU runs NEON: what remains is that the layer is compiled.
      if (!ATTN_ARM_BFDOT_COMPILED) {
        if (why) *why = "the BFDOT layer is not compiled (it needs GCC and the NEON target)";
        return false;
      }
      return true;
    }
    case DotPath::kAmx:
      if (!AmxUnavailable().empty()) {
        if (why) *why = AmxUnavailable();
        return false;
      }
      // Its decode views run vdpbf16ps (kernels/amx/amx.cc); every CPU with
      // AMX-BF16 so far has AVX512-BF16.
      if (!CpuHasAvx512Bf16()) {
        if (why) *why = "this CPU has AMX but no AVX512-BF16, which the AMX path's decode uses";
        return false;
      }
      if (CurrentTarget() != "AVX3") {
        if (why) *why = "the AMX path runs on the AVX3 target, the current one is " +
                        CurrentTarget();
        return false;
      }
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
    case DotPath::kAmx: return "amx";
    case DotPath::kAmxEmulated: return "amx-emulated";
    case DotPath::kArmBfdot: return "bfdot";
    case DotPath::kArmBfdotEmulated: return "bfdot-emulated";
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

bool CpuHasArmBf16() {
#if HWY_ARCH_ARM_A64 && defined(__linux__)
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)  // Linux's arch/arm64 uapi hwcap.h
#endif
  static const bool has = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
  return has;
#else
  return false;
#endif
}

const std::string& AmxUnavailable() {
  static const std::string why = []() -> std::string {
#if HWY_ARCH_X86_64 && defined(__linux__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) ||
        !(edx & (1u << 22))) {
      return "this CPU has no AMX-BF16";
    }
    // The hardware layer rounds P to bf16 with vcvtneps2bf16
    // (kernels/common/amx-inl.h); every AMX-BF16 CPU so far has it.
    if (!CpuHasAvx512Bf16()) return "this CPU has AMX-BF16 but no AVX512-BF16";
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) {
      return "the OS has not enabled XSAVE (OSXSAVE), so not AMX either";
    }
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) {
      return "the OS does not manage the AMX tile state (XCR0 bits 17-18 clear)";
    }
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      return std::string("Linux refused the AMX tile data to this process "
                         "(arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): ") +
             std::strerror(errno) + ")";
    }
    return "";
#else
    return "AMX runs only on x86-64 Linux";
#endif
  }();
  return why;
}

bool IsAmxPath(DotPath path) { return path == DotPath::kAmx || path == DotPath::kAmxEmulated; }
bool IsAvx512Bf16Path(DotPath path) {
  return path == DotPath::kAvx512Bf16 || path == DotPath::kAvx512Bf16Emulated;
}
bool IsPairDotPath(DotPath path) {
  return IsAvx512Bf16Path(path) || path == DotPath::kArmBfdot ||
         path == DotPath::kArmBfdotEmulated;
}

// Without ForceDotPath or ATTN_DOT_PATH: the fastest instruction that runs
// here (AMX tiles, then AVX512-BF16's vdpbf16ps; both need the AVX3
// target; on aarch64 BFDOT, NEON's kernels whatever the target), else widen. Never an emulation, which is for tests (~10x (AVX512-
// BF16) to ~100x (AMX) slower than widening). These paths round P to bf16
// (docs/precision.md): an all-bf16 problem asks for bf16 arithmetic, and
// PyTorch's and oneDNN's bf16 attention round P the same way.
DotPath ActiveDotPath() {
  InitOnce();
  const int forced = g_forced.load();
  if (forced >= 0) return static_cast<DotPath>(forced);
  return DefaultDotPath();
}

DotPath DefaultDotPath() {
  if (Runnable(DotPath::kAmx, nullptr)) return DotPath::kAmx;
  if (Runnable(DotPath::kAvx512Bf16, nullptr)) return DotPath::kAvx512Bf16;
  return Runnable(DotPath::kArmBfdot, nullptr) ? DotPath::kArmBfdot : DotPath::kWiden;
}

bool DotPathForced() {
  InitOnce();
  return g_forced.load() >= 0;
}

bool DotPathRunnable(DotPath path, std::string* why) { return Runnable(path, why); }

DotPath ParseDotPath(const std::string& name) { return Parse(name); }

DotPath CallDotPath(const std::string& name) {
  if (name.empty() || name == "auto") return ActiveDotPath();
  const DotPath path = Parse(name);
  std::string why;
  if (!Runnable(path, &why)) {
    throw Error("dot_path", name, "attn: dot path " + name + " cannot run here: " + why);
  }
  return path;
}

DotPathRequest RequestedDotPath(const Problem& problem, const std::string& option) {
  DotPathRequest r;
  const bool named = !(option.empty() || option == "auto");
  if (problem.q.dtype != DType::kBF16 || problem.k.dtype != DType::kBF16 ||
      problem.v.dtype != DType::kBF16) {
    if (named) CallDotPath(option);  // validated all the same
    return r;
  }
  r.path = CallDotPath(option);
  r.fixed = named || DotPathForced();
  return r;
}

namespace {

// "" when a row of the path family `is_family` takes `p`, else why not.
// Called on every row walk of an all-bf16 problem; the f32 and f16 walks
// only compare dtypes.
std::string DeclinesUnless(const Problem& p, DotPath path, bool (*is_family)(DotPath),
                           const char* family) {
  if (p.q.dtype != DType::kBF16 || p.k.dtype != DType::kBF16 || p.v.dtype != DType::kBF16) {
    return std::string("the bf16 dot-product paths need bf16 Q, K and V, got ") +
           DTypeName(p.q.dtype) + "/" + DTypeName(p.k.dtype) + "/" + DTypeName(p.v.dtype);
  }
  if (!is_family(path)) {
    return std::string("the call's dot path is ") + DotPathName(path) + ", not " + family +
           " (Options::dot_path, ForceDotPath, ATTN_DOT_PATH, a tuning table)";
  }
  std::string why;
  // A forced path can stop being runnable when the target is forced later.
  if (!Runnable(path, &why)) return std::string("dot path ") + DotPathName(path) + ": " + why;
  return "";
}

}  // namespace

std::string AmxDeclines(const Problem& p, DotPath path) {
  return DeclinesUnless(p, path, &IsAmxPath, "amx");
}
std::string PairDotDeclines(const Problem& p, DotPath path) {
  return DeclinesUnless(p, path, &IsPairDotPath, "avx512bf16 or bfdot");
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
