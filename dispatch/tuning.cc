// Tuning tables: schema, validation, bucketing, first-use load and the
// `auto` choice (see include/attn/tuning.h and dispatch/tuning.h).
#include "dispatch/tuning.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "dispatch/registry.h"
#include "dispatch/targets.h"
#include "kernels/kernel.h"
#include "kernels/naive/naive.h"
#include "kernels/streaming/streaming.h"

#ifndef ATTN_VERSION
#define ATTN_VERSION "unknown"
#endif

namespace attn {
namespace internal {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

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

// ---- parsing -----------------------------------------------------------------

// Thrown inside ParseTuning only; carries the sentence for *why.
struct BadField {
  std::string why;
};

// A value as it appears in the file, cut short: the wrong value may be a
// whole array or object.
std::string Shown(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void Bad(const std::string& field, const Json& value, const std::string& must) {
  throw BadField{field + " must be " + must + ", got " + Shown(value)};
}

const Json& Field(const Json& object, const std::string& path, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) throw BadField{"field " + path + name + " is missing"};
  return *it;
}

int64_t IntField(const Json& object, const std::string& path, const char* name, int64_t lo,
                 int64_t hi) {
  const Json& v = Field(object, path, name);
  const std::string must = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!v.is_number_integer()) Bad(path + name, v, must);
  // Unsigned values above int64 max would wrap in get<int64_t>().
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) Bad(path + name, v, must);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) Bad(path + name, v, must);
  return x;
}

std::string StringField(const Json& object, const std::string& path, const char* name) {
  const Json& v = Field(object, path, name);
  if (!v.is_string()) Bad(path + name, v, "a string");
  return v.get<std::string>();
}

bool BoolField(const Json& object, const std::string& path, const char* name) {
  const Json& v = Field(object, path, name);
  if (!v.is_boolean()) Bad(path + name, v, "true or false");
  return v.get<bool>();
}

// Informational numbers: optional, but a present one must be a finite number.
double OptionalNumber(const Json& object, const std::string& path, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return 0.0;
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    Bad(path + name, *it, "a finite number");
  }
  return it->get<double>();
}

const Json& ObjectField(const Json& object, const std::string& path, const char* name) {
  const Json& v = Field(object, path, name);
  if (!v.is_object()) Bad(path + name, v, "an object");
  return v;
}

KernelId KernelField(const Json& object, const std::string& path) {
  const Json& v = Field(object, path, "kernel");
  const char* must = "one of \"naive\", \"blocked\", \"streaming\", \"parallel\"";
  if (!v.is_string()) Bad(path + "kernel", v, must);
  for (KernelId id : {KernelId::kNaive, KernelId::kBlocked, KernelId::kStreaming,
                      KernelId::kParallel}) {
    if (v.get<std::string>() == KernelName(id)) return id;
  }
  Bad(path + "kernel", v, must);
}

