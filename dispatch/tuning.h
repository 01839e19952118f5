// Tuning tables, internals: where the table comes from, the process's
// active table, and the `auto` choice. The schema is dispatch/tuning_file.h,
// the bucketing dispatch/shape_key.h, the machine identity
// dispatch/machine.h. The pure parts (ParseTuning, FindBucket,
// ResolveTuningPath, ChooseAutoFrom) take everything they depend on as
// arguments, so tests/tuning_test.cc checks them without files or globals.
#pragma once

#include <optional>
#include <string>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/dot_path.h"
#include "dispatch/machine.h"
#include "dispatch/shape_key.h"
#include "dispatch/tiles.h"
#include "dispatch/tuning_file.h"

namespace attn::internal {

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
// `problem` is the call's (its shape, causal mode and, for KernelSupports,
// whatever a kernel may decline on); `in` its tile inputs; `dot` the call's
// dot path before the table (an all-bf16 entry's dot_path replaces it
// unless it is fixed, and AutoChoice::dot_path says which one runs).
AutoChoice ChooseAutoFrom(const LoadedTable* table, const std::string& current_target,
                          const Problem& problem, const TileInputs& in, const Tiles& requested,
                          bool explain = true, const DotPathRequest& dot = DotPathRequest{});
// The same with the process's active table (loading it on first use).
AutoChoice ChooseAuto(const Problem& problem, const TileInputs& in, const Tiles& requested,
                      bool explain, const DotPathRequest& dot);
// The dot path an AutoChoice names: its dot_path, else `fallback` (a
// problem that is not all-bf16).
DotPath ChosenDotPath(const AutoChoice& choice, DotPath fallback);

// Reads, parses and machine-checks a file; on failure returns nullopt and
// the warning to print.
std::optional<LoadedTable> ReadTuningFile(const std::string& path, std::string* warning);
// What the first-use load does (exposed so tests can run it with their own
// environment; the library runs it once, under std::call_once).
TuningStatus LoadFromEnvironment();

}  // namespace attn::internal
