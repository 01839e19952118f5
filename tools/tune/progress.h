// attn-tune's progress on stderr: a redrawn bar with an ETA on a terminal,
// one plain line per finished shape otherwise (logs, CI, pipes).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace attn_tune {

class Progress {
 public:
  // `interactive`: draw a bar (stderr is a terminal).
  Progress(size_t shapes, bool interactive);
  // A shape starts; `label` names it.
  void StartShape(size_t index, const std::string& label);
  // Candidate `candidate` of `candidates` of the current shape starts.
  void Candidate(size_t candidate, size_t candidates);
  // The current shape is done; `summary` is its one-line result.
  void FinishShape(const std::string& summary, double eta_seconds);
  // Clears the bar (before the table is printed).
  void Finish();

  double ElapsedSeconds() const;
  static std::string Clock(double seconds);  // "1:05"

 private:
  void Draw();
  size_t shapes_;
  bool interactive_;
  size_t index_ = 0;
  size_t candidate_ = 0, candidates_ = 1;
  double eta_ = -1.0;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace attn_tune
