// The autotuner (tools/tune) and the tuning tables `auto` follows
// (dispatch/tuning): winner selection under a fake timer, rejection of wrong
// candidates, early drops, budgets, the file schema and its round trip,
// every kind of bad file, the shape bucketing and the `auto` choice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/tuning.h"
#include "reference/reference.h"
#include "tests/test_util.h"
#include "tools/tune/grid.h"
#include "tools/tune/report.h"
#include "tools/tune/shape_tuner.h"
#include "tools/tune/tuner.h"

namespace attn::test {
namespace {

using internal::BucketMatch;
using internal::ShapeKey;
using internal::TuningEntry;
using internal::TuningTable;

// ---- helpers -------------------------------------------------------------------

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "attn_tuning_test_" + std::to_string(getpid()) + "_" + name;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TuningEntry Entry(int64_t q, int64_t k, int64_t d, bool causal, int threads, KernelId kernel,
                  Tiles tiles) {
  TuningEntry e;
  e.shape = ShapeKey{q, k, d, causal, threads};
  e.kernel = kernel;
  e.tiles = tiles;
  return e;
}

// A table this process accepts (its CPU model and target).
TuningTable ThisMachineTable() {
  TuningTable t;
  t.library_version = internal::LibraryVersion();
  t.cpu_model = internal::CpuModel();
  t.target = CurrentTarget();
  t.max_threads = 2;
  t.heads = 1;
  t.created = "2024-01-01T00:00:00Z";
  t.peak_gflops = {{1, 100.0}, {2, 200.0}};
  TuningEntry blocked = Entry(64, 64, 32, false, 1, KernelId::kBlocked, Tiles{16, 32, 1});
  blocked.figures.gflops = 42.5;
  blocked.figures.speedup_vs_default = 1.25;
  blocked.kernel_gflops = {{"blocked", 42.5}, {"streaming", 30.0}};
  t.entries.push_back(blocked);
  t.entries.push_back(Entry(1, 2048, 64, false, 2, KernelId::kParallel, Tiles{8, 256, 4}));
  t.entries.push_back(Entry(256, 256, 128, true, 1, KernelId::kStreaming, Tiles{64, 64, 1}));
  return t;
}

std::string Serialized(const TuningTable& t) { return internal::SerializeTuning(t); }

// Runs attention with `auto` at one thread and expects the reference's
// answer within the kernel tests' bound: whatever a table says, results hold.
void ExpectAutoCorrect(int64_t q, int64_t k, int64_t d, Causal causal) {
  Shape s;
  s.tq = q;
  s.tk = k;
  s.d = d;
  s.causal = causal;
  s.q_heads = s.kv_heads = 1;
  OwnedProblem owned = MakeProblem(s);
  const reference::Result ref = reference::Attention(owned.problem);
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
  Options automatic;
  automatic.threads = 1;
  const Errors err = RunAndCompare(owned, ref, automatic);
  EXPECT_LE(err.out, bound.out) << s.Name();
  EXPECT_LE(err.lse, bound.lse) << s.Name();
}

// Every test starts and ends without a table, so that none depends on the
// user's own cache file or on another test.
class TuningTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearTuning(); }
  void TearDown() override { ClearTuning(); }
};

// ---- the generic tuner, with fake timers -------------------------------------------

attn_tune::TunerHooks FakeHooks(const std::vector<double>& seconds,
                                const std::set<size_t>& wrong = {},
                                std::vector<int>* timed_calls = nullptr) {
  attn_tune::TunerHooks hooks;
  hooks.check = [wrong](size_t i) {
    attn_tune::CheckOutcome c;
    c.correct = !wrong.count(i);
    if (!c.correct) c.reason = "output differs from naive by 0.5 at row 3";
    return c;
  };
  hooks.time_once = [seconds, timed_calls](size_t i) {
    if (timed_calls) (*timed_calls)[i] += 1;
    return seconds[i];
  };
  return hooks;
}

TEST(Tuner, PicksTheCandidateTheTimerSaysIsFastest) {
  const attn_tune::TunerResult r = attn_tune::Tune(4, FakeHooks({3.0, 1.0, 2.0, 5.0}), {});
  EXPECT_EQ(r.winner, 1);
  EXPECT_EQ(r.candidates[1].verdict, attn_tune::Verdict::kTimed);
  EXPECT_DOUBLE_EQ(r.candidates[1].best, 1.0);
}

TEST(Tuner, AFastWrongCandidateIsNeverTimedAndNeverWins) {
  std::vector<int> timed(4, 0);
  const attn_tune::TunerResult r =
      attn_tune::Tune(4, FakeHooks({3.0, 0.001, 2.0, 5.0}, {1}, &timed), {});
  EXPECT_EQ(r.winner, 2);
  EXPECT_EQ(r.candidates[1].verdict, attn_tune::Verdict::kWrong);
  EXPECT_NE(r.candidates[1].reason.find("differs from naive"), std::string::npos);
  EXPECT_EQ(timed[1], 0);
  EXPECT_TRUE(r.candidates[1].samples.empty());
}

TEST(Tuner, NoWinnerWhenEveryCandidateIsWrong) {
  const attn_tune::TunerResult r = attn_tune::Tune(2, FakeHooks({1.0, 2.0}, {0, 1}), {});
  EXPECT_EQ(r.winner, -1);
}

