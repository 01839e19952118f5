#include "tools/tune/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attn_tune {

Progress::Progress(size_t shapes, bool interactive)
    : shapes_(std::max<size_t>(1, shapes)),
      interactive_(interactive),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double Progress::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::Clock(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

void Progress::StartShape(size_t index, const std::string& label) {
  index_ = index;
  label_ = label;
  candidate_ = 0;
  candidates_ = 1;
  Draw();
}

void Progress::Candidate(size_t candidate, size_t candidates) {
  candidate_ = candidate;
  candidates_ = std::max<size_t>(1, candidates);
  // Redrawing costs a write per candidate; 10 per second is plenty.
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_draw_).count() >= 0.1) Draw();
}

void Progress::FinishShape(const std::string& summary, double eta_seconds) {
  eta_ = eta_seconds;
  if (interactive_) {
    // The finished shape scrolls up above the bar.
    std::fprintf(stderr, "\r\033[K  %s\n", summary.c_str());
    index_ += 1;
    candidate_ = 0;
    label_.clear();
    Draw();
  } else {
    std::fprintf(stderr, "[%zu/%zu] %s  (elapsed %s, ETA ~%s)\n", index_ + 1, shapes_,
                 summary.c_str(), Clock(ElapsedSeconds()).c_str(), Clock(eta_).c_str());
  }
}

void Progress::Finish() {
  if (interactive_) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void Progress::Draw() {
  if (!interactive_) return;
  last_draw_ = std::chrono::steady_clock::now();
  constexpr int kWidth = 30;
  const double done = (double(index_) + double(candidate_) / double(candidates_)) / double(shapes_);
  const int filled = std::clamp(int(done * kWidth), 0, kWidth);
  const std::string eta = eta_ < 0 ? "?" : "~" + Clock(eta_);
  std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %-28s %s elapsed, ETA %s",
               std::string(size_t(filled), '#').c_str(),
               std::string(size_t(kWidth - filled), '.').c_str(), std::min(index_ + 1, shapes_),
               shapes_, label_.c_str(), Clock(ElapsedSeconds()).c_str(), eta.c_str());
  std::fflush(stderr);
}

}  // namespace attn_tune
