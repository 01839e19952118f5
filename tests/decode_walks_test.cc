// Every decode walk of the table (kernels/decode/walk_table.h), forced
// through Options::decode_walk, against its family's simple walk: the
// widened walks (row, pipelined) against the tiled walk, the pair row walk
// against the pair tiled walk. Each reorders the simple walk's operations
// but keeps their order per row and column, so the same bits, on every
// target, kernel and tile size, with masks, causal limits, fully masked
// rows and non-finite values. Every walk is also held to the float64 bound
// by kernels_test, dtype_test, bf16dot_test and the serving tests (the
// amx-tiles row, the AMX prefill kernel, by amx_test). The table's own
// rules and the option's errors are tested at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"  // ExplainChoice
#include "kernels/decode/walk_table.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

// Outputs and lse of one call, as bits.
struct Bits {
  std::vector<uint32_t> out, lse;
};

Bits RunWalk(OwnedProblem& o, Options options, const std::string& walk) {
  options.decode_walk = walk;
  o.ClearOutputs();
  attention(o.problem, options);
  Bits b;
  b.out.resize(o.out.size());
  std::memcpy(b.out.data(), o.out.data(), o.out.size() * sizeof(float));
  b.lse.resize(o.lse.size());
  std::memcpy(b.lse.data(), o.lse.data(), o.lse.size() * sizeof(float));
  return b;
}

std::vector<Shape> DecodeShapes() {
  std::vector<Shape> shapes;
  uint64_t seed = 11;
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    // tk: one key, fewer than a score block (4), a few ragged tiles, many
    // tiles; d ragged (40: a scalar tail in each dot product) and whole.
    // d = d_v (16, 128): the row walk (kernels/decode/row-inl.h) where the row is
    // at most 8 vectors, a V row of 1 to 16 vectors over the targets.
    for (int64_t tk : {1, 3, 37, 300, 1100}) {
      for (int64_t d : {40, 64, 16, 128}) {
        Shape s;
        s.batch = 2;
        s.q_heads = s.kv_heads = 3;
        s.tq = 1;
        s.tk = tk;
        s.d = d;
        s.dv = d == 16 || d == 128 ? d : 32;
        s.k_type = s.v_type = kv;
        s.seed = seed++;
        s.causal = tk % 2 ? Causal::kBottomRight : Causal::kNone;
        s.additive_mask = tk >= 37;  // some -inf entries: hidden keys skipped in the mix
        s.magnitude = d == 64 ? 3.0f : 1.0f;
        shapes.push_back(s);
      }
    }
    Shape masked;  // a row that sees no key: output 0, lse -inf
    masked.q_heads = masked.kv_heads = 2;
    masked.tk = 50;
    masked.d = masked.dv = 64;
    masked.k_type = masked.v_type = kv;
    masked.additive_mask = true;
    masked.fully_masked_rows = 1;
    masked.seed = seed++;
    shapes.push_back(masked);
  }
  // q8_0 and q4_0 K and V: the row walk where d = d_v (a multiple of 32, at
  // most 8 vectors), the block tiled passes otherwise
  // (kernels/decode/quant_passes-inl.h).
  for (DType kv : {DType::kQ8_0, DType::kQ4_0})
  for (int64_t tk : {1, 3, 37, 300, 1100}) {
    for (int64_t d : {64, 128}) {
      Shape s;
      s.q_heads = s.kv_heads = 2;
      s.tq = 1;
      s.tk = tk;
      s.d = s.dv = d;
      s.k_type = s.v_type = kv;
      s.seed = seed++;
      s.causal = tk % 2 ? Causal::kBottomRight : Causal::kNone;
      s.additive_mask = tk >= 37;
      shapes.push_back(s);
    }
  }
  // Views of 2-4 rows (GQA groups of 2, 3 and 4 query heads; 3 causal
  // query rows of one head, each with its own last key): the row walk's
  // group form where d = d_v (at most 8 vectors).
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t tk : {3, 37, 300, 1100}) {
      for (int64_t group : {2, 3, 4}) {
        Shape s;
        s.kv_heads = 2;
        s.q_heads = 2 * group;
        s.tq = 1;
        s.tk = tk;
        s.d = s.dv = tk % 2 ? 64 : 128;
        s.k_type = s.v_type = kv;
        s.seed = seed++;
        s.causal = Causal::kBottomRight;
        s.additive_mask = tk == 37;
        shapes.push_back(s);
      }
      Shape rows;
      rows.tq = 3;
      rows.tk = tk;
      rows.d = rows.dv = 64;
      rows.k_type = rows.v_type = kv;
      rows.seed = seed++;
      rows.causal = Causal::kBottomRight;
      shapes.push_back(rows);
    }
  }
  // Token-major K and V ([T, kv_heads, d]): the kv heads of a token row are
  // a run of views (NarrowHeads) that take each pipelined step in turn, one
  // row or groups of 2 and 4 rows; 9 kv heads make a run of 8 and one view
  // alone; d = 40 a scalar tail in each dot product.
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t tk : {3, 37, 300}) {
      for (int64_t group : {1, 2, 4}) {
        Shape s;
        s.batch = tk == 37 ? 2 : 1;
        s.kv_heads = 9;
        s.q_heads = 9 * group;
        s.tq = 1;
        s.tk = tk;
        s.d = s.dv = tk == 300 ? 128 : 64;
        if (group == 1 && tk == 3) {
          s.d = 40;
          s.dv = 32;
        }
        s.k_type = s.v_type = kv;
        s.layout = Layout::kBTHD;
        s.seed = seed++;
        s.causal = Causal::kBottomRight;
        s.additive_mask = tk == 37;
        shapes.push_back(s);
      }
    }
  }
  return shapes;
}

