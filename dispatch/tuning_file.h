// The tuning file's schema: the table in memory, its JSON text and its
// validation (dispatch/tuning_file.cc). One list of fields serves both
// directions, so the reader and the writer cannot disagree.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "dispatch/shape_key.h"

namespace attn::internal {

// Bump when a reader of the previous version would misread a new file.
// Readers accept every version <= theirs and ignore newer files.
// Version 2 added the entries' "window" (ShapeKey::window): a version-1
// reader would apply a windowed entry to full-attention calls, so a table
// with a windowed entry is written as version 2; one without is written as
// version 1, which every reader takes as before (SerializeTuning).
inline constexpr int kTuningSchemaVersion = 2;
// The version SerializeTuning writes for `table`: the oldest that holds it.
struct TuningTable;
int SchemaVersionFor(const TuningTable& table);
inline constexpr const char* kTuningSchemaName = "attn-tuning";

// Tiles a table may name. Beyond these a kernel's scratch (q_block x d,
// kv_splits partial outputs) could exhaust memory, and no measured winner
// comes near them; a file naming more is treated as corrupt.
inline constexpr int kMaxTunedQBlock = 4096;
inline constexpr int kMaxTunedKvBlock = 65536;
inline constexpr int kMaxTunedKvSplits = 1024;

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
  // For an all-bf16 shape (q_type and kv_type bf16): the dot path the winner
  // ran ("widen", "avx512bf16", "amx"; attn.h), which `auto` then takes for
  // the call unless Options::dot_path, ForceDotPath or ATTN_DOT_PATH fixes
  // one. "": the process path (tables of other shapes, older files).
  std::string dot_path;
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

// JSON text of a table (pretty-printed, stable field order).
std::string SerializeTuning(const TuningTable& table);
// Parses and validates a file's text. On failure returns nullopt and sets
// *why to one sentence naming the bad field and value. Checks the schema and
// the fields, not the machine (see CheckTuningMachine).
std::optional<TuningTable> ParseTuning(const std::string& text, std::string* why);
// "" when the table was made on this CPU model and SIMD target, else why not.
std::string CheckTuningMachine(const TuningTable& table, const std::string& cpu_model,
                               const std::string& target);

// "" when the table was made on this CPU model and SIMD target, else why not.
std::string CheckTuningMachine(const TuningTable& table, const std::string& cpu_model,
                               const std::string& target);

}  // namespace attn::internal
