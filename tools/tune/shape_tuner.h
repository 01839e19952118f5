// Tuning one attention shape: the candidates (kernel x tiles at the shape's
// thread count), a problem to run them on, the correctness check (against
// the float64 reference, within a bound set by the naive kernel's own
// error), and a wall-clock timer, all handed to the generic tuner
// (tools/tune/tuner.h). Only the public attn API and the float64 reference
// (reference/reference.h) are used: no kernel internals.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "tools/tune/tuner.h"

namespace attn_tune {

// One point of the tuning grid. Causal means bottom-right aligned (the
// KV-cache convention), so a causal shape needs q_len <= kv_len.
struct TuneShape {
  int64_t q_len = 1, kv_len = 1, head_dim = 64;
  bool causal = false;
  int threads = 1;
  attn::DType kv_type = attn::DType::kF32;  // K and V (O stays float32)
  // Q: float32, or bf16 with a bf16 K and V (an all-bf16 shape, whose
  // candidates run on every bf16 dot-product path this CPU has).
  attn::DType q_type = attn::DType::kF32;
  bool AllBf16() const { return q_type == attn::DType::kBF16 && kv_type == attn::DType::kBF16; }
  std::string Name() const;  // "1024x1024 d=64 causal t=2[ kv=bf16][ q=bf16]"
};

// The shape as a problem without data (heads query and K/V heads): what
// KernelSupports and ExplainChoice read.
attn::Problem ShapeOnly(const TuneShape& shape, int heads);

struct AttnCandidate {
  attn::KernelId kernel = attn::KernelId::kStreaming;
  attn::Tiles tiles;        // resolved: every field > 0
  bool is_default = false;  // what `auto` runs without a tuning table
  std::string Label() const;  // "streaming q=32 kv=128[ avx512bf16]"
  // Replaces attn::attention for this candidate (tests inject wrong ones).
  std::function<void(const attn::Problem&, const attn::Options&)> run;
  // An all-bf16 shape's dot path (Options::dot_path); "" otherwise.
  std::string dot_path;
};

struct ShapeTuneSettings {
  TunerSettings tuner;
  bool quick = false;       // fewer tile values per kernel
  int heads = 1;            // batch * heads of the tuning problem
  double min_sample_seconds = 0.005;  // calls are repeated until a sample is this long
  uint64_t seed = 1;
  // Called before each candidate's check with (candidate, candidates): lets
  // a progress display move during long shapes.
  std::function<void(size_t, size_t)> on_candidate;
};

// The candidates for a shape, default first, then ordered by how many tile
// fields differ from the default (so a small budget tries every kernel at
// its default tiles before any tile variant). Naive is included when
// `include_naive` (it can win for tiny shapes).
std::vector<AttnCandidate> EnumerateCandidates(const TuneShape& shape, int heads, bool quick,
                                               bool include_naive);

// Whether naive is cheap enough at this shape to be a candidate (the same
// bound under which the check compares every row with naive).
bool NaiveIsCandidate(const TuneShape& shape, int heads);

// Useful FLOPs of a shape: 2·(d + d_v) per visible (query, key) pair per head.
double ShapeFlops(const TuneShape& shape, int heads);

struct ShapeResult {
  TuneShape shape;
  std::vector<AttnCandidate> candidates;
  TunerResult tuning;
  double flops = 0.0;
  int default_index = -1;
  double naive_seconds = 0.0;       // measured or extrapolated (see below)
  bool naive_extrapolated = false;  // timed on sampled rows, scaled by FLOPs
  int64_t checked_rows = 0;         // query rows checked per head
  double check_bound = 0.0;         // largest |candidate - float64 reference| allowed
  double dot_path_check_bound = 0.0;  // the same for a bf16 dot-path candidate
  double max_error_seen = 0.0;      // largest |candidate - reference| that passed

  bool HasWinner() const { return tuning.winner >= 0; }
  const AttnCandidate& Winner() const { return candidates[size_t(tuning.winner)]; }
  // Seconds per call are the tuner's scores (robust, not the fastest sample).
  double WinnerSeconds() const { return tuning.candidates[size_t(tuning.winner)].score; }
  double DefaultSeconds() const;  // 0 when the default was not timed
  double Gflops(double seconds) const { return seconds > 0 ? flops / seconds * 1e-9 : 0.0; }
  // Best score per kernel name over its timed (or dropped) candidates.
  std::map<std::string, double> KernelBestSeconds() const;
};

// Tunes one shape. `fake_timer`, when set, replaces the wall clock (the
// candidates still run and are checked: only the timing is faked, and the
// tuner's parallel_slowdown probe of the machine is left out).
ShapeResult TuneOneShape(const TuneShape& shape, const ShapeTuneSettings& settings,
                         std::vector<AttnCandidate> candidates,
                         const std::function<double(const AttnCandidate&)>& fake_timer = {});

// A tuned configuration against the untuned default on its shape, as
// `attn-tune --verify` measures it: `pairs` pairs of samples (each at least
// min_sample_seconds of calls; which runs first alternates), the ratio
// default/tuned per pair, and its median (> 1: the tuned one is faster).
struct DefaultComparison {
  AttnCandidate default_candidate;
  double median_ratio = 0.0;  // default seconds / tuned seconds
  double tuned_gflops = 0.0, default_gflops = 0.0;  // medians over the pairs
};
DefaultComparison CompareWithDefault(const TuneShape& shape, int heads, const AttnCandidate& tuned,
                                     int pairs, double min_sample_seconds);

}  // namespace attn_tune
