// Seconds spent in each stage of a kernel's loop, for attn-bench's stage
// rows (bench/README.md "amx-stages/"). A kernel given a null clock times
// nothing: one predictable branch per stage and group, nothing else.
// Target-independent.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace attn::internal {

// The stages of the AMX kernel's loop (kernels/amx/head-body.h), in order.
enum class AmxStage : int {
  kPackQ,    // Q of a block into zero-padded bf16 rows, stats and O zeroed
  kPackKV,   // K into pair tiles, V into pair rows, per block and key tile
  kScores,   // S = Q·Kᵀ tile products and the tile stores of S
  kWeights,  // scale, modifiers, mask, online softmax, O rescale, P to bf16
  kMix,      // O += P·V tile products (loads and stores of O included)
  kFinish,   // O / sum into the output rows, lse
  kCount,
};

inline const char* AmxStageName(AmxStage s) {
  switch (s) {
    case AmxStage::kPackQ: return "pack_q";
    case AmxStage::kPackKV: return "pack_kv";
    case AmxStage::kScores: return "qk_tiles";
    case AmxStage::kWeights: return "softmax";
    case AmxStage::kMix: return "pv_tiles";
    case AmxStage::kFinish: return "finish";
    case AmxStage::kCount: break;
  }
  return "?";
}

// Whether a stage runs on the tile instructions (or their emulation) rather
// than on the target's vectors.
inline bool IsTileStage(AmxStage s) { return s == AmxStage::kScores || s == AmxStage::kMix; }

class StageClock {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts the lap that the next Lap() closes.
  void Start() { last_ = Clock::now(); }
  // Charges the time since the last Start() or Lap() to `stage`.
  void Lap(AmxStage stage) {
    const Clock::time_point now = Clock::now();
    seconds_[size_t(stage)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  double seconds(AmxStage stage) const { return seconds_[size_t(stage)]; }
  void Reset() { seconds_.fill(0.0); }

 private:
  std::array<double, size_t(AmxStage::kCount)> seconds_{};
  Clock::time_point last_{};
};

// How the AMX kernel runs a head beyond its tiles: what tests and the stage
// rows choose explicitly (the defaults are what every call runs).
struct AmxRun {
  StageClock* clock = nullptr;  // null: time nothing
  // false: every row through the general weights (AmxRowWeights), the
  // simple path the two-pass one is tested against.
  bool plain_weights = true;
  // With the emulated layer only: run no tile instruction at all (attn-bench's
  // stage rows on CPUs without AMX, which time the other stages alone; the
  // outputs are then not attention).
  bool exclude_tiles = false;
};

}  // namespace attn::internal
