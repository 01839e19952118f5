// The generic autotuner: picks the fastest correct candidate for one problem,
// in a way that interference from other processes cannot fool.
//
// It knows nothing of attention kernels. Candidates are indices; the caller
// supplies hooks, so tests drive it with a fake timer and fake checks:
//   check(i)        runs candidate i once (the warm-up run) and says whether
//                   its output is right. A wrong candidate is never timed, so
//                   it can never win, however fast it would be.
//   time_once(i)    runs candidate i and returns its seconds per call.
//   threads_used(i) (optional) how many threads candidate i runs; unset, all
//                   count as equal.
//   parallel_slowdown(n) (optional) a probe of the machine: see rule 4.
// Candidate 0 is the baseline: what the caller runs untuned. It is always
// measured, so the speed-up over it is known.
//
// 1. Checks, in the order given, all before any timing. Once the time spent
//    plus an estimate of timing the admitted candidates (drop_after samples
//    each, a sample taken to cost what the check run cost) reaches
//    budget_seconds, the remaining candidates are not checked (kNotRun);
//    the first correct candidate is always admitted: a result needs one.
// 2. Rounds: each round times every live candidate once; round 0 in the
//    given order, later rounds in a fresh shuffled order (fixed seed, so
//    runs repeat), so interference that comes in spells is spread over all
//    candidates instead of landing on one candidate's back-to-back samples,
//    and no candidate always runs right after a particular other (whose
//    cache or frequency footprint it would inherit). At most max_repeats
//    rounds. Every candidate's score is a robust statistic of its samples:
//    the median (see RobustSeconds in tuner.cc for why not the minimum or
//    a trimmed mean). From round drop_after on, a candidate whose FASTEST
//    sample is over drop_ratio x the leader's score is dropped: even its
//    best case cannot win (comparing its best with the leader's typical
//    time means interference on either side only delays drops). The
//    baseline is never dropped. When the budget is spent the rounds stop
//    where they are (the baseline still gets min_repeats samples); a
//    checked candidate left with no sample is kNotRun.
// 3. Head to head (head_to_head): the candidates whose score beats the
//    baseline's, best first, at most max_challengers of them, each meet the
//    baseline in `pairs` dedicated pairs of back-to-back runs (which of the
//    two runs first alternates). A burst of interference then hits both
//    runs of a pair, so the per-pair ratio challenger/baseline survives it;
//    the first challenger whose median ratio is below 1/(1 + min_gain)
//    wins, else the baseline does. Scores then come from the pairs: a
//    challenger's is the median of its head-to-head samples; the kept
//    baseline's, the median of all of its own; when a challenger wins, the
//    baseline's is the median of its samples in that head to head and the
//    winner's that times the median ratio, so the reported speed-up is
//    exactly the paired one the decision was made on.
// 4. Fewer threads: a challenger that runs fewer threads than the baseline
//    needs stronger evidence. A core kept busy by another process slows a
//    multi-threaded baseline far more than a one-thread candidate (the
//    thread that shares the busy core holds up every barrier: 2x and much
//    more, while the one thread runs on the idle core at full speed), so
//    interference alone makes "fewer threads wins" -- the case that fooled
//    the old tuner into a table running at 0.57x the untuned default. Such
//    a challenger gets fewer_threads_pair_factor x the pairs (the budget
//    may cut them to `pairs`, never fewer), and wins only if
//      - its median ratio is below 1/(1 + fewer_threads_gain_factor x
//        min_gain) (a larger margin),
//      - it is faster by min_gain in at least fewer_threads_majority of the
//        pairs (a spell of interference that covers part of the head to
//        head wins it those pairs only; the quiet pairs show the truth),
//      - its fastest sample beats the baseline's fastest sample of the
//        whole run by min_gain (interference only adds time, so a fastest
//        sample is the candidate's quiet-machine speed: if the baseline
//        ever ran faster than the challenger ever did, it lost to noise),
//      - the baseline was steady in this head to head: the median of its
//        samples there is within fewer_threads_max_spread of its fastest
//        sample. On a quiet machine repeated runs of a kernel differ by a
//        few percent; a baseline whose typical time is far above its own
//        best was being disturbed, and a comparison with it is no evidence
//        about the quiet machine the table is for,
//      - and, asked last, the parallel_slowdown probe finds the baseline's
//        threads each getting a core now (slowdown at most
//        fewer_threads_max_slowdown). This catches a core kept busy
//        steadily through the whole shape: the baseline is then slow in
//        every sample, evenly, which no comparison of timings can tell
//        from a kernel that is really slower.
//    The rules fail safe: under interference a one-thread kernel that is
//    really faster may lose its place to the default (the table then costs
//    nothing over untuned), never the other way round. What they cannot
//    see is a machine whose every core stayed busy since before the run
//    began (the probe's quiet reference is then slow too); attn-tune warns
//    of a high load average for that reason.
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
  // Threads candidate i runs; unset: every candidate counts as equal.
  std::function<int(size_t candidate)> threads_used;
  // A probe of the machine now: how many times longer `threads` threads
  // take to each do a fixed piece of work than one thread alone on a quiet
  // core (about 1 when each has a core, about 2 when another process keeps
  // one of two cores busy). Unset: taken as 1.
  std::function<double(int threads)> parallel_slowdown;
};

