// attn-tune: times every attention kernel and tile configuration on this
// machine for a grid of shapes, prints the winners, and writes the tuning
// file that KernelId::kAuto follows (plus an HTML/SVG report).
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "bench/peak.h"
#include "dispatch/tuning.h"
#include "tools/tune/grid.h"
#include "tools/tune/progress.h"
#include "tools/tune/report.h"
#include "tools/tune/shape_tuner.h"

namespace {

namespace fs = std::filesystem;
using attn::internal::TuningEntry;
using attn::internal::TuningTable;
using attn_tune::ShapeResult;
using attn_tune::TuneShape;

constexpr double kQuickBudgetSeconds = 40.0;
constexpr double kDefaultBudgetSeconds = 300.0;

struct Args {
  bool quick = false;
  double budget = 0.0;
  std::string output;
  std::string report;
  std::vector<int> threads;
  std::string shapes;
  int heads = 1;
  std::vector<int64_t> explain;
  std::vector<int64_t> window;  // with --explain: left, right (-1: unbounded)
  bool causal = false;
  bool verbose = false;
  std::string verify;
  std::string kv_dtype = "f32";
  std::string dtype;  // "bf16": Q, K and V bf16 (overrides kv_dtype)
};

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string ConfigText(const attn_tune::AttnCandidate& c) {
  const std::string label = c.Label();
  const size_t space = label.find(' ');
  return space == std::string::npos ? "-" : label.substr(space + 1);
}

// Writes through a temporary file and a rename, so a library loading the
// table at the same moment sees the old file or the new one, never half.
void WriteAtomically(const std::string& path, const std::string& text) {
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      throw std::runtime_error("cannot write '" + temp + "': " + std::strerror(errno));
    }
  }
  fs::rename(temp, target);
}

int Explain(const Args& args, bool output_given) {
  if (output_given) {
    const attn::TuningStatus status = attn::LoadTuningFile(args.output);
    if (!status.loaded) fmt::print("(no table loaded from {})\n", args.output);
  } else {
    const attn::TuningStatus status = attn::CurrentTuning();
    fmt::print("tuning table: {}\n", status.loaded ? status.path : "none loaded");
  }
  const int threads = args.threads.empty() ? 0 : args.threads.front();
  attn::Problem shape;
  shape.q_len = args.explain[0];
  shape.kv_len = args.explain[1];
  shape.head_dim = args.explain[2];
  shape.causal = args.causal ? attn::Causal::kBottomRight : attn::Causal::kNone;
  shape.k.dtype = shape.v.dtype = attn::ParseDType(args.kv_dtype);
  if (args.dtype == "bf16") shape.q.dtype = shape.k.dtype = shape.v.dtype = attn::DType::kBF16;
  if (args.window.size() == 2) shape.window = attn::Window{args.window[0], args.window[1]};
  attn::Options options;
  options.threads = threads;
  const attn::AutoChoice c = attn::ExplainChoice(shape, options);
  const std::string window_text =
      args.window.size() == 2
          ? fmt::format(" window ({}, {})", args.window[0], args.window[1])
          : std::string();
  fmt::print("auto for T_q={} T_k={} d={}{}{} with {} thread{}:\n", args.explain[0],
             args.explain[1], args.explain[2], args.causal ? " causal" : "", window_text, c.threads,
             c.threads == 1 ? "" : "s");
  // The key the table is searched with (a window by its span: WindowSpan).
  const attn::internal::ShapeKey key = attn::internal::MakeShapeKey(
      shape.q_len, shape.kv_len, shape.head_dim, shape.causal, c.threads, shape.k.dtype,
      shape.q.dtype, attn::internal::WindowSpan(shape.window, shape.causal, shape.kv_len));
  fmt::print("  key     {}\n", attn::internal::ShapeText(key));
  fmt::print("  kernel  {}\n", attn::KernelName(c.kernel));
  fmt::print("  tiles   q_block={} kv_block={} kv_splits={}\n", c.tiles.q_block, c.tiles.kv_block,
             c.tiles.kv_splits);
  fmt::print("  source  {}\n", c.source);
  fmt::print("  why     {}\n", c.reason);
  fmt::print("  path    {}\n", c.path);
  if (!c.decode_walk.empty()) fmt::print("  walk    {}\n", c.decode_walk);
  return 0;
}