TEST(Tuner, DropsClearlySlowerCandidatesAfterOneSample) {
  attn_tune::TunerSettings settings;
  settings.max_repeats = 5;
  settings.drop_ratio = 1.5;
  std::vector<int> timed(3, 0);
  const attn_tune::TunerResult r =
      attn_tune::Tune(3, FakeHooks({1.0, 1.6, 1.2}, {}, &timed), settings);
  EXPECT_EQ(r.winner, 0);
  EXPECT_EQ(r.candidates[1].verdict, attn_tune::Verdict::kDroppedEarly);
  EXPECT_EQ(timed[1], 1);
  EXPECT_EQ(r.candidates[2].verdict, attn_tune::Verdict::kTimed);  // 1.2 < 1.5 x 1.0
  EXPECT_EQ(timed[0], 5);
  EXPECT_EQ(timed[2], 5);
}

TEST(Tuner, ScoresByTheMinimumSampleAndReportsTheMedian) {
  // Candidate 0 is noisy but once ran fastest; interference only adds time.
  std::vector<std::vector<double>> sequences = {{5.0, 1.0, 5.0}, {2.0, 2.0, 2.0}};
  std::vector<size_t> next(2, 0);
  attn_tune::TunerHooks hooks;
  hooks.check = [](size_t) { return attn_tune::CheckOutcome{true, "", 0.0}; };
  hooks.time_once = [&](size_t i) { return sequences[i][next[i]++]; };
  attn_tune::TunerSettings settings;
  settings.max_repeats = 3;
  settings.drop_ratio = 100.0;
  const attn_tune::TunerResult r = attn_tune::Tune(2, hooks, settings);
  EXPECT_EQ(r.winner, 0);
  EXPECT_DOUBLE_EQ(r.candidates[0].best, 1.0);
  EXPECT_DOUBLE_EQ(r.candidates[0].median, 5.0);
}

TEST(Tuner, RemeasuresTheBaselineWhenItLost) {
  // The baseline's first samples fell into a burst of interference.
  std::vector<double> baseline = {10.0, 10.0, 0.5, 0.5};
  size_t next = 0;
  attn_tune::TunerHooks hooks;
  hooks.check = [](size_t) { return attn_tune::CheckOutcome{true, "", 0.0}; };
  hooks.time_once = [&](size_t i) { return i == 0 ? baseline[next++] : 1.0; };
  attn_tune::TunerSettings settings;
  settings.max_repeats = 2;
  attn_tune::TunerResult r = attn_tune::Tune(2, hooks, settings);
  EXPECT_EQ(r.winner, 0);
  EXPECT_EQ(r.candidates[0].samples.size(), 4u);
  EXPECT_DOUBLE_EQ(r.candidates[0].best, 0.5);

  // Without the second look, the candidate that ran in quiet times wins.
  next = 0;
  settings.remeasure_first = false;
  r = attn_tune::Tune(2, hooks, settings);
  EXPECT_EQ(r.winner, 1);
  EXPECT_EQ(r.candidates[0].samples.size(), 2u);
}

TEST(Tuner, TheWinnerMustBeatTheBaselineHeadToHeadByTheMargin) {
  // Candidate 1 wins the first pass (a burst hit the baseline's samples);
  // head to head, the two alternate and see the same conditions.
  for (double head_to_head : {0.98, 0.90}) {
    SCOPED_TRACE(head_to_head);
    std::vector<std::vector<double>> seq = {{2.0, 2.0, 1.0, 1.0},
                                            {0.5, 0.5, head_to_head, head_to_head}};
    std::vector<size_t> next(2, 0);
    std::vector<int> order;
    attn_tune::TunerHooks hooks;
    hooks.check = [](size_t) { return attn_tune::CheckOutcome{true, "", 0.0}; };
    hooks.time_once = [&](size_t i) {
      order.push_back(int(i));
      return seq[i][next[i]++];
    };
    attn_tune::TunerSettings settings;
    settings.max_repeats = 2;
    settings.min_gain = 0.03;
    const attn_tune::TunerResult r = attn_tune::Tune(2, hooks, settings);
    // 0.98 is within 3% of the baseline's 1.0: the baseline stays.
    EXPECT_EQ(r.winner, head_to_head < 0.97 ? 1 : 0);
    EXPECT_EQ(order, (std::vector<int>{0, 0, 1, 1, 0, 1, 0, 1}));  // alternated
    EXPECT_EQ(r.candidates[1].samples.size(), 4u);
    EXPECT_DOUBLE_EQ(r.candidates[0].best, 1.0);  // scores from the head to head
    EXPECT_DOUBLE_EQ(r.candidates[1].best, head_to_head);
  }
}

TEST(Tuner, StopsAtTheBudgetButAlwaysMeasuresTheFirstCandidate) {
  attn_tune::TunerSettings settings;
  settings.max_repeats = 3;
  settings.min_repeats = 1;
  settings.budget_seconds = 0.0;
  std::vector<int> timed(3, 0);
  attn_tune::TunerResult r = attn_tune::Tune(3, FakeHooks({1.0, 0.5, 0.1}, {}, &timed), settings);
  EXPECT_EQ(r.winner, 0);
  EXPECT_EQ(timed[0], 1);
  EXPECT_EQ(r.candidates[1].verdict, attn_tune::Verdict::kNotRun);
  EXPECT_EQ(r.candidates[2].verdict, attn_tune::Verdict::kNotRun);

  // 2.5 s: candidate 0 (3 x 1 s) spends it all; the rest is skipped.
  settings.budget_seconds = 2.5;
  std::fill(timed.begin(), timed.end(), 0);
  r = attn_tune::Tune(3, FakeHooks({1.0, 0.5, 0.1}, {}, &timed), settings);
  EXPECT_EQ(timed[0], 3);
  EXPECT_EQ(timed[1], 0);
  EXPECT_DOUBLE_EQ(r.spent_seconds, 3.0);
}

