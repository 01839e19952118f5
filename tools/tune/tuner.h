// The generic autotuner: picks the fastest correct candidate for one problem.
//
// It knows nothing of attention kernels. Candidates are indices; the caller
// supplies two hooks, so tests drive it with a fake timer and fake checks:
//   check(i)     runs candidate i once (the warm-up run) and says whether its
//                output is right. A wrong candidate is never timed, so it can
//                never win, however fast it would be.
//   time_once(i) runs candidate i and returns its seconds per call.
//
// Per candidate, in the order given (put the default first: it is always
// measured, so the speed-up over it is known): check, then up to
// max_repeats timed samples. The score is the minimum sample: on a shared
// machine interference only ever adds time, so the minimum is the estimate
// least disturbed by it (the median is reported too). A candidate whose best
// sample so far is over drop_ratio x the best score so far is dropped
// without further samples: it cannot win, and timing it would only eat the
// budget. Once the time spent (checks and samples) reaches budget_seconds,
// the remaining candidates are skipped; the candidate in progress keeps the
// samples it has. Finally a baseline that lost meets the winner head to
// head (see remeasure_first).
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace attn_tune {

struct CheckOutcome {
  bool correct = false;
  std::string reason;    // why not, naming the bad value
  double seconds = 0.0;  // the check's own cost, counted against the budget
};

struct TunerHooks {
  std::function<CheckOutcome(size_t candidate)> check;
  std::function<double(size_t candidate)> time_once;
};

struct TunerSettings {
  int max_repeats = 5;    // timed samples per candidate, at most
  int min_repeats = 2;    // samples before the budget may cut a candidate short
  double drop_ratio = 1.5;  // drop when best sample > drop_ratio x best score
  double budget_seconds = std::numeric_limits<double>::infinity();
  // When the first candidate (the baseline: what `auto` runs untuned) did
  // not win, time it and the winner again, alternately, max_repeats times
  // each: a baseline measured during a burst of interference would
  // otherwise make every speed-up over it look many times larger, and a
  // winner that was merely lucky would make `auto` slower than untuned.
  // The winner stays only if its best head-to-head sample is faster than
  // the baseline's by more than min_gain; otherwise the baseline wins.
  bool remeasure_first = true;
  // Two runs of the same code on a shared machine differ by a few percent
  // even alternated; a gain within that is not worth a table entry.
  double min_gain = 0.03;
};

enum class Verdict {
  kNotRun,         // skipped: the budget was spent before its turn
  kWrong,          // failed the correctness check: never timed
  kDroppedEarly,   // clearly slower than the best so far
  kTimed,          // fully measured
};
const char* VerdictName(Verdict v);

struct Measurement {
  Verdict verdict = Verdict::kNotRun;
  std::vector<double> samples;  // seconds per call
  double best = 0.0;            // min of samples (the score)
  double median = 0.0;
  std::string reason;           // for kWrong: the check's reason
};

struct TunerResult {
  std::vector<Measurement> candidates;
  int winner = -1;          // index of the lowest score; -1 if none was timed
  double spent_seconds = 0.0;
};

TunerResult Tune(size_t candidate_count, const TunerHooks& hooks, const TunerSettings& settings);

}  // namespace attn_tune
