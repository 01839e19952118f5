// The kernel table: the one place that lists every kernel. Adding a kernel
// is a row here, its KernelId enumerator (attn/attn.h) and attn_kernel_t
// value (attn/attn_c.h), and its directory under kernels/ (CMake picks up
// kernels/*/*.cc); the tests, the tuner, attn-bench, the C API and the
// Python package follow the table.
#include "dispatch/kernel_table.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "attn/attn_c.h"
#include "dispatch/dot_path.h"
#include "kernels/amx/amx.h"
#include "kernels/bf16dot/bf16dot.h"

namespace attn::internal {

// Each kernel's entry points (kernels/<name>/<name>.cc).
void ParallelAttention(const Problem& problem, const RunConfig& config);
void StreamingAttention(const Problem& problem, const RunConfig& config);
void BlockedAttention(const Problem& problem, const RunConfig& config);
void NaiveAttention(const Problem& problem, const RunConfig& config);
void StreamingSpansAttention(const Problem& problem, const KeySpan* spans, int64_t span_count,
                             const RunConfig& config);

namespace {

std::string DeclinesNothing(const Problem&, DotPath) { return ""; }
std::string AmxRowDeclines(const Problem& p, DotPath path) { return AmxDeclines(p, path); }
std::string PairDotRowDeclines(const Problem& p, DotPath path) {
  return PairDotDeclines(p, path);
}

// The bf16 dot-product rows: all-bf16 problems whose call's dot path is
// one of theirs (dispatch/dot_path.h); the hardware or the emulated layer
// as the path says.
void ParallelAmxAttention(const Problem& p, const RunConfig& config) {
  ParallelAttentionWith(AmxTarget(config.dot_path == DotPath::kAmx), p, config);
}
void StreamingAmxAttention(const Problem& p, const RunConfig& config) {
  AmxStreamingAttention(p, config, config.dot_path == DotPath::kAmx);
}
// The rows' span entry point (KernelImpl::run_spans), for the streaming
// and the parallel row alike: the serving executor runs each item on one
// thread.
void AmxSpansAttention(const Problem& p, const KeySpan* spans, int64_t span_count,
                       const RunConfig& config) {
  SpansAttentionWith(AmxTarget(config.dot_path == DotPath::kAmx), p, spans, span_count, config);
}
constexpr const char* kAmxPath = "bf16 AMX tiles (tdpbf16ps), P rounded to bf16";

void ParallelBf16DotAttention(const Problem& p, const RunConfig& config) {
  ParallelAttentionWith(Bf16DotTarget(PairDotLayerOf(config.dot_path)), p, config);
}
void StreamingBf16DotAttention(const Problem& p, const RunConfig& config) {
  Bf16DotStreamingAttention(p, config, PairDotLayerOf(config.dot_path));
}
void Bf16DotSpansAttention(const Problem& p, const KeySpan* spans, int64_t span_count,
                           const RunConfig& config) {
  SpansAttentionWith(Bf16DotTarget(PairDotLayerOf(config.dot_path)), p, spans, span_count,
                     config);
}
constexpr const char* kBf16DotPath = "bf16 dot products, P rounded to bf16";

// The naive kernel materialises T_q x T_k float scores per head: above
// 1 GiB it declines rather than exhaust memory (streaming needs O(tile)).
constexpr int64_t kNaiveMaxScoreBytes = int64_t{1} << 30;
std::string NaiveDeclines(const Problem& p, DotPath) {
  int64_t bytes;
  const bool overflow = __builtin_mul_overflow(p.q_len, p.kv_len, &bytes) ||
                        __builtin_mul_overflow(bytes, int64_t{sizeof(float)}, &bytes);
  if (!overflow && bytes <= kNaiveMaxScoreBytes) return "";
  return "kernel naive would materialise " + std::to_string(p.q_len) + " x " +
         std::to_string(p.kv_len) + " scores (over " + std::to_string(kNaiveMaxScoreBytes >> 20) +
         " MiB); use streaming or auto";
}

KernelInfo Info(KernelId id, const char* name, const char* summary, bool simd, bool threaded,
                bool q_block, bool kv_block, bool kv_splits) {
  KernelInfo i;
  i.id = id;
  i.name = name;
  i.summary = summary;
  i.simd = simd;
  i.threaded = threaded;
  i.uses_q_block = q_block;
  i.uses_kv_block = kv_block;
  i.uses_kv_splits = kv_splits;
  return i;
}

// Fastest first; the order is the default rule's (DefaultKernel).
//                 id                   name         summary
//                 simd   threaded  q_block kv_block kv_splits
const std::vector<KernelImpl>& Table() {
  static const std::vector<KernelImpl> table = {
      {Info(KernelId::kParallel, "parallel",
            "the AMX streaming kernel over OpenMP threads",
            true, true, true, true, true),
       ATTN_KERNEL_PARALLEL, &AmxRowDeclines, &ParallelAmxAttention, kAmxPath,
       /*all_bf16_only=*/true, &AmxSpansAttention},
      {Info(KernelId::kParallel, "parallel",
            "the bf16 dot-product streaming kernel over OpenMP threads",
            true, true, true, true, true),
       ATTN_KERNEL_PARALLEL, &PairDotRowDeclines, &ParallelBf16DotAttention, kBf16DotPath,
       /*all_bf16_only=*/true, &Bf16DotSpansAttention},
      {Info(KernelId::kParallel, "parallel",
            "the streaming kernel over OpenMP threads; split-KV when items are few",
            true, true, true, true, true),
       // The serving executor runs each of its items on one thread, where
       // the parallel kernel is the streaming kernel's views: the same span
       // entry point.
       ATTN_KERNEL_PARALLEL, &DeclinesNothing, &ParallelAttention, "", false,
       &StreamingSpansAttention},
      {Info(KernelId::kStreaming, "streaming",
            "online softmax in AMX tiles: tdpbf16ps for Q·Kᵀ and P·V",
            true, false, true, true, false),
       ATTN_KERNEL_STREAMING, &AmxRowDeclines, &StreamingAmxAttention, kAmxPath,
       /*all_bf16_only=*/true, &AmxSpansAttention},
      {Info(KernelId::kStreaming, "streaming",
            "online softmax over bf16 pairs: bf16 dot products for Q·Kᵀ and P·V",
            true, false, true, true, false),
       ATTN_KERNEL_STREAMING, &PairDotRowDeclines, &StreamingBf16DotAttention, kBf16DotPath,
       /*all_bf16_only=*/true, &Bf16DotSpansAttention},
      {Info(KernelId::kStreaming, "streaming",
            "SIMD online softmax (flash attention), O(tile) memory, one thread",
            true, false, true, true, false),
       ATTN_KERNEL_STREAMING, &DeclinesNothing, &StreamingAttention, "", false,
       &StreamingSpansAttention},
      {Info(KernelId::kBlocked, "blocked",
            "SIMD, whole score rows of one query panel, exact two-pass softmax",
            true, false, false, true, false),
       ATTN_KERNEL_BLOCKED, &DeclinesNothing, &BlockedAttention},
      {Info(KernelId::kNaive, "naive",
            "scalar float32, materialises the T_q x T_k scores: the simple reference",
            false, false, false, false, false),
       ATTN_KERNEL_NAIVE, &NaiveDeclines, &NaiveAttention},
  };
  return table;
}

}  // namespace

const std::vector<KernelImpl>& KernelImpls() { return Table(); }

// The first row of `id` that does not decline `problem`, else null with the
// first row's reason in *why.
const KernelImpl* FirstAccepting(KernelId id, const Problem& problem, DotPath path,
                                 std::string* why) {
  for (const KernelImpl& row : Table()) {
    if (row.info.id != id || row.Skips(problem)) continue;
    std::string declined = row.declines(problem, path);
    if (declined.empty()) return &row;
    if (why->empty()) *why = std::move(declined);
  }
  return nullptr;
}

const KernelImpl& ImplFor(KernelId id, const Problem& problem, DotPath path) {
  std::string why;
  if (const KernelImpl* row = FirstAccepting(id, problem, path, &why)) return *row;
  const KernelInfo& info = GetKernelInfo(id);  // throws for kAuto / unknown
  throw Error("kernel", info.name, "attn: " + why + ", got " + info.name);
}

bool ThreadsPayOff(const Problem& problem, int threads) {
  if (threads <= 1) return false;
  // FLOPs as the benchmarks count them (4·T_q·T_k·d per head, d the mean of
  // d and d_v; halved when causal), in double: no overflow for any shape.
  double flops = 2.0 * double(problem.batch) * double(problem.q_heads) * double(problem.q_len) *
                 double(problem.kv_len) * double(problem.head_dim + problem.ValueDim());
  if (problem.causal != Causal::kNone) flops /= 2.0;
  return flops >= double(threads) * kMinFlopsPerThread;
}

KernelId DefaultKernel(const Problem& problem, int threads, DotPath path) {
  const bool use_threads = ThreadsPayOff(problem, threads);
  for (const KernelImpl& row : Table()) {
    if (row.info.threaded && !use_threads) continue;
    if (!row.Skips(problem) && row.declines(problem, path).empty()) return row.info.id;
  }
  return KernelId::kStreaming;  // declines nothing
}

bool KernelFromC(long long value, KernelId* id) {
  if (value == ATTN_KERNEL_AUTO) {
    *id = KernelId::kAuto;
    return true;
  }
  for (const KernelImpl& row : Table()) {
    if (row.c_value == value) {
      *id = row.info.id;
      return true;
    }
  }
  return false;
}

}  // namespace attn::internal