TuningEntry ParseEntry(const Json& e, const std::string& path) {
  if (!e.is_object()) Bad(path.substr(0, path.size() - 1), e, "an object");
  constexpr int64_t kMaxLen = int64_t{1} << 40;
  TuningEntry entry;
  entry.shape.q_len = IntField(e, path, "q_len", 1, kMaxLen);
  entry.shape.kv_len = IntField(e, path, "kv_len", 1, kMaxLen);
  entry.shape.head_dim = IntField(e, path, "head_dim", 1, kMaxLen);
  entry.shape.causal = BoolField(e, path, "causal");
  entry.shape.threads = int(IntField(e, path, "threads", 1, 1 << 16));
  entry.kernel = KernelField(e, path);
  const Json& tiles = ObjectField(e, path, "tiles");
  const std::string tiles_path = path + "tiles.";
  entry.tiles.q_block = int(IntField(tiles, tiles_path, "q_block", 1, kMaxTunedQBlock));
  entry.tiles.kv_block = int(IntField(tiles, tiles_path, "kv_block", 1, kMaxTunedKvBlock));
  entry.tiles.kv_splits = int(IntField(tiles, tiles_path, "kv_splits", 1, kMaxTunedKvSplits));
  if (const auto m = e.find("measured"); m != e.end()) {
    const std::string mp = path + "measured.";
    if (!m->is_object()) Bad(path + "measured", *m, "an object");
    TunedFigures& f = entry.figures;
    f.seconds = OptionalNumber(*m, mp, "seconds");
    f.gflops = OptionalNumber(*m, mp, "gflops");
    f.peak_fraction = OptionalNumber(*m, mp, "peak_fraction");
    f.default_seconds = OptionalNumber(*m, mp, "default_seconds");
    f.naive_seconds = OptionalNumber(*m, mp, "naive_seconds");
    f.speedup_vs_default = OptionalNumber(*m, mp, "speedup_vs_default");
    f.speedup_vs_naive = OptionalNumber(*m, mp, "speedup_vs_naive");
    if (const auto x = m->find("naive_extrapolated"); x != m->end()) {
      if (!x->is_boolean()) Bad(mp + "naive_extrapolated", *x, "true or false");
      f.naive_extrapolated = x->get<bool>();
    }
  }
  if (const auto k = e.find("kernel_gflops"); k != e.end()) {
    if (!k->is_object()) Bad(path + "kernel_gflops", *k, "an object");
    for (auto it = k->begin(); it != k->end(); ++it) {
      entry.kernel_gflops[it.key()] = OptionalNumber(*k, path + "kernel_gflops.", it.key().c_str());
    }
  }
  return entry;
}

std::string ShapeText(const ShapeKey& s) {
  return "T_q=" + std::to_string(s.q_len) + " T_k=" + std::to_string(s.kv_len) +
         " d=" + std::to_string(s.head_dim) + (s.causal ? " causal" : "") +
         " threads=" + std::to_string(s.threads);
}

bool SameShape(const ShapeKey& a, const ShapeKey& b) {
  return a.q_len == b.q_len && a.kv_len == b.kv_len && a.head_dim == b.head_dim &&
         a.causal == b.causal && a.threads == b.threads;
}

TuningTable ParseTable(const Json& j) {
  if (!j.is_object()) Bad("the top level", j, "an object");
  TuningTable t;
  const Json& schema = Field(j, "", "schema");
  if (schema != kTuningSchemaName) Bad("schema", schema, std::string("\"") + kTuningSchemaName + "\"");
  // The version before anything else: a newer schema may have renamed fields.
  const Json& version = Field(j, "", "schema_version");
  if (!version.is_number_integer() || version.get<int64_t>() < 1) {
    Bad("schema_version", version, "a positive integer");
  }
  if (version.get<int64_t>() > kTuningSchemaVersion) {
    throw BadField{"its schema_version " + Shown(version) + " is newer than this library reads (" +
                   std::to_string(kTuningSchemaVersion) + "); rerun attn-tune"};
  }
  t.schema_version = int(version.get<int64_t>());
  t.library_version = StringField(j, "", "library_version");
  t.cpu_model = StringField(j, "", "cpu_model");
  t.target = StringField(j, "", "target");
  t.max_threads = int(IntField(j, "", "max_threads", 1, 1 << 16));
  t.heads = int(IntField(j, "", "heads", 1, 1 << 20));
  if (j.contains("created")) t.created = StringField(j, "", "created");
  if (const auto p = j.find("peak_gflops"); p != j.end()) {
    if (!p->is_object()) Bad("peak_gflops", *p, "an object");
    for (auto it = p->begin(); it != p->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      const long threads = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || threads < 1 || threads > (1 << 16)) {
        Bad("peak_gflops key", Json(key), "a thread count");
      }
      t.peak_gflops[int(threads)] = OptionalNumber(*p, "peak_gflops.", key.c_str());
    }
  }
  const Json& entries = Field(j, "", "entries");
  if (!entries.is_array()) Bad("entries", entries, "an array");
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string path = "entries[" + std::to_string(i) + "].";
    TuningEntry e = ParseEntry(entries[i], path);
    for (size_t k = 0; k < t.entries.size(); ++k) {
      if (SameShape(t.entries[k].shape, e.shape)) {
        throw BadField{"entries[" + std::to_string(i) + "] repeats the shape of entries[" +
                       std::to_string(k) + "] (" + ShapeText(e.shape) + ")"};
      }
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

OrderedJson FiniteOrZero(double x) { return std::isfinite(x) ? x : 0.0; }

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

std::string TilesText(const Tiles& t) {
  return "q_block=" + std::to_string(t.q_block) + " kv_block=" + std::to_string(t.kv_block) +
         " kv_splits=" + std::to_string(t.kv_splits);
}

}  // namespace

