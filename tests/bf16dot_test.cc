// The bf16 dot-product paths (attn.h "bf16 dot-product paths", kernels/
// bf16dot/): every kernel variant of the table on all-bf16 problems against
// the float64 reference, on every supported target through the emulated
// instruction layer and, where this CPU has AVX512-BF16, on AVX3 through
// the instruction itself; the hardware kernels against the emulated ones
// bit for bit; dispatch (which rows take which problems, forcing, errors).
//
// The bound (docs/precision.md, bf16 dot-product paths). The path
// computes scores exactly as float32 code does (a bf16 x bf16 product is
// exact in float32, the d-term sums round as the naive kernel's), and its
// softmax is the other kernels' float32 one; what differs is that each
// unnormalised weight w_j is rounded to bf16 before P·V: w~_j = w_j (1 + e_j),
// |e_j| <= 2^-9 (8 significant bits, to nearest even), while the normaliser
// S = Σ w_j is the float32 sum of the unrounded weights. So
//   out_ic = Σ_j w~_j v_jc / S = Σ_j w_j v_jc / S + Σ_j e_j w_j v_jc / S,
// and the second term is at most 2^-9 Σ_j p_j |v_jc|, which is the float64
// reference's output for |V| in place of V, times 2^-9. Per element:
//   |out_ic - ref_ic| <= B32 + 2^-8 · ref(|V|)_ic
// with B32 the float32 kernels' bound on the same input (test_util.cc
// BoundFromNaive: 4x the naive kernel's error plus a floor) and a factor 2
// over the worst case for the float32 error of the weights that the
// rounding term multiplies. The tests below show that it still fails on a
// kernel that drops one key, or swaps the two halves of a K pair.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "dispatch/dot_path.h"
#include "dispatch/kernel_table.h"
#include "kernels/amx/amx.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;

bool Has(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& n : names) {
    if (n == name) return true;
  }
  return false;
}

// Whether `path` is offered with `target` forced: each instruction is
// tested on its own target (AVX3, NEON), which need not be the best one
// (with SVE compiled, aarch64's best is SVE2).
bool OfferedOn(const std::string& path, const std::string& target) {
  if (!Has(SupportedTargets(), target)) return false;
  ForceTarget(target);
  const bool offered = Has(SupportedDotPaths(), path);
  ForceTarget("auto");
  return offered;
}

// The dot paths other than widen that run here, each with the targets it
// runs on: the emulated layer on every supported target, the instruction
// on its own target only (AVX3, NEON).
struct PathTargets {
  std::string path;
  std::vector<std::string> targets;
};
std::vector<PathTargets> RealDotPaths() {
  std::vector<PathTargets> out;
  out.push_back({"avx512bf16-emulated", TestTargets()});
  if (OfferedOn("avx512bf16", "AVX3")) out.push_back({"avx512bf16", {"AVX3"}});
  out.push_back({"amx-emulated", TestTargets()});
  if (OfferedOn("amx", "AVX3")) out.push_back({"amx", {"AVX3"}});
  // Arm's BFDOT (round to odd): its emulation everywhere, the instruction
  // on aarch64's NEON with FEAT_BF16 (qemu-aarch64 -cpu max has it).
  out.push_back({"bfdot-emulated", TestTargets()});
  if (OfferedOn("bfdot", "NEON")) out.push_back({"bfdot", {"NEON"}});
  return out;
}

// Restores the default target and dot path however a test ends.
struct PathGuard {
  ~PathGuard() {
    ForceTarget("auto");
    ForceDotPath("auto");
  }
};


Shape Bf16Shape(int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                Causal causal, bool mask = false, Layout layout = Layout::kBHTD,
                int64_t pad = 0, DType out = kF32) {
  Shape s;
  s.batch = 2;
  s.q_heads = hq;
  s.kv_heads = hkv;
  s.tq = tq;
  s.tk = tk;
  s.d = d;
  s.dv = dv;
  s.causal = causal;
  s.additive_mask = mask;
  s.fully_masked_rows = mask ? 2 : 0;
  s.layout = layout;
  s.row_padding = pad;
  s.q_type = s.k_type = s.v_type = kBF16;
  s.out_type = out;
  s.seed = uint64_t(hq * 1000 + tq * 31 + tk * 7 + d);
  return s;
}

