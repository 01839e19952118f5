// FP32 FMA peak probe for attn-bench: many independent MulAdd chains on the
// SIMD target Highway picks at run time (the same dispatch, and the same
// ATTN_TARGET / attn::ForceTarget narrowing, as the attn kernels).
#pragma once

#include <cstddef>

namespace attn_bench {

// float lanes per vector of the target the probe runs on now.
size_t PeakProbeLanes();

struct Peak {
  // Σ over the threads of each thread's FLOPs / its own CPU time: the FMA
  // peak of `threads` cores, unaffected by other processes preempting the
  // probe (the bench machine may be shared).
  double gflops = 0.0;
  // Total FLOPs / wall time of the concurrent run: what the threads really
  // got together (below `gflops` when cores are busy with other work).
  double wall_gflops = 0.0;
  // MeasureReadBandwidth only: the concurrent streams per thread of the
  // best `gflops` (1, 2, 4 or 8).
  int streams = 0;
};

// FP32 throughput in GFLOP/s (an FMA counts 2 FLOPs) of `threads` threads
// running the probe concurrently, each for about `seconds` of CPU time; the
// best of `repeats` runs (each field maximised separately).
Peak MeasurePeak(int threads, double seconds = 0.2, int repeats = 4);

// The bf16 dot-product peak in GFLOP/s (a vdpbf16ps is 4 FLOPs a float
// lane), measured as MeasurePeak measures FMAs; all zero when the current
// target has no such instruction (only AVX3 on a CPU with AVX512-BF16 does;
// attn-bench calls it only there, with attn::SupportedDotPaths()).
Peak MeasureBf16DotPeak(int threads, double seconds = 0.2, int repeats = 4);

// The AMX bf16 peak in GFLOP/s (a tdpbf16ps is 16·16·32 multiply-adds),
// measured the same way; all zero unless the "amx" dot path runs here
// (attn::SupportedDotPaths(): a CPU with AMX-BF16, the OS's permission for
// the tile state, the AVX3 target).
Peak MeasureAmxPeak(int threads, double seconds = 0.2, int repeats = 4);

// Memory read bandwidth in GB/s (10^9 bytes/s) of `threads` threads each
// summing its own slice of one `bytes` buffer (default 256 MiB, beyond any
// last-level cache here), with the kernels' SIMD target: the yardstick for
// decode, which must read K and V once. Each thread reads its slice as 1, 2,
// 4 and 8 concurrent streams (the best reader, not the simplest: a core
// reads faster with several prefetch streams in flight); the best count
// wins. Same fields and statistic as the peak: Σ per-thread bytes / own CPU
// time (gflops holds GB/s), concurrent wall clock beside it; best of
// `repeats` rounds of every stream count.
Peak MeasureReadBandwidth(int threads, size_t bytes = size_t(256) << 20, int repeats = 3);

// The core's clock in GHz while one thread runs scalar code: a chain of
// dependent integer adds (one a cycle on every x86 and Arm core here) over
// the thread's own CPU time, best of `repeats`. attn-bench turns the stage
// rows' ns into cycles with it. With AVX-512 or AMX busy a core may run
// slower than this; the cycles are then an underestimate.
double MeasureClockGhz(double seconds = 0.05, int repeats = 5);

}  // namespace attn_bench
