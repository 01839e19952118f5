// The kernel table, internals: each implementation once, with everything
// dispatch needs to pick and run it. The public view is attn::Kernels().
#pragma once

#include <string>
#include <vector>

#include "attn/attn.h"
#include "kernels/kernel.h"

namespace attn::internal {

// One implementation (a row of dispatch/kernel_table.cc).
struct KernelImpl {
  KernelInfo info;
  int c_value = 0;  // its attn_kernel_t value in the C API (attn/attn_c.h)
  // "" when it can compute the (validated) problem, else a sentence saying
  // why not, in the manner of oneDNN's pd_t::init() declining.
  // `path` is the call's dot path (dispatch/dot_path.h).
  std::string (*declines)(const Problem& problem, DotPath path) = nullptr;
  KernelFn run = nullptr;
  // "" for a kernel's generic row; else the instruction path of a variant
  // row standing before it (e.g. the bf16 dot-product rows), for
  // explanations. attn::Kernels() shows the generic row's KernelInfo.
  const char* path = "";
  // Takes only problems whose Q, K and V are all bf16 (the dot-product
  // rows): other problems skip the row without calling `declines`, so a
  // float32 call builds no reason string (no allocation on that path).
  bool all_bf16_only = false;
  // Null, or the same kernel on a problem of one batch entry whose keys are
  // a list of spans (a paged cache's page runs, kernel.h KeySpan, giving kv
  // head 0's rows; the problem's k and v are not read, their head strides
  // place the other kv heads): one call for every page and kv head, one
  // online softmax across the pages. The serving executor uses it where set
  // and otherwise calls `run` once per span and merges.
  void (*run_spans)(const Problem& problem, const KeySpan* spans, int64_t span_count,
                    const RunConfig& config) = nullptr;
  bool Skips(const Problem& p) const {
    return all_bf16_only && (p.q.dtype != DType::kBF16 || p.k.dtype != DType::kBF16 ||
                             p.v.dtype != DType::kBF16);
  }
};

// Every row, in order. Several rows may share a kernel id: variants of one
// kernel for an element type or an instruction set (an AMX or AVX512-BF16
// streaming row would stand before the generic streaming row), and the
// first row of an id that does not decline the problem is the one that runs.
const std::vector<KernelImpl>& KernelImpls();

// The first row of `id` that does not decline `problem` under dot path
// `path`; null when every row of it does, with the first row's reason in
// *why.
const KernelImpl* FirstAccepting(KernelId id, const Problem& problem, DotPath path,
                                 std::string* why);

// The row that runs `id` on `problem` under `path`: the first of that id
// that does not decline it. Throws Error (field "kernel", the kernel's
// name) with the reason when every row of that id declines.
const KernelImpl& ImplFor(KernelId id, const Problem& problem, DotPath path);

// Whether `threads` threads have enough work to beat one: at least
// kMinFlopsPerThread FLOPs each. Waking and joining a thread costs 1-2 µs
// (an empty 2-thread OpenMP region, hot threads: median 1.1-1.8 µs on the
// AMD EPYC Zen 3 VM), and a second thread reads the head's K and V again,
// from L3 instead of its own L2; 2^20 FLOPs is 10-20 µs of one core's work
// (Zen 3: 50-90 GFLOP/s on such shapes; Intel Xeon: ~130), so the overhead
// stays within ~10% where threads are used. attn-tune measures the single-
// threaded kernels at every thread count, so a table corrects this rule on
// any CPU where it is wrong.
constexpr double kMinFlopsPerThread = double(1 << 20);
bool ThreadsPayOff(const Problem& problem, int threads);

// The untuned default, what `auto` runs without a tuning table: the first
// kernel in table order that supports the problem, skipping threaded ones
// when the threads do not pay off (ThreadsPayOff; always at threads <= 1).
KernelId DefaultKernel(const Problem& problem, int threads, DotPath path);

// The C API's attn_kernel_t values: kAuto is 0; false for a value that
// names no kernel.
bool KernelFromC(long long value, KernelId* id);

}  // namespace attn::internal