// Ragged everything (odd d, d_v and key counts, partial panels at every
// panel width), GQA, every causal alignment, masks with fully masked rows,
// sequence-major padded rows, bf16 output, and few-row views.
std::vector<Shape> Bf16Shapes() {
  return {
      Bf16Shape(2, 1, 37, 53, 19, 11, Causal::kNone),
      Bf16Shape(2, 2, 37, 53, 19, 11, Causal::kBottomRight, true),
      Bf16Shape(3, 3, 41, 29, 33, 7, Causal::kTopLeft),
      Bf16Shape(4, 2, 70, 130, 64, 64, Causal::kBottomRight, false, Layout::kBTHD, 5),
      Bf16Shape(1, 1, 33, 33, 128, 128, Causal::kTopLeft, true, Layout::kBHTD, 0, kBF16),
      Bf16Shape(2, 1, 65, 200, 128, 128, Causal::kNone, false, Layout::kBTHD, 3, kBF16),
      Bf16Shape(4, 1, 3, 200, 128, 128, Causal::kBottomRight),  // narrow (decode) views
      // GQA decode (one view per kv head, 4 rows), ragged d and dv, an odd
      // key count; and narrow views with a mask's hidden keys.
      Bf16Shape(8, 2, 1, 301, 50, 40, Causal::kBottomRight),
      Bf16Shape(2, 2, 2, 97, 64, 64, Causal::kNone, true),
      // GQA decode with d = dv of whole pair vectors: the pair row walk on
      // AVX3 (narrow-body.h PairNarrowRowWalk) at its default 256-key
      // tiles, groups of 4, of 8 and of 2 (with a mask's hidden keys:
      // its float32 mix).
      Bf16Shape(8, 2, 1, 601, 128, 128, Causal::kBottomRight),
      Bf16Shape(16, 2, 1, 333, 128, 128, Causal::kBottomRight),  // groups of 8
      Bf16Shape(4, 2, 1, 300, 64, 64, Causal::kNone, true),
      Bf16Shape(8, 2, 1, 300, 64, 64, Causal::kBottomRight),  // groups of 4 in one pass
      Bf16Shape(1, 1, 100, 1, 1, 1, Causal::kNone),             // d = 1, one key
  };
}

class Bf16DotKernels : public ::testing::TestWithParam<Shape> {};