// --verify FILE: every entry of a table against the untuned default on its
// shape, alternated pairs (tuned first, then default first), the median of
// the per-pair speed-ups. A table that makes `auto` slower than untuned
// anywhere shows here; exit 1 if a shape is slower by more than 5%.
int Verify(const Args& args) {
  std::ifstream in(args.verify, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "attn-tune: cannot open {}\n", args.verify);
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string why;
  const std::optional<TuningTable> table = attn::internal::ParseTuning(text, &why);
  if (!table) {
    fmt::print(stderr, "attn-tune: {}: {}\n", args.verify, why);
    return 2;
  }
  // A table `auto` would ignore here (another CPU or target) is no evidence.
  why = attn::internal::CheckTuningMachine(*table, attn::internal::CpuModel(), attn::CurrentTarget());
  if (!why.empty()) {
    fmt::print(stderr, "attn-tune: {} is not used by auto here: {}\n", args.verify, why);
    return 2;
  }
  if (table->entries.empty()) {
    fmt::print(stderr, "attn-tune: {} has no entries\n", args.verify);
    return 2;
  }
  attn::ClearTuning();  // the default is what auto runs without a table
  constexpr int kPairs = 7;
  constexpr double kSampleSeconds = 0.02;
  constexpr double kWorstAllowed = 0.95;
  fmt::print("attn-tune: {} entries of {} (target {}) against the untuned default, {} pairs of "
             ">= {:.0f} ms samples each, load average {:.2f}\n",
             table->entries.size(), args.verify, table->target, kPairs, kSampleSeconds * 1e3,
             [] {
               double load = 0.0;
               return getloadavg(&load, 1) == 1 ? load : -1.0;
             }());
  fmt::print("{:<28} {:<30} {:<30} {:>8} {:>8} {:>8}\n", "shape", "table", "default",
             "GFLOP/s", "default", "speedup");
  double worst = std::numeric_limits<double>::infinity();
  for (const TuningEntry& e : table->entries) {
    if (e.shape.window > 0) {
      // attn-tune tunes no windowed shapes; one in a table came from
      // elsewhere, and its window's sides are not in the key to rerun it.
      fmt::print("{:<28} windowed (span {}): not timed\n",
                 attn::internal::ShapeText(e.shape), e.shape.window);
      continue;
    }
    const attn_tune::TuneShape shape{e.shape.q_len, e.shape.kv_len, e.shape.head_dim,
                                     e.shape.causal, e.shape.threads, e.shape.kv_type,
                                     e.shape.q_type};
    const attn_tune::AttnCandidate tuned{e.kernel, e.tiles, false, {}, e.dot_path};
    if (std::string declined;
        !attn::KernelSupports(e.kernel, attn_tune::ShapeOnly(shape, table->heads), &declined)) {
      // auto falls back to the default here too: nothing to compare.
      fmt::print("{:<28} {:<30} declined ({}): auto runs the default\n", shape.Name(),
                 tuned.Label(), declined);
      continue;
    }
    const attn_tune::DefaultComparison c =
        attn_tune::CompareWithDefault(shape, table->heads, tuned, kPairs, kSampleSeconds);
    worst = std::min(worst, c.median_ratio);
    fmt::print("{:<28} {:<30} {:<30} {:>8.1f} {:>8.1f} {:>7.3f}x\n", shape.Name(), tuned.Label(),
               c.default_candidate.Label(), c.tuned_gflops, c.default_gflops, c.median_ratio);
  }
  fmt::print("attn-tune: worst speed-up over the default {:.3f}x (allowed: {:.2f}x)\n", worst,
             kWorstAllowed);
  return worst >= kWorstAllowed ? 0 : 1;
}

// The table to write: this run's entries, plus those of an existing file
// for this machine that this run did not re-tune (so tuning a few extra
// shapes does not throw away the rest).
TuningTable Merge(TuningTable fresh, const std::string& path, int* kept) {
  *kept = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return fresh;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string why;
  const std::optional<TuningTable> old = attn::internal::ParseTuning(text, &why);
  if (!old || !attn::internal::CheckTuningMachine(*old, fresh.cpu_model, fresh.target).empty() ||
      old->heads != fresh.heads) {
    return fresh;  // a file for elsewhere (or broken): replaced whole
  }
  for (const TuningEntry& e : old->entries) {
    const bool retuned = std::any_of(fresh.entries.begin(), fresh.entries.end(), [&](const TuningEntry& f) {
      return f.shape.q_len == e.shape.q_len && f.shape.kv_len == e.shape.kv_len &&
             f.shape.head_dim == e.shape.head_dim && f.shape.causal == e.shape.causal &&
             f.shape.threads == e.shape.threads && f.shape.kv_type == e.shape.kv_type &&
             f.shape.q_type == e.shape.q_type && f.shape.window == e.shape.window;
    });
    if (!retuned) {
      fresh.entries.push_back(e);
      *kept += 1;
    }
  }
  for (const auto& [threads, peak] : old->peak_gflops) fresh.peak_gflops.emplace(threads, peak);
  std::stable_sort(fresh.entries.begin(), fresh.entries.end(), [](const TuningEntry& a, const TuningEntry& b) {
    return std::tie(a.shape.q_type, a.shape.kv_type, a.shape.threads, a.shape.causal,
                    a.shape.window, a.shape.head_dim, a.shape.q_len, a.shape.kv_len) <
           std::tie(b.shape.q_type, b.shape.kv_type, b.shape.threads, b.shape.causal,
                    b.shape.window, b.shape.head_dim, b.shape.q_len, b.shape.kv_len);
  });
  return fresh;
}

