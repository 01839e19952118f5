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

// The configurations each shape runs through: every SIMD kernel with default
// tiles, with small ragged tiles (many key tiles, partial panels, several
// query blocks), and the parallel kernel at several thread counts with and
// without split-KV.
struct Variant {
  std::string name;
  Options options;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  for (KernelId k : {KernelId::kBlocked, KernelId::kStreaming, KernelId::kParallel, KernelId::kAuto}) {
    Options o;
    o.kernel = k;
    o.threads = 1;
    v.push_back({std::string(KernelName(k)) + "/default", o});
    o.tiles.q_block = 1;  // rounded up to one panel
    o.tiles.kv_block = 7;
    v.push_back({std::string(KernelName(k)) + "/ragged-tiles", o});
  }
  for (int threads : {2, 3, 4}) {
    for (int splits : {1, 3}) {
      Options o;
      o.kernel = KernelId::kParallel;
      o.threads = threads;
      o.tiles.q_block = 1;
      o.tiles.kv_splits = splits;
      v.push_back({"parallel/threads" + std::to_string(threads) + "/splits" + std::to_string(splits), o});
    }
  }
  Options o;
  o.kernel = KernelId::kAuto;
  o.threads = 2;
  v.push_back({"auto/threads2", o});
  return v;
}

class KernelsTest : public ::testing::TestWithParam<Shape> {};

TEST_P(KernelsTest, MatchesReferenceOnEveryTarget) {
  OwnedProblem owned = MakeProblem(GetParam());
  const reference::Result ref = reference::Attention(owned.problem);
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Errors naive_err = RunAndCompare(owned, ref, naive);
  const Bound bound = BoundFromNaive(naive_err, owned.problem, ref);
  const std::vector<std::string> targets = SupportedTargets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    ForceTarget(target);
    for (const Variant& variant : Variants()) {
      SCOPED_TRACE(target + " " + variant.name);
      const Errors e = RunAndCompare(owned, ref, variant.options);
      EXPECT_LE(e.out, bound.out) << "naive error " << naive_err.out;
      EXPECT_LE(e.lse, bound.lse) << "naive lse error " << naive_err.lse;
    }
  }
  ForceTarget("auto");
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
  // Views of at most half a panel of rows (8 on AVX2, 4 on SSE4/EMU128) take
  // the narrow (lanes along d) path of the streaming and parallel kernels, in
  // groups of up to 4 rows: every group size and a second partial group,
  // ragged d (scalar dot-product and column tails, d < one vector), ragged
  // T_k (key blocks of 8/R, padded score rows), each causal alignment (rows
  // of one view with different limits), additive masks with fully masked
  // rows, and grouped decode of 3 and 6 heads.
  {
    const int64_t dims[] = {3, 17, 128, 40, 64, 7, 96, 33};
    for (int64_t rows = 1; rows <= 8; ++rows) {
      for (Causal c : {Causal::kNone, Causal::kBottomRight, Causal::kTopLeft}) {
        Shape s;
        s.tq = rows;
        s.tk = 293;
        s.d = dims[rows - 1];
        s.dv = rows == 2 || rows == 7 ? 70 : 0;
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
    for (int64_t group : {3, 6}) add(DecodeShape(2 * group, 2, 135, 33));
  }
  add(DecodeShape(40, 1, 517, 64));  // MQA decode with more heads than one panel holds
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelsTest, ::testing::ValuesIn(Shapes()),
                         [](const auto& info) { return info.param.Name(); });

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
  for (const std::string& target : SupportedTargets()) {
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