TEST(Tuner, CountsCheckTimeAgainstTheBudget) {
  attn_tune::TunerHooks hooks = FakeHooks({0.1, 0.1});
  hooks.check = [](size_t) { return attn_tune::CheckOutcome{true, "", 10.0}; };
  attn_tune::TunerSettings settings;
  settings.budget_seconds = 5.0;
  const attn_tune::TunerResult r = attn_tune::Tune(2, hooks, settings);
  EXPECT_EQ(r.candidates[1].verdict, attn_tune::Verdict::kNotRun);
}

// ---- the attention layer: real runs and checks, fake timer --------------------------

TEST(ShapeTuner, FollowsTheTimerAndRejectsACorruptingCandidate) {
  const attn_tune::TuneShape shape{48, 80, 32, false, 1};
  std::vector<attn_tune::AttnCandidate> candidates =
      attn_tune::EnumerateCandidates(shape, 1, /*quick=*/true, /*include_naive=*/true);
  ASSERT_TRUE(candidates.front().is_default);
  // Correct kernel, then one output element nudged by 1e-2: the kind of
  // error an off-by-one tile edge makes.
  attn_tune::AttnCandidate corrupt{KernelId::kBlocked, Tiles{16, 64, 1}, false, {}};
  corrupt.run = [](const Problem& p, const Options& o) {
    attention(p, o);
    p.out.data[5 * p.out.row_stride + 3] += 1e-2f;
  };
  // And one that leaves the last query row unwritten.
  attn_tune::AttnCandidate lazy{KernelId::kStreaming, Tiles{16, 64, 1}, false, {}};
  lazy.run = [](const Problem& p, const Options& o) {
    Problem head = p;
    head.q_len = p.q_len - 1;
    attention(head, o);
  };
  // And one that ignores the last key: a small error (~1/T_k of an output),
  // which the bound must still catch.
  attn_tune::AttnCandidate short_sighted{KernelId::kStreaming, Tiles{32, 64, 1}, false, {}};
  short_sighted.run = [](const Problem& p, const Options& o) {
    Problem fewer_keys = p;
    fewer_keys.kv_len = p.kv_len - 1;
    attention(fewer_keys, o);
  };
  candidates.push_back(corrupt);
  candidates.push_back(lazy);
  candidates.push_back(short_sighted);
  const size_t corrupt_index = candidates.size() - 3, lazy_index = candidates.size() - 2;
  const size_t short_sighted_index = candidates.size() - 1;
  const attn_tune::AttnCandidate expected_winner = candidates[2];

  // The timer: the wrong ones fastest, then candidate 2, the rest slower.
  auto fake_timer = [&](const attn_tune::AttnCandidate& c) {
    if (c.run) return 1e-6;
    if (c.kernel == expected_winner.kernel && c.tiles.q_block == expected_winner.tiles.q_block &&
        c.tiles.kv_block == expected_winner.tiles.kv_block &&
        c.tiles.kv_splits == expected_winner.tiles.kv_splits) {
      return 1e-3;
    }
    return 2e-3;
  };
  attn_tune::ShapeTuneSettings settings;
  settings.tuner.drop_ratio = 1.5;
  const attn_tune::ShapeResult r =
      attn_tune::TuneOneShape(shape, settings, candidates, fake_timer);
  ASSERT_TRUE(r.HasWinner());
  EXPECT_EQ(r.tuning.winner, 2);
  EXPECT_EQ(r.Winner().Label(), expected_winner.Label());
  EXPECT_EQ(r.tuning.candidates[corrupt_index].verdict, attn_tune::Verdict::kWrong);
  EXPECT_NE(r.tuning.candidates[corrupt_index].reason.find("from the float64 reference at row 5"),
            std::string::npos)
      << r.tuning.candidates[corrupt_index].reason;
  EXPECT_EQ(r.tuning.candidates[lazy_index].verdict, attn_tune::Verdict::kWrong);
  EXPECT_NE(r.tuning.candidates[lazy_index].reason.find("row 47"), std::string::npos)
      << r.tuning.candidates[lazy_index].reason;
  EXPECT_EQ(r.tuning.candidates[short_sighted_index].verdict, attn_tune::Verdict::kWrong);
  // Every real candidate passed, within the bound.
  for (size_t i = 0; i < corrupt_index; ++i) {
    EXPECT_NE(r.tuning.candidates[i].verdict, attn_tune::Verdict::kWrong)
        << candidates[i].Label() << ": " << r.tuning.candidates[i].reason;
  }
  EXPECT_LE(r.max_error_seen, r.check_bound);
  EXPECT_GT(r.check_bound, 0.0);
  EXPECT_LT(r.check_bound, 1e-5);
  EXPECT_EQ(r.default_index, 0);
  EXPECT_DOUBLE_EQ(r.DefaultSeconds(), 2e-3);
  EXPECT_EQ(r.checked_rows, 48);  // small shape: every row checked
  EXPECT_FALSE(r.naive_extrapolated);
}