// Every variant names its key tile: by default the row walk takes longer
// tiles than the tiled walk (kNarrowRowTileKeys against 16 KiB of V), and
// tiles of another length give other bits (the online softmax rescales at
// other keys); 32 keys is within both caps for every shape here. The
// default tiles are held to the float64 bound by kernels_test, dtype_test
// and the serving tests.
std::vector<Variant> Variants() {
  Tiles ragged;
  ragged.q_block = 1;
  ragged.kv_block = 7;
  Tiles one;
  one.kv_block = 1;
  Tiles tile32;
  tile32.kv_block = 32;
  return {MakeVariant("streaming/kv32", KernelId::kStreaming, 1, tile32),
          MakeVariant("streaming/kv7", KernelId::kStreaming, 1, ragged),
          MakeVariant("streaming/kv1", KernelId::kStreaming, 1, one),
          MakeVariant("parallel/t2/kv32", KernelId::kParallel, 2, tile32),
          MakeVariant("parallel/t2/kv7", KernelId::kParallel, 2, ragged)};
}

// The walks of a family: its simple walk first, then those tested against
// it. A forced walk that declines a view leaves it to the table, which
// then picks one of the family (or, forced, the simple walk).
const std::vector<std::string> kWidenedWalks = {"tiled", "row", "pipelined", "auto"};
const std::vector<std::string> kPairWalks = {"pair-tiled", "pair-row", "auto"};

// Each variant's walks of `walks` give the first one's bits on problem o
// (at the target and dot path in force); `also` checks the outputs further
// after each run.
void ExpectWalksAgree(OwnedProblem& o, const std::string& where,
                      const std::vector<std::string>& walks = kWidenedWalks,
                      const std::function<void()>& also = [] {}) {
  for (const Variant& v : Variants()) {
    const Bits simple = RunWalk(o, v.options, walks[0]);
    for (size_t i = 1; i < walks.size(); ++i) {
      SCOPED_TRACE(where + " " + v.name + " " + walks[i] + " against " + walks[0]);
      const Bits other = RunWalk(o, v.options, walks[i]);
      ASSERT_EQ(simple.out, other.out);
      ASSERT_EQ(simple.lse, other.lse);
      also();
    }
  }
}