namespace attn {

const std::vector<KernelInfo>& Kernels() {
  // One entry per kernel id, in the order of its first row.
  static const std::vector<KernelInfo> kernels = [] {
    std::vector<KernelInfo> out;
    for (const internal::KernelImpl& row : internal::Table()) {
      bool seen = false;
      for (const KernelInfo& k : out) seen = seen || k.id == row.info.id;
      if (seen) continue;
      // In the order of the id's first row, with its generic row's info.
      for (const internal::KernelImpl& generic : internal::Table()) {
        if (generic.info.id == row.info.id && !*generic.path) {
          out.push_back(generic.info);
          break;
        }
      }
    }
    return out;
  }();
  return kernels;
}

const KernelInfo& GetKernelInfo(KernelId id) {
  for (const KernelInfo& k : Kernels()) {
    if (k.id == id) return k;
  }
  const std::string value =
      id == KernelId::kAuto ? "auto" : std::to_string(static_cast<int>(id));
  throw Error("kernel", value, "attn: kernel must name one kernel of the table, got " + value);
}

bool KernelSupports(KernelId kernel, const Problem& problem, std::string* why) {
  if (kernel == KernelId::kAuto) return true;
  GetKernelInfo(kernel);  // throws for a value outside the enum
  std::string first;
  if (internal::FirstAccepting(kernel, problem, internal::ActiveDotPath(), &first)) return true;
  if (why) *why = first;
  return false;
}

const char* KernelName(KernelId id) {
  if (id == KernelId::kAuto) return "auto";
  for (const KernelInfo& k : Kernels()) {
    if (k.id == id) return k.name;
  }
  return "unknown";
}

KernelId ParseKernel(const std::string& name) {
  if (name == "auto") return KernelId::kAuto;
  std::string names = "auto";
  for (const KernelInfo& k : Kernels()) {
    if (name == k.name) return k.id;
    names += std::string(", ") + k.name;
  }
  throw Error("kernel", name, "attn: kernel must be one of " + names + ", got " + name);
}

}  // namespace attn