TEST(ShapeTuner, SampledRowsCheckLargeCausalShapesAndCatchCorruption) {
  // 1024 queries against 2048 keys, bottom-right causal: too large for a
  // full naive reference, so row blocks are checked; correct kernels must
  // pass (the sub-problems keep the causal diagonal) and a corrupted middle
  // row must not.
  const attn_tune::TuneShape shape{1024, 2048, 128, true, 2};
  std::vector<attn_tune::AttnCandidate> candidates;
  candidates.push_back({KernelId::kStreaming, Tiles{64, 128, 1}, true, {}});
  candidates.push_back({KernelId::kBlocked, Tiles{16, 64, 1}, false, {}});
  candidates.push_back({KernelId::kParallel, Tiles{32, 128, 2}, false, {}});
  attn_tune::AttnCandidate corrupt{KernelId::kStreaming, Tiles{64, 128, 1}, false, {}};
  corrupt.run = [](const Problem& p, const Options& o) {
    attention(p, o);
    p.out.data[(p.q_len / 2) * p.out.row_stride] += 1e-2f;
  };
  candidates.push_back(corrupt);
  const attn_tune::ShapeResult r = attn_tune::TuneOneShape(
      shape, {}, candidates, [](const attn_tune::AttnCandidate& c) { return c.run ? 1e-6 : 1.0; });
  EXPECT_TRUE(r.naive_extrapolated);
  EXPECT_LT(r.checked_rows, shape.q_len);
  EXPECT_GT(r.naive_seconds, 0.0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(r.tuning.candidates[i].verdict, attn_tune::Verdict::kWrong)
        << candidates[i].Label() << ": " << r.tuning.candidates[i].reason;
  }
  EXPECT_EQ(r.tuning.candidates[3].verdict, attn_tune::Verdict::kWrong);
  EXPECT_EQ(r.tuning.winner, 0);
}

TEST(ShapeTuner, CandidatesStartWithTheDefaultAndStayWithinTheShape) {
  ClearTuning();
  const attn_tune::TuneShape prefill{40, 40, 64, false, 1};
  const std::vector<attn_tune::AttnCandidate> c = attn_tune::EnumerateCandidates(prefill, 1, false, false);
  ASSERT_FALSE(c.empty());
  EXPECT_TRUE(c[0].is_default);
  const AutoChoice def = ExplainChoice(40, 40, 64, Causal::kNone, 1);
  EXPECT_EQ(c[0].kernel, def.kernel);
  const int panel = DefaultTiles(1, 40, 64).q_block;
  std::set<std::string> labels;
  for (const attn_tune::AttnCandidate& x : c) {
    EXPECT_NE(x.kernel, KernelId::kParallel) << "one thread: no parallel candidates";
    EXPECT_NE(x.kernel, KernelId::kNaive) << "naive not asked for";
    EXPECT_LE(x.tiles.q_block, (40 + panel - 1) / panel * panel) << x.Label();
    EXPECT_TRUE(labels.insert(x.Label()).second) << "duplicate " << x.Label();
  }
  EXPECT_EQ(c.size(), labels.size());

  // Decode at two threads: parallel with split-KV is among the candidates.
  const attn_tune::TuneShape decode{1, 4096, 64, false, 2};
  bool split = false;
  for (const attn_tune::AttnCandidate& x : attn_tune::EnumerateCandidates(decode, 1, false, true)) {
    split |= x.kernel == KernelId::kParallel && x.tiles.kv_splits > 1;
  }
  EXPECT_TRUE(split);
}

TEST(ShapeTuner, FlopsCountVisiblePairs) {
  EXPECT_DOUBLE_EQ(attn_tune::ShapeFlops({4, 4, 8, false, 1}, 1), 4.0 * 16 * 8);
  // Causal square: 1 + 2 + 3 + 4 visible pairs.
  EXPECT_DOUBLE_EQ(attn_tune::ShapeFlops({4, 4, 8, true, 1}, 1), 4.0 * 10 * 8);
  // Bottom-right with 2 queries over 4 keys: 3 + 4.
  EXPECT_DOUBLE_EQ(attn_tune::ShapeFlops({2, 4, 8, true, 1}, 3), 4.0 * 7 * 8 * 3);
}

// ---- grids -----------------------------------------------------------------------

TEST(Grid, ParsesShapeListsAndNamesBadItems) {
  const std::vector<attn_tune::TuneShape> s = attn_tune::ParseShapes("1:4096:128,512:512:64:1", {1, 2});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].q_len, 1);
  EXPECT_EQ(s[0].kv_len, 4096);
  EXPECT_EQ(s[0].head_dim, 128);
  EXPECT_FALSE(s[0].causal);
  EXPECT_EQ(s[1].threads, 2);
  EXPECT_TRUE(s[2].causal);

  auto error_of = [](const std::string& list) {
    try {
      attn_tune::ParseShapes(list, {1});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("1:4096").find("'1:4096'"), std::string::npos);
  EXPECT_NE(error_of("1:x:64").find("'x'"), std::string::npos);
  EXPECT_NE(error_of("1:64:0").find("'0'"), std::string::npos);
  EXPECT_NE(error_of("8:8:64:yes").find("'yes'"), std::string::npos);
  EXPECT_NE(error_of("64:32:64:1").find("Tq 64 > Tk 32"), std::string::npos);
  EXPECT_NE(error_of("").find("no shape"), std::string::npos);
}

TEST(Grid, DefaultGridSpansDecodeToSixteenKAndEveryHeadDim) {
  const std::vector<attn_tune::TuneShape> grid = attn_tune::DefaultGrid({2});
  std::set<int64_t> dims, prefill_t;
  bool decode = false, causal = false;
  for (const attn_tune::TuneShape& s : grid) {
    dims.insert(s.head_dim);
    decode |= s.q_len == 1;
    causal |= s.causal;
    if (s.q_len == s.kv_len) prefill_t.insert(s.q_len);
    EXPECT_EQ(s.threads, 2);
  }
  EXPECT_EQ(dims, (std::set<int64_t>{32, 64, 80, 96, 128, 256}));
  EXPECT_TRUE(decode);
  EXPECT_TRUE(causal);
  EXPECT_EQ(*prefill_t.rbegin(), 16384);
  // Cheapest first.
  for (size_t i = 1; i < grid.size(); ++i) {
    EXPECT_LE(attn_tune::ShapeFlops(grid[i - 1], 1), attn_tune::ShapeFlops(grid[i], 1));
  }
  EXPECT_LE(attn_tune::QuickGrid({2}).size(), 12u);
}