// ---- machine identity ------------------------------------------------------

std::string LibraryVersion() { return ATTN_VERSION; }

std::string CpuModel() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t begin = line.find_first_not_of(" \t", colon + 1);
      const size_t end = line.find_last_not_of(" \t\r");
      if (begin != std::string::npos && end >= begin) return line.substr(begin, end - begin + 1);
    }
    return std::string("unknown");
  }();
  return model;
}

// ---- schema ------------------------------------------------------------------

std::string SerializeTuning(const TuningTable& t) {
  OrderedJson j;
  j["schema"] = kTuningSchemaName;
  j["schema_version"] = t.schema_version;
  j["library_version"] = t.library_version;
  j["cpu_model"] = t.cpu_model;
  j["target"] = t.target;
  j["max_threads"] = t.max_threads;
  j["heads"] = t.heads;
  j["created"] = t.created;
  OrderedJson peaks = OrderedJson::object();
  for (const auto& [threads, gflops] : t.peak_gflops) peaks[std::to_string(threads)] = FiniteOrZero(gflops);
  j["peak_gflops"] = peaks;
  OrderedJson entries = OrderedJson::array();
  for (const TuningEntry& e : t.entries) {
    OrderedJson o;
    o["q_len"] = e.shape.q_len;
    o["kv_len"] = e.shape.kv_len;
    o["head_dim"] = e.shape.head_dim;
    o["causal"] = e.shape.causal;
    o["threads"] = e.shape.threads;
    o["kernel"] = KernelName(e.kernel);
    o["tiles"] = {{"q_block", e.tiles.q_block},
                  {"kv_block", e.tiles.kv_block},
                  {"kv_splits", e.tiles.kv_splits}};
    const TunedFigures& f = e.figures;
    o["measured"] = {{"seconds", FiniteOrZero(f.seconds)},
                     {"gflops", FiniteOrZero(f.gflops)},
                     {"peak_fraction", FiniteOrZero(f.peak_fraction)},
                     {"default_seconds", FiniteOrZero(f.default_seconds)},
                     {"naive_seconds", FiniteOrZero(f.naive_seconds)},
                     {"naive_extrapolated", f.naive_extrapolated},
                     {"speedup_vs_default", FiniteOrZero(f.speedup_vs_default)},
                     {"speedup_vs_naive", FiniteOrZero(f.speedup_vs_naive)}};
    OrderedJson per_kernel = OrderedJson::object();
    for (const auto& [name, gflops] : e.kernel_gflops) per_kernel[name] = FiniteOrZero(gflops);
    o["kernel_gflops"] = per_kernel;
    entries.push_back(std::move(o));
  }
  j["entries"] = std::move(entries);
  return j.dump(2) + "\n";
}

std::optional<TuningTable> ParseTuning(const std::string& text, std::string* why) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.g. "... parse error at line 12, column 3: syntax error while parsing
    // object - unexpected end of input" for a truncated file.
    *why = std::string("it is not valid JSON: ") + e.what();
    return std::nullopt;
  }
  try {
    return ParseTable(j);
  } catch (const BadField& bad) {
    *why = bad.why;
  } catch (const Json::exception& e) {  // defensive: a type our checks missed
    *why = std::string("unexpected content: ") + e.what();
  }
  return std::nullopt;
}

