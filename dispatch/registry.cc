#include "dispatch/registry.h"

#include "kernels/blocked/blocked.h"
#include "kernels/naive/naive.h"
#include "kernels/parallel/parallel.h"
#include "kernels/streaming/streaming.h"

namespace attn::internal {
namespace {
const KernelEntry kKernels[] = {
    {KernelId::kParallel, "parallel", &ParallelAttention},
    {KernelId::kStreaming, "streaming", &StreamingAttention},
    {KernelId::kBlocked, "blocked", &BlockedAttention},
    {KernelId::kNaive, "naive", &NaiveAttention},
};
}  // namespace

const KernelEntry* Kernels(int* count) {
  *count = int(sizeof(kKernels) / sizeof(kKernels[0]));
  return kKernels;
}

const KernelEntry& FindKernel(KernelId id) {
  for (const KernelEntry& e : kKernels) {
    if (e.id == id) return e;
  }
  return kKernels[sizeof(kKernels) / sizeof(kKernels[0]) - 1];
}

KernelId DefaultKernel(const Problem&, int threads) {
  // The streaming kernel is the fastest single-threaded SIMD kernel at every
  // shape we measured (AMD EPYC Zen 3, AVX2); the parallel kernel is it,
  // spread over threads.
  return threads > 1 ? KernelId::kParallel : KernelId::kStreaming;
}

}  // namespace attn::internal
