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
};
const char* DotPathName(DotPath path);

// CPUID leaf 7 sub-leaf 1, EAX bit 5 (the AVX-512 state itself is Highway's
// AVX3 check); false off x86.
bool CpuHasAvx512Bf16();

// The path in force: ForceDotPath / ATTN_DOT_PATH (read at first use, as
// ATTN_TARGET is), else the default rule. Throws Error for a bad
// ATTN_DOT_PATH.
DotPath ActiveDotPath();

// "" when the bf16 dot-product rows of the kernel table take `problem`
// (Q, K and V bf16 and a dot path in force that runs here), else why not.
std::string DotPathDeclines(const Problem& problem);

}  // namespace attn::internal
