// Which instruction path an all-bf16 problem takes (attn.h "bf16 dot-product
// paths"): the process-wide choice, and the kernel table's test for its
// bf16 rows.
#pragma once

#include <string>

#include "attn/attn.h"

namespace attn::internal {

enum class DotPath {
  kWiden,               // widened to float32: the exact path of every type mix
  kAvx512Bf16,          // vdpbf16ps, AVX3 target, CPU with AVX512-BF16
  kAvx512Bf16Emulated,  // the same kernels over the portable emulation
  kAmx,                 // AMX tiles (tdpbf16ps), AVX3 target, CPU and OS with AMX-BF16
  kAmxEmulated,         // the AMX kernels over the emulated tiles
};
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

// Whether `path` runs the AMX kernels (hardware or emulated tiles), and
// whether it runs the AVX512-BF16 ones.
bool IsAmxPath(DotPath path);
bool IsAvx512Bf16Path(DotPath path);

// The path in force: ForceDotPath / ATTN_DOT_PATH (read at first use, as
// ATTN_TARGET is), else the default rule. Throws Error for a bad
// ATTN_DOT_PATH.
DotPath ActiveDotPath();

// "" when the AMX rows / the AVX512-BF16 rows of the kernel table take
// `problem` (Q, K and V bf16 and a dot path of theirs in force that runs
// here), else why not.
std::string AmxDeclines(const Problem& problem);
std::string Avx512Bf16Declines(const Problem& problem);

}  // namespace attn::internal