// ---- the file: schema and round trip ---------------------------------------------------

TEST(TuningFile, RoundTripsThroughText) {
  const TuningTable t = ThisMachineTable();
  std::string why;
  const std::optional<TuningTable> back = internal::ParseTuning(Serialized(t), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->schema_version, internal::kTuningSchemaVersion);
  EXPECT_EQ(back->library_version, t.library_version);
  EXPECT_EQ(back->cpu_model, t.cpu_model);
  EXPECT_EQ(back->target, t.target);
  EXPECT_EQ(back->max_threads, 2);
  EXPECT_EQ(back->heads, 1);
  EXPECT_EQ(back->created, t.created);
  EXPECT_EQ(back->peak_gflops, t.peak_gflops);
  ASSERT_EQ(back->entries.size(), t.entries.size());
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const TuningEntry& a = t.entries[i];
    const TuningEntry& b = back->entries[i];
    EXPECT_EQ(a.shape.q_len, b.shape.q_len);
    EXPECT_EQ(a.shape.kv_len, b.shape.kv_len);
    EXPECT_EQ(a.shape.head_dim, b.shape.head_dim);
    EXPECT_EQ(a.shape.causal, b.shape.causal);
    EXPECT_EQ(a.shape.threads, b.shape.threads);
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.tiles.q_block, b.tiles.q_block);
    EXPECT_EQ(a.tiles.kv_block, b.tiles.kv_block);
    EXPECT_EQ(a.tiles.kv_splits, b.tiles.kv_splits);
    EXPECT_DOUBLE_EQ(a.figures.gflops, b.figures.gflops);
    EXPECT_DOUBLE_EQ(a.figures.speedup_vs_default, b.figures.speedup_vs_default);
    EXPECT_EQ(a.kernel_gflops, b.kernel_gflops);
  }
  // Text -> table -> text is a fixed point.
  EXPECT_EQ(Serialized(*back), Serialized(t));
}

TEST_F(TuningTest, RoundTripsThroughAFileTheLibraryLoads) {
  const std::string path = TempPath("good.json");
  WriteFile(path, Serialized(ThisMachineTable()));
  const TuningStatus status = LoadTuningFile(path);
  EXPECT_TRUE(status.loaded) << status.warning;
  EXPECT_EQ(status.warning, "");
  EXPECT_EQ(status.path, path);
  EXPECT_EQ(status.entries, 3u);
  EXPECT_TRUE(CurrentTuning().loaded);
  ClearTuning();
  EXPECT_FALSE(CurrentTuning().loaded);
  std::remove(path.c_str());
}

// ---- bad files: ignored with one warning, defaults used, results correct ---------------

struct BadFile {
  std::string name;
  std::string text;
  std::string warning_names;  // a part of the warning that names the bad value
};

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::vector<BadFile> BadFiles() {
  const std::string good = Serialized(ThisMachineTable());
  std::vector<BadFile> bad;
  TuningTable other_cpu = ThisMachineTable();
  other_cpu.cpu_model = "Imaginary CPU 9000";
  bad.push_back({"other_cpu", Serialized(other_cpu), "'Imaginary CPU 9000'"});
  TuningTable other_target = ThisMachineTable();
  other_target.target = other_target.target == "EMU128" ? "AVX2" : "EMU128";
  bad.push_back({"other_target", Serialized(other_target), "'" + other_target.target + "'"});
  bad.push_back({"corrupt_json", Replace(good, "\"entries\": [", "\"entries\": [}"), "not valid JSON"});
  bad.push_back({"truncated", good.substr(0, good.size() / 2), "not valid JSON"});
  bad.push_back({"empty", "", "not valid JSON"});
  bad.push_back({"newer_schema", Replace(good, "\"schema_version\": 1", "\"schema_version\": 7"),
                 "schema_version 7 is newer"});
  bad.push_back({"zero_schema", Replace(good, "\"schema_version\": 1", "\"schema_version\": 0"),
                 "schema_version must be a positive integer, got 0"});
  bad.push_back({"not_a_tuning_file", Replace(good, "\"attn-tuning\"", "\"something-else\""),
                 "\"something-else\""});
  bad.push_back({"top_level_array", "[1, 2, 3]", "got [1,2,3]"});
  bad.push_back({"missing_kernel", Replace(good, "\"kernel\": \"blocked\",", ""),
                 "entries[0].kernel is missing"});
  bad.push_back({"missing_entries", Replace(good, "\"entries\"", "\"entreis\""), "entries is missing"});
  bad.push_back({"missing_cpu", Replace(good, "\"cpu_model\"", "\"cpu\""), "cpu_model is missing"});
  bad.push_back({"threads_wrong_type", Replace(good, "\"threads\": 1,", "\"threads\": \"one\","),
                 "entries[0].threads must be an integer in [1, 65536], got \"one\""});
  bad.push_back({"causal_wrong_type", Replace(good, "\"causal\": false", "\"causal\": 0"),
                 "entries[0].causal must be true or false, got 0"});
  bad.push_back({"float_length", Replace(good, "\"q_len\": 64", "\"q_len\": 64.5"),
                 "entries[0].q_len must be an integer"});
  bad.push_back({"unknown_kernel", Replace(good, "\"kernel\": \"blocked\"", "\"kernel\": \"turbo\""),
                 "got \"turbo\""});
  bad.push_back({"auto_kernel", Replace(good, "\"kernel\": \"blocked\"", "\"kernel\": \"auto\""),
                 "got \"auto\""});
  bad.push_back({"zero_splits", Replace(good, "\"kv_splits\": 4", "\"kv_splits\": 0"),
                 "entries[1].tiles.kv_splits must be an integer in [1, 1024], got 0"});
  bad.push_back({"huge_q_block", Replace(good, "\"q_block\": 16", "\"q_block\": 1000000000"),
                 "entries[0].tiles.q_block must be an integer in [1, 4096], got 1000000000"});
  bad.push_back({"huge_unsigned", Replace(good, "\"kv_len\": 64", "\"kv_len\": 18446744073709551615"),
                 "got 18446744073709551615"});
  bad.push_back({"negative_length", Replace(good, "\"head_dim\": 32", "\"head_dim\": -32"), "got -32"});
  bad.push_back({"entries_not_array", Replace(good, "\"entries\": [", "\"entries\": 5, \"x\": ["),
                 "entries must be an array, got 5"});
  bad.push_back({"nan_figure", Replace(good, "\"gflops\": 42.5", "\"gflops\": \"fast\""),
                 "entries[0].measured.gflops must be a finite number, got \"fast\""});
  TuningTable duplicate = ThisMachineTable();
  duplicate.entries.push_back(duplicate.entries[0]);
  bad.push_back({"duplicate_shape", Serialized(duplicate), "entries[3] repeats the shape of entries[0]"});
  return bad;
}

