#include "tools/tune/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace attn_tune {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kNotRun: return "not run (budget)";
    case Verdict::kWrong: return "wrong";
    case Verdict::kDroppedEarly: return "dropped early";
    case Verdict::kTimed: return "timed";
    case Verdict::kLostHeadToHead: return "lost head to head";
  }
  return "unknown";
}

// Why the median. Interference (another process on a core, a frequency
// drop) only ever adds time, and it comes in spells that cover some
// samples and not others. The minimum trusts one sample: it is fooled when
// a spell covers all of a candidate's samples, and between two candidates
// it favours the one whose time varies more (a one-thread kernel whose lone
// thread sometimes gets the idle core), not the one that is faster. A
// location estimate that discards outliers, as Highway's hwy/auto_tune.h
// does for its configs' costs, is what interference cannot move. With the
// few samples a tuner can afford (3 to 10), the median is that estimate
// with the most tolerance: a spell must cover over half of a candidate's
// samples, which the rounds spread over the whole shape's tuning, to move
// it. A trimmed mean (the fastest and slowest quarter dropped) equals the
// median for up to 4 samples and, at 5 to 7, averages in one more sample on
// each side, so one more sample in a spell already moves it: it buys a
// little less noise on a quiet machine at the price of half the tolerance.
double RobustSeconds(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

double Fastest(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// Fisher-Yates with the standard's mt19937 (std::shuffle's algorithm is the
// library's own, so its orders differ between standard libraries).
void Shuffle(std::vector<size_t>& v, std::mt19937& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

}  // namespace

TunerResult Tune(size_t candidate_count, const TunerHooks& hooks, const TunerSettings& settings) {
  TunerResult result;
  result.candidates.resize(candidate_count);
  std::vector<Measurement>& c = result.candidates;
  const int max_repeats = std::max(1, settings.max_repeats);
  const int min_repeats = std::clamp(settings.min_repeats, 1, max_repeats);
  const int drop_after = std::clamp(settings.drop_after, 1, max_repeats);
  const double gain = std::max(0.0, settings.min_gain);
  auto budget_left = [&] { return result.spent_seconds < settings.budget_seconds; };
  for (size_t i = 0; i < candidate_count; ++i) {
    c[i].threads = hooks.threads_used ? std::max(1, hooks.threads_used(i)) : 1;
  }

  // 1. Checks. `projected`: the admitted candidates' first drop_after
  // samples, each estimated at its check run's cost.
  std::vector<size_t> live;
  double projected = 0.0;
  for (size_t i = 0; i < candidate_count; ++i) {
    if (!live.empty() && result.spent_seconds + projected >= settings.budget_seconds) break;
    const CheckOutcome check = hooks.check(i);
    const double seconds = std::max(0.0, check.seconds);
    result.spent_seconds += seconds;
    if (!check.correct) {
      c[i].verdict = Verdict::kWrong;
      c[i].reason = check.reason;
      continue;
    }
    c[i].verdict = Verdict::kTimed;
    live.push_back(i);
    projected += seconds * drop_after;
  }
  if (live.empty()) return result;
  // The anchor is never dropped and always gets min_repeats samples; it is
  // the baseline of the head to head when it is candidate 0.
  const size_t anchor = live.front();

  auto sample = [&](size_t i) {
    const double t = hooks.time_once(i);
    result.spent_seconds += std::max(0.0, t);
    c[i].samples.push_back(t);
  };
  auto leader = [&] {
    int best = -1;
    for (size_t i : live) {
      if (c[i].verdict != Verdict::kTimed || c[i].samples.empty()) continue;
      if (best < 0 || c[i].score < c[size_t(best)].score) best = int(i);
    }
    return best;
  };

  // 2. Rounds.
  std::mt19937 rng(20240521u);
  std::vector<size_t> order = live;
  bool out_of_budget = false;
  for (int round = 0; round < max_repeats && !out_of_budget; ++round) {
    result.rounds = round + 1;
    if (round > 0) Shuffle(order, rng);
    for (size_t i : order) {
      sample(i);
      if (!budget_left()) {
        // Stop here; the anchor's missing samples are taken below, without
        // finishing the round for the others (a whole round can be long).
        out_of_budget = true;
        break;
      }
    }
    for (size_t i : live) c[i].score = RobustSeconds(c[i].samples);
    if (round + 1 >= drop_after) {
      const int lead = leader();
      const double lead_score = c[size_t(lead)].score;
      for (size_t i : live) {
        if (i == anchor || c[i].verdict != Verdict::kTimed || c[i].samples.empty()) continue;
        if (Fastest(c[i].samples) > settings.drop_ratio * lead_score) c[i].verdict = Verdict::kDroppedEarly;
      }
      order.erase(std::remove_if(order.begin(), order.end(),
                                 [&](size_t i) { return c[i].verdict != Verdict::kTimed; }),
                  order.end());
    }
  }
  // Over budget the anchor still gets its samples.
  while (int(c[anchor].samples.size()) < min_repeats) sample(anchor);
  c[anchor].score = RobustSeconds(c[anchor].samples);
  for (size_t i : live) {
    if (c[i].samples.empty()) c[i].verdict = Verdict::kNotRun;  // checked, never reached
  }
  result.leader = leader();
  result.winner = result.leader;

  // 3. Head to head against the baseline.
  if (settings.head_to_head && anchor == 0 && result.leader > 0) {
    std::vector<size_t> challengers;
    for (size_t i : live) {
      if (i != 0 && c[i].verdict == Verdict::kTimed && !c[i].samples.empty() &&
          c[i].score < c[0].score) {
        challengers.push_back(i);
      }
    }
    std::stable_sort(challengers.begin(), challengers.end(),
                     [&](size_t a, size_t b) { return c[a].score < c[b].score; });
    if (int(challengers.size()) > std::max(1, settings.max_challengers)) {
      challengers.resize(size_t(std::max(1, settings.max_challengers)));
    }
    result.winner = 0;
    std::vector<double> baseline_pair_samples;
    const int pairs = std::max(1, settings.pairs);
    for (size_t w : challengers) {
      const bool fewer = c[w].threads < c[0].threads;
      const int wanted = fewer ? pairs * std::max(1, settings.fewer_threads_pair_factor) : pairs;
      const int least = fewer ? pairs : std::min(pairs, min_repeats);
      std::vector<double> ratios, challenger_samples, baseline_samples;
      for (int p = 0; p < wanted; ++p) {
        double t0, tw;
        if (p % 2 == 0) {
          t0 = hooks.time_once(0);
          tw = hooks.time_once(w);
        } else {
          tw = hooks.time_once(w);
          t0 = hooks.time_once(0);
        }
        result.spent_seconds += std::max(0.0, t0) + std::max(0.0, tw);
        c[0].samples.push_back(t0);
        c[w].samples.push_back(tw);
        baseline_pair_samples.push_back(t0);
        baseline_samples.push_back(t0);
        challenger_samples.push_back(tw);
        ratios.push_back(t0 > 0 ? tw / t0 : std::numeric_limits<double>::infinity());
        if (!budget_left() && p + 1 >= least) break;
      }
      Measurement& m = c[w];
      m.pairs = int(ratios.size());
      m.pair_ratio = RobustSeconds(ratios);
      m.pairs_won = int(std::count_if(ratios.begin(), ratios.end(),
                                      [&](double r) { return r * (1.0 + gain) < 1.0; }));
      m.score = RobustSeconds(challenger_samples);
      bool wins = m.pair_ratio * (1.0 + gain) < 1.0;
      char why[512];
      std::snprintf(why, sizeof(why), "median time ratio to the baseline %.3f over %d pairs (needs < %.3f)",
                    m.pair_ratio, m.pairs, 1.0 / (1.0 + gain));
      if (fewer) {
        const double strong = 1.0 + settings.fewer_threads_gain_factor * gain;
        const int majority = int(std::ceil(settings.fewer_threads_majority * m.pairs - 1e-9));
        const bool margin = m.pair_ratio * strong < 1.0;
        const bool most_pairs = m.pairs_won >= majority;
        const double baseline_fastest = Fastest(c[0].samples);
        const bool fastest = Fastest(m.samples) * (1.0 + gain) < baseline_fastest;
        const double spread = RobustSeconds(baseline_samples) / baseline_fastest;
        const bool steady = spread <= settings.fewer_threads_max_spread;
        wins = margin && most_pairs && fastest && steady;
        // The probe last, only when the timings say "fewer threads win".
        std::string probe;
        if (wins && hooks.parallel_slowdown) {
          const double slowdown = hooks.parallel_slowdown(c[0].threads);
          wins = slowdown <= settings.fewer_threads_max_slowdown;
          char text[120];
          std::snprintf(text, sizeof(text), ", %d threads probed %.2fx slower than one (needs <= %.2fx)",
                        c[0].threads, slowdown, settings.fewer_threads_max_slowdown);
          probe = text;
        }
        std::snprintf(why, sizeof(why),
                      "%d thread%s vs the baseline's %d: median time ratio %.3f (needs < %.3f), faster "
                      "in %d of %d pairs (needs %d), fastest %.4g s vs the baseline's %.4g s, "
                      "baseline's median %.2fx its fastest (needs <= %.2fx)%s",
                      m.threads, m.threads == 1 ? "" : "s", c[0].threads, m.pair_ratio, 1.0 / strong,
                      m.pairs_won, m.pairs, majority, Fastest(m.samples), baseline_fastest, spread,
                      settings.fewer_threads_max_spread, probe.c_str());
      }
      if (wins) {
        // The speed-up reported is the paired one the decision was made on.
        c[0].score = RobustSeconds(baseline_samples);
        m.score = c[0].score * m.pair_ratio;
        result.winner = int(w);
        m.reason = std::string("beat the baseline head to head: ") + why;
        break;
      }
      m.verdict = Verdict::kLostHeadToHead;
      m.reason = std::string("lost to the baseline head to head: ") + why;
      if (!budget_left()) break;
    }
    if (result.winner == 0 && !baseline_pair_samples.empty()) {
      c[0].score = RobustSeconds(baseline_pair_samples);
    }
  }
  for (Measurement& m : c) {
    if (m.samples.empty()) continue;
    m.best = Fastest(m.samples);
    m.median = RobustSeconds(m.samples);
  }
  return result;
}

}  // namespace attn_tune
