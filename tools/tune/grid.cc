#include "tools/tune/grid.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace attn_tune {
namespace {

const std::vector<int64_t> kHeadDims = {32, 64, 80, 96, 128, 256};

void SortCheapestFirst(std::vector<TuneShape>& shapes) {
  // Cheap shapes first: the budget share of each later shape then grows by
  // what the cheap ones left unused, and a cut-short run has tuned the most
  // shapes it could.
  std::stable_sort(shapes.begin(), shapes.end(), [](const TuneShape& a, const TuneShape& b) {
    return ShapeFlops(a, 1) < ShapeFlops(b, 1);
  });
}

int64_t ParseLength(const std::string& item, const std::string& text, const char* what) {
  // Decimal digits only (CLI11's lexical_cast would read 064 as octal).
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1 ||
      v > (int64_t{1} << 24)) {
    throw std::invalid_argument("shape '" + item + "': " + what + " must be an integer in [1, " +
                                std::to_string(int64_t{1} << 24) + "], got '" + text + "'");
  }
  return v;
}

}  // namespace

std::vector<TuneShape> DefaultGrid(const std::vector<int>& threads) {
  std::vector<TuneShape> shapes;
  for (int t : threads) {
    for (int64_t d : kHeadDims) {
      for (int64_t tk : {256, 1024, 4096, 16384}) shapes.push_back({1, tk, d, false, t});
      for (int64_t tq : {16, 64, 256, 1024, 4096, 16384}) {
        for (bool causal : {false, true}) shapes.push_back({tq, tq, d, causal, t});
      }
    }
  }
  SortCheapestFirst(shapes);
  return shapes;
}

std::vector<TuneShape> QuickGrid(const std::vector<int>& threads) {
  std::vector<TuneShape> shapes;
  for (int t : threads) {
    for (int64_t d : {64, 128}) {
      shapes.push_back({1, 2048, d, false, t});
      for (int64_t tq : {128, 512, 2048}) shapes.push_back({tq, tq, d, false, t});
      shapes.push_back({2048, 2048, d, true, t});
    }
  }
  SortCheapestFirst(shapes);
  return shapes;
}

std::vector<TuneShape> ParseShapes(const std::string& list, const std::vector<int>& threads) {
  std::vector<TuneShape> shapes;
  std::vector<std::string> items = list.empty() ? std::vector<std::string>{}
                                                : CLI::detail::split(list, ',');
  // (split drops a trailing empty item: "a," is "a", as before; "a,,b" is an error)
  for (const std::string& item : items) {
    if (item.empty()) throw std::invalid_argument("shape list '" + list + "' has an empty item");
    const std::vector<std::string> parts = CLI::detail::split(item, ':');
    const size_t colons = size_t(std::count(item.begin(), item.end(), ':'));
    if (parts.size() < 3 || parts.size() > 4 || colons + 1 != parts.size()) {
      throw std::invalid_argument("shape '" + item + "' must be Tq:Tk:d or Tq:Tk:d:causal");
    }
    TuneShape s;
    s.q_len = ParseLength(item, parts[0], "Tq");
    s.kv_len = ParseLength(item, parts[1], "Tk");
    s.head_dim = ParseLength(item, parts[2], "d");
    if (parts.size() == 4) {
      const std::string& c = parts[3];
      if (c == "1" || c == "true" || c == "causal") {
        s.causal = true;
      } else if (c != "0" && c != "false") {
        throw std::invalid_argument("shape '" + item + "': causal must be 0 or 1, got '" + c + "'");
      }
    }
    if (s.causal && s.q_len > s.kv_len) {
      throw std::invalid_argument(
          "shape '" + item + "': a causal shape needs Tq <= Tk (the queries are the newest " +
          "keys), got Tq " + parts[0] + " > Tk " + parts[1]);
    }
    for (int t : threads) {
      s.threads = t;
      shapes.push_back(s);
    }
  }
  if (shapes.empty()) throw std::invalid_argument("shape list '" + list + "' names no shape");
  return shapes;
}

attn::internal::TuningEntry ToEntry(const ShapeResult& r, double peak_gflops) {
  attn::internal::TuningEntry e;
  e.shape.q_len = r.shape.q_len;
  e.shape.kv_len = r.shape.kv_len;
  e.shape.head_dim = r.shape.head_dim;
  e.shape.causal = r.shape.causal;
  e.shape.threads = r.shape.threads;
  e.shape.kv_type = r.shape.kv_type;
  e.shape.q_type = r.shape.q_type;
  const AttnCandidate& w = r.Winner();
  e.kernel = w.kernel;
  e.dot_path = w.dot_path;
  e.tiles = w.tiles;
  attn::internal::TunedFigures& f = e.figures;
  f.seconds = r.WinnerSeconds();
  f.gflops = r.Gflops(f.seconds);
  f.peak_fraction = peak_gflops > 0 ? f.gflops / peak_gflops : 0.0;
  f.default_seconds = r.DefaultSeconds();
  f.naive_seconds = r.naive_seconds;
  f.naive_extrapolated = r.naive_extrapolated;
  f.speedup_vs_default = f.default_seconds > 0 ? f.default_seconds / f.seconds : 0.0;
  f.speedup_vs_naive = f.naive_seconds > 0 ? f.naive_seconds / f.seconds : 0.0;
  for (const auto& [name, seconds] : r.KernelBestSeconds()) e.kernel_gflops[name] = r.Gflops(seconds);
  if (!e.kernel_gflops.count("naive") && r.naive_seconds > 0) {
    e.kernel_gflops["naive"] = r.Gflops(r.naive_seconds);
  }
  return e;
}

}  // namespace attn_tune