TEST(DecodeWalks, WidenedWalksGiveTheTiledWalksBits) {
  for (const Shape& shape : DecodeShapes()) {
    SCOPED_TRACE(shape.Name());
    OwnedProblem o = MakeProblem(shape);
    for (const std::string& target : TestTargets()) {
      ForceTarget(target);
      ExpectWalksAgree(o, target);
    }
    ForceTarget("auto");
  }
}

// All-bf16 GQA groups on a bf16 dot-product path: the pair path's row walk
// (kernels/decode/pair_row-body.h PairNarrowRowWalk: groups of 2, 4 and 8
// rows, 8 only where no row can hide a key from another; K and V rows
// adjacent; d = d_v of 2 or 4 vectors of pairs) against its tiled walk
// (PairNarrowGroupTile), on every dot path that runs here (the emulations,
// the instruction where the CPU has it) at the AVX3 target, the only one it
// is compiled for. Odd tiles (7 and 1 keys) end on a key without a pair; a
// mask hides keys (the float32 mix of such a tile); groups of 3, masked
// groups of 8, d = 32 and token-major rows keep the tiled walk, and must
// give its bits too. The row walk's default tiles are held to the float64
// bound by bf16dot_test.
std::vector<Shape> PairShapes() {
  std::vector<Shape> shapes;
  uint64_t seed = 101;
  // An all-bf16 shape of kv_heads x group query heads, tq rows each.
  auto bf16 = [&](int64_t kv_heads, int64_t group, int64_t tq, int64_t tk, int64_t d) {
    Shape s;
    s.kv_heads = kv_heads;
    s.q_heads = kv_heads * group;
    s.tq = tq;
    s.tk = tk;
    s.d = s.dv = d;
    s.q_type = s.k_type = s.v_type = DType::kBF16;
    s.causal = Causal::kBottomRight;
    s.seed = seed++;
    return s;
  };
  for (int64_t tk : {1, 2, 3, 37, 300, 1100}) {
    for (int64_t group : {2, 3, 4, 8}) {
      for (int64_t d : {64, 128, 32}) {
        if (d == 32 && tk != 37) continue;
        Shape s = bf16(2, group, 1, tk, d);
        s.additive_mask = tk == 37 || tk == 1100;
        s.magnitude = tk == 300 ? 3.0f : 1.0f;
        shapes.push_back(s);
      }
    }
  }
  // 2 causal query rows of one head: the last tile hides a key from row 0.
  shapes.push_back(bf16(1, 1, 2, 70, 64));
  Shape token_major = bf16(3, 4, 1, 90, 64);  // [T, kv_heads, d]: the tiled walk
  token_major.layout = Layout::kBTHD;
  shapes.push_back(token_major);
  return shapes;
}

TEST(DecodeWalks, PairRowWalkGivesThePairTiledWalksBits) {
  // The walk is compiled for AVX3 only (pair_row-body.h kPairRowWalkCompiled);
  // on other targets every run would take the pair tiled walk.
  const std::vector<std::string> targets = TestTargets();
  if (std::find(targets.begin(), targets.end(), "AVX3") == targets.end()) {
    GTEST_SKIP() << "the pair row walk runs on the AVX3 target only, not tested here";
  }
  int compared = 0;
  for (const Shape& shape : PairShapes()) {
    SCOPED_TRACE(shape.Name());
    OwnedProblem o = MakeProblem(shape);
    ForceTarget("AVX3");
    for (const std::string& path : SupportedDotPaths()) {
      if (path == "widen") continue;  // no pairs
      ForceDotPath(path);
      // On the amx paths auto gives groups of 8 rows to the tiles (another
      // order of sums), so only the forced pair walks are compared there.
      std::vector<std::string> walks = kPairWalks;
      if (path.rfind("amx", 0) == 0) walks.pop_back();
      ExpectWalksAgree(o, path, walks);
      ++compared;
    }
    ForceDotPath("auto");
    ForceTarget("auto");
  }
  EXPECT_GT(compared, 0);
}

