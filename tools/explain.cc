// attn-explain: the seed walkthrough, printed stage by stage from the library.
//
//   score      S = Q·Kᵀ                      [T_q x T_k]
//   scale      S · scale   (1/sqrt(d))       [T_q x T_k]
//   mask       + causal mask (-inf above the diagonal)
//   normalize  softmax per row (shares, %)   [T_q x T_k]
//   mix        out = weights · V              [T_q x d_v]
//
// Every number comes from the library: the stages from the float64
// reference (attn::reference::Stages), the final output also from
// attn::attention (float32, the auto kernel on the best SIMD target), with
// the largest difference between the two printed as the check that they
// agree. The word vectors are in tools/walkthrough_data.h, shared with
// tests/walkthrough_test.cc.
//
// Usage: attn-explain   (no arguments)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"  // ExplainChoice
#include "reference/reference.h"
#include "tools/walkthrough_data.h"

namespace attn::walkthrough {
namespace {

constexpr int kLabelWidth = 7;
constexpr int kCellWidth = 8;
const std::vector<std::string> kFeatureNames = {"machine", "animal"};

using Format = std::function<std::string(double)>;

std::string Fixed(double x, int decimals) {
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  return fmt::format("{:.{}f}", x, decimals);
}
Format Decimals(int decimals) {
  return [decimals](double x) { return Fixed(x, decimals); };
}
Format Percent(int decimals) {
  return [decimals](double x) { return fmt::format("{:.{}f}%", x * 100.0, decimals); };
}

std::vector<std::string> Words(const Sentence& s) { return {s.words.begin(), s.words.end()}; }

// A matrix as a table: a title line with its shape, column labels, then one
// labelled row per query word.
void PrintMatrix(const std::string& title, const std::vector<std::string>& rows,
                 const std::vector<std::string>& cols, const double* data,
                 const Format& format) {
  fmt::print("  {}  [{} x {}]\n", title, rows.size(), cols.size());
  std::string line = fmt::format("    {:<{}}|", "", kLabelWidth);
  for (const std::string& c : cols) line += fmt::format("{:>{}}", c, kCellWidth);
  fmt::print("{}\n    {}+{}\n", line, std::string(kLabelWidth, '-'),
             std::string(cols.size() * kCellWidth, '-'));
  for (size_t i = 0; i < rows.size(); ++i) {
    line = fmt::format("    {:<{}}|", rows[i], kLabelWidth);
    for (size_t j = 0; j < cols.size(); ++j) {
      line += fmt::format("{:>{}}", format(data[i * cols.size() + j]), kCellWidth);
    }
    fmt::print("{}\n", line);
  }
  fmt::print("\n");
}

void PrintMatrix(const std::string& title, const std::vector<std::string>& rows,
                 const std::vector<std::string>& cols, const float* data,
                 const Format& format) {
  std::vector<double> d(data, data + rows.size() * cols.size());
  PrintMatrix(title, rows, cols, d.data(), format);
}

// Runs attn::attention on the problem and returns the largest difference to
// the reference's output.
double LibraryVersusReference(SentenceProblem& sp, const std::vector<double>& ref) {
  std::fill(sp.out.begin(), sp.out.end(), std::nanf(""));
  attention(sp.problem);
  double max_diff = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(double(sp.out[i]) - ref[i]);
    max_diff = std::isnan(diff) ? INFINITY : std::max(max_diff, diff);
  }
  return max_diff;
}

void PrintAgreement(double max_diff) {
  // float32 kernels against the float64 reference on values of order 1
  // (scores up to 70 at d = 200 unscaled: a few 1e-6 of float32 rounding).
  const bool agree = max_diff <= 1e-4;
  fmt::print("  max |attn::attention - reference| = {:.1e}: {}\n\n", max_diff,
             agree ? "they agree" : "DISAGREE");
}

void ExplainSentence(const Sentence& s, Causal causal) {
  const std::vector<std::string> words = Words(s);
  SentenceProblem sp(s, 1, false, std::nullopt, causal);
  const reference::HeadStages st = reference::Stages(sp.problem, 0, 0);
  const bool masked = causal != Causal::kNone;
  fmt::print("--- \"{}\", d = {}, {} ---\n\n", s.text, kDim,
             masked ? "with the causal mask" : "no mask");

  PrintMatrix("1. score      S = Q·Kᵀ", words, words, st.scores.data(), Decimals(2));
  PrintMatrix(fmt::format("2. scale      S · 1/sqrt({}) = S · {:.4f}", kDim, sp.problem.Scale()),
              words, words, st.scaled.data(), Decimals(3));
  if (masked) {
    PrintMatrix("3. mask       causal: word i sees words 0..i (-inf hides a word)", words, words,
                st.masked.data(), Decimals(3));
  } else {
    PrintMatrix("3. mask       none: every word sees every word (masked = scaled)", words, words,
                st.masked.data(), Decimals(3));
  }
  PrintMatrix("4. normalize  softmax of each row (shares)", words, words, st.weights.data(),
              Percent(0));
  PrintMatrix("5. mix        out = weights · V", words, kFeatureNames, st.out.data(), Decimals(3));

  const double diff = LibraryVersusReference(sp, st.out);
  PrintMatrix("   attn::attention (float32)", words, kFeatureNames, sp.out.data(), Decimals(3));
  // What auto ran: a sentence's few query rows are a narrow view, which
  // takes a decode walk (docs/decode-walks.md).
  const AutoChoice choice = ExplainChoice(sp.problem);
  fmt::print("  auto ran kernel {}, {}{}\n", KernelName(choice.kernel), choice.path,
             choice.decode_walk.empty() ? "" : ", decode walk " + choice.decode_walk);
  PrintAgreement(diff);

  const double* w = &st.weights[1 * kWords];
  const double* o = &st.out[1 * kDim];
  std::string shares;
  for (int j = 0; j < kWords; ++j) {
    shares += fmt::format("{}{} {:.0f}%", j ? ", " : "", words[j], w[j] * 100.0);
  }
  fmt::print("  crane attends to: {}\n", shares);
  if (std::fabs(o[0] - o[1]) < 0.05) {
    fmt::print("  crane's output ({:.2f}, {:.2f}) is undecided: it cannot see the words "
               "after it\n\n", o[0], o[1]);
  } else {
    fmt::print("  crane's output ({:.2f}, {:.2f}) is on the {} side\n\n", o[0], o[1],
               o[0] > o[1] ? "machine" : "animal");
  }
}

void ExplainInputs(const Sentence& s) {
  const std::vector<std::string> words = Words(s);
  fmt::print("=== \"{}\" ===\n\n", s.text);
  fmt::print("  features: ({}, {})\n\n", kFeatureNames[0], kFeatureNames[1]);
  PrintMatrix("Q (queries)", words, kFeatureNames, &s.q[0][0], Decimals(2));
  PrintMatrix("K (keys)", words, kFeatureNames, &s.k[0][0], Decimals(2));
  PrintMatrix("V (values)", words, kFeatureNames, &s.v[0][0], Decimals(2));
}

// d = 200: every number repeated 100 times, so every score is 100x larger.
void ExplainScaling(const Sentence& s) {
  const std::vector<std::string> words = Words(s);
  const int d = kDim * kRepeat;
  fmt::print("=== Why scale: \"{}\" at d = {} (each number repeated {} times) ===\n\n", s.text, d,
             kRepeat);
  SentenceProblem unscaled(s, kRepeat, true, 1.0f);
  SentenceProblem scaled(s, kRepeat, true);
  const reference::HeadStages u = reference::Stages(unscaled.problem, 0, 0);
  const reference::HeadStages t = reference::Stages(scaled.problem, 0, 0);
  PrintMatrix(fmt::format("score  S = Q·Kᵀ at d = {} (100x the d = 2 scores)", d), words, words,
              u.scores.data(), Decimals(2));
  PrintMatrix("normalize WITHOUT scaling (scale = 1)", words, words, u.weights.data(),
              Percent(1));
  PrintAgreement(LibraryVersusReference(unscaled, u.weights));
  PrintMatrix(fmt::format("normalize WITH scaling (scale = 1/sqrt({}) = {:.4f})", d,
                          scaled.problem.Scale()),
              words, words, t.weights.data(), Percent(1));
  PrintAgreement(LibraryVersusReference(scaled, t.weights));
  const double* wu = &u.weights[1 * kWords];
  const double* wt = &t.weights[1 * kWords];
  const int top = int(std::max_element(wu, wu + kWords) - wu);
  fmt::print("  unscaled, crane gives {:.1f}% to \"{}\": softmax is saturated (one-hot)\n",
             wu[top] * 100.0, words[top]);
  fmt::print("  scaled, crane gives {:.1f}% to \"{}\": about half\n\n", wt[2] * 100.0, words[2]);
}

}  // namespace
}  // namespace attn::walkthrough

int main() {
  using namespace attn::walkthrough;
  try {
    fmt::print("attn-explain: scaled dot-product attention, stage by stage "
               "(SIMD target {})\n\n",
               attn::CurrentTarget());
    for (const Sentence* s : {&kCraneLiftedSteel, &kCraneAteFish}) {
      ExplainInputs(*s);
      ExplainSentence(*s, attn::Causal::kNone);
      ExplainSentence(*s, attn::Causal::kBottomRight);
    }
    ExplainScaling(kCraneLiftedSteel);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn-explain: %s\n", e.what());
    return 1;
  }
  return 0;
}