TEST_F(TuningTest, EveryBadFileIsIgnoredWithOneWarningAndDefaultsStayCorrect) {
  for (const BadFile& bad : BadFiles()) {
    SCOPED_TRACE(bad.name);
    // A good table first: the bad file must replace it, not leave it active.
    const std::string good_path = TempPath("good_before_" + bad.name + ".json");
    WriteFile(good_path, Serialized(ThisMachineTable()));
    ASSERT_TRUE(LoadTuningFile(good_path).loaded);

    const std::string path = TempPath(bad.name + ".json");
    WriteFile(path, bad.text);
    ::testing::internal::CaptureStderr();
    const TuningStatus status = LoadTuningFile(path);
    const std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(status.loaded);
    EXPECT_EQ(status.entries, 0u);
    EXPECT_NE(status.warning.find(bad.warning_names), std::string::npos)
        << "warning: " << status.warning;
    EXPECT_NE(status.warning.find(path), std::string::npos) << status.warning;
    // Exactly one line, and the same as returned.
    EXPECT_EQ(printed, status.warning + "\n");
    EXPECT_FALSE(CurrentTuning().loaded);
    const AutoChoice c = ExplainChoice(64, 64, 32, Causal::kNone, 1);
    EXPECT_EQ(c.source, "default") << c.reason;
    EXPECT_EQ(c.kernel, KernelId::kStreaming);
    ExpectAutoCorrect(64, 64, 32, Causal::kNone);
    std::remove(path.c_str());
    std::remove(good_path.c_str());
  }
}

TEST_F(TuningTest, AMissingFileIsIgnoredWithAWarning) {
  const std::string path = TempPath("does_not_exist.json");
  const TuningStatus status = LoadTuningFile(path);
  EXPECT_FALSE(status.loaded);
  EXPECT_NE(status.warning.find(path), std::string::npos);
  EXPECT_NE(status.warning.find("cannot be opened"), std::string::npos) << status.warning;
  EXPECT_EQ(ExplainChoice(64, 64, 32).source, "default");
}

// ---- bucketing (pure) ------------------------------------------------------------------

std::vector<TuningEntry> GridEntries() {
  std::vector<TuningEntry> e;
  for (int64_t t : {64, 256, 1024}) {
    for (int64_t d : {64, 128}) e.push_back(Entry(t, t, d, false, 2, KernelId::kStreaming, {16, 64, 1}));
  }
  e.push_back(Entry(1, 2048, 64, false, 2, KernelId::kParallel, {16, 128, 4}));
  e.push_back(Entry(256, 256, 64, true, 2, KernelId::kBlocked, {16, 64, 1}));
  e.push_back(Entry(256, 256, 64, false, 1, KernelId::kBlocked, {16, 32, 1}));
  return e;
}

TEST(Bucketing, AnIdenticalShapeIsAnExactMatch) {
  const BucketMatch m = internal::FindBucket(GridEntries(), ShapeKey{256, 256, 128, false, 2});
  EXPECT_EQ(m.index, 3);
  EXPECT_TRUE(m.exact);
  EXPECT_DOUBLE_EQ(m.distance, 0.0);
}

TEST(Bucketing, TheNearestEntryInLogSpaceWins) {
  // 300 is nearer 256 than 1024 (log2 distance 0.23 vs 1.77 per axis).
  BucketMatch m = internal::FindBucket(GridEntries(), ShapeKey{300, 300, 64, false, 2});
  EXPECT_EQ(m.index, 2);
  EXPECT_FALSE(m.exact);
  EXPECT_NEAR(m.distance, 2 * std::log2(300.0 / 256.0), 1e-12);
  // d = 96 lies between 64 and 128; log2(128/96) < log2(96/64).
  m = internal::FindBucket(GridEntries(), ShapeKey{1024, 1024, 96, false, 2});
  EXPECT_EQ(m.index, 5);
  // T_q and T_k may differ from each other: 256 x 1024 is 2 (log2) from
  // both 256 x 256 and 1024 x 1024; the tie goes to the entry listed first.
  m = internal::FindBucket(GridEntries(), ShapeKey{256, 1024, 64, false, 2});
  EXPECT_EQ(m.index, 2);
  EXPECT_DOUBLE_EQ(m.distance, 2.0);
}

