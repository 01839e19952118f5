// Tuning tables: what KernelId::kAuto runs, per shape, on this machine.
//
// attn-tune (tools/tune) times every kernel and tile configuration on the
// user's own hardware and writes the winners to a JSON tuning file. The
// library loads one at the first call that needs it (attention with
// KernelId::kAuto, or ExplainChoice), from, in this order:
//   1. an explicit LoadTuningFile(path) call made before (it also replaces a
//      table loaded earlier);
//   2. the environment variable ATTN_TUNING_FILE (set but empty: no table);
//   3. DefaultTuningPath(), when that file exists.
// `auto` then looks up the call's (T_q, T_k, d, causal, threads, element
// types, sliding-window span): an exact entry, else the entry of the
// nearest shape bucket, else the built-in default rule. A windowed call
// only ever takes a windowed entry, and a full one a full one
// (docs/tuner.md "Sliding windows"). Explicit (non-zero) Options::tiles fields still win.
//
// A file made on another CPU model or SIMD target, or one that is corrupt,
// truncated, of a newer schema, or has missing or ill-typed fields, is
// ignored as a whole with one warning line on stderr: the default rule is
// used and results are unchanged (a table only ever changes speed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attn/attn.h"

namespace attn {

struct TuningStatus {
  bool loaded = false;   // a table is active
  std::string path;      // where it came from ("" when none)
  size_t entries = 0;    // shapes in the active table
  std::string warning;   // why the last load attempt was ignored ("" if it wasn't)
};

// Replaces the active table with the file's. On any problem the active table
// is cleared (defaults are used), the warning is printed to stderr once, and
// returned in TuningStatus::warning. Never throws for a bad file.
TuningStatus LoadTuningFile(const std::string& path);
// Drops the active table; `auto` uses the default rule from now on (the
// environment is not consulted again).
void ClearTuning();
// The active table (performs the first-use load if it has not happened).
TuningStatus CurrentTuning();
// The per-user cache path: $XDG_CACHE_HOME/attn/tuning.json, else
// $HOME/.cache/attn/tuning.json; "" when neither variable is set.
std::string DefaultTuningPath();

// What `auto` picks for a shape, and why.
struct AutoChoice {
  KernelId kernel = KernelId::kStreaming;
  Tiles tiles;          // resolved: every field > 0
  int threads = 1;      // the thread count the lookup used
  // "table" (exact entry), "bucket" (nearest entry), "default" (built-in
  // rule), or "explicit" (Options::kernel was not kAuto).
  std::string source;
  std::string reason;   // one human-readable sentence
  // The instruction-set path and the arithmetic of the element types, e.g.
  // "AVX2 float32 FMA; k, v bf16 widened to float32 exactly", or for an
  // all-bf16 problem under a dot path (attn.h ForceDotPath) "AVX3 bf16 dot
  // products, P rounded to bf16 (dot path avx512bf16)".
  std::string path;
  // For a problem whose Q, K and V are all bf16: the dot path the call
  // takes (attn.h "bf16 dot-product paths": Options::dot_path, else
  // ForceDotPath / ATTN_DOT_PATH, else the tuning entry's, else the default
  // rule); "" for every other problem.
  std::string dot_path;
  // Whether the row of the kernel table that runs the call takes bf16 dot
  // products on dot_path (path then names it); false where it widens the
  // inputs to float32, as every kernel does for other problems.
  bool dot_product_row = false;
  // The decode walk of the call's narrow views (at most one vector of query
  // rows: decode, GQA groups; docs/decode-walks.md), e.g. "row", or
  // "tiled (decode_walk row declined: K or V rows are not adjacent; it takes
  // …)" where Options::decode_walk named one that declined; "" where the
  // kernel takes no decode walk (wider views, naive, blocked). Told from the first view.
  std::string decode_walk;
};
// For a problem of batch * heads = 1 with d_v = d; threads 0 means what
// attention() would use (OpenMP's default).
AutoChoice ExplainChoice(int64_t q_len, int64_t kv_len, int64_t head_dim,
                         Causal causal = Causal::kNone, int threads = 0);
// Exactly what attention(problem, options) would run, options.tiles
// overrides included.
AutoChoice ExplainChoice(const Problem& problem, const Options& options = {});

}  // namespace attn
