// The word vectors of the seed walkthrough, shared by attn-explain
// (tools/explain.cc) and tests/walkthrough_test.cc so that the tool prints
// exactly what the test checks.
//
// The walkthrough's published numbers for "the crane lifted steel" at d = 2:
//   crane's raw scores against the, crane, lifted, steel: 0.14 0.56 0.70 0.63
//   scaled by 1/sqrt(2): 0.14 -> 0.099
//   softmax shares: 19 % 26 % 28 % 27 %
//   causal mask: crane's row becomes 43 % 57 % 0 0; steel's row sees all four
//   d = 200 (every number repeated 100 times): scores 100x larger; without
//   scaling one word takes 99.9 %, with scale 1/sqrt(200) "lifted" takes
//   about half.
//
// The two feature axes are (machine / construction, bird / animal).
//
//   word     query       key         value
//   the      (0.1, 0.1)  (0.1, 0.1)  (0,   0)     a function word: near 0
//   crane    (0.7, 0.7)  (0.4, 0.4)  (0.5, 0.5)   ambiguous: machine or bird
//   lifted   (0.9, 0.1)  (0.9, 0.1)  (1,   0)     a machine verb
//   steel    (0.8, 0.1)  (0.8, 0.1)  (1,   0)     a construction material
//   ate      (0.1, 0.9)  (0.1, 0.9)  (0,   1)     an animal verb
//   fish     (0.1, 0.8)  (0.1, 0.8)  (0,   1)     food of a bird
//
// crane's query (0.7, 0.7) asks equally about both senses, so its raw scores
// are 0.7·(k0 + k1): the -> 0.7·0.2 = 0.14, crane -> 0.7·0.8 = 0.56,
// lifted -> 0.7·1.0 = 0.70, steel -> 0.7·0.9 = 0.63 (the published numbers).
// "ate" and "fish" are "lifted" and "steel" mirrored onto the animal axis,
// so in "the crane ate fish" crane's scores (and shares) are the same
// 0.14 0.56 0.70 0.63, but the 55 % that went to lifted + steel now goes to
// ate + fish, and crane's output (the mix of values) lands on the animal
// side: about (0.13, 0.68) instead of (0.68, 0.13).
// The other words' queries equal their keys; they only matter for the other
// rows of the tables.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace attn::walkthrough {

inline constexpr int kWords = 4;
inline constexpr int kDim = 2;     // d of the seed walkthrough
inline constexpr int kRepeat = 100;  // d = 200 demonstration: each number x100

struct Sentence {
  const char* text;
  std::array<const char*, kWords> words;
  float q[kWords][kDim];
  float k[kWords][kDim];
  float v[kWords][kDim];
};

inline const Sentence kCraneLiftedSteel = {
    "the crane lifted steel",
    {"the", "crane", "lifted", "steel"},
    {{0.1f, 0.1f}, {0.7f, 0.7f}, {0.9f, 0.1f}, {0.8f, 0.1f}},
    {{0.1f, 0.1f}, {0.4f, 0.4f}, {0.9f, 0.1f}, {0.8f, 0.1f}},
    {{0.0f, 0.0f}, {0.5f, 0.5f}, {1.0f, 0.0f}, {1.0f, 0.0f}},
};

inline const Sentence kCraneAteFish = {
    "the crane ate fish",
    {"the", "crane", "ate", "fish"},
    {{0.1f, 0.1f}, {0.7f, 0.7f}, {0.1f, 0.9f}, {0.1f, 0.8f}},
    {{0.1f, 0.1f}, {0.4f, 0.4f}, {0.1f, 0.9f}, {0.1f, 0.8f}},
    {{0.0f, 0.0f}, {0.5f, 0.5f}, {0.0f, 1.0f}, {0.0f, 1.0f}},
};

// One head of one sentence as an attn::Problem with its own buffers.
// repeat > 1 repeats every Q and K component `repeat` times (d = 2·repeat),
// which multiplies every raw score by `repeat`. identity_values replaces V
// by the 4x4 identity (value_dim 4), so that out row i = weights row i.
struct SentenceProblem {
  std::vector<float> q, k, v, out;
  Problem problem;

  SentenceProblem(const Sentence& s, int repeat = 1, bool identity_values = false,
                  std::optional<float> scale = std::nullopt,
                  Causal causal = Causal::kNone) {
    const int d = kDim * repeat;
    const int dv = identity_values ? kWords : kDim;
    for (int w = 0; w < kWords; ++w) {
      for (int c = 0; c < kDim; ++c) {
        for (int r = 0; r < repeat; ++r) {
          q.push_back(s.q[w][c]);
          k.push_back(s.k[w][c]);
        }
      }
      for (int c = 0; c < dv; ++c) {
        v.push_back(identity_values ? (c == w ? 1.0f : 0.0f) : s.v[w][c]);
      }
    }
    out.assign(size_t(kWords) * dv, 0.0f);
    problem.q_len = problem.kv_len = kWords;
    problem.head_dim = d;
    problem.value_dim = dv;
    problem.q = DenseBHTD(q.data(), 1, kWords, d);
    problem.k = DenseBHTD(k.data(), 1, kWords, d);
    problem.v = DenseBHTD(v.data(), 1, kWords, dv);
    problem.out = DenseBHTD(out.data(), 1, kWords, dv);
    problem.scale = scale;
    problem.causal = causal;
  }
  // The Problem points into this object's vectors.
  SentenceProblem(const SentenceProblem&) = delete;
  SentenceProblem& operator=(const SentenceProblem&) = delete;
};

}  // namespace attn::walkthrough