TEST_P(Bf16DotKernels, EveryVariantOnEveryPathAndTargetIsWithinTheBound) {
  PathGuard guard;
  OwnedProblem owned = MakeProblem(GetParam());
  const reference::Result ref = reference::Attention(owned.problem);
  const Bf16DotBound bound = MakeBf16DotBound(owned, ref);
  const std::vector<Variant> variants = KernelVariants();
  for (const PathTargets& pt : RealDotPaths()) {
    for (const std::string& target : pt.targets) {
      ForceTarget(target);
      ForceDotPath(pt.path);
      // The streaming kernel runs the bf16 row (not silently the widened one).
      const internal::KernelImpl& row = internal::ImplFor(KernelId::kStreaming, owned.problem, internal::ActiveDotPath());
      ASSERT_STRNE(row.path, "") << pt.path << " " << target;
      for (const Variant& variant : variants) {
        // A kernel with no bf16 row here (blocked, naive) computes the
        // widened float32 path whatever the dot path: the same code on every
        // path, which DTypeKernels holds to the tighter float32 bound on
        // every target. Running it once per path and target only repeated
        // it (the slowest test of the ASan and qemu runs).
        if (variant.options.kernel != KernelId::kAuto &&
            internal::ImplFor(variant.options.kernel, owned.problem, internal::ActiveDotPath()).path[0] == '\0') {
          continue;
        }
        SCOPED_TRACE(pt.path + " " + target + " " + variant.name);
        owned.ClearOutputs();
        attention(owned.problem, variant.options);
        EXPECT_EQ(FirstBf16DotViolation(owned, ref, bound), "");
      }
      ForceDotPath("auto");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16DotKernels, ::testing::ValuesIn(Bf16Shapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::string name = info.param.Name();
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name + "_" + std::to_string(info.index);
                         });

// Calls fn(path, target) for each AMX path ("amx-emulated", and "amx"
// where it runs) on each target it runs on, with both forced.
template <class Fn>
void ForEachAmxPathAndTarget(const Fn& fn) {
  for (const PathTargets& pt : RealDotPaths()) {
    if (pt.path != "amx-emulated" && pt.path != "amx") continue;
    for (const std::string& target : pt.targets) {
      ForceTarget(target);
      ForceDotPath(pt.path);
      fn(pt.path, target);
      ForceDotPath("auto");
    }
  }
}

// Runs the AMX kernel's loop itself (internal::AmxHeads) on `path` ("amx"
// or "amx-emulated") with these tiles, on the two-pass weights or, with
// fast_weights false, on the general ones for every row.
void RunAmxHeads(OwnedProblem& owned, const std::string& path, const Tiles& tiles,
                 bool fast_weights) {
  internal::RunConfig config;
  config.tiles = tiles;
  config.dot_path = path == "amx" ? internal::DotPath::kAmx : internal::DotPath::kAmxEmulated;
  internal::AmxRun run;
  run.plain_weights = fast_weights;
  owned.ClearOutputs();
  internal::AmxHeads(owned.problem, config, path == "amx", run);
}

// The AMX kernel's two-pass weights (kernels/amx/head-body.h
// AmxRowWeightsTwoPass) rescale a row's O and sum whenever a key tile raises
// its max. Here the scores climb tile by tile (32-key tiles), by little and
// by much, with every query row seeing every tile: within the bound on
// every target through the emulated tiles and on the tiles themselves where
// they run, and the general weights path (AmxRowWeights, what rows with
// modifiers take) alike. A skipped rescale lets an early tile's V outweigh
// the last tile's (.ci/planted_bug.sh amxrescale); the random scores of
// Bf16DotKernels rarely move the max by more than a little.
TEST(AmxRescale, ScoresClimbingAcrossKeyTilesStayWithinTheBound) {
  PathGuard guard;
  constexpr int64_t kTile = 32, kTiles = 8, kD = 32;
  Shape s = Bf16Shape(2, 1, 40, kTile * kTiles, kD, kD, Causal::kNone);
  s.batch = 1;
  OwnedProblem owned = MakeProblem(s);
  // Q entries 1, K row j entries c_j: scaled score_j = kD·c_j/sqrt(kD),
  // climbing from tile to tile by these steps (a little noise per key),
  // so that without its rescale an early tile's weights reach e^42 over
  // the last one's.
  const float tile_score[kTiles] = {0.0f, 3.0f, 6.0f, 18.0f, 19.0f, 40.0f, 41.0f, 42.0f};
  for (size_t i = 0; i < owned.q16.size(); ++i) owned.q16[i] = BFloat16Bits(1.0f);
  const float per_unit = std::sqrt(float(kD)) / float(kD);
  for (int64_t j = 0; j < kTile * kTiles; ++j) {
    const float noise = 0.3f * float((j * 7) % 11) / 11.0f;
    const uint16_t c = BFloat16Bits((tile_score[j / kTile] + noise) * per_unit);
    for (int64_t e = 0; e < kD; ++e) owned.k16[size_t(j * kD + e)] = c;
  }
  for (size_t i = 0; i < owned.q16.size(); ++i) owned.q[i] = FromBFloat16Bits(owned.q16[i]);
  for (size_t i = 0; i < owned.k16.size(); ++i) owned.k[i] = FromBFloat16Bits(owned.k16[i]);
  const reference::Result ref = reference::Attention(owned.problem);
  const Bf16DotBound bound = MakeBf16DotBound(owned, ref);
  ForEachAmxPathAndTarget([&](const std::string& path, const std::string& target) {
    for (const KernelId kernel : {KernelId::kStreaming, KernelId::kParallel}) {
      const Variant variant = MakeVariant("tiles32", kernel, 1, Tiles{32, kTile, 1});
      SCOPED_TRACE(path + " " + target + " " + variant.name);
      owned.ClearOutputs();
      attention(owned.problem, variant.options);
      EXPECT_EQ(FirstBf16DotViolation(owned, ref, bound), "");
    }
    SCOPED_TRACE(path + " " + target + " general weights");
    RunAmxHeads(owned, path, Tiles{64, kTile, 1}, /*fast_weights=*/false);
    EXPECT_EQ(FirstBf16DotViolation(owned, ref, bound), "");
  });
}

// Rows with a mask or score modifiers take the fast weights too, from
// scores AmxPrepareRow made final (kernels/amx/head-body.h), and fall back
// to the general weights where the fast form's base would overflow: here
// rows masked wholly or partly by -FLT_MAX (transformers' masking value;
// such a row's softmax is uniform over its keys), a fully -inf row, a
// random mask, soft-cap and ALiBi, over 32-key tiles, on every target
// through the emulated tiles and on the tiles themselves where they run,
// beside the general path. Scaling prepared scores twice
// (.ci/planted_bug.sh amxprepared) or taking the -FLT_MAX rows on the fast
// form (amxoverflow) fails here.
TEST(AmxWeights, MaskedAndModifiedRowsStayWithinTheBound) {
  PathGuard guard;
  constexpr float kLowest = -std::numeric_limits<float>::max();
  for (const char* mods : {"mask", "mask+softcap", "alibi"}) {
    const bool mask = std::string(mods).rfind("mask", 0) == 0;
    Shape s = Bf16Shape(2, 1, 40, 150, 32, 32, Causal::kNone, mask);
    s.batch = 1;
    s.fully_masked_rows = 0;
    OwnedProblem owned = MakeProblem(s);
    std::vector<float> slopes = {0.5f, 0.125f};
    if (mask) {
      for (int64_t j = 0; j < s.tk; ++j) {
        owned.mask[size_t(0 * s.tk + j)] = kLowest;                       // wholly
        owned.mask[size_t(1 * s.tk + j)] = j % 3 ? kLowest : 0.0f;        // partly
        owned.mask[size_t(2 * s.tk + j)] = j < 100 ? kLowest : -0.5f;     // late keys only
        owned.mask[size_t(3 * s.tk + j)] = -std::numeric_limits<float>::infinity();
      }
      if (std::string(mods) == "mask+softcap") owned.problem.softcap = 2.0f;
    } else {
      owned.problem.alibi_slopes.data = slopes.data();
    }
    const reference::Result ref = reference::Attention(owned.problem);
    const Bf16DotBound bound = MakeBf16DotBound(owned, ref);
    ForEachAmxPathAndTarget([&](const std::string& path, const std::string& target) {
      for (const bool fast : {true, false}) {
        SCOPED_TRACE(path + " " + target + " " + mods + (fast ? " fast" : " general") +
                     " weights");
        RunAmxHeads(owned, path, Tiles{64, 32, 1}, fast);
        EXPECT_EQ(FirstBf16DotViolation(owned, ref, bound), "");
      }
    });
  }
}

// The bound is tight enough to catch a wrong kernel: the path's own output
// for a problem with one key fewer, or with each K pair's halves swapped
// (a VNNI packing mistake), exceeds it on the inputs the tests use.
TEST(Bf16DotBound, FailsForADroppedKeyOrSwappedPairHalves) {
  PathGuard guard;
  for (const char* path : {"avx512bf16-emulated", "amx-emulated", "bfdot-emulated"})
  for (const Shape& s : {Bf16Shapes()[0], Bf16Shapes()[3], Bf16Shapes()[5]}) {
    ForceDotPath(path);
    SCOPED_TRACE(std::string(path) + " " + s.Name());
    OwnedProblem owned = MakeProblem(s);
    const reference::Result ref = reference::Attention(owned.problem);
    const Bf16DotBound bound = MakeBf16DotBound(owned, ref);
    Options streaming;
    streaming.kernel = KernelId::kStreaming;
    owned.ClearOutputs();
    attention(owned.problem, streaming);
    ASSERT_EQ(FirstBf16DotViolation(owned, ref, bound), "");  // the right kernel passes

    Problem dropped = owned.problem;
    dropped.kv_len -= 1;
    dropped.causal = Causal::kNone;  // keep every row's visible set but one key
    if (owned.problem.causal == Causal::kNone) {
      owned.ClearOutputs();
      attention(dropped, streaming);
      EXPECT_NE(FirstBf16DotViolation(owned, ref, bound), "") << "a dropped key passed";
    }

    std::vector<uint16_t> saved = owned.k16;
    for (size_t i = 0; i + 1 < owned.k16.size(); i += 2) std::swap(owned.k16[i], owned.k16[i + 1]);
    owned.ClearOutputs();
    attention(owned.problem, streaming);
    owned.k16 = saved;
    EXPECT_NE(FirstBf16DotViolation(owned, ref, bound), "") << "swapped K pair halves passed";
    // The hostile-input oracle's analytical bound for the path rejects it too.
    EXPECT_NE(oracle::Check(owned.problem, ref), "") << "the oracle passed swapped K halves";
  }
}

// Where the CPU has the instruction, the hardware kernels equal the
// emulated ones bit for bit: the layer is exact on normal values and all
// the rest is the same code. vdpbf16ps on AVX3; BFDOT on aarch64's NEON
// (under qemu-aarch64 -cpu max in .ci/arm.sh).
TEST(Bf16DotHardware, EqualsTheEmulationBitForBit) {
  struct Pair {
    const char* hardware;
    const char* emulated;
    const char* target;
  };
  std::vector<Pair> pairs;
  PathGuard guard;
  for (const Pair& pair : {Pair{"avx512bf16", "avx512bf16-emulated", "AVX3"},
                           Pair{"bfdot", "bfdot-emulated", "NEON"}}) {
    if (OfferedOn(pair.hardware, pair.target)) pairs.push_back(pair);
  }
  if (pairs.empty()) {
    GTEST_SKIP() << "this CPU has neither AVX512-BF16 (with AVX3) nor FEAT_BF16: only the "
                    "emulated paths run here, and Bf16DotKernels tests them on every target";
  }
  for (const Pair& pair : pairs) {
    ForceTarget(pair.target);
    for (const Shape& shape : Bf16Shapes()) {
      SCOPED_TRACE(std::string(pair.hardware) + " " + shape.Name());
      OwnedProblem owned = MakeProblem(shape);
      for (const Variant& variant : KernelVariants()) {
        if (variant.options.kernel == KernelId::kNaive || variant.options.kernel == KernelId::kBlocked)
          continue;  // no bf16 row
        SCOPED_TRACE(variant.name);
        ForceDotPath(pair.emulated);
        owned.ClearOutputs();
        attention(owned.problem, variant.options);
        const std::vector<float> out = owned.out, lse = owned.lse;
        const std::vector<uint16_t> out16 = owned.out16;
        ForceDotPath(pair.hardware);
        owned.ClearOutputs();
        attention(owned.problem, variant.options);
        EXPECT_EQ(0, std::memcmp(out.data(), owned.out.data(), out.size() * sizeof(float)));
        EXPECT_EQ(out16, owned.out16);
        EXPECT_EQ(0, std::memcmp(lse.data(), owned.lse.data(), lse.size() * sizeof(float)));
      }
    }
  }
}

// NaN and ±Inf in V reach exactly the rows that see their key (the float32
// slow path of such tiles), as on the widened path.
TEST(Bf16DotHostile, NonFiniteVReachesOnlyTheRowsThatSeeIt) {
  PathGuard guard;
  for (const PathTargets& pt : RealDotPaths()) {
    // An instruction runs on its one target (AVX3, NEON), which need not be
    // the best one (aarch64 with SVE compiled: SVE2); an emulation on any.
    ForceTarget(pt.targets.size() == 1 ? pt.targets.front() : "auto");
    ForceDotPath(pt.path);
    Shape s = Bf16Shape(1, 1, 40, 40, 16, 8, Causal::kTopLeft);
    OwnedProblem owned = MakeProblem(s);
    // Key 20: value column 3 NaN, column 5 +inf (bf16 bits).
    const int64_t key = 20;
    owned.v16[size_t(key * owned.problem.v.row_stride + 3)] = 0x7FC0;
    owned.v16[size_t(key * owned.problem.v.row_stride + 5)] = 0x7F80;
    const reference::Result ref = reference::Attention(owned.problem);
    Options streaming;
    streaming.kernel = KernelId::kStreaming;
    attention(owned.problem, streaming);
    const int64_t dv = 8;
    for (int64_t i = 0; i < s.tq; ++i) {
      const float nan_col = ElementAt(owned.problem.out, i * owned.problem.out.row_stride + 3);
      const float inf_col = ElementAt(owned.problem.out, i * owned.problem.out.row_stride + 5);
      if (i < key) {  // top-left causal: row i sees keys <= i
        EXPECT_FALSE(std::isnan(nan_col)) << pt.path << " row " << i;
        EXPECT_TRUE(std::isfinite(inf_col)) << pt.path << " row " << i;
        EXPECT_NEAR(nan_col, ref.out[size_t(i * dv + 3)], 1e-2) << pt.path << " row " << i;
      } else {
        EXPECT_TRUE(std::isnan(nan_col)) << pt.path << " row " << i;
        EXPECT_EQ(inf_col, std::numeric_limits<float>::infinity()) << pt.path << " row " << i;
      }
    }
    ForceDotPath("auto");
  }
}

// Only all-bf16 problems take the path: an f16 input is never rounded to
// bf16, and f32 inputs stay exact; those problems run the widened rows and
// meet the float32 bound under every forced dot path.
TEST(Bf16DotDispatch, OtherTypeMixesKeepTheWidenedPath) {
  PathGuard guard;
  ForceDotPath("avx512bf16-emulated");
  const std::vector<std::vector<DType>> mixes = {
      {kF16, kF16, kF16}, {kBF16, kBF16, kF16}, {kBF16, kF32, kBF16}, {kF32, kF32, kF32}};
  for (const auto& mix : mixes) {
    Shape s = Bf16Shape(2, 1, 37, 53, 19, 11, Causal::kBottomRight, true);
    s.q_type = mix[0];
    s.k_type = mix[1];
    s.v_type = mix[2];
    OwnedProblem owned = MakeProblem(s);
    SCOPED_TRACE(s.Name());
    EXPECT_STREQ(internal::ImplFor(KernelId::kStreaming, owned.problem, internal::ActiveDotPath()).path, "");
    EXPECT_STREQ(internal::ImplFor(KernelId::kParallel, owned.problem, internal::ActiveDotPath()).path, "");
    ExpectVariantsWithinNaiveBound(owned, {MakeVariant("streaming", KernelId::kStreaming, 1),
                                           MakeVariant("parallel/t2", KernelId::kParallel, 2)});
  }
}

// Options::round_inputs_to_bf16: float32 and f16 inputs (any mix) are
// rounded to bf16 and take the bf16 rows; the result is that of the
// all-bf16 problem of the rounded values, bit for bit, on every path.
TEST(Bf16DotRounding, OptInRoundsFloat32AndF16InputsAsTheBf16ProblemOfTheirValues) {
  PathGuard guard;
  const std::vector<std::vector<DType>> mixes = {
      {kF32, kF32, kF32}, {kF16, kF16, kF16}, {kF32, kBF16, kF16}};
  for (const PathTargets& pt : RealDotPaths()) {
    // An instruction runs on its one target (AVX3, NEON), which need not be
    // the best one (aarch64 with SVE compiled: SVE2); an emulation on any.
    ForceTarget(pt.targets.size() == 1 ? pt.targets.front() : "auto");
    ForceDotPath(pt.path);
    for (const auto& mix : mixes) {
      Shape s = Bf16Shape(2, 1, 37, 53, 19, 11, Causal::kBottomRight, true, Layout::kBTHD, 3);
      s.q_type = mix[0];
      s.k_type = mix[1];
      s.v_type = mix[2];
      OwnedProblem given = MakeProblem(s);
      SCOPED_TRACE(pt.path + " " + s.Name());
      // The same values rounded to bf16, as an all-bf16 problem.
      Shape sb = s;
      sb.q_type = sb.k_type = sb.v_type = kBF16;
      OwnedProblem rounded = MakeProblem(sb);
      auto round_into = [](DType type, const std::vector<float>& f32,
                           const std::vector<uint16_t>& bits, std::vector<uint16_t>& out) {
        for (size_t i = 0; i < out.size(); ++i) {
          const float x = type == kF32 ? f32[i] : type == kF16 ? FromFloat16Bits(bits[i])
                                                               : FromBFloat16Bits(bits[i]);
          out[i] = BFloat16Bits(x);
        }
      };
      round_into(s.q_type, given.q, given.q16, rounded.q16);
      round_into(s.k_type, given.k, given.k16, rounded.k16);
      round_into(s.v_type, given.v, given.v16, rounded.v16);
      const reference::Result ref = reference::Attention(rounded.problem);
      const Bf16DotBound bound = MakeBf16DotBound(rounded, ref);
      for (const Variant& variant : {MakeVariant("streaming", KernelId::kStreaming, 1),
                                     MakeVariant("parallel/t2", KernelId::kParallel, 2)}) {
        SCOPED_TRACE(variant.name);
        Options opt = variant.options;
        opt.round_inputs_to_bf16 = true;
        EXPECT_NE(ExplainChoice(given.problem, opt).path.find("rounded to bf16 first"),
                  std::string::npos);
        given.ClearOutputs();
        attention(given.problem, opt);
        rounded.ClearOutputs();
        attention(rounded.problem, variant.options);
        EXPECT_EQ(0, std::memcmp(given.out.data(), rounded.out.data(),
                                 given.out.size() * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(given.lse.data(), rounded.lse.data(),
                                 given.lse.size() * sizeof(float)));
        EXPECT_EQ(FirstBf16DotViolation(given, ref, bound), "");
      }
    }
    ForceDotPath("auto");
  }
}

TEST(Bf16DotDispatch, ForcingNamesThePathAndBadNamesAreErrors) {
  PathGuard guard;
  // The default: the fastest instruction that runs (AMX, then AVX512-BF16;
  // BFDOT on Arm), else widen; never emulated.
  const std::vector<std::string> supported = SupportedDotPaths();
  EXPECT_EQ(CurrentDotPath(), Has(supported, "amx")          ? "amx"
                              : Has(supported, "avx512bf16") ? "avx512bf16"
                              : Has(supported, "bfdot")      ? "bfdot"
                                                             : "widen");
  EXPECT_TRUE(Has(supported, "widen"));
  EXPECT_TRUE(Has(supported, "avx512bf16-emulated"));
  EXPECT_TRUE(Has(supported, "amx-emulated"));
  EXPECT_TRUE(Has(supported, "bfdot-emulated"));
  ForceDotPath("avx512bf16-emulated");
  EXPECT_EQ(CurrentDotPath(), "avx512bf16-emulated");
  try {
    ForceDotPath("sve-bfdot");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "dot_path");
    EXPECT_EQ(e.value(), "sve-bfdot");
    EXPECT_NE(std::string(e.what()).find("amx-emulated"), std::string::npos) << e.what();
  }
  EXPECT_EQ(CurrentDotPath(), "avx512bf16-emulated");  // unchanged by the failed call
  // The instructions need the AVX3 target (and the CPU's AVX512-BF16 / AMX),
  // BFDOT FEAT_BF16 and its NEON layer, which runs whatever the target (on
  // aarch64 with FEAT_BF16 it runs here: it is left out of the list).
  ForceTarget(SupportedTargets().back());  // the lowest supported target
  std::vector<const char*> not_here = {"avx512bf16", "amx"};
  if (!Has(SupportedDotPaths(), "bfdot")) not_here.push_back("bfdot");
  for (const char* path : not_here) {
    try {
      ForceDotPath(path);
      FAIL() << "no error for " << path << " on " << CurrentTarget();
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "dot_path");
      EXPECT_EQ(e.value(), path);
      EXPECT_NE(std::string(e.what()).find("cannot run here"), std::string::npos) << e.what();
    }
  }
  ForceTarget("auto");
  if (!Has(supported, "amx")) {
    // Without AMX (or the OS's permission) the error says which check failed.
    try {
      ForceDotPath("amx");
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("AMX") != std::string::npos) << what;
    }
  }
}

