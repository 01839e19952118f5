// Which instruction path an all-bf16 problem takes (attn.h "bf16 dot-product
// paths"): the process-wide choice, and the kernel table's test for its
// bf16 rows.
#pragma once

#include <string>
#include <vector>

#include "attn/attn.h"
#include "kernels/kernel.h"  // DotPath

namespace attn::internal {

const char* DotPathName(DotPath path);

// CPUID leaf 7 sub-leaf 1, EAX bit 5 (the AVX-512 state itself is Highway's
// AVX3 check); false off x86.
bool CpuHasAvx512Bf16();

// "" when this process may execute AMX bf16 tile instructions, else why
// not: CPUID leaf 7 EDX bits 24 (AMX-TILE) and 22 (AMX-BF16), XCR0 bits 17
// and 18 (the OS manages the tile configuration and data), and Linux's
// permission for the tile data, requested once per process with
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) (0x1023, 18): without
// it the first tile instruction faults. Always a reason off x86-64 Linux.
const std::string& AmxUnavailable();

// getauxval(AT_HWCAP2) & HWCAP2_BF16 (Arm's BFDOT, BFMMLA...: FEAT_BF16);
// false off aarch64 Linux.
bool CpuHasArmBf16();

// Whether `path` runs the AMX kernels (hardware or emulated tiles), whether
// it runs the AVX512-BF16 ones, and whether it runs the bf16 dot-product
// kernels over a pair dot layer (AVX512-BF16's or Arm BFDOT's, hardware or
// emulated: kernels/bf16dot/bf16dot.h PairDotLayer).
bool IsAmxPath(DotPath path);
bool IsAvx512Bf16Path(DotPath path);
bool IsPairDotPath(DotPath path);

// The process-wide path: ForceDotPath / ATTN_DOT_PATH (read at first use,
// as ATTN_TARGET is), else DefaultDotPath(). Throws Error for a bad
// ATTN_DOT_PATH.
DotPath ActiveDotPath();
// The default rule: the fastest hardware path that runs here (amx, then
// avx512bf16), else widen; never an emulation.
DotPath DefaultDotPath();
// Whether ForceDotPath or ATTN_DOT_PATH chose the process-wide path (a
// tuning table's per-shape path then does not apply).
bool DotPathForced();
// Whether `path` can run here now, else why not in *why.
bool DotPathRunnable(DotPath path, std::string* why);
// The path named `name`; throws Error (field "dot_path") for an unknown one.
DotPath ParseDotPath(const std::string& name);
// A call's path from Options::dot_path: "" or "auto" is ActiveDotPath();
// a name must be runnable here, else Error (field "dot_path").
DotPath CallDotPath(const std::string& name);
// A call's dot path before a tuning table is consulted: for a problem
// whose Q, K and V are all bf16, Options::dot_path, else the process-wide
// path; widen for every other problem (the path is not consulted, so a
// float32 call reads no CPU state). `fixed` when one was chosen explicitly
// (Options::dot_path, ForceDotPath, ATTN_DOT_PATH): a table's per-shape
// path then does not apply. Throws Error (field "dot_path") as CallDotPath,
// for any problem when the option names a path.
struct DotPathRequest {
  DotPath path = DotPath::kWiden;
  bool fixed = false;
};
DotPathRequest RequestedDotPath(const Problem& problem, const std::string& option);

// "" when the AMX rows / the pair dot-product rows of the kernel table take
// `problem` under the call's dot path `path` (Q, K and V bf16, and `path`
// one of theirs that runs here), else why not.
std::string AmxDeclines(const Problem& problem, DotPath path);
std::string PairDotDeclines(const Problem& problem, DotPath path);

}  // namespace attn::internal