void PrintTable(const std::vector<ShapeResult>& results, const std::map<int, double>& peaks) {
  const std::string header =
      fmt::format("{:<29} {:<10} {:<22} {:>8} {:>6} {:>10} {:>9}", "shape", "winner", "config",
                  "GFLOP/s", "peak", "vs default", "vs naive");
  fmt::print("{}\n{}\n", header, std::string(header.size(), '-'));
  for (const ShapeResult& r : results) {
    if (!r.HasWinner()) {
      fmt::print("{:<29} no correct candidate\n", r.shape.Name());
      continue;
    }
    const double seconds = r.WinnerSeconds();
    const double gflops = r.Gflops(seconds);
    const auto peak = peaks.find(r.shape.threads);
    const double fraction = peak != peaks.end() && peak->second > 0 ? gflops / peak->second : 0.0;
    const double vs_default = r.DefaultSeconds() > 0 ? r.DefaultSeconds() / seconds : 0.0;
    const double vs_naive = r.naive_seconds / seconds;
    fmt::print("{:<29} {:<10} {:<22} {:>8.1f} {:>5.0f}% {:>9.2f}x {:>8}\n", r.shape.Name(),
               attn::KernelName(r.Winner().kernel), ConfigText(r.Winner()), gflops, 100 * fraction,
               vs_default,
               fmt::format("{}{:.0f}x", r.naive_extrapolated ? "~" : "", vs_naive));
  }
  fmt::print("(~: naive timed on sampled rows, scaled by FLOPs; peak: measured FP32 FMA peak at "
             "the shape's thread count)\n");
}