TEST(Bucketing, BucketsReachFourTimesInTAndTwiceInD) {
  const std::vector<TuningEntry> e = GridEntries();
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{4096, 4096, 64, false, 2}).index, 4);  // 4x: in
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{4097, 4097, 64, false, 2}).index, -1);  // over 4x
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{16, 16, 64, false, 2}).index, 0);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{15, 15, 64, false, 2}).index, -1);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{64, 64, 32, false, 2}).index, 0);   // d / 2: in
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{64, 64, 256, false, 2}).index, 1);  // d x 2: in
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{64, 64, 257, false, 2}).index, -1);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{64, 64, 31, false, 2}).index, -1);
}

TEST(Bucketing, ThreadsCausalityAndDecodeAreNeverMixed) {
  const std::vector<TuningEntry> e = GridEntries();
  // Only the one-thread entry serves one thread.
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{300, 300, 64, false, 1}).index, 8);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{300, 300, 64, false, 3}).index, -1);
  // Causal shapes only from causal entries, and the other way round.
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{300, 300, 64, true, 2}).index, 7);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{1024, 1024, 64, true, 2}).index, 7);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{64, 64, 256, true, 2}).index, -1);
  // Decode (T_q = 1) only from decode entries; T_q = 2 is not decode.
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{1, 4096, 64, false, 2}).index, 6);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{2, 2048, 64, false, 2}).index, -1);
  EXPECT_EQ(internal::FindBucket(e, ShapeKey{1, 64, 64, false, 2}).index, -1);  // 2048/64 > 4
}

TEST(Bucketing, BottomRightDecodeIsNotCausalButTopLeftIs) {
  EXPECT_FALSE(internal::MakeShapeKey(1, 100, 64, Causal::kBottomRight, 1).causal);
  EXPECT_TRUE(internal::MakeShapeKey(1, 100, 64, Causal::kTopLeft, 1).causal);
  EXPECT_TRUE(internal::MakeShapeKey(2, 100, 64, Causal::kBottomRight, 1).causal);
  EXPECT_FALSE(internal::MakeShapeKey(8, 8, 64, Causal::kNone, 1).causal);
}

TEST(Bucketing, AnEmptyTableHasNoBucket) {
  EXPECT_EQ(internal::FindBucket({}, ShapeKey{64, 64, 64, false, 1}).index, -1);
}

// ---- where the first-use load looks ------------------------------------------------------

TEST(TuningPath, EnvironmentThenXdgThenHome) {
  internal::TuningPath p = internal::ResolveTuningPath("/x/t.json", "/xdg", "/home/u");
  EXPECT_EQ(p.path, "/x/t.json");
  EXPECT_TRUE(p.required);
  p = internal::ResolveTuningPath("", "/xdg", "/home/u");  // set but empty: no table
  EXPECT_EQ(p.path, "");
  p = internal::ResolveTuningPath(nullptr, "/xdg", "/home/u");
  EXPECT_EQ(p.path, "/xdg/attn/tuning.json");
  EXPECT_FALSE(p.required);
  p = internal::ResolveTuningPath(nullptr, "", "/home/u");
  EXPECT_EQ(p.path, "/home/u/.cache/attn/tuning.json");
  p = internal::ResolveTuningPath(nullptr, nullptr, nullptr);
  EXPECT_EQ(p.path, "");
}

// Restores an environment variable on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST_F(TuningTest, FirstUseLoadReadsTheEnvironmentVariable) {
  const std::string path = TempPath("env.json");
  WriteFile(path, Serialized(ThisMachineTable()));
  {
    ScopedEnv env("ATTN_TUNING_FILE", path.c_str());
    const TuningStatus status = internal::LoadFromEnvironment();
    EXPECT_TRUE(status.loaded) << status.warning;
    EXPECT_EQ(ExplainChoice(64, 64, 32, Causal::kNone, 1).source, "table");
  }
  {
    // Named explicitly but missing: a warning.
    ScopedEnv env("ATTN_TUNING_FILE", TempPath("missing.json").c_str());
    ::testing::internal::CaptureStderr();
    const TuningStatus status = internal::LoadFromEnvironment();
    ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(status.loaded);
    EXPECT_NE(status.warning.find("missing.json"), std::string::npos);
  }
  {
    // The per-user cache path without a file: silently no table.
    ScopedEnv env("ATTN_TUNING_FILE", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", TempPath("empty_cache_dir").c_str());
    ::testing::internal::CaptureStderr();
    const TuningStatus status = internal::LoadFromEnvironment();
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_FALSE(status.loaded);
    EXPECT_EQ(status.warning, "");
  }
  std::remove(path.c_str());
}

// ---- `auto` follows a given table ---------------------------------------------------

