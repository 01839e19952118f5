// The seed walkthrough's published numbers, reproduced stage by stage by the
// float64 reference and end to end by every kernel on every SIMD target.
//
// Every expected value below is a number the walkthrough publishes (see
// tools/walkthrough_data.h), checked to the precision it is published with:
// 2 decimals for raw scores, 3 for 0.099, whole percent for the shares.
// Nothing here is copied from the library's output.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "tools/walkthrough_data.h"

namespace attn::walkthrough {
namespace {

constexpr int kThe = 0, kCrane = 1, kLifted = 2, kSteel = 3;

// Published numbers.
constexpr double kCraneScores[kWords] = {0.14, 0.56, 0.70, 0.63};
constexpr double kTheScaled = 0.099;                        // 0.14 / sqrt(2)
constexpr int kCraneShares[kWords] = {19, 26, 28, 27};      // percent
constexpr int kCraneCausalShares[kWords] = {43, 57, 0, 0};  // percent

// True when x, rounded to `decimals` decimals, is the published value.
bool RoundsTo(double x, int decimals, double published) {
  const double f = std::pow(10.0, decimals);
  return std::llround(x * f) == std::llround(published * f);
}
// x as a whole percent.
long long Percent(double share) { return std::llround(share * 100.0); }

// Every kernel of the table, and auto.
const std::vector<KernelId>& AllKernels() {
  static const std::vector<KernelId> kernels = [] {
    std::vector<KernelId> ids;
    for (const KernelInfo& k : Kernels()) ids.push_back(k.id);
    ids.push_back(KernelId::kAuto);
    return ids;
  }();
  return kernels;
}

// Runs `fn(kernel, target)` for every kernel on every supported target, with
// the target forced; restores "auto" afterwards.
template <typename Fn>
void ForEveryKernelAndTarget(Fn fn) {
  const std::vector<std::string> targets = SupportedTargets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    ForceTarget(target);
    ASSERT_EQ(CurrentTarget(), target);
    for (KernelId kernel : AllKernels()) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(target + " " + KernelName(kernel) + " threads=" + std::to_string(threads));
        fn(kernel, threads);
      }
    }
  }
  ForceTarget("auto");
}

// ---- The five stages through the float64 reference ------------------------

TEST(Walkthrough, CraneScoresAreThePublishedOnes) {
  SentenceProblem sp(kCraneLiftedSteel);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  ASSERT_EQ(s.q_len, kWords);
  ASSERT_EQ(s.kv_len, kWords);
  for (int j = 0; j < kWords; ++j) {
    SCOPED_TRACE(kCraneLiftedSteel.words[j]);
    EXPECT_TRUE(RoundsTo(s.scores[kCrane * kWords + j], 2, kCraneScores[j]))
        << s.scores[kCrane * kWords + j] << " vs published " << kCraneScores[j];
  }
}

TEST(Walkthrough, ScalingTurns014Into0099) {
  SentenceProblem sp(kCraneLiftedSteel);
  EXPECT_FLOAT_EQ(sp.problem.Scale(), float(1.0 / std::sqrt(2.0)));
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  const double scaled = s.scaled[kCrane * kWords + kThe];
  EXPECT_TRUE(RoundsTo(scaled, 3, kTheScaled)) << scaled;
  // Without a mask the masked stage is the scaled stage.
  for (int ij = 0; ij < kWords * kWords; ++ij) EXPECT_EQ(s.masked[ij], s.scaled[ij]);
}

