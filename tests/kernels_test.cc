// Every kernel x every SIMD target this CPU supports x many shapes, against
// the float64 reference, within the bound of tests/test_util.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

// The configurations each shape runs through, from the kernel table: every
// SIMD kernel with default tiles and with small ragged tiles (many key
// tiles, partial panels, several query blocks), every threaded kernel at 2,
// 3 and 4 threads with and without split-KV, and auto. (Naive is the
// yardstick the bound comes from.)
std::vector<Variant> Variants() {
  std::vector<Variant> v;
  auto add = [&](const std::string& name, KernelId k, int threads, Tiles tiles) {
    v.push_back(MakeVariant(name, k, threads, tiles));
  };
  for (const KernelInfo& k : Kernels()) {
    if (!k.simd) continue;
    add(std::string(k.name) + "/default", k.id, 1, {});
    add(std::string(k.name) + "/ragged-tiles", k.id, 1, {1, 7, 0});  // q_block: one panel
    if (!k.threaded) continue;
    for (int threads : {2, 3, 4}) {
      for (int splits : k.uses_kv_splits ? std::vector<int>{1, 3} : std::vector<int>{0}) {
        add(std::string(k.name) + "/threads" + std::to_string(threads) +
                (splits ? "/splits" + std::to_string(splits) : ""),
            k.id, threads, {1, 0, splits});
      }
    }
  }
  add("auto/default", KernelId::kAuto, 1, {});
  add("auto/ragged-tiles", KernelId::kAuto, 1, {1, 7, 0});
  add("auto/threads2", KernelId::kAuto, 2, {});
  return v;
}

// Rows of the narrow-path sweep in Shapes(): half the widest panel of any
// compiled target (AVX3: 2 vectors x 16 lanes = 32 rows), whatever this CPU
// runs. NarrowSweep.CoversEveryTargetsNarrowViews checks it on this CPU.
constexpr int64_t kNarrowSweepRows = 16;

class KernelsTest : public ::testing::TestWithParam<Shape> {};

TEST_P(KernelsTest, MatchesReferenceOnEveryTarget) {
  OwnedProblem owned = MakeProblem(GetParam());
  ExpectVariantsWithinNaiveBound(owned, Variants());
}