std::string CheckTuningMachine(const TuningTable& t, const std::string& cpu_model,
                               const std::string& target) {
  if (t.cpu_model != cpu_model) {
    return "it was made on CPU " + Quoted(t.cpu_model) + ", not on this " + Quoted(cpu_model);
  }
  if (t.target != target) {
    return "it was made for SIMD target " + Quoted(t.target) + ", not for this process's " +
           Quoted(target);
  }
  return "";
}

// ---- bucketing ---------------------------------------------------------------

ShapeKey MakeShapeKey(int64_t q_len, int64_t kv_len, int64_t head_dim, Causal causal,
                      int threads) {
  ShapeKey key;
  key.q_len = q_len;
  key.kv_len = kv_len;
  key.head_dim = head_dim;
  key.threads = threads;
  key.causal = causal != Causal::kNone && !(causal == Causal::kBottomRight && q_len == 1);
  return key;
}

BucketMatch FindBucket(const std::vector<TuningEntry>& entries, const ShapeKey& key) {
  auto log_ratio = [](int64_t a, int64_t b) {
    return std::fabs(std::log2(double(std::max<int64_t>(a, 1)) / double(std::max<int64_t>(b, 1))));
  };
  BucketMatch best;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ShapeKey& s = entries[i].shape;
    if (SameShape(s, key)) return BucketMatch{int(i), true, 0.0};
    if (s.threads != key.threads || s.causal != key.causal) continue;
    if ((s.q_len == 1) != (key.q_len == 1)) continue;
    const double dq = log_ratio(s.q_len, key.q_len);
    const double dk = log_ratio(s.kv_len, key.kv_len);
    const double dd = log_ratio(s.head_dim, key.head_dim);
    if (dq > 2.0 || dk > 2.0 || dd > 1.0) continue;
    const double distance = dq + dk + 2.0 * dd;
    if (best.index < 0 || distance < best.distance) best = BucketMatch{int(i), false, distance};
  }
  return best;
}

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

int ResolveThreads(int requested) {
  return requested > 0 ? requested : omp_in_parallel() ? 1 : omp_get_max_threads();
}

TileInputs TileInputsFor(const Problem& p, int threads) {
  TileInputs in;
  in.q_len = p.q_len;
  in.kv_len = p.kv_len;
  in.head_dim = p.head_dim;
  in.value_dim = p.ValueDim();
  // Independent work items: grouped-query decode runs one view per kv head.
  in.heads = HeadViews(p).size();
  in.panel_width = PanelWidth();
  in.threads = threads;
  return in;
}

// ---- the choice ----------------------------------------------------------------