TEST(Walkthrough, SoftmaxSharesAre19262827) {
  SentenceProblem sp(kCraneLiftedSteel);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  double sum = 0.0;
  for (int j = 0; j < kWords; ++j) {
    SCOPED_TRACE(kCraneLiftedSteel.words[j]);
    const double w = s.weights[kCrane * kWords + j];
    EXPECT_EQ(Percent(w), kCraneShares[j]) << w;
    sum += w;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

// out = weights · V. With the published shares, crane's output is
// 0.26·(0.5,0.5) + 0.28·(1,0) + 0.27·(1,0) = (0.68, 0.13): the machine sense.
// The shares are published to whole percent, so the expected output is good
// to about ±0.01.
constexpr double kCraneOut[kDim] = {0.26 * 0.5 + 0.28 + 0.27, 0.26 * 0.5};

TEST(Walkthrough, MixGivesCraneTheMachineSense) {
  SentenceProblem sp(kCraneLiftedSteel);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  ASSERT_EQ(s.value_dim, kDim);
  for (int c = 0; c < kDim; ++c) EXPECT_NEAR(s.out[kCrane * kDim + c], kCraneOut[c], 0.01) << c;
  EXPECT_GT(s.out[kCrane * kDim + 0], s.out[kCrane * kDim + 1]);
}

TEST(Walkthrough, CausalMaskLeavesCrane43And57) {
  SentenceProblem sp(kCraneLiftedSteel, 1, false, std::nullopt, Causal::kBottomRight);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  const double inf = std::numeric_limits<double>::infinity();
  // crane (position 1) sees the and itself; lifted and steel are hidden.
  EXPECT_TRUE(std::isfinite(s.masked[kCrane * kWords + kThe]));
  EXPECT_TRUE(std::isfinite(s.masked[kCrane * kWords + kCrane]));
  EXPECT_EQ(s.masked[kCrane * kWords + kLifted], -inf);
  EXPECT_EQ(s.masked[kCrane * kWords + kSteel], -inf);
  for (int j = 0; j < kWords; ++j) {
    SCOPED_TRACE(kCraneLiftedSteel.words[j]);
    const double w = s.weights[kCrane * kWords + j];
    EXPECT_EQ(Percent(w), kCraneCausalShares[j]) << w;
    if (kCraneCausalShares[j] == 0) {
      EXPECT_EQ(w, 0.0);
    }
  }
  // The causal mask is top-left = bottom-right here (q_len == kv_len).
  SentenceProblem tl(kCraneLiftedSteel, 1, false, std::nullopt, Causal::kTopLeft);
  const reference::HeadStages t = reference::Stages(tl.problem, 0, 0);
  EXPECT_EQ(t.weights, s.weights);
  // The last row (steel) sees all four words: nothing masked, and its shares
  // are those of the unmasked problem.
  SentenceProblem unmasked(kCraneLiftedSteel);
  const reference::HeadStages u = reference::Stages(unmasked.problem, 0, 0);
  for (int j = 0; j < kWords; ++j) {
    EXPECT_TRUE(std::isfinite(s.masked[kSteel * kWords + j])) << j;
    EXPECT_GT(s.weights[kSteel * kWords + j], 0.0) << j;
    EXPECT_DOUBLE_EQ(s.weights[kSteel * kWords + j], u.weights[kSteel * kWords + j]) << j;
  }
  // The first row (the) sees only itself.
  EXPECT_EQ(s.weights[kThe * kWords + kThe], 1.0);
}

// ---- The same numbers through every kernel and SIMD target ----------------

// V = identity: every kernel's output row is its softmax weights row.
TEST(Walkthrough, EveryKernelGivesThePublishedShares) {
  for (Causal causal : {Causal::kNone, Causal::kBottomRight}) {
    const int* published = causal == Causal::kNone ? kCraneShares : kCraneCausalShares;
    SentenceProblem sp(kCraneLiftedSteel, 1, true, std::nullopt, causal);
    const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
    ForEveryKernelAndTarget([&](KernelId kernel, int threads) {
      std::fill(sp.out.begin(), sp.out.end(), -1.0f);
      Options o;
      o.kernel = kernel;
      o.threads = threads;
      attention(sp.problem, o);
      for (int j = 0; j < kWords; ++j) {
        const float w = sp.out[kCrane * kWords + j];
        EXPECT_EQ(Percent(w), published[j]) << "causal=" << int(causal) << " key " << j << ": " << w;
      }
      // Every row: the kernel's weights agree with the reference's.
      for (int ij = 0; ij < kWords * kWords; ++ij) {
        EXPECT_NEAR(sp.out[ij], s.weights[ij], 1e-6) << "causal=" << int(causal) << " " << ij;
      }
      if (causal != Causal::kNone) {
        EXPECT_EQ(sp.out[kCrane * kWords + kLifted], 0.0f);
        EXPECT_EQ(sp.out[kCrane * kWords + kSteel], 0.0f);
        for (int j = 0; j < kWords; ++j) EXPECT_GT(sp.out[kSteel * kWords + j], 0.0f) << j;
      }
    });
  }
}

TEST(Walkthrough, EveryKernelGivesCraneTheMachineSense) {
  SentenceProblem sp(kCraneLiftedSteel);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  ForEveryKernelAndTarget([&](KernelId kernel, int threads) {
    std::fill(sp.out.begin(), sp.out.end(), -1.0f);
    Options o;
    o.kernel = kernel;
    o.threads = threads;
    attention(sp.problem, o);
    for (int c = 0; c < kDim; ++c) EXPECT_NEAR(sp.out[kCrane * kDim + c], kCraneOut[c], 0.01) << c;
    for (int ic = 0; ic < kWords * kDim; ++ic) EXPECT_NEAR(sp.out[ic], s.out[ic], 1e-6) << ic;
  });
}

// "the crane ate fish": the same scores mirrored onto the animal axis, so
// crane's shares are again 19 26 28 27 % but its output is the animal sense,
// (0.13, 0.68).
TEST(Walkthrough, CraneAteFishLandsOnTheAnimalSide) {
  SentenceProblem sp(kCraneAteFish);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  for (int j = 0; j < kWords; ++j) {
    EXPECT_TRUE(RoundsTo(s.scores[kCrane * kWords + j], 2, kCraneScores[j])) << j;
    EXPECT_EQ(Percent(s.weights[kCrane * kWords + j]), kCraneShares[j]) << j;
  }
  // ate + fish take the majority of crane's attention.
  EXPECT_GT(s.weights[kCrane * kWords + 2] + s.weights[kCrane * kWords + 3], 0.5);
  ForEveryKernelAndTarget([&](KernelId kernel, int threads) {
    std::fill(sp.out.begin(), sp.out.end(), -1.0f);
    Options o;
    o.kernel = kernel;
    o.threads = threads;
    attention(sp.problem, o);
    EXPECT_NEAR(sp.out[kCrane * kDim + 0], kCraneOut[1], 0.01);
    EXPECT_NEAR(sp.out[kCrane * kDim + 1], kCraneOut[0], 0.01);
    EXPECT_GT(sp.out[kCrane * kDim + 1], sp.out[kCrane * kDim + 0]);
  });
}

// ---- d = 200: why the scale is there --------------------------------------

TEST(Walkthrough, D200ScoresAre100TimesLarger) {
  SentenceProblem sp(kCraneLiftedSteel, kRepeat);
  ASSERT_EQ(sp.problem.head_dim, 200);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  for (int j = 0; j < kWords; ++j) {
    // 0.14 -> 14, 0.56 -> 56, 0.70 -> 70, 0.63 -> 63.
    EXPECT_TRUE(RoundsTo(s.scores[kCrane * kWords + j], 0, 100 * kCraneScores[j]))
        << s.scores[kCrane * kWords + j];
  }
}

// Published: without the scaling one word takes 99.9 % of the weight; with
// scale 1/sqrt(200) "lifted" takes about half. (The exact values are
// lifted = 99.909 % unscaled and 49.99 % scaled: softmax(14, 56, 70, 63) and
// softmax(0.99, 3.96, 4.95, 4.455).)
TEST(Walkthrough, D200WithoutScalingOneWordTakes999Percent) {
  SentenceProblem sp(kCraneLiftedSteel, kRepeat, false, 1.0f);
  const reference::HeadStages s = reference::Stages(sp.problem, 0, 0);
  double top = 0.0;
  int top_j = -1;
  for (int j = 0; j < kWords; ++j) {
    if (s.weights[kCrane * kWords + j] > top) {
      top = s.weights[kCrane * kWords + j];
      top_j = j;
    }
  }
  EXPECT_EQ(top_j, kLifted);
  EXPECT_GE(top, 0.999);
  // With the scale, the published "about half".
  SentenceProblem scaled(kCraneLiftedSteel, kRepeat);
  EXPECT_FLOAT_EQ(scaled.problem.Scale(), float(1.0 / std::sqrt(200.0)));
  const reference::HeadStages t = reference::Stages(scaled.problem, 0, 0);
  const double lifted = t.weights[kCrane * kWords + kLifted];
  EXPECT_GE(lifted, 0.45);
  EXPECT_LE(lifted, 0.55);
  // The scaled d = 200 scores are 100 / sqrt(100) = 10x the scaled d = 2
  // ones, so the shares are sharper than at d = 2 (lifted: 28 %) but far
  // from one-hot.
  EXPECT_GT(lifted, 0.28);
}

TEST(Walkthrough, D200EveryKernelAgrees) {
  SentenceProblem unscaled(kCraneLiftedSteel, kRepeat, true, 1.0f);
  SentenceProblem scaled(kCraneLiftedSteel, kRepeat, true);
  ForEveryKernelAndTarget([&](KernelId kernel, int threads) {
    Options o;
    o.kernel = kernel;
    o.threads = threads;
    std::fill(unscaled.out.begin(), unscaled.out.end(), -1.0f);
    std::fill(scaled.out.begin(), scaled.out.end(), -1.0f);
    attention(unscaled.problem, o);
    attention(scaled.problem, o);
    EXPECT_GE(unscaled.out[kCrane * kWords + kLifted], 0.999f);
    const float lifted = scaled.out[kCrane * kWords + kLifted];
    EXPECT_GE(lifted, 0.45f);
    EXPECT_LE(lifted, 0.55f);
  });
}

// ---- attn-explain prints the published numbers ----------------------------

std::string RunExplain() {
#ifdef ATTN_EXPLAIN_PATH
  std::string output;
  FILE* pipe = popen(ATTN_EXPLAIN_PATH " 2>&1", "r");
  if (pipe == nullptr) return output;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  return output;
#else
  return {};
#endif
}

TEST(Walkthrough, ExplainToolPrintsThePublishedNumbers) {
#ifndef ATTN_EXPLAIN_PATH
  GTEST_SKIP() << "attn-explain is not built (ATTN_BUILD_TOOLS=OFF)";
#endif
  const std::string out = RunExplain();
  ASSERT_FALSE(out.empty());
  // Published figures, as the tool formats them.
  for (const char* figure :
       {"0.14", "0.56", "0.70", "0.63",           // crane's raw scores
        "0.099",                                  // 0.14 / sqrt(2)
        "19%", "26%", "28%", "27%",               // crane's shares
        "43%", "57%",                             // with the causal mask
        "14.00", "56.00", "70.00", "63.00",       // d = 200 raw scores
        "99.9", "the crane lifted steel", "the crane ate fish"}) {
    EXPECT_NE(out.find(figure), std::string::npos) << "missing " << figure << "\n" << out;
  }
  // Crane's row of the shares table, in order, for both sentences.
  const std::string shares = "crane  |     19%     26%     28%     27%";
  const size_t first = out.find(shares);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(shares, first + 1), std::string::npos) << "only one sentence has it";
  // Crane's row with the causal mask.
  EXPECT_NE(out.find("crane  |     43%     57%      0%      0%"), std::string::npos) << out;
  // The kernel auto ran, and the decode walk of the sentence's few rows.
  EXPECT_NE(out.find("auto ran kernel"), std::string::npos) << out;
  EXPECT_NE(out.find(", decode walk "), std::string::npos) << out;
  // crane's sense: machine in the first sentence, animal in the second.
  EXPECT_NE(out.find("(0.68, 0.13) is on the machine side"), std::string::npos) << out;
  EXPECT_NE(out.find("(0.13, 0.68) is on the animal side"), std::string::npos) << out;
  // d = 200: one word takes >= 99.9 % unscaled, lifted about half scaled.
  auto percent_after = [&](const std::string& prefix) {
    const size_t at = out.find(prefix);
    EXPECT_NE(at, std::string::npos) << "missing '" << prefix << "'\n" << out;
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + prefix.size()));
  };
  EXPECT_GE(percent_after("unscaled, crane gives "), 99.9);
  const double half = percent_after("\n  scaled, crane gives ");
  EXPECT_GE(half, 45.0);
  EXPECT_LE(half, 55.0);
  EXPECT_NE(out.find("% to \"lifted\": about half"), std::string::npos) << out;
  // The library's output agrees with the reference stages.
  EXPECT_NE(out.find("agree"), std::string::npos) << out;
  EXPECT_EQ(out.find("DISAGREE"), std::string::npos) << out;
}

}  // namespace
}  // namespace attn::walkthrough
