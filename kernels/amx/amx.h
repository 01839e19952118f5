// The AMX attention kernels (amx.cc), as dispatch sees them.
#pragma once

#include "attn/attn.h"
#include "kernels/common/stage_clock.h"
#include "kernels/kernel.h"

namespace attn::internal {

// The AMX kernel on the current target: over the tiles themselves
// (`hardware`, AVX3 on a CPU with AMX-BF16 whose OS granted the tile state)
// or over the emulated tiles. Q, K and V must be bf16 (dispatch/dot_path.cc).
ParallelTarget AmxTarget(bool hardware);
void AmxStreamingAttention(const Problem& problem, const RunConfig& config, bool hardware);
// Every view of the problem through the AMX loop on the calling thread
// (views of few rows too, padded to tiles), with the
// run's explicit choices: a stage clock (attn-bench's amx-stages rows) and
// which weights path (tests compare them).
void AmxHeads(const Problem& problem, const RunConfig& config, bool hardware, const AmxRun& run);

}  // namespace attn::internal
