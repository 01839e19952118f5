// Tuning tables, internals: the file schema, its validation, the shape
// bucketing and the `auto` choice. The pure parts (ParseTuning, FindBucket,
// ResolveTuningPath, ChooseAutoFrom) take everything they depend on as
// arguments, so tests/tuning_test.cc checks them without files or globals.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/tiles.h"

namespace attn::internal {

// Bump when a reader of the previous version would misread a new file.
// Readers accept every version <= theirs and ignore newer files.
inline constexpr int kTuningSchemaVersion = 1;
inline constexpr const char* kTuningSchemaName = "attn-tuning";

// Tiles a table may name. Beyond these a kernel's scratch (q_block x d,
// kv_splits partial outputs) could exhaust memory, and no measured winner
// comes near them; a file naming more is treated as corrupt.
inline constexpr int kMaxTunedQBlock = 4096;
inline constexpr int kMaxTunedKvBlock = 65536;
inline constexpr int kMaxTunedKvSplits = 1024;

// The lookup key of a call. `causal` is true when some visible key is masked
// for some query: bottom-right causal with q_len == 1 masks nothing, so it
// shares the non-causal entries (which is what decode needs).
struct ShapeKey {
  int64_t q_len = 1, kv_len = 1, head_dim = 1;
  bool causal = false;
  int threads = 1;
};
ShapeKey MakeShapeKey(int64_t q_len, int64_t kv_len, int64_t head_dim, Causal causal, int threads);

// What attn-tune measured for the winner (informational: the lookup never
// reads it, so these fields are optional in a file).
struct TunedFigures {
  double seconds = 0.0;          // the winner's time per call
  double gflops = 0.0;           // useful FLOPs (visible pairs) per second
  double peak_fraction = 0.0;    // gflops / measured FMA peak at `threads`
  double default_seconds = 0.0;  // the untuned default's time
  double naive_seconds = 0.0;    // the naive kernel's time
  bool naive_extrapolated = false;  // naive timed on sampled rows, scaled up
  double speedup_vs_default = 0.0;
  double speedup_vs_naive = 0.0;
};

struct TuningEntry {
  ShapeKey shape;
  KernelId kernel = KernelId::kStreaming;  // never kAuto
  Tiles tiles;                             // every field in [1, kMaxTuned*]
  TunedFigures figures;
  // Best GFLOP/s of each kernel over its configurations (for reports).
  std::map<std::string, double> kernel_gflops;
};

struct TuningTable {
  int schema_version = kTuningSchemaVersion;
  std::string library_version;
  std::string cpu_model;
  std::string target;   // attn::CurrentTarget() when tuned
  int max_threads = 1;  // omp_get_max_threads() when tuned
  int heads = 1;        // batch * heads of the tuning problems
  std::string created;  // ISO 8601 UTC, informational
  std::map<int, double> peak_gflops;  // measured FMA peak by thread count
  std::vector<TuningEntry> entries;
};

// This process's machine identity, compared with a file's.
std::string LibraryVersion();  // PROJECT_VERSION
std::string CpuModel();        // /proc/cpuinfo "model name", else "unknown"

// JSON text of a table (pretty-printed, stable field order).
std::string SerializeTuning(const TuningTable& table);
// Parses and validates a file's text. On failure returns nullopt and sets
// *why to one sentence naming the bad field and value. Checks the schema and
// the fields, not the machine (see CheckTuningMachine).
std::optional<TuningTable> ParseTuning(const std::string& text, std::string* why);
// "" when the table was made on this CPU model and SIMD target, else why not.
std::string CheckTuningMachine(const TuningTable& table, const std::string& cpu_model,
                               const std::string& target);

// Shape bucketing. Among entries with the same threads, the same causal flag
// and the same kind (decode q_len == 1, or not), an entry is in the key's
// bucket when T_q and T_k are each within a factor of 4 of the key's and d
// within a factor of 2. The nearest by
//   |log2(T_q'/T_q)| + |log2(T_k'/T_k)| + 2·|log2(d'/d)|
// wins (d weighs double: it changes the kernels' register and cache use more
// than T does); ties go to the entry listed first. An identical shape is an
// exact match. The factor-4 reach in T makes a grid with T spaced by 4
// (1..16k) cover every T from 1 to 64k.
struct BucketMatch {
  int index = -1;        // into the entries; -1: no entry in the bucket
  bool exact = false;
  double distance = 0.0;
};
BucketMatch FindBucket(const std::vector<TuningEntry>& entries, const ShapeKey& key);

// Where the first-use load looks: ATTN_TUNING_FILE if set (empty: nowhere),
// else the per-user cache path. `required` is true for the environment
// variable (a missing file then deserves a warning) and false for the cache
// path (no tuning file is the normal state).
struct TuningPath {
  std::string path;
  bool required = false;
};
TuningPath ResolveTuningPath(const char* env_tuning_file, const char* xdg_cache_home,
                             const char* home);

// A loaded, validated table plus where it came from.
struct LoadedTable {
  TuningTable table;
  std::string path;
};

// The `auto` decision for a call, given the active table (may be null) and
// the target the kernels run now. `in` describes the call (threads resolved);
// `requested` holds the caller's explicit tiles (zero fields: choose).
// Without `explain` the reason is left empty: attention() calls this on
// every kAuto call, and decode calls are too short to format sentences for.
AutoChoice ChooseAutoFrom(const LoadedTable* table, const std::string& current_target,
                          const TileInputs& in, Causal causal, const Tiles& requested,
                          bool explain = true);
// The same with the process's active table (loading it on first use).
AutoChoice ChooseAuto(const TileInputs& in, Causal causal, const Tiles& requested,
                      bool explain = false);

// Reads, parses and machine-checks a file; on failure returns nullopt and
// the warning to print.
std::optional<LoadedTable> ReadTuningFile(const std::string& path, std::string* warning);
// What the first-use load does (exposed so tests can run it with their own
// environment; the library runs it once, under std::call_once).
TuningStatus LoadFromEnvironment();

// The thread count attention() uses for Options::threads == requested.
int ResolveThreads(int requested);
// The tile rule's inputs for a problem run with `threads` threads.
TileInputs TileInputsFor(const Problem& problem, int threads);

}  // namespace attn::internal