// NaN and infinity in K and V: a NaN score makes the row NaN, an infinite
// V at a hidden key is never read, as in the tiled walk.
TEST(DecodeWalks, NonFiniteInputsGiveTheTiledWalksBits) {
  Shape s;
  s.q_heads = s.kv_heads = 2;
  s.tk = 90;
  s.d = s.dv = 64;
  s.additive_mask = true;
  s.seed = 5;
  OwnedProblem o = MakeProblem(s);
  const float inf = std::numeric_limits<float>::infinity();
  // Head 0: NaN in one K row; head 1: +inf in a V row (key 70), hidden from
  // the row by the mask.
  o.k[10 * s.d + 3] = std::nanf("");
  o.v[(s.tk + 70) * s.dv + 5] = inf;
  o.mask[70] = -inf;  // one mask row, broadcast over the heads
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    ExpectWalksAgree(o, target, kWidenedWalks, [&] {
      EXPECT_TRUE(std::isnan(o.out[0]));            // head 0 saw the NaN
      EXPECT_TRUE(std::isfinite(o.out[s.dv + 5]));  // head 1 never read the inf
    });
  }
  ForceTarget("auto");
}

// Every row of the table is compared bit for bit above, or (amx-tiles, the
// AMX prefill kernel, whose sums run in another order) held to the float64
// bound by amx_test: a new row must join one of these lists.
TEST(DecodeWalks, EveryRowOfTheTableIsTested) {
  for (const internal::DecodeWalkRow& row : internal::DecodeWalks()) {
    const std::string name = row.name;
    const bool widened = std::count(kWidenedWalks.begin(), kWidenedWalks.end(), name) > 0;
    const bool pairs = std::count(kPairWalks.begin(), kPairWalks.end(), name) > 0;
    EXPECT_TRUE(widened || pairs || name == "amx-tiles") << name;
    EXPECT_EQ(internal::ParseDecodeWalk(name), row.walk) << name;
  }
}