int Tune(const Args& args) {
  const double budget = args.budget > 0 ? args.budget
                        : args.quick    ? kQuickBudgetSeconds
                                        : kDefaultBudgetSeconds;
  std::vector<int> threads = args.threads;
  if (threads.empty()) threads.push_back(omp_get_max_threads());
  std::vector<TuneShape> shapes;
  try {
    shapes = !args.shapes.empty() ? attn_tune::ParseShapes(args.shapes, threads)
             : args.quick        ? attn_tune::QuickGrid(threads)
                                 : attn_tune::DefaultGrid(threads);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "attn-tune: {}\n", e.what());
    return 2;
  }
  for (TuneShape& s : shapes) {
    s.kv_type = attn::ParseDType(args.kv_dtype);
    if (args.dtype == "bf16") s.q_type = s.kv_type = attn::DType::kBF16;
  }
  // The untuned default must be what `auto` does without any table.
  attn::ClearTuning();
  const std::string target = attn::CurrentTarget();
  fmt::print(stderr, "attn-tune: {} shape{}, budget {:.0f} s, CPU '{}', target {}, {} head{}\n",
             shapes.size(), shapes.size() == 1 ? "" : "s", budget, attn::internal::CpuModel(),
             target, args.heads, args.heads == 1 ? "" : "s");
  // Timings are only as good as the machine is quiet; multi-threaded
  // candidates suffer most (a thread that waits for a core stalls them all).
  double load[1] = {0.0};
  if (getloadavg(load, 1) == 1 && load[0] > 0.75 * omp_get_num_procs()) {
    fmt::print(stderr,
               "attn-tune: warning: load average {:.1f} on {} cores: other processes will disturb "
               "the timings (tune on a quiet machine for a table worth keeping)\n",
               load[0], omp_get_num_procs());
  }
  std::map<int, double> peaks;
  for (int t : std::set<int>(threads.begin(), threads.end())) {
    peaks[t] = attn_bench::MeasurePeak(t, args.quick ? 0.1 : 0.2, args.quick ? 2 : 4).gflops;
    fmt::print(stderr, "attn-tune: FP32 FMA peak with {} thread{}: {:.1f} GFLOP/s\n", t,
               t == 1 ? "" : "s", peaks[t]);
  }

  attn_tune::Progress progress(shapes.size(), isatty(fileno(stderr)) != 0);
  std::vector<ShapeResult> results;
  std::vector<std::string> wrong;
  // Seconds per (candidate x FLOP) seen so far: the ETA's cost model.
  double work_done = 0.0, work_seconds = 0.0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const TuneShape& shape = shapes[i];
    const double left = budget - progress.ElapsedSeconds();
    attn_tune::ShapeTuneSettings settings;
    settings.quick = args.quick;
    settings.heads = args.heads;
    // Rounds; the head to head keeps its 5 pairs (10 for a challenger that
    // runs fewer threads than the default: see tools/tune/tuner.h).
    settings.tuner.max_repeats = args.quick ? 3 : 5;
    // Over budget, one sample will do: at T = 16k a call takes seconds, and
    // the check run before it has already warmed the caches.
    settings.tuner.min_repeats = 1;
    settings.tuner.budget_seconds = std::max(0.05, left / double(shapes.size() - i));
    settings.min_sample_seconds = args.quick ? 0.01 : 0.005;
    settings.on_candidate = [&](size_t c, size_t n) { progress.Candidate(c, n); };
    progress.StartShape(i, shape.Name());
    const double shape_start = progress.ElapsedSeconds();
    std::vector<attn_tune::AttnCandidate> candidates = attn_tune::EnumerateCandidates(
        shape, args.heads, args.quick, attn_tune::NaiveIsCandidate(shape, args.heads));
    const size_t candidate_count = candidates.size();
    ShapeResult r = attn_tune::TuneOneShape(shape, settings, std::move(candidates));
    const double shape_seconds = progress.ElapsedSeconds() - shape_start;
    work_done += double(candidate_count) * r.flops;
    work_seconds += shape_seconds;

    for (size_t c = 0; c < r.candidates.size(); ++c) {
      const attn_tune::Measurement& m = r.tuning.candidates[c];
      if (m.verdict == attn_tune::Verdict::kWrong) {
        wrong.push_back(shape.Name() + ": " + r.candidates[c].Label() + ": " + m.reason);
      }
      if (args.verbose) {
        fmt::print(stderr, "    {:<34} {:<17} score {:9.3f} ms  fastest {:9.3f} ms  {} sample{}  {}\n",
                   r.candidates[c].Label() + (r.candidates[c].is_default ? " (default)" : ""),
                   attn_tune::VerdictName(m.verdict), 1e3 * m.score, 1e3 * m.best,
                   m.samples.size(), m.samples.size() == 1 ? "" : "s", m.reason);
      }
    }
    if (args.verbose) {
      fmt::print(stderr,
                 "    checked {} rows per head against the float64 reference: largest accepted "
                 "error {:.2e}, bound {:.2e}{}\n",
                 r.checked_rows, r.max_error_seen, r.check_bound,
                 shape.AllBf16()
                     ? fmt::format(" ({:.2e} on a bf16 dot path, P rounded to bf16)",
                                   r.dot_path_check_bound)
                     : std::string());
    }
    // ETA: each remaining shape costs its full candidate sweep at the rate
    // seen so far, or its budget share, whichever is less, but never less
    // than checking and timing its default once (which the budget cannot
    // cut). That floor uses the speed of this shape's winner: a default
    // slowed by one unlucky moment of a busy machine would inflate it.
    double eta = 0.0;
    const double left_after = std::max(0.0, budget - progress.ElapsedSeconds());
    const double default_flops_per_second = r.HasWinner() ? r.flops / r.WinnerSeconds() : 0.0;
    for (size_t j = i + 1; j < shapes.size(); ++j) {
      const double flops = attn_tune::ShapeFlops(shapes[j], args.heads);
      const double sweep = work_seconds / std::max(1.0, work_done) * flops * double(candidate_count);
      const double floor = default_flops_per_second > 0 ? 2.0 * flops / default_flops_per_second : 0.0;
      eta += std::max(floor, std::min(sweep, left_after / double(shapes.size() - i - 1)));
    }
    std::string summary = shape.Name() + ": ";
    if (r.HasWinner()) {
      summary += fmt::format("{} {:.1f} GFLOP/s", r.Winner().Label(), r.Gflops(r.WinnerSeconds()));
    } else {
      summary += "no correct candidate";
    }
    progress.FinishShape(summary, eta);
    results.push_back(std::move(r));
  }
  progress.Finish();

  PrintTable(results, peaks);
  for (const std::string& w : wrong) fmt::print(stderr, "attn-tune: WRONG OUTPUT, rejected: {}\n", w);

  TuningTable table;
  table.library_version = attn::internal::LibraryVersion();
  table.cpu_model = attn::internal::CpuModel();
  table.target = target;
  table.max_threads = omp_get_max_threads();
  table.heads = args.heads;
  table.created = UtcNow();
  table.peak_gflops = peaks;
  for (const ShapeResult& r : results) {
    if (r.HasWinner()) table.entries.push_back(attn_tune::ToEntry(r, peaks[r.shape.threads]));
  }
  int kept = 0;
  table = Merge(std::move(table), args.output, &kept);
  try {
    WriteAtomically(args.output, attn::internal::SerializeTuning(table));
    const std::string report =
        !args.report.empty() ? args.report : fs::path(args.output).replace_extension(".html").string();
    WriteAtomically(report, attn_tune::RenderReport(table));
    fmt::print("tuning file: {} ({} shapes{})\nreport:      {}\n", args.output, table.entries.size(),
               kept ? fmt::format(", {} kept from the previous file", kept) : "", report);
  } catch (const std::exception& e) {
    fmt::print(stderr, "attn-tune: {}\n", e.what());
    return 1;
  }
  fmt::print("tuned in {}\n", attn_tune::Progress::Clock(progress.ElapsedSeconds()));
  return wrong.empty() ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "attn-tune: finds the fastest attention kernel and tiles per shape on this machine and "
      "writes the tuning file that kernel `auto` follows.\n\n"
      "Examples:\n"
      "  attn-tune --quick                     a small grid, under a minute on 2 cores\n"
      "  attn-tune --budget 600                the full grid (T 1..16k, d 32..256)\n"
      "  attn-tune --shapes 1:4096:128,512:512:64:1 --threads 1,4\n"
      "  attn-tune --explain 1 4096 128        what auto picks for that shape, and why\n\n"
      "The library reads the table from $ATTN_TUNING_FILE, else from the default --output path.",
      "attn-tune"};
  Args args;
  args.output = attn::DefaultTuningPath();
  app.add_flag("--quick", args.quick, "Tune a small grid (under a minute on 2 cores)");
  app.add_option("--budget", args.budget,
                 "Time budget in seconds for the whole run (default 300, quick 40); every shape "
                 "measures at least its default")
      ->check(CLI::Range(1.0, 1e6));
  CLI::Option* output = app.add_option("--output", args.output, "Tuning file to write (merged with "
                                                                "an existing one for this machine)");
  if (!args.output.empty()) output->default_str(args.output);
  app.add_option("--report", args.report, "HTML/SVG report to write (default: the output with .html)");
  app.add_option("--threads", args.threads,
                 "Thread counts to tune, e.g. 2 or 1,2 (default: OpenMP's maximum)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--shapes", args.shapes,
                 "Shapes instead of the grid: Tq:Tk:d[:causal],... (causal 0 or 1)");
  app.add_option("--heads", args.heads, "Heads per tuning problem (batch x heads)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--explain", args.explain,
                 "Say what auto picks for Tq Tk d (with --causal, --threads) and why; tunes nothing")
      ->expected(3)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_flag("--causal", args.causal, "With --explain: a causal shape");
  app.add_option("--window", args.window,
                 "With --explain: a sliding window LEFT RIGHT (FlashAttention's, -1: unbounded)")
      ->expected(2)
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  app.add_option("--kv-dtype", args.kv_dtype,
                 "Element type of K and V of the tuned shapes: f32, bf16, f16, q8_0 or q4_0 (a "
                 "table keeps each type's entries apart; Q and O stay f32; q8_0 and q4_0 need "
                 "head dims that are multiples of 32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0"}));
  app.add_option("--dtype", args.dtype,
                 "bf16: Q, K and V all bf16 (overrides --kv-dtype); each candidate also runs on "
                 "every bf16 dot-product path this CPU has (widen, avx512bf16, amx), and the "
                 "table records the winner's path")
      ->check(CLI::IsMember({"bf16"}));
  app.add_option("--verify", args.verify,
                 "Time every entry of this tuning file against the untuned default on its shape "
                 "(alternated pairs); exit 1 if one is over 5% slower. Tunes nothing");
  app.add_flag("--verbose,-v", args.verbose, "Print every candidate's measurement");
  CLI11_PARSE(app, argc, argv);

  const bool output_given = app.get_option("--output")->count() > 0;
  try {
    if (!args.explain.empty()) return Explain(args, output_given);
    if (!args.verify.empty()) return Verify(args);
    if (args.output.empty()) {
      fmt::print(stderr, "attn-tune: no default tuning path (neither XDG_CACHE_HOME nor HOME is "
                         "set); pass --output PATH\n");
      return 2;
    }
    return Tune(args);
  } catch (const attn::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