AutoChoice ChooseAutoFrom(const LoadedTable* loaded, const std::string& current_target,
                          const TileInputs& in, Causal causal, const Tiles& requested,
                          bool explain) {
  AutoChoice c;
  c.threads = in.threads;
  const ShapeKey key = MakeShapeKey(in.q_len, in.kv_len, in.head_dim, causal, in.threads);
  // `why` is only called when explaining, so sentences cost nothing otherwise.
  auto use_default = [&](auto why) {
    // The shape as the default rule sees it (it reads no tensor data).
    Problem shape;
    shape.q_heads = shape.kv_heads = in.heads;
    shape.q_len = in.q_len;
    shape.kv_len = in.kv_len;
    shape.head_dim = in.head_dim;
    shape.value_dim = in.value_dim;
    shape.causal = causal;
    c.kernel = DefaultKernel(shape, in.threads);
    c.tiles = ResolveTiles(requested, in);
    c.source = "default";
    if (explain) {
      c.reason = why() + "; the default rule picks " + KernelName(c.kernel) + " with " +
                 TilesText(c.tiles) + " (attn::DefaultTiles)";
    }
    return c;
  };
  if (!loaded) return use_default([] { return std::string("no tuning table is loaded"); });
  const TuningTable& t = loaded->table;
  if (t.target != current_target) {
    return use_default([&] {
      return "the tuning table " + Quoted(loaded->path) + " was made for target " +
             Quoted(t.target) + " but the kernels now run " + Quoted(current_target);
    });
  }
  const BucketMatch match = FindBucket(t.entries, key);
  if (match.index < 0) {
    return use_default([&] {
      return "the tuning table " + Quoted(loaded->path) + " has no entry in the bucket of " +
             ShapeText(key) + " (same threads and causal flag, T_q and T_k within 4x, d within 2x)";
    });
  }
  const TuningEntry& e = t.entries[size_t(match.index)];
  if (e.kernel == KernelId::kNaive &&
      NaiveScratchBytes(in.q_len, in.kv_len) > kNaiveMaxScratchBytes) {
    return use_default([&] {
      return "the nearest tuned shape (" + ShapeText(e.shape) +
             ") names naive, which cannot hold this shape's score matrix";
    });
  }
  c.kernel = e.kernel;
  Tiles tuned = e.tiles;
  // Split-KV pays off only when too few (head, query block) items feed the
  // threads, so a split count holds for the head count it was tuned with.
  const bool splits_from_rule = in.heads != t.heads;
  if (splits_from_rule) tuned.kv_splits = ChooseTiles(in).kv_splits;
  c.tiles = requested;
  if (requested.q_block == 0) c.tiles.q_block = tuned.q_block;
  if (requested.kv_block == 0) c.tiles.kv_block = tuned.kv_block;
  if (requested.kv_splits == 0) c.tiles.kv_splits = tuned.kv_splits;
  c.source = match.exact ? "table" : "bucket";
  if (!explain) return c;

  char figures[160] = "";
  if (e.figures.gflops > 0.0) {
    std::snprintf(figures, sizeof(figures), " (measured %.1f GFLOP/s, %.2fx the default)",
                  e.figures.gflops, e.figures.speedup_vs_default);
  }
  char distance[32];
  std::snprintf(distance, sizeof(distance), "%.2f", match.distance);
  c.reason = match.exact ? "the tuning table " + Quoted(loaded->path) + " has an entry for " +
                               ShapeText(key)
                         : "the nearest tuned shape in " + Quoted(loaded->path) + " is " +
                               ShapeText(e.shape) + " (bucket distance " + distance + ")";
  c.reason += std::string(": ") + KernelName(e.kernel) + " " + TilesText(e.tiles) + figures;
  if (splits_from_rule) {
    c.reason += "; kv_splits from the default rule (the table was tuned with " +
                std::to_string(t.heads) + " head(s), this call has " + std::to_string(in.heads) + ")";
  }
  if (requested.q_block || requested.kv_block || requested.kv_splits) {
    c.reason += "; explicit Options::tiles fields kept";
  }
  return c;
}

AutoChoice ChooseAuto(const TileInputs& in, Causal causal, const Tiles& requested, bool explain) {
  const std::shared_ptr<const LoadedTable> table = ActiveTable();
  // Without a table the target is irrelevant; skip naming it on hot calls.
  const std::string target = table ? CurrentTarget() : std::string();
  return ChooseAutoFrom(table.get(), target, in, causal, requested, explain);
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
  return ExplainChoice(shape, Options{KernelId::kAuto, threads, Tiles{}});
}

AutoChoice ExplainChoice(const Problem& problem, const Options& options) {
  internal::InitTargetsOnce();
  const internal::TileInputs in =
      internal::TileInputsFor(problem, internal::ResolveThreads(options.threads));
  if (options.kernel != KernelId::kAuto) {
    AutoChoice c;
    c.kernel = options.kernel;
    c.tiles = internal::ResolveTiles(options.tiles, in);
    c.threads = in.threads;
    c.source = "explicit";
    c.reason = std::string("Options::kernel names ") + KernelName(options.kernel) +
               "; the tuning table is not consulted";
    return c;
  }
  return internal::ChooseAuto(in, problem.causal, options.tiles, /*explain=*/true);
}

}  // namespace attn