// One decode step (T_q = 1, bottom-right causal) of q_heads over kv_heads.
Shape DecodeShape(int64_t q_heads, int64_t kv_heads, int64_t tk, int64_t d) {
  Shape s;
  s.q_heads = q_heads;
  s.kv_heads = kv_heads;
  s.tq = 1;
  s.tk = tk;
  s.d = d;
  s.causal = Causal::kBottomRight;
  return s;
}

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  uint64_t seed = 100;
  auto add = [&](Shape s) {
    s.seed = seed++;
    shapes.push_back(s);
  };
  // Head dims, ragged T, square, both causal alignments and none.
  for (int64_t d : {1, 3, 8, 17, 64, 80, 96, 128, 256}) {
    for (Causal c : {Causal::kNone, Causal::kBottomRight}) {
      Shape s;
      s.tq = 37;
      s.tk = 53;
      s.d = d;
      s.causal = c;
      add(s);
    }
  }
  // Lengths from 1 to a few thousand, T_q != T_k both ways, both alignments.
  for (auto [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {1, 2}, {2, 1}, {1, 1000}, {1000, 1}, {5, 300}, {300, 5}, {129, 257},
           {257, 129}, {700, 700}}) {
    for (Causal c : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
      Shape s;
      s.tq = tq;
      s.tk = tk;
      s.d = 24;
      s.causal = c;
      add(s);
    }
  }
  {
    Shape s;  // one long causal head at a production head dim
    s.tq = s.tk = 2053;
    s.d = 64;
    s.causal = Causal::kBottomRight;
    add(s);
  }
  // Additive masks with -inf entries and fully masked rows, with and without
  // a causal mask on top.
  for (Causal c : {Causal::kNone, Causal::kBottomRight}) {
    Shape s;
    s.tq = 45;
    s.tk = 67;
    s.d = 19;
    s.causal = c;
    s.additive_mask = true;
    s.fully_masked_rows = 3;
    add(s);
  }
  // Scores of magnitude ~1e4: max subtraction keeps exp finite.
  {
    Shape s;
    s.tq = 33;
    s.tk = 65;
    s.d = 16;
    s.magnitude = 60.0f;  // |q·k| up to 16·3600, scaled ~1e4
    add(s);
  }
  // Batches, GQA/MQA, [B,T,H,d] layout, padded rows, d_v != d.
  {
    Shape s;
    s.batch = 2;
    s.q_heads = 4;
    s.kv_heads = 2;
    s.tq = 19;
    s.tk = 41;
    s.d = 32;
    s.dv = 20;
    s.layout = Layout::kBTHD;
    s.row_padding = 3;
    s.causal = Causal::kBottomRight;
    add(s);
    s.kv_heads = 1;
    s.layout = Layout::kBHTD;
    s.dv = 48;
    s.causal = Causal::kNone;
    add(s);
  }
  // Grouped-query decode (T_q = 1): the group's heads become the rows of
  // one view, in both layouts, with masks and every causal alignment
  // (top-left must not be grouped: only key 0 is visible there).
  for (Causal c : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
    Shape s;
    s.batch = 2;
    s.q_heads = 8;
    s.kv_heads = 2;
    s.tq = 1;
    s.tk = 300;
    s.d = 40;
    s.causal = c;
    s.additive_mask = c == Causal::kNone;
    s.layout = c == Causal::kBottomRight ? Layout::kBTHD : Layout::kBHTD;
    add(s);
  }
  // Views of at most half a panel of rows take the narrow (lanes along d)
  // path of the streaming and parallel kernels, in groups of up to 4 rows:
  // 4 rows on EMU128/SSSE3/SSE4 (8-row panels), 8 on AVX2 (16-row panels),
  // 16 on AVX3 (32-row panels). Every CPU sweeps the same 1..16 rows
  // (kNarrowSweepRows), so AVX3 sweeps its 3 and 4 groups too; on the
  // narrower targets the rows beyond their limit are partial panels. Every
  // group size and partial last groups, ragged d (scalar dot-product and
  // column tails, d < one vector), ragged T_k (key blocks of 8/R, padded
  // score rows), each causal alignment (rows of one view with different
  // limits), additive masks with fully masked rows, and grouped decode of
  // 3, 6, 13 and 16 heads.
  {
    const int64_t dims[kNarrowSweepRows] = {3, 17, 128, 40, 64, 7, 96, 33,
                                            5, 48, 128, 11, 80, 1, 31, 64};
    for (int64_t rows = 1; rows <= kNarrowSweepRows; ++rows) {
      for (Causal c : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
        Shape s;
        s.tq = rows;
        s.tk = 293;
        s.d = dims[rows - 1];
        s.dv = rows % 5 == 2 ? 70 : 0;  // rows 2, 7 and 12
        s.causal = c;
        add(s);
      }
      if (rows > 1) {
        Shape s;
        s.tq = rows;
        s.tk = 61;
        s.d = 9;
        s.additive_mask = true;
        s.fully_masked_rows = 1;
        s.causal = rows % 2 == 1 ? Causal::kBottomRight : Causal::kNone;
        add(s);
      }
    }
    for (int64_t group : {3, 6, 13, 16}) add(DecodeShape(2 * group, 2, 135, 33));
  }
  add(DecodeShape(40, 1, 517, 64));  // MQA decode with more heads than one panel holds
  // GQA decode, groups of 4 at d = 64: on AVX-512 the decode row walk mixes
  // all four rows in one pass (kernels/decode/row-inl.h kRowWalkOutputVectors);
  // elsewhere rows 2-3 take a second pass.
  add(DecodeShape(8, 2, 300, 64));
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelsTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return info.param.Name(); });

// The narrow path takes views of up to half a panel of rows
// (kernels/common/narrow_state-inl.h NarrowMaxRows): the sweep must reach that
// on every target this CPU runs, or a wider target would leave its widest
// narrow views unswept. The panel width P, through the public API: the
// default query block of one query row is one (partial) panel
// (dispatch/tiles.cc, pinned by tests/tiles_test.cc).
TEST(NarrowSweep, CoversEveryTargetsNarrowViews) {
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    SCOPED_TRACE(target);
    const int panel_width = DefaultTiles(1, 1, 1).q_block;
    EXPECT_GE(panel_width, 8);
    EXPECT_LE(panel_width / 2, kNarrowSweepRows);
  }
  ForceTarget("auto");
}

// The bound is tight enough to catch real bugs: an off-by-one that drops the
// last key, and a 0.1% error in the scale, both exceed it on every target.
TEST(BoundTightness, CatchesDroppedKeyAndWrongScale) {
  Shape s;
  s.tq = 37;
  s.tk = 53;
  s.d = 17;
  OwnedProblem owned = MakeProblem(s);
  const reference::Result ref = reference::Attention(owned.problem);
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
  for (const std::string& target : TestTargets()) {
    ForceTarget(target);
    SCOPED_TRACE(target);
    Options streaming;
    streaming.kernel = KernelId::kStreaming;
    OwnedProblem dropped = MakeProblem(s);
    dropped.problem.kv_len = s.tk - 1;  // "forgets" the last key
    attention(dropped.problem, streaming);
    EXPECT_GT(MaxErrors(dropped.problem, ref).out, bound.out);

    OwnedProblem scaled = MakeProblem(s);
    scaled.problem.scale = owned.problem.Scale() * 1.001f;
    attention(scaled.problem, streaming);
    EXPECT_GT(MaxErrors(scaled.problem, ref).out, bound.out);
  }
  ForceTarget("auto");
}

}  // namespace
}  // namespace attn::test