struct TunerSettings {
  int max_repeats = 5;  // rounds: timed samples per candidate, at most
  // Samples the baseline (the first correct candidate) gets whatever the
  // budget, and head-to-head pairs before the budget may end one.
  int min_repeats = 2;
  int drop_after = 2;       // rounds before a candidate may be dropped
  double drop_ratio = 1.5;  // drop when fastest sample > drop_ratio x leader's score
  double budget_seconds = std::numeric_limits<double>::infinity();
  // A winner other than the baseline must beat it head to head (above).
  // Off, the best score wins outright (tests compare the two).
  bool head_to_head = true;
  int pairs = 5;           // head-to-head pairs per challenger
  int max_challengers = 2; // challengers tried before the baseline is kept
  // Two runs of the same code on a shared machine differ by a few percent
  // even alternated; a gain within that is not worth a table entry.
  double min_gain = 0.03;
  // The stronger evidence for a challenger that runs fewer threads.
  int fewer_threads_pair_factor = 2;
  double fewer_threads_gain_factor = 2.0;
  double fewer_threads_majority = 0.75;
  double fewer_threads_max_spread = 1.25;   // the baseline's median / fastest sample
  double fewer_threads_max_slowdown = 1.3;  // parallel_slowdown(baseline's threads)
};

enum class Verdict {
  kNotRun,           // skipped: the budget was spent before its turn
  kWrong,            // failed the correctness check: never timed
  kDroppedEarly,     // clearly slower than the leader
  kTimed,            // measured in every round it could be
  kLostHeadToHead,   // led the rounds over the baseline, but did not beat it in pairs
};
const char* VerdictName(Verdict v);

struct Measurement {
  Verdict verdict = Verdict::kNotRun;
  int threads = 1;              // threads_used, or 1
  std::vector<double> samples;  // seconds per call: the rounds', then any head to head's
  double score = 0.0;   // seconds per call that decisions use and reports show: the
                        // median of the rounds' samples, or from the head to head
  double best = 0.0;    // fastest of all samples (reported; a quiet-machine figure)
  double median = 0.0;  // median of all samples
  // Head to head (challengers only): pairs run, pairs it won by min_gain,
  // and the median per-pair ratio challenger / baseline.
  int pairs = 0, pairs_won = 0;
  double pair_ratio = 0.0;
  std::string reason;  // kWrong: the check's reason; a challenger: why it won or lost
};

struct TunerResult {
  std::vector<Measurement> candidates;
  int leader = -1;  // lowest score after the rounds; -1 if none was timed
  int winner = -1;  // after the head to head; -1 if none was timed
  int rounds = 0;   // rounds started
  double spent_seconds = 0.0;
};

TunerResult Tune(size_t candidate_count, const TunerHooks& hooks, const TunerSettings& settings);

// The median of `seconds` (0 for none): the tuner's robust statistic.
double RobustSeconds(std::vector<double> seconds);

}  // namespace attn_tune