// AMX: the emulated tiles on the forced target, else the rows decline.
TEST(Bf16DotDispatch, EachPathFamilyTakesOnlyItsOwnRows) {
  PathGuard guard;
  OwnedProblem owned = MakeProblem(Bf16Shape(2, 1, 64, 64, 64, 64, Causal::kNone));
  ForceDotPath("amx-emulated");
  EXPECT_STREQ(internal::ImplFor(KernelId::kStreaming, owned.problem, internal::ActiveDotPath()).path,
               "bf16 AMX tiles (tdpbf16ps), P rounded to bf16");
  EXPECT_STREQ(internal::ImplFor(KernelId::kParallel, owned.problem, internal::ActiveDotPath()).path,
               "bf16 AMX tiles (tdpbf16ps), P rounded to bf16");
  ForceDotPath("avx512bf16-emulated");
  EXPECT_STREQ(internal::ImplFor(KernelId::kStreaming, owned.problem, internal::ActiveDotPath()).path,
               "bf16 dot products, P rounded to bf16");
  ForceDotPath("bfdot-emulated");
  EXPECT_STREQ(internal::ImplFor(KernelId::kParallel, owned.problem, internal::ActiveDotPath()).path,
               "bf16 dot products, P rounded to bf16");
  ForceDotPath("widen");
  EXPECT_STREQ(internal::ImplFor(KernelId::kStreaming, owned.problem, internal::ActiveDotPath()).path, "");
  Options o;
  o.kernel = KernelId::kStreaming;
  ForceDotPath("amx-emulated");
  const std::string path = ExplainChoice(owned.problem, o).path;
  EXPECT_NE(path.find("AMX tiles"), std::string::npos) << path;
  EXPECT_NE(path.find("(dot path amx-emulated)"), std::string::npos) << path;
}