TEST_F(TuningTest, AutoFollowsTheTableExactlyAndByBucket) {
  const std::string path = TempPath("follow.json");
  WriteFile(path, Serialized(ThisMachineTable()));
  ASSERT_TRUE(LoadTuningFile(path).loaded);

  AutoChoice c = ExplainChoice(64, 64, 32, Causal::kNone, 1);
  EXPECT_EQ(c.source, "table");
  EXPECT_EQ(c.kernel, KernelId::kBlocked);
  EXPECT_EQ(c.tiles.kv_block, 32);
  EXPECT_EQ(c.tiles.q_block, 16);
  EXPECT_EQ(c.threads, 1);
  EXPECT_NE(c.reason.find(path), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("42.5 GFLOP/s"), std::string::npos) << c.reason;
  ExpectAutoCorrect(64, 64, 32, Causal::kNone);

  c = ExplainChoice(100, 90, 40, Causal::kNone, 1);
  EXPECT_EQ(c.source, "bucket");
  EXPECT_EQ(c.kernel, KernelId::kBlocked);
  EXPECT_NE(c.reason.find("T_q=64 T_k=64 d=32"), std::string::npos) << c.reason;
  ExpectAutoCorrect(100, 90, 40, Causal::kNone);

  // The causal entry serves causal calls of both alignments at T_q = T_k.
  c = ExplainChoice(200, 200, 128, Causal::kTopLeft, 1);
  EXPECT_EQ(c.source, "bucket");
  EXPECT_EQ(c.kernel, KernelId::kStreaming);
  EXPECT_EQ(c.tiles.kv_block, 64);
  ExpectAutoCorrect(200, 200, 128, Causal::kTopLeft);
  ExpectAutoCorrect(256, 256, 128, Causal::kBottomRight);

  // Outside every bucket: the default rule.
  c = ExplainChoice(5000, 5000, 64, Causal::kNone, 1);
  EXPECT_EQ(c.source, "default");
  EXPECT_NE(c.reason.find("no entry in the bucket"), std::string::npos) << c.reason;

  // Explicit tiles still override the table's.
  Problem p;
  p.q_len = p.kv_len = 64;
  p.head_dim = 32;
  Options o;
  o.threads = 1;
  o.tiles.kv_block = 48;
  c = ExplainChoice(p, o);
  EXPECT_EQ(c.source, "table");
  EXPECT_EQ(c.tiles.kv_block, 48);
  EXPECT_EQ(c.tiles.q_block, 16);
  // An explicit kernel is not looked up at all.
  o.kernel = KernelId::kStreaming;
  EXPECT_EQ(ExplainChoice(p, o).source, "explicit");
  std::remove(path.c_str());
}

TEST(AutoChoice, TableMadeForAnotherTargetIsNotUsedAfterForcingOne) {
  internal::LoadedTable loaded{ThisMachineTable(), "/t.json"};
  internal::TileInputs in;
  in.q_len = in.kv_len = 64;
  in.head_dim = in.value_dim = 32;
  in.threads = 1;
  in.panel_width = 16;
  AutoChoice c = internal::ChooseAutoFrom(&loaded, loaded.table.target, in, Causal::kNone, {});
  EXPECT_EQ(c.source, "table");
  c = internal::ChooseAutoFrom(&loaded, "SOME_OTHER_TARGET", in, Causal::kNone, {});
  EXPECT_EQ(c.source, "default");
  EXPECT_NE(c.reason.find("'SOME_OTHER_TARGET'"), std::string::npos) << c.reason;
  c = internal::ChooseAutoFrom(nullptr, "", in, Causal::kNone, {});
  EXPECT_EQ(c.source, "default");
  EXPECT_NE(c.reason.find("no tuning table"), std::string::npos);
  // Hot calls skip the sentence.
  c = internal::ChooseAutoFrom(&loaded, loaded.table.target, in, Causal::kNone, {}, false);
  EXPECT_EQ(c.reason, "");
  EXPECT_EQ(c.kernel, KernelId::kBlocked);
}

TEST(AutoChoice, NaiveFromABucketNeverMeetsAShapeItCannotHold) {
  internal::LoadedTable loaded{ThisMachineTable(), "/t.json"};
  loaded.table.entries = {Entry(65536, 65536, 64, false, 1, KernelId::kNaive, {16, 64, 1})};
  internal::TileInputs in;
  in.q_len = in.kv_len = 200000;  // in the bucket, but 160 GB of scores
  in.head_dim = in.value_dim = 64;
  in.threads = 1;
  const AutoChoice c = internal::ChooseAutoFrom(&loaded, loaded.table.target, in, Causal::kNone, {});
  EXPECT_EQ(c.source, "default");
  EXPECT_NE(c.kernel, KernelId::kNaive);
}

TEST(AutoChoice, SplitCountsHoldOnlyForTheHeadCountTheyWereTunedWith) {
  internal::LoadedTable loaded{ThisMachineTable(), "/t.json"};  // tuned with 1 head
  internal::TileInputs in;
  in.q_len = 1;
  in.kv_len = 2048;
  in.head_dim = in.value_dim = 64;
  in.threads = 2;
  in.panel_width = 16;
  AutoChoice c = internal::ChooseAutoFrom(&loaded, loaded.table.target, in, Causal::kNone, {});
  EXPECT_EQ(c.kernel, KernelId::kParallel);
  EXPECT_EQ(c.tiles.kv_splits, 4);
  in.heads = 32;  // 32 items already feed 2 threads: no split
  c = internal::ChooseAutoFrom(&loaded, loaded.table.target, in, Causal::kNone, {});
  EXPECT_EQ(c.kernel, KernelId::kParallel);
  EXPECT_EQ(c.tiles.kv_splits, internal::ChooseTiles(in).kv_splits);
  EXPECT_EQ(c.tiles.kv_block, 256);
  EXPECT_NE(c.reason.find("kv_splits from the default rule"), std::string::npos) << c.reason;
}

// ---- the report -------------------------------------------------------------------------

TEST(Report, IsSelfContainedHtmlWithAChartPerHeadDimAndThePeak) {
  const std::string html = attn_tune::RenderReport(ThisMachineTable());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("FMA peak 100"), std::string::npos);
  EXPECT_NE(html.find("d = 32"), std::string::npos);
  // Nothing fetched from elsewhere: no scripts, images or links.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

}  // namespace
}  // namespace attn::test
