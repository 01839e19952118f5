// Tuning tables: the process's active table, its first-use load, and the
// `auto` choice (see include/attn/tuning.h and dispatch/tuning.h).
#include "dispatch/tuning.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sys/stat.h>

#include "dispatch/kernel_table.h"
#include "dispatch/targets.h"
#include "kernels/decode/walk_table.h"

namespace attn {
namespace internal {
namespace {

// A tuning file is a few kB per hundred shapes; anything this large is not
// one, and reading it whole could exhaust memory.
constexpr std::streamoff kMaxTuningFileBytes = std::streamoff(64) << 20;

// ---- process state ---------------------------------------------------------

std::once_flag g_first_use;
std::mutex g_mutex;  // guards g_table and g_status
std::shared_ptr<const LoadedTable> g_table;
TuningStatus g_status;

void EnsureLoaded() {
  std::call_once(g_first_use, [] { LoadFromEnvironment(); });
}

// Explicit calls decide for the process: the environment is not read after.
void PreemptFirstUseLoad() { std::call_once(g_first_use, [] {}); }

TuningStatus Install(std::optional<LoadedTable> table, const std::string& path,
                     const std::string& warning) {
  TuningStatus status;
  status.path = table ? path : "";
  status.loaded = table.has_value();
  status.entries = table ? table->table.entries.size() : 0;
  status.warning = warning;
  if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  std::lock_guard<std::mutex> lock(g_mutex);
  g_table = table ? std::make_shared<const LoadedTable>(std::move(*table)) : nullptr;
  g_status = status;
  return status;
}

std::shared_ptr<const LoadedTable> ActiveTable() {
  EnsureLoaded();
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_table;
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

std::string TilesText(const Tiles& t) {
  return "q_block=" + std::to_string(t.q_block) + " kv_block=" + std::to_string(t.kv_block) +
         " kv_splits=" + std::to_string(t.kv_splits);
}

}  // namespace

// ---- loading -------------------------------------------------------------------

TuningPath ResolveTuningPath(const char* env_tuning_file, const char* xdg_cache_home,
                             const char* home) {
  if (env_tuning_file) return TuningPath{env_tuning_file, *env_tuning_file != '\0'};
  if (xdg_cache_home && *xdg_cache_home) {
    return TuningPath{std::string(xdg_cache_home) + "/attn/tuning.json", false};
  }
  if (home && *home) return TuningPath{std::string(home) + "/.cache/attn/tuning.json", false};
  return TuningPath{};
}

std::optional<LoadedTable> ReadTuningFile(const std::string& path, std::string* warning) {
  auto fail = [&](const std::string& why) {
    *warning = "attn: warning: ignoring tuning file " + Quoted(path) + ": " + why +
               "; kernel choice falls back to the default rule";
    return std::nullopt;
  };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return fail("it cannot be opened");
  const std::streamoff size = in.tellg();
  if (size < 0) return fail("it cannot be read");
  if (size > kMaxTuningFileBytes) {
    return fail("its size " + std::to_string(size) + " bytes is over the " +
                std::to_string(kMaxTuningFileBytes >> 20) + " MiB a tuning file can have");
  }
  in.seekg(0);
  std::string text(size_t(size), '\0');
  if (!in.read(text.data(), size)) return fail("it cannot be read");
  std::string why;
  std::optional<TuningTable> table = ParseTuning(text, &why);
  if (!table) return fail(why);
  why = CheckTuningMachine(*table, CpuModel(), CurrentTarget());
  if (!why.empty()) return fail(why);
  return LoadedTable{std::move(*table), path};
}

TuningStatus LoadFromEnvironment() {
  const TuningPath where = ResolveTuningPath(std::getenv("ATTN_TUNING_FILE"),
                                             std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
  if (where.path.empty()) return Install(std::nullopt, "", "");
  struct stat st;
  if (!where.required && stat(where.path.c_str(), &st) != 0) return Install(std::nullopt, "", "");
  std::string warning;
  std::optional<LoadedTable> table = ReadTuningFile(where.path, &warning);
  return Install(std::move(table), where.path, warning);
}

// ---- the choice ----------------------------------------------------------------

namespace {

// What the table and the default rule decide for a call, and the facts
// its explanation names (AutoReason): the decision first, the English
// apart, so that a hot call builds no sentence.
struct AutoDecision {
  enum class Why {
    kNoTable,              // no tuning table is loaded: the default rule
    kOtherTarget,          // the table was made for another target: the default rule
    kNoBucket,             // no entry in the shape's bucket: the default rule
    kEntryPathCannotRun,   // the entry's dot path cannot run here: the default rule
    kEntryKernelDeclines,  // the entry's kernel declines this shape: the default rule
    kEntry,                // the entry's kernel and tiles
  };
  Why why = Why::kNoTable;
  AutoChoice choice;  // everything but the reason
  ShapeKey key;
  BucketMatch match;
  const TuningEntry* entry = nullptr;
  std::string declined;           // kEntryPathCannotRun, kEntryKernelDeclines: the cause
  bool one_thread = false;        // the default rule's one-thread kernel on one thread's tiles
  bool entry_path = false;        // kEntry: the entry's dot path replaced the call's
  bool splits_from_rule = false;  // kEntry: kv_splits from the default rule
};

AutoDecision DecideAuto(const LoadedTable* loaded, const std::string& current_target,
                        const Problem& problem, const TileInputs& in, const Tiles& requested,
                        const DotPathRequest& dot) {
  AutoDecision d;
  AutoChoice& c = d.choice;
  c.threads = in.threads;
  const bool all_bf16 = problem.q.dtype == DType::kBF16 && problem.k.dtype == DType::kBF16 &&
                        problem.v.dtype == DType::kBF16;
  if (all_bf16) c.dot_path = DotPathName(dot.path);
  d.key = MakeShapeKey(in.q_len, in.kv_len, in.head_dim, problem.causal, in.threads,
                       problem.k.dtype, problem.q.dtype,
                       WindowSpan(problem.window, problem.causal, in.kv_len));
  auto use_default = [&](AutoDecision::Why why) {
    d.why = why;
    if (all_bf16) c.dot_path = DotPathName(dot.path);
    c.kernel = DefaultKernel(problem, in.threads, dot.path);
    // A one-thread kernel gets one thread's tiles: the query blocks that
    // ChooseTiles shrinks so that every thread has a unit would only cost
    // the single thread per-block overhead.
    d.one_thread = in.threads > 1 && !GetKernelInfo(c.kernel).threaded;
    TileInputs tile_in = in;
    if (d.one_thread) tile_in.threads = 1;
    c.tiles = ResolveTiles(requested, tile_in);
    c.source = "default";
    return d;
  };
  using Why = AutoDecision::Why;
  if (!loaded) return use_default(Why::kNoTable);
  const TuningTable& t = loaded->table;
  if (t.target != current_target) return use_default(Why::kOtherTarget);
  d.match = FindBucket(t.entries, d.key);
  if (d.match.index < 0) return use_default(Why::kNoBucket);
  const TuningEntry& e = t.entries[size_t(d.match.index)];
  d.entry = &e;
  // The entry's dot path, when it has one for an all-bf16 call that has not
  // fixed its own.
  DotPath path = dot.path;
  d.entry_path = all_bf16 && !dot.fixed && !e.dot_path.empty();
  if (d.entry_path) {
    path = ParseDotPath(e.dot_path);  // the parser checked the name
    if (!DotPathRunnable(path, &d.declined)) return use_default(Why::kEntryPathCannotRun);
    c.dot_path = e.dot_path;
  }
  if (!FirstAccepting(e.kernel, problem, path, &d.declined)) {
    return use_default(Why::kEntryKernelDeclines);
  }
  d.why = Why::kEntry;
  c.kernel = e.kernel;
  Tiles tuned = e.tiles;
  // Split-KV pays off only when too few (head, query block) items feed the
  // threads, so a split count holds for the head count it was tuned with.
  d.splits_from_rule = in.heads != t.heads;
  if (d.splits_from_rule) tuned.kv_splits = ChooseTiles(in).kv_splits;
  c.tiles = requested;
  if (requested.q_block == 0) c.tiles.q_block = tuned.q_block;
  if (requested.kv_block == 0) c.tiles.kv_block = tuned.kv_block;
  if (requested.kv_splits == 0) c.tiles.kv_splits = tuned.kv_splits;
  c.source = d.match.exact ? "table" : "bucket";
  return d;
}

// AutoChoice::reason for a decision.
std::string AutoReason(const AutoDecision& d, const LoadedTable* loaded,
                       const std::string& current_target, const Problem& problem,
                       const TileInputs& in, const Tiles& requested, const DotPathRequest& dot) {
  using Why = AutoDecision::Why;
  const AutoChoice& c = d.choice;
  if (d.why != Why::kEntry) {
    std::string why;
    switch (d.why) {
      case Why::kNoTable:
        why = "no tuning table is loaded";
        break;
      case Why::kOtherTarget:
        why = "the tuning table " + Quoted(loaded->path) + " was made for target " +
              Quoted(loaded->table.target) + " but the kernels now run " + Quoted(current_target);
        break;
      case Why::kNoBucket:
        why = "the tuning table " + Quoted(loaded->path) + " has no entry in the bucket of " +
              ShapeText(d.key) +
              " (same threads, causal flag and element types, windowed or not, T_q, T_k and a "
              "window's span within 4x, d within 2x)";
        break;
      case Why::kEntryPathCannotRun:
        why = "the nearest tuned shape (" + ShapeText(d.entry->shape) + ") ran dot path " +
              d.entry->dot_path + ", which cannot run now: " + d.declined;
        break;
      case Why::kEntryKernelDeclines:
        why = "the nearest tuned shape (" + ShapeText(d.entry->shape) + ") names " +
              KernelName(d.entry->kernel) + ", which declines this shape: " + d.declined;
        break;
      case Why::kEntry:
        break;
    }
    std::string reason = why + "; the default rule picks " + KernelName(c.kernel) + " with " +
                         TilesText(c.tiles) + " (attn::DefaultTiles)";
    if (d.one_thread) {
      reason += " on one thread: " + std::to_string(in.threads) +
                (ThreadsPayOff(problem, in.threads)
                     ? " threads were asked for, but no threaded kernel takes this problem"
                     : " threads would get under " +
                           std::to_string(static_cast<long long>(kMinFlopsPerThread)) +
                           " FLOPs each (attn::internal::ThreadsPayOff)");
    }
    return reason;
  }
  const TuningEntry& e = *d.entry;
  char figures[160] = "";
  if (e.figures.gflops > 0.0) {
    std::snprintf(figures, sizeof(figures), " (measured %.1f GFLOP/s, %.2fx the default)",
                  e.figures.gflops, e.figures.speedup_vs_default);
  }
  char distance[32];
  std::snprintf(distance, sizeof(distance), "%.2f", d.match.distance);
  std::string reason =
      d.match.exact ? "the tuning table " + Quoted(loaded->path) + " has an entry for " +
                          ShapeText(d.key)
                    : "the nearest tuned shape in " + Quoted(loaded->path) + " is " +
                          ShapeText(e.shape) + " (bucket distance " + distance + ")";
  reason += std::string(": ") + KernelName(e.kernel) + " " + TilesText(e.tiles) + figures;
  if (d.entry_path) reason += " on dot path " + e.dot_path;
  const bool all_bf16 = !c.dot_path.empty();
  if (all_bf16 && dot.fixed && !e.dot_path.empty() && e.dot_path != c.dot_path) {
    reason += "; dot path " + c.dot_path + " as fixed by Options::dot_path, ForceDotPath or "
              "ATTN_DOT_PATH (the entry was tuned on " + e.dot_path + ")";
  }
  if (d.splits_from_rule) {
    reason += "; kv_splits from the default rule (the table was tuned with " +
              std::to_string(loaded->table.heads) + " head(s), this call has " +
              std::to_string(in.heads) + ")";
  }
  if (requested.q_block || requested.kv_block || requested.kv_splits) {
    reason += "; explicit Options::tiles fields kept";
  }
  return reason;
}

}  // namespace

AutoChoice ChooseAutoFrom(const LoadedTable* loaded, const std::string& current_target,
                          const Problem& problem, const TileInputs& in, const Tiles& requested,
                          bool explain, const DotPathRequest& dot) {
  AutoDecision d = DecideAuto(loaded, current_target, problem, in, requested, dot);
  if (explain) {
    d.choice.reason = AutoReason(d, loaded, current_target, problem, in, requested, dot);
  }
  return std::move(d.choice);
}

AutoChoice ChooseAuto(const Problem& problem, const TileInputs& in, const Tiles& requested,
                      bool explain, const DotPathRequest& dot) {
  const std::shared_ptr<const LoadedTable> table = ActiveTable();
  // Without a table the target is irrelevant; skip naming it on hot calls.
  const std::string target = table ? CurrentTarget() : std::string();
  return ChooseAutoFrom(table.get(), target, problem, in, requested, explain, dot);
}

DotPath ChosenDotPath(const AutoChoice& choice, DotPath fallback) {
  return choice.dot_path.empty() ? fallback : ParseDotPath(choice.dot_path);
}

}  // namespace internal

// ---- public API ------------------------------------------------------------------

TuningStatus LoadTuningFile(const std::string& path) {
  internal::InitTargetsOnce();
  internal::PreemptFirstUseLoad();
  std::string warning;
  std::optional<internal::LoadedTable> table = internal::ReadTuningFile(path, &warning);
  return internal::Install(std::move(table), path, warning);
}

void ClearTuning() {
  internal::PreemptFirstUseLoad();
  internal::Install(std::nullopt, "", "");
}

TuningStatus CurrentTuning() {
  internal::EnsureLoaded();
  std::lock_guard<std::mutex> lock(internal::g_mutex);
  return internal::g_status;
}

std::string DefaultTuningPath() {
  return internal::ResolveTuningPath(nullptr, std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"))
      .path;
}

AutoChoice ExplainChoice(int64_t q_len, int64_t kv_len, int64_t head_dim, Causal causal,
                         int threads) {
  Problem shape;
  shape.q_len = q_len;
  shape.kv_len = kv_len;
  shape.head_dim = head_dim;
  shape.causal = causal;
  Options options;
  options.threads = threads;
  return ExplainChoice(shape, options);
}

namespace {

// The score modifiers of `p` for AutoChoice::reason ("" without any): what
// each row computes, and for a window how many keys a row reads (the kernels
// skip the key tiles outside it).
std::string ModifiersText(const Problem& p) {
  if (!p.HasScoreModifiers()) return "";
  std::string text = "; score modifiers:";
  if (p.window.left >= 0 || p.window.right >= 0) {
    auto side = [](int64_t w) { return w < 0 ? std::string("unbounded") : std::to_string(w); };
    text += " window (left " + side(p.window.left) + ", right " + side(p.window.right) + ")";
    if (p.window.left >= 0 && p.kv_len > 0) {
      const int64_t width = p.window.left + 1 + std::max<int64_t>(0, p.window.right);
      text += ", each row reads at most " + std::to_string(std::min(width, p.kv_len)) + " of the " +
              std::to_string(p.kv_len) + " keys (whole tiles outside the window are skipped)";
    }
    text += ";";
  }
  if (p.softcap != 0.0f) text += " soft-cap " + std::to_string(p.softcap) + ";";
  if (p.alibi_slopes.data) text += " ALiBi slopes;";
  if (p.sinks.data) text += " attention sinks (one logit per head, in lse);";
  text.pop_back();
  return text;
}

// ExplainChoice without the path.
AutoChoice ExplainKernelChoice(const Problem& problem, const Options& options,
                               const internal::DotPathRequest& dot);

// AutoChoice::path for `kernel` on `problem`'s element types under the
// call's dot path; *dot_row: whether the row that runs it is a bf16
// dot-product row.
std::string PathText(KernelId kernel, const Problem& p, internal::DotPath dot_path,
                     bool* dot_row) {
  // The row of the table that runs it (a bf16 dot-product row, say).
  std::string why;
  const internal::KernelImpl* row = internal::FirstAccepting(kernel, p, dot_path, &why);
  *dot_row = row && *row->path;
  if (*dot_row) {
    std::string path = CurrentTarget() + " " + row->path + " (dot path " +
                       internal::DotPathName(dot_path) + ")";
    if (p.out.dtype != DType::kF32) {
      path += std::string("; out rounded once to ") + DTypeName(p.out.dtype);
    }
    return path;
  }
  std::string path =
      GetKernelInfo(kernel).simd ? CurrentTarget() + " float32 FMA" : std::string("scalar float32");
  std::string widened;
  const std::pair<const char*, DType> inputs[] = {{"q", p.q.dtype}, {"k", p.k.dtype}, {"v", p.v.dtype}};
  for (const auto& [name, type] : inputs) {
    if (type == DType::kF32) continue;
    widened += std::string(widened.empty() ? "" : ", ") + name + " " + DTypeName(type);
  }
  if (!widened.empty()) path += "; " + widened + " widened to float32 exactly";
  if (p.out.dtype != DType::kF32) {
    path += std::string("; out rounded once to ") + DTypeName(p.out.dtype);
  }
  return path;
}

// AutoChoice::decode_walk for `kernel` on `p` (a call's first view, as the
// kernel table's row that runs it sees it; "" where no decode walk runs).
std::string DecodeWalkText(KernelId kernel, const Problem& p, internal::DotPath dot_path,
                           bool dot_row, const Options& options) {
  if (kernel != KernelId::kStreaming && kernel != KernelId::kParallel) return "";
  if (p.batch <= 0 || p.q_heads <= 0 || p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0) return "";
  const int64_t lanes = internal::PanelWidth() / 2;  // NarrowMaxRows()
  internal::RunConfig config;
  config.decode_walk = internal::ParseDecodeWalk(options.decode_walk);
  const internal::HeadViews views(p, config);
  if (views.size() == 0) return "";
  const internal::HeadView view = views[0];
  if (view.tq > lanes) return "";  // the panel kernels
  const bool amx = dot_path == internal::DotPath::kAmx || dot_path == internal::DotPath::kAmxEmulated;
  const auto products = !dot_row ? internal::DecodeProducts::kWidened
                        : amx    ? internal::DecodeProducts::kAmx
                                 : internal::DecodeProducts::kPairs;
  internal::DecodeView facts = internal::DescribeDecodeView(view, lanes, products);
  // A shape without strides (ExplainChoice(q_len, ...)) is dense.
  if (p.k.row_stride == 0 && p.v.row_stride == 0) facts.rows_adjacent = true;
  facts.pair_row_compiled =
      CurrentTarget() == "AVX3" &&
      (amx || dot_path == internal::DotPath::kAvx512Bf16 ||
       dot_path == internal::DotPath::kAvx512Bf16Emulated);
  // The streaming kernel takes the kv heads of token-major K/V, whose rows
  // interleave, as a run of views (kernels/decode/heads.cc NarrowHeads).
  facts.in_run = kernel == KernelId::kStreaming && views.size() > 1 &&
                 p.k.row_stride > p.k.head_stride && p.k.head_stride > 0 &&
                 p.v.row_stride > p.v.head_stride && p.v.head_stride > 0;
  return internal::ExplainDecodeWalk(facts, config.decode_walk);
}

}  // namespace

AutoChoice ExplainChoice(const Problem& problem, const Options& options) {
  internal::InitTargetsOnce();
  // attention() rounds first, then chooses for the rounded copies.
  Problem rounded = problem;
  if (options.round_inputs_to_bf16) {
    rounded.q.dtype = rounded.k.dtype = rounded.v.dtype = DType::kBF16;
  }
  const internal::DotPathRequest dot = internal::RequestedDotPath(rounded, options.dot_path);
  AutoChoice c = ExplainKernelChoice(rounded, options, dot);
  const internal::DotPath chosen = internal::ChosenDotPath(c, dot.path);
  c.path = PathText(c.kernel, rounded, chosen, &c.dot_product_row);
  c.decode_walk = DecodeWalkText(c.kernel, rounded, chosen, c.dot_product_row, options);
  c.reason += ModifiersText(problem);
  bool any = false;
  for (DType t : {problem.q.dtype, problem.k.dtype, problem.v.dtype}) any |= t != DType::kBF16;
  if (options.round_inputs_to_bf16 && any) {
    c.path += "; q, k, v rounded to bf16 first (Options::round_inputs_to_bf16)";
  }
  return c;
}

namespace {
AutoChoice ExplainKernelChoice(const Problem& problem, const Options& options,
                               const internal::DotPathRequest& dot) {
  const internal::TileInputs in =
      internal::TileInputsFor(problem, internal::ResolveThreads(options.threads), dot.path);
  if (options.kernel != KernelId::kAuto) {
    AutoChoice c;
    c.kernel = options.kernel;
    if (problem.q.dtype == DType::kBF16 && problem.k.dtype == DType::kBF16 &&
        problem.v.dtype == DType::kBF16) {
      c.dot_path = internal::DotPathName(dot.path);
    }
    c.tiles = internal::ResolveTiles(options.tiles, in);
    c.threads = in.threads;
    c.source = "explicit";
    c.reason = std::string("Options::kernel names ") + KernelName(options.kernel) +
               "; the tuning table is not consulted";
    return c;
  }
  return internal::ChooseAuto(problem, in, options.tiles, /*explain=*/true, dot);
}
}  // namespace

}  // namespace attn
