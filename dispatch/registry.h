#pragma once
#include "attn/attn.h"
#include "kernels/kernel.h"

namespace attn::internal {

struct KernelEntry {
  KernelId id;
  const char* name;
  KernelFn run;
};

// Every implementation, fastest-first, the naive kernel last (the reference
// that the others are tested against), in the manner of oneDNN's ordered
// implementation lists.
const KernelEntry* Kernels(int* count);
const KernelEntry& FindKernel(KernelId id);

// The untuned default for a shape: what `auto` runs without a tuning table.
KernelId DefaultKernel(const Problem& problem, int threads);

}  // namespace attn::internal
