#include "tools/tune/tuner.h"

#include <algorithm>
#include <cmath>

namespace attn_tune {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kNotRun: return "not run (budget)";
    case Verdict::kWrong: return "wrong";
    case Verdict::kDroppedEarly: return "dropped early";
    case Verdict::kTimed: return "timed";
  }
  return "unknown";
}

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TunerResult Tune(size_t candidate_count, const TunerHooks& hooks, const TunerSettings& settings) {
  TunerResult result;
  result.candidates.resize(candidate_count);
  const int max_repeats = std::max(1, settings.max_repeats);
  const int min_repeats = std::clamp(settings.min_repeats, 1, max_repeats);
  double best_score = std::numeric_limits<double>::infinity();
  auto budget_left = [&] { return result.spent_seconds < settings.budget_seconds; };

  for (size_t i = 0; i < candidate_count; ++i) {
    // The first candidate runs whatever the budget: a result needs one.
    if (!budget_left() && result.winner >= 0) break;
    Measurement& m = result.candidates[i];
    const CheckOutcome check = hooks.check(i);
    result.spent_seconds += std::max(0.0, check.seconds);
    if (!check.correct) {
      m.verdict = Verdict::kWrong;
      m.reason = check.reason;
      continue;
    }
    m.verdict = Verdict::kTimed;
    m.best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < max_repeats; ++r) {
      const double t = hooks.time_once(i);
      result.spent_seconds += std::max(0.0, t);
      m.samples.push_back(t);
      m.best = std::min(m.best, t);
      if (m.best > settings.drop_ratio * best_score) {
        m.verdict = Verdict::kDroppedEarly;
        break;
      }
      if (!budget_left() && int(m.samples.size()) >= min_repeats) break;
    }
    m.median = Median(m.samples);
    if (m.verdict == Verdict::kTimed && m.best < best_score) {
      best_score = m.best;
      result.winner = int(i);
    }
  }
  if (settings.remeasure_first && result.winner > 0 &&
      result.candidates[0].verdict == Verdict::kTimed) {
    // Head to head: the baseline and the winner alternately, so both see
    // the same interference; the winner keeps its place only if its best
    // sample here beats the baseline's by min_gain.
    const size_t w = size_t(result.winner);
    Measurement& first = result.candidates[0];
    Measurement& win = result.candidates[w];
    double first_best = std::numeric_limits<double>::infinity(), win_best = first_best;
    for (int r = 0; r < max_repeats; ++r) {
      const double t0 = hooks.time_once(0);
      const double tw = hooks.time_once(w);
      result.spent_seconds += std::max(0.0, t0) + std::max(0.0, tw);
      first.samples.push_back(t0);
      win.samples.push_back(tw);
      first_best = std::min(first_best, t0);
      win_best = std::min(win_best, tw);
      if (!budget_left() && r + 1 >= min_repeats) break;
    }
    // The head-to-head bests are the scores: the reported speed-up over the
    // baseline is then the one the decision was made on.
    first.best = first_best;
    win.best = win_best;
    first.median = Median(first.samples);
    win.median = Median(win.samples);
    if (!(win_best * (1.0 + settings.min_gain) < first_best)) result.winner = 0;
  }
  return result;
}

}  // namespace attn_tune