// Where the CPU has AMX, the tile kernels against the emulated ones. The
// hardware may sum the 32 products of a tile step in another order than
// the emulation (the SDM leaves it open), so a weight can round to the
// neighbouring bf16; both are held to the reference bound by
// Bf16DotKernels, so they differ by at most twice it.
TEST(AmxHardware, MatchesTheEmulationWithinTwiceTheBound) {
  if (!Has(SupportedDotPaths(), "amx")) {
    GTEST_SKIP() << "AMX cannot run here (" << [] {
      try {
        ForceDotPath("amx");
      } catch (const Error& e) {
        ForceDotPath("auto");
        return std::string(e.what());
      }
      return std::string("?");
    }() << "): only the emulated tiles run, and Bf16DotKernels tests them on every target";
  }
  PathGuard guard;
  ForceTarget("AVX3");
  double worst = 0;
  for (const Shape& shape : Bf16Shapes()) {
    SCOPED_TRACE(shape.Name());
    OwnedProblem owned = MakeProblem(shape);
    const reference::Result ref = reference::Attention(owned.problem);
    const Bf16DotBound bound = MakeBf16DotBound(owned, ref);
    Options streaming;
    streaming.kernel = KernelId::kStreaming;
    ForceDotPath("amx-emulated");
    owned.ClearOutputs();
    attention(owned.problem, streaming);
    std::vector<double> emulated;
    const Problem& p = owned.problem;
    const int64_t rows = p.batch * p.q_heads * p.q_len, dv = p.ValueDim();
    auto out_at = [&](int64_t r, int64_t c) {
      const int64_t b = r / (p.q_heads * p.q_len), h = r / p.q_len % p.q_heads, i = r % p.q_len;
      return double(ElementAt(p.out, b * p.out.batch_stride + h * p.out.head_stride +
                                         i * p.out.row_stride + c));
    };
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dv; ++c) emulated.push_back(out_at(r, c));
    ForceDotPath("amx");
    owned.ClearOutputs();
    attention(owned.problem, streaming);
    for (int64_t r = 0, n = 0; r < rows; ++r) {
      for (int64_t c = 0; c < dv; ++c, ++n) {
        const double diff = std::fabs(out_at(r, c) - emulated[size_t(n)]);
        if (std::isnan(emulated[size_t(n)])) {
          EXPECT_TRUE(std::isnan(out_at(r, c))) << "row " << r << " col " << c;
          continue;
        }
        worst = std::max(worst, diff);
        EXPECT_LE(diff, 2 * (bound.b32 + std::ldexp(bound.abs_v.out[size_t(n)], -8)))
            << "row " << r << " col " << c;
      }
    }
  }
  RecordProperty("max_abs_difference_hardware_vs_emulation", std::to_string(worst));
}

TEST(Bf16DotDispatch, ExplainNamesTheRowThatRuns) {
  PathGuard guard;
  OwnedProblem owned = MakeProblem(Bf16Shape(2, 1, 64, 64, 64, 64, Causal::kNone));
  Options o;
  o.kernel = KernelId::kStreaming;
  ForceDotPath("widen");
  EXPECT_NE(ExplainChoice(owned.problem, o).path.find("widened to float32 exactly"),
            std::string::npos);
  ForceDotPath("avx512bf16-emulated");
  const std::string path = ExplainChoice(owned.problem, o).path;
  EXPECT_NE(path.find("bf16 dot products, P rounded to bf16"), std::string::npos) << path;
  EXPECT_NE(path.find("avx512bf16-emulated"), std::string::npos) << path;
}

}  // namespace
}  // namespace attn::test