// The table's rules, on the facts of views of each kind (the rules as
// docs/decode-walks.md states them, for a target of 16 float32 lanes).
TEST(DecodeWalks, TheTableTakesEachViewByItsRules) {
  using internal::DecodeProducts;
  using internal::DecodeWalk;
  auto view = [](int64_t rows, int64_t d, DType type = DType::kF32) {
    internal::DecodeView v;
    v.rows = rows;
    v.d = v.dv = d;
    v.k_type = v.v_type = type;
    v.float_lanes = 16;
    return v;
  };
  auto choose = [](const internal::DecodeView& v, DecodeWalk forced = DecodeWalk::kAuto) {
    return std::string(internal::DecodeWalkName(internal::ChooseDecodeWalk(v, forced)));
  };
  EXPECT_EQ(choose(view(1, 128)), "row");            // 8 vectors, rows adjacent
  EXPECT_EQ(choose(view(1, 40)), "tiled");           // d_v not whole vectors
  EXPECT_EQ(choose(view(4, 64, DType::kBF16)), "row");
  EXPECT_EQ(choose(view(3, 64)), "tiled");           // no row step for 3 rows
  EXPECT_EQ(choose(view(1, 256)), "pipelined");      // 16 vectors: beyond the row walk
  EXPECT_EQ(choose(view(1, 128, DType::kQ8_0)), "row");
  EXPECT_EQ(choose(view(2, 128, DType::kQ8_0)), "tiled");
  EXPECT_EQ(choose(view(1, 128, DType::kQ4_0)), "row");
  EXPECT_EQ(choose(view(2, 128, DType::kQ4_0)), "tiled");
  EXPECT_EQ(choose(view(1, 128, DType::kQ4_0), DecodeWalk::kPipelined), "tiled");
  internal::DecodeView strided = view(2, 64);
  strided.rows_adjacent = false;  // token-major: a view's rows are kv_heads·d apart
  EXPECT_EQ(choose(strided), "tiled");
  strided.in_run = true;  // with its neighbours in lockstep
  EXPECT_EQ(choose(strided), "pipelined");
  internal::DecodeView mixed = view(1, 64);
  mixed.v_type = DType::kBF16;
  EXPECT_EQ(choose(mixed), "tiled");

  internal::DecodeView pairs = view(4, 128, DType::kBF16);
  pairs.products = DecodeProducts::kPairs;
  EXPECT_EQ(choose(pairs), "pair-tiled");  // the layer has no row walk
  pairs.pair_row_compiled = true;
  EXPECT_EQ(choose(pairs), "pair-row");    // 4 vectors of 32-element pairs
  pairs.spans = true;
  EXPECT_EQ(choose(pairs), "pair-tiled");  // pages
  internal::DecodeView eight = view(8, 64, DType::kBF16);
  eight.products = DecodeProducts::kPairs;
  eight.pair_row_compiled = true;
  EXPECT_EQ(choose(eight), "pair-row");
  eight.same_keys = false;  // a mask: rows may hide different keys
  EXPECT_EQ(choose(eight), "pair-tiled");
  eight.products = DecodeProducts::kAmx;
  EXPECT_EQ(choose(eight), "amx-tiles");
  internal::DecodeView one = view(1, 128, DType::kBF16);
  one.products = DecodeProducts::kAmx;  // one row: the widened walks
  EXPECT_EQ(choose(one), "row");

  // Forced: the table from that row on; a walk that declines passes the
  // view on, and a family's walks never take another family's views.
  EXPECT_EQ(choose(view(1, 128), DecodeWalk::kTiled), "tiled");
  EXPECT_EQ(choose(view(1, 128), DecodeWalk::kPipelined), "pipelined");
  EXPECT_EQ(choose(view(2, 64), DecodeWalk::kPipelined), "tiled");
  EXPECT_EQ(choose(eight, DecodeWalk::kPairRow), "pair-tiled");  // declines the mask
  EXPECT_EQ(choose(eight, DecodeWalk::kTiled), "amx-tiles");     // not a widened view
  const std::string text = internal::ExplainDecodeWalk(view(2, 64), DecodeWalk::kPipelined);
  EXPECT_EQ(text,
            "tiled (decode_walk pipelined declined: not one row, or a group of 2 or 4 in a run "
            "of views; it takes one row (2 or 4 in a run of views), K and V of one 16- or "
            "32-bit type: a tile's mix beside the next tile's scores)");
}

// An unknown walk is an Error naming the field and value, before anything
// is written; ExplainChoice names the walk that runs.
TEST(DecodeWalks, TheOptionIsCheckedAndExplained) {
  Shape s;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.tq = 1;
  s.tk = 300;
  s.d = s.dv = 64;
  OwnedProblem o = MakeProblem(s);
  std::fill(o.out.begin(), o.out.end(), 7.0f);
  Options options;
  options.decode_walk = "no-such-walk";
  try {
    attention(o.problem, options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "decode_walk");
    EXPECT_EQ(e.value(), "no-such-walk");
  }
  for (float x : o.out) ASSERT_EQ(x, 7.0f);

  options.decode_walk = "";
  options.kernel = KernelId::kStreaming;
  const std::string chosen = ExplainChoice(o.problem, options).decode_walk;
  EXPECT_TRUE(chosen == "row" || chosen == "pipelined" || chosen == "tiled") << chosen;
  options.decode_walk = "tiled";
  EXPECT_EQ(ExplainChoice(o.problem, options).decode_walk, "tiled");
  Shape wide = s;  // more query rows than a vector: the panel kernels
  wide.tq = 64;
  OwnedProblem w = MakeProblem(wide);
  EXPECT_EQ(ExplainChoice(w.problem, options).decode_walk, "");
  options.kernel = KernelId::kNaive;
  EXPECT_EQ(ExplainChoice(o.problem, options).decode_walk, "");
}

}  // namespace
}  // namespace attn::test
