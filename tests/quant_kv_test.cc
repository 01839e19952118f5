// ggml's block types for K/V, q8_0 and q4_0 (attn::DType::kQ8_0, kQ4_0):
// the quantisers against values computed by hand from ggml's reference
// rules; every kernel x every SIMD target this CPU supports with block K
// and/or V (mixed with f32, bf16 and f16) on ragged key counts, GQA,
// decode, few rows, masks and every causal alignment, against the float64
// reference decoding the same bytes; the bound's power to see a block's
// scale applied to its neighbour or a q4_0 block's nibble halves swapped;
// hostile bytes (NaN / inf / subnormal scales, q = -128, every nibble); the
// serving calls with block K/V and pools; the validation errors; and the
// quantisation error itself within its analytic bound.
//
// The bound (docs/precision.md): a q8_0 element q · s, and a q4_0 element
// (n - 8) · s, is exact in float32 (8 or 4 x 11 significant bits), and
// every path dequantises it exactly before
// the float32 arithmetic, so the reference on those bytes is the exact
// answer the kernels approximate, with the float32 tests' own bound
// (tests/test_util.cc BoundFromNaive: 4x the naive kernel's error on the
// same input, a floor of 16 float ULPs of max|V|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "reference/serving_reference.h"
#include "tests/oracle.h"
#include "tests/serving_test_util.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16,
                kQ8 = DType::kQ8_0, kQ4 = DType::kQ4_0;
constexpr DType kBlockTypes[] = {kQ8, kQ4};

// Bytes of one block of `type`.
size_t BlockBytes(DType type) { return size_t(DTypeBlockBytes(type)); }

// ---- Names and sizes ---------------------------------------------------------

TEST(Q8Types, NamesSizesAndBlocks) {
  EXPECT_EQ(std::string(DTypeName(kQ8)), "q8_0");
  EXPECT_EQ(ParseDType("q8_0"), kQ8);
  EXPECT_EQ(DTypeSize(kQ8), 0);  // no whole bytes per element
  EXPECT_EQ(DTypeBlockElements(kQ8), 32);
  EXPECT_EQ(DTypeBlockBytes(kQ8), 34);
  EXPECT_EQ(DTypeBytes(kQ8, 128), 136);  // 4 blocks
  EXPECT_EQ(DTypeBytes(kF16, 128), 256);
  EXPECT_EQ(DTypeBytes(kF32, 3), 12);
  EXPECT_EQ(DTypeBlockElements(kBF16), 1);
  EXPECT_EQ(DTypeBlockBytes(kF32), 4);
  EXPECT_EQ(DTypeBlockElements(static_cast<DType>(9)), 0);
  EXPECT_EQ(std::string(DTypeName(kQ4)), "q4_0");
  EXPECT_EQ(ParseDType("q4_0"), kQ4);
  EXPECT_EQ(DTypeSize(kQ4), 0);
  EXPECT_EQ(DTypeBlockElements(kQ4), 32);
  EXPECT_EQ(DTypeBlockBytes(kQ4), 18);
  EXPECT_EQ(DTypeBytes(kQ4, 128), 72);  // 4 blocks
  try {
    ParseDType("q5_0");
    ADD_FAILURE() << "q5_0 parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "dtype");
    EXPECT_NE(std::string(e.what()).find("q8_0, q4_0"), std::string::npos) << e.what();
  }
}

// ---- The quantiser -------------------------------------------------------------

// One block's expected bytes: the scale's binary16 bits and the 32 q's.
std::vector<uint8_t> Block(uint16_t scale_bits, const std::vector<int>& q) {
  std::vector<uint8_t> b(34, 0);
  b[0] = uint8_t(scale_bits & 0xff);
  b[1] = uint8_t(scale_bits >> 8);
  for (size_t j = 0; j < q.size(); ++j) b[2 + j] = uint8_t(int8_t(q[j]));
  return b;
}

// Blocks of 32 values, the rest of each block 0 (which quantises to 0).
std::vector<float> Values(const std::vector<float>& head) {
  std::vector<float> x(32, 0.0f);
  std::copy(head.begin(), head.end(), x.begin());
  return x;
}

// Expected values worked out by hand from ggml's quantize_row_q8_0_ref:
// d = amax / 127, id = 1 / d, q = roundf(x · id), d stored as binary16 to
// nearest even. Values are chosen so that x · id is not within float
// rounding of a half (except where the half is exact).
TEST(Q8Quantize, MatchesGgmlsReferenceRuleOnHandComputedBlocks) {
  struct Case {
    const char* what;
    std::vector<float> x;
    uint16_t scale;
    std::vector<int> q;
  };
  const Case cases[] = {
      // amax 127: d = 1 (0x3c00), id = 1, q = roundf(x): halves away from
      // zero (roundf, not rint: 0.5 -> 1, 2.5 -> 3, -63.5 -> -64).
      {"amax 127", Values({127.0f, -63.5f, 0.5f, -0.5f, 2.5f, -2.5f, 1.49f, -126.6f}), 0x3c00,
       {127, -64, 1, -1, 3, -3, 1, -127}},
      // amax 1: d = 1/127 = 2^-7 · 1.00787...; binary16 keeps 10 fraction
      // bits: 0.00787 · 1024 = 8.06 -> 8, so 0x2008 (exponent -7 + 15 = 8).
      // id = 127 (to float rounding): 0.25 -> 31.75 -> 32, -0.1 -> -12.7
      // -> -13, 0.75 -> 95.25 -> 95, 0.004 -> 0.508 -> 1.
      {"amax 1", Values({1.0f, -1.0f, 0.25f, -0.1f, 0.75f, 0.004f, -0.004f}), 0x2008,
       {127, -127, 32, -13, 95, 1, -1}},
      // amax 3 from a negative value: d = 3/127 = 2^-6 · 1.51181; fraction
      // 0.51181 · 1024 = 524.09 -> 524 = 0x20c: 0x2400 | 0x20c = 0x260c.
      // id = 42.333: 1 -> 42, 2 -> 84.67 -> 85, -0.7 -> -29.63 -> -30.
      {"amax 3, negative", Values({-3.0f, 1.0f, 2.0f, -0.7f}), 0x260c, {-127, 42, 85, -30}},
      // All zero: d = 0, id = 0, every q 0.
      {"zeros", Values({}), 0x0000, {}},
      // amax 1e-6: d = 7.87e-9 is below half the smallest binary16
      // subnormal (2^-25 = 2.98e-8), so the stored scale is +0; q is still
      // computed with id = 1 / d: 1e-6 -> 127, 2.5e-7 -> 31.75 -> 32 (and
      // the block decodes to zeros).
      {"scale underflows", Values({1e-6f, 2.5e-7f}), 0x0000, {127, 32}},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> got(34, 0xee);
    QuantizeQ8_0(c.x.data(), 32, got.data());
    const std::vector<uint8_t> want = Block(c.scale, c.q);
    for (size_t i = 0; i < 34; ++i) {
      EXPECT_EQ(int(got[i]), int(want[i])) << c.what << ": byte " << i;
    }
    // Dequantised: q · the binary16 scale, exactly.
    std::vector<float> back(32);
    DequantizeQ8_0(got.data(), 32, back.data());
    for (size_t j = 0; j < 32; ++j) {
      const int q = j < c.q.size() ? c.q[j] : 0;
      EXPECT_EQ(back[j], float(q) * FromFloat16Bits(c.scale)) << c.what << ": element " << j;
    }
  }
}

TEST(Q8Quantize, BlocksAreIndependentAndRowsContiguous) {
  // Two blocks: the second's scale does not depend on the first's values.
  std::vector<float> x(64, 0.0f);
  x[0] = 127.0f;   // block 0: d = 1
  x[32] = -1.0f;   // block 1: d = 1/127 (0x2008)
  x[33] = 0.25f;
  std::vector<uint8_t> got(68, 0xee);
  QuantizeQ8_0(x.data(), 64, got.data());
  EXPECT_EQ(got[0] | (got[1] << 8), 0x3c00);
  EXPECT_EQ(int8_t(got[2]), 127);
  EXPECT_EQ(got[34] | (got[35] << 8), 0x2008);
  EXPECT_EQ(int8_t(got[36]), -127);
  EXPECT_EQ(int8_t(got[37]), 32);
  // n = 0 writes nothing and is no error.
  EXPECT_NO_THROW(QuantizeQ8_0(x.data(), 0, got.data()));
}

// Each block type's quantiser: its scale's divisor (amax / 127; |max| / 8)
// and the binary16 bits of the largest finite scale, which q8_0 stores
// positive and q4_0 negative (d = max / -8 of a positive max).
struct Quantiser {
  DType type;
  void (*quantize)(const float*, int64_t, void*);
  void (*dequantize)(const void*, int64_t, float*);
  float divisor;
  uint16_t largest_scale;
};
const Quantiser kQuantisers[] = {{kQ8, QuantizeQ8_0, DequantizeQ8_0, 127.0f, 0x7bff},
                                 {kQ4, QuantizeQ4_0, DequantizeQ4_0, 8.0f, 0xfbff}};

TEST(BlockQuantize, BadInputNamesTheFieldAndWritesNothing) {
  for (const Quantiser& z : kQuantisers) {
    const size_t bytes = BlockBytes(z.type);
    std::vector<float> x(64, 0.5f);
    std::vector<uint8_t> out(2 * bytes, 0xee);
    const std::vector<uint8_t> before = out;
    auto expect = [&](const std::string& field, const std::string& value, int64_t n) {
      try {
        z.quantize(x.data(), n, out.data());
        ADD_FAILURE() << DTypeName(z.type) << " " << field << ": no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.field(), field) << e.what();
        EXPECT_EQ(e.value(), value) << e.what();
      }
      EXPECT_EQ(out, before) << DTypeName(z.type) << " " << field << ": written";
    };
    expect("n", "33", 33);
    expect("n", "-32", -32);
    x[40] = std::numeric_limits<float>::infinity();  // second block: the first is not written
    expect("x[40]", "inf", 64);
    x[40] = -std::numeric_limits<float>::infinity();
    expect("x[40]", "-inf", 64);
    x[40] = std::nanf("");
    expect("x[40]", "nan", 64);
    // amax / divisor >= 65520 rounds the binary16 scale to inf.
    x[40] = 65520.0f * z.divisor;
    std::ostringstream huge;
    huge << x[40];
    expect("x[40]", huge.str(), 64);
    x[40] = 65519.0f * z.divisor;  // still finite once rounded (65504)
    EXPECT_NO_THROW(z.quantize(x.data(), 64, out.data()));
    EXPECT_EQ(out[bytes] | (out[bytes + 1] << 8), z.largest_scale) << DTypeName(z.type);
    std::vector<float> back(64);
    try {
      z.dequantize(out.data(), 31, back.data());
      ADD_FAILURE() << DTypeName(z.type) << " dequantize n = 31: no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), "n");
    }
  }
}

// One q4_0 block's expected bytes: the scale's binary16 bits and the 32
// nibbles (elements 0-15 low, 16-31 high); unnamed nibbles are 8 (x = 0).
std::vector<uint8_t> Block4(uint16_t scale_bits, const std::vector<int>& low,
                            const std::vector<int>& high = {}) {
  std::vector<uint8_t> b(18, 0);
  b[0] = uint8_t(scale_bits & 0xff);
  b[1] = uint8_t(scale_bits >> 8);
  for (size_t j = 0; j < 16; ++j) {
    const int lo = j < low.size() ? low[j] : 8, hi = j < high.size() ? high[j] : 8;
    b[2 + j] = uint8_t(lo | (hi << 4));
  }
  return b;
}

// Expected values worked out by hand from ggml's quantize_row_q4_0_ref:
// max = the first value of largest |x|, d = max / -8, id = 1 / d, nibble =
// min(15, trunc(x · id + 8.5)), d stored as binary16 to nearest even.
TEST(Q4Quantize, MatchesGgmlsReferenceRuleOnHandComputedBlocks) {
  struct Case {
    const char* what;
    std::vector<float> x;
    uint16_t scale;
    std::vector<int> low, high;
  };
  std::vector<float> high_half = Values({8.0f, -4.0f});
  high_half[16] = -2.0f;  // element 16: the first high nibble
  high_half[17] = 5.0f;
  const Case cases[] = {
      // max 8: d = -1 (0xbc00), id = -1: 8 -> 0.5 -> 0, -4 -> 12.5 -> 12,
      // 2 -> 6, 1 -> 7, 0.5 -> 8, 3.3 -> 5.2 -> 5, -0.6 -> 9.1 -> 9, and
      // -7.9 -> 16.4 -> 16, saturated to 15.
      {"max 8", Values({8.0f, -4.0f, 2.0f, 1.0f, 0.5f, 3.3f, -0.6f, -7.9f}), 0xbc00,
       {0, 12, 6, 7, 8, 5, 9, 15}, {}},
      // Elements 16 and 17 land in the high nibbles of bytes 0 and 1:
      // -2 -> 10.5 -> 10, 5 -> 3.5 -> 3.
      {"high nibbles", high_half, 0xbc00, {0, 12}, {10, 3}},
      // max -6 (negative): d = 0.75 (0x3a00), id = 1.3333334: -6 -> 0,
      // 3 -> 12.5 -> 12, 1.5 -> 10.5 -> 10, -1 -> 7.17 -> 7.
      {"max negative", Values({-6.0f, 3.0f, 1.5f, -1.0f}), 0x3a00, {0, 12, 10, 7}, {}},
      // |-2| = |2|: the first is max, d = 0.25 (0x3400), id = 4: -2 -> 0,
      // 2 -> 16.5 -> 16, saturated to 15 (decodes as 1.75), 1 -> 12.
      {"tie, saturated", Values({-2.0f, 2.0f, 1.0f}), 0x3400, {0, 15, 12}, {}},
      // All zero: max 0, d = 0 / -8 = -0 (0x8000), id = 0: every nibble 8.
      {"zeros", Values({}), 0x8000, {}, {}},
      // max 0.1: d = -0.0125 = -2^-7 · 1.6, fraction 0.6 · 1024 = 614.4 ->
      // 614 = 0x266: 0xa266; id = -80: 0.1 -> 0, 0.03 -> 6.1 -> 6, -0.05
      // -> 12.5 -> 12.
      {"scale rounded", Values({0.1f, 0.03f, -0.05f}), 0xa266, {0, 6, 12}, {}},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> got(18, 0xee);
    QuantizeQ4_0(c.x.data(), 32, got.data());
    const std::vector<uint8_t> want = Block4(c.scale, c.low, c.high);
    for (size_t i = 0; i < 18; ++i) {
      EXPECT_EQ(int(got[i]), int(want[i])) << c.what << ": byte " << i;
    }
    // Dequantised: (nibble - 8) · the binary16 scale, exactly.
    std::vector<float> back(32);
    DequantizeQ4_0(got.data(), 32, back.data());
    for (size_t j = 0; j < 32; ++j) {
      const int nibble = j < 16 ? (j < c.low.size() ? c.low[j] : 8)
                                : (j - 16 < c.high.size() ? c.high[j - 16] : 8);
      EXPECT_EQ(back[j], float(nibble - 8) * FromFloat16Bits(c.scale)) << c.what << ": element "
                                                                        << j;
    }
  }
}

// ---- Kernels ---------------------------------------------------------------------

struct Types {
  DType q, k, v, out;
};
// Block K and V (b: q8_0 or q4_0) with float32 Q and O (a llama.cpp
// cache), with 16-bit Q and O, and a block K or V alone next to every other
// K/V type, the other block type included.
std::vector<Types> TypeCombos(DType b) {
  const DType other = b == kQ8 ? kQ4 : kQ8;
  return {{kF32, b, b, kF32},   {kBF16, b, b, kBF16}, {kF16, b, b, kF32},
          {kF32, b, kF16, kF32}, {kF32, kF16, b, kF32}, {kF32, b, kF32, kF16},
          {kF32, kBF16, b, kF32}, {kF32, b, other, kF32}};
}

Shape WithTypes(Shape s, Types t) {
  s.q_type = t.q;
  s.k_type = t.k;
  s.v_type = t.v;
  s.out_type = t.out;
  return s;
}

std::vector<Shape> BaseShapes() {
  std::vector<Shape> shapes;
  auto add = [&](int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                 Causal c, bool mask = false, Layout layout = Layout::kBHTD, int64_t pad = 0) {
    Shape s;
    s.batch = 2;
    s.q_heads = hq;
    s.kv_heads = hkv;
    s.tq = tq;
    s.tk = tk;
    s.d = d;
    s.dv = dv;
    s.causal = c;
    s.additive_mask = mask;
    s.fully_masked_rows = mask ? 2 : 0;
    s.layout = layout;
    s.row_padding = pad;
    s.seed = uint64_t(shapes.size() + 101);
    shapes.push_back(s);
  };
  // Ragged key and query counts (partial panels, tiles and vectors), one
  // block per row, d != dv.
  add(2, 1, 37, 53, 32, 64, Causal::kNone);
  add(2, 2, 37, 53, 64, 32, Causal::kBottomRight, true);
  add(3, 3, 41, 29, 96, 96, Causal::kTopLeft);
  // Head dims of real models, sequence-major with a padded KV cache row
  // (a block of padding).
  add(4, 2, 70, 130, 64, 64, Causal::kBottomRight, false, Layout::kBTHD, 32);
  add(1, 1, 33, 33, 128, 128, Causal::kTopLeft, true);
  // Decode: one query over a long cache (the narrow path) in GQA groups of
  // 4 and 8, MHA, and a few rows (speculative decoding); causal decode.
  add(8, 2, 1, 300, 64, 64, Causal::kBottomRight);
  add(8, 1, 1, 211, 128, 128, Causal::kNone);
  add(3, 3, 1, 257, 32, 96, Causal::kNone, true);
  add(4, 1, 3, 200, 128, 128, Causal::kBottomRight, false, Layout::kBTHD, 32);
  return shapes;
}

std::vector<Shape> BlockShapes() {
  std::vector<Shape> shapes;
  for (const DType b : kBlockTypes) {
    for (const Shape& base : BaseShapes()) {
      for (const Types& t : TypeCombos(b)) shapes.push_back(WithTypes(base, t));
    }
  }
  return shapes;
}

class BlockKernels : public ::testing::TestWithParam<Shape> {};

TEST_P(BlockKernels, EveryKernelAndTargetMatchesReference) {
  OwnedProblem owned = MakeProblem(GetParam());
  {
    // The bound must be tight enough to catch a wrong kernel at all.
    const reference::Result ref = reference::Attention(owned.problem);
    Options naive;
    naive.kernel = KernelId::kNaive;
    const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
    ASSERT_LT(bound.out, 0.05);
  }
  ExpectVariantsWithinNaiveBound(owned, KernelVariants());
}

INSTANTIATE_TEST_SUITE_P(Combos, BlockKernels, ::testing::ValuesIn(BlockShapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::string name = info.param.Name();
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name + "_" + std::to_string(info.index);
                         });

// Arbitrary bytes, not only what the quantisers write: q = -128 (which
// ggml's q8_0 quantiser never produces), every q4_0 nibble, scales over
// binary16's whole normal and subnormal range, every target and kernel.
TEST(BlockKernels, ArbitraryBlocksOnEveryTarget) {
  for (const DType type : kBlockTypes)
  for (const Shape& base : {BaseShapes()[0], BaseShapes()[5], BaseShapes()[6]}) {
    OwnedProblem owned = MakeProblem(WithTypes(base, {kF32, type, type, kF32}));
    const size_t bytes = BlockBytes(type);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int> byte(0, 255);
    // Scales from 2^-24 (binary16 subnormals) up to 2^-7 for K (|k| < 2:
    // scores of moderate size, so that the softmax is not one key) and 2^-3
    // for V, random signs.
    for (std::vector<uint8_t>* blocks : {&owned.k8, &owned.v8}) {
      std::uniform_int_distribution<int> exponent(-24, blocks == &owned.k8 ? -7 : -3);
      for (size_t b = 0; b < blocks->size() / bytes; ++b) {
        uint8_t* block = blocks->data() + b * bytes;
        const float s = std::ldexp(1.0f + float(byte(rng)) / 256.0f, exponent(rng));
        const uint16_t bits = uint16_t(Float16Bits(s) | (byte(rng) & 1 ? 0x8000 : 0));
        block[0] = uint8_t(bits & 0xff);
        block[1] = uint8_t(bits >> 8);
        for (size_t j = 2; j < bytes; ++j) block[j] = uint8_t(byte(rng));
        block[2 + b % (bytes - 2)] = 0x80;  // q8_0: -128; q4_0: nibbles 0 and 8
      }
    }
    ExpectVariantsWithinNaiveBound(owned, KernelVariants());
  }
}

// The bound sees the mistake a q8_0 path could make with a block's scale:
// K (or V) decoded with each block's scale taken from its neighbour (the
// planted bug .ci/planted/q8-scale-neighbour.patch), or the scale ignored
// (q read as the value). Both must exceed the bound on the inputs above.
TEST(Q8Bound, FailsWhenAScaleIsTakenFromTheNeighbourBlockOrIgnored) {
  for (const Shape& base : {BaseShapes()[0], BaseShapes()[6]}) {  // panels; decode
    OwnedProblem owned = MakeProblem(WithTypes(base, {kF32, kQ8, kQ8, kF32}));
    const reference::Result ref = reference::Attention(owned.problem);
    Options naive;
    naive.kernel = KernelId::kNaive;
    const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
    for (const bool values : {false, true}) {
      std::vector<uint8_t>& blocks = values ? owned.v8 : owned.k8;
      const std::vector<uint8_t> original = blocks;
      const int64_t row_blocks = (values ? owned.problem.ValueDim() : base.d) / 32;
      // (1) Block i read with block i + 1's scale (the last of a row with
      // the first's); for one-block rows, the next row's.
      const size_t n = blocks.size() / 34;
      for (size_t b = 0; b < n; ++b) {
        const size_t from = row_blocks > 1 ? (b % row_blocks + 1 < size_t(row_blocks) ? b + 1
                                                                                    : b + 1 - row_blocks)
                                           : (b + 1) % n;
        blocks[b * 34] = original[from * 34];
        blocks[b * 34 + 1] = original[from * 34 + 1];
      }
      Options streaming;
      streaming.kernel = KernelId::kStreaming;
      const Errors e1 = RunAndCompare(owned, ref, streaming);
      EXPECT_GT(e1.out, bound.out) << base.Name() << (values ? " V" : " K")
                                   << ": neighbour's scale went unnoticed";
      // (2) Every scale 1: q read as the value.
      blocks = original;
      for (size_t b = 0; b < n; ++b) {
        blocks[b * 34] = 0x00;
        blocks[b * 34 + 1] = 0x3c;
      }
      const Errors e2 = RunAndCompare(owned, ref, streaming);
      EXPECT_GT(e2.out, bound.out) << base.Name() << (values ? " V" : " K")
                                   << ": ignored scale went unnoticed";
      blocks = original;
    }
  }
}

// The bound sees the mistake a q4_0 path could make with its nibbles: each
// byte's halves swapped (elements 0-15 read from the high nibbles, 16-31
// from the low: the planted bug .ci/planted/q4-nibble-halves-swapped.patch),
// in K or in V, must exceed the bound on the inputs above.
TEST(Q4Bound, FailsWhenTheNibbleHalvesAreSwapped) {
  for (const Shape& base : {BaseShapes()[0], BaseShapes()[6]}) {  // panels; decode
    OwnedProblem owned = MakeProblem(WithTypes(base, {kF32, kQ4, kQ4, kF32}));
    const reference::Result ref = reference::Attention(owned.problem);
    Options naive;
    naive.kernel = KernelId::kNaive;
    const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
    for (const bool values : {false, true}) {
      std::vector<uint8_t>& blocks = values ? owned.v8 : owned.k8;
      const std::vector<uint8_t> original = blocks;
      for (size_t b = 0; b < blocks.size() / 18; ++b) {
        for (size_t j = 2; j < 18; ++j) {
          const uint8_t x = original[b * 18 + j];
          blocks[b * 18 + j] = uint8_t((x >> 4) | (x << 4));
        }
      }
      Options streaming;
      streaming.kernel = KernelId::kStreaming;
      EXPECT_GT(RunAndCompare(owned, ref, streaming).out, bound.out)
          << base.Name() << (values ? " V" : " K") << ": swapped nibble halves went unnoticed";
      blocks = original;
    }
  }
}

// NaN, ±inf and subnormal scales keep their meaning on every path (the
// hostile-input oracle, tests/oracle.h): q · s with s = inf is ±inf, 0 · inf
// is NaN, as the reference decodes them.
TEST(BlockHostile, NonFiniteAndSubnormalScalesOnEveryTarget) {
  for (const DType type : kBlockTypes)
  for (const Shape& base : {BaseShapes()[0], BaseShapes()[5]}) {  // panels; decode
    OwnedProblem owned = MakeProblem(WithTypes(base, {kF32, type, type, kF32}));
    const size_t bytes = BlockBytes(type);
    auto set_scale = [&](std::vector<uint8_t>& blocks, size_t block, uint16_t bits) {
      blocks[block * bytes] = uint8_t(bits & 0xff);
      blocks[block * bytes + 1] = uint8_t(bits >> 8);
    };
    const size_t kn = owned.k8.size() / bytes, vn = owned.v8.size() / bytes;
    set_scale(owned.v8, vn / 3, 0x7c00);      // +inf
    set_scale(owned.v8, vn / 2, 0xfc00);      // -inf
    set_scale(owned.v8, vn * 3 / 4, 0x7e00);  // NaN
    set_scale(owned.k8, kn / 5, 0x7c00);
    set_scale(owned.k8, kn / 2 + 1, 0x0003);  // subnormal
    // 0 · inf = NaN in that element (q8_0: q = 0; q4_0: nibble 8).
    owned.v8[(vn / 3) * bytes + 5] = type == kQ4 ? 0x88 : 0;
    const reference::Result ref = reference::Attention(owned.problem);
    for (const std::string& target : TestTargets()) {
      ForceTarget(target);
      for (const Variant& variant : KernelVariants()) {
        owned.ClearOutputs();
        attention(owned.problem, variant.options);
        EXPECT_EQ(oracle::Check(owned.problem, ref), "")
            << base.Name() << " " << target << " " << variant.name << " " << DTypeName(type);
      }
    }
    ForceTarget("auto");
  }
}

// Reads stay inside the blocks: the padded shapes above put NaN-scaled
// blocks after every row (a kernel reading one fails them); here K and V
// end exactly at their buffers' ends (batch 1, no padding), so a vector
// load past the last block is an out-of-bounds read that the sanitizer
// builds (cmake/Sanitizers.cmake) report, and the result is checked as
// everywhere else.
TEST(BlockKernels, LastBlockEndsTheBuffer) {
  for (const DType type : kBlockTypes) {
    Shape s = WithTypes(BaseShapes()[6], {kF32, type, type, kF32});
    s.batch = 1;
    OwnedProblem owned = MakeProblem(s);
    ASSERT_EQ(owned.k8.size(), size_t(s.kv_heads * s.tk * s.d / 32) * BlockBytes(type));
    ExpectVariantsWithinNaiveBound(owned, KernelVariants());
  }
}

// ---- The serving calls ---------------------------------------------------------

// Packed block tokens [tokens, heads, cols] quantised from random values.
struct BlockPacked {
  explicit BlockPacked(DType t) : type(t) {}
  DType type;
  std::vector<float> values;
  std::vector<uint8_t> blocks;
  void Random(int64_t tokens, int64_t heads, int64_t cols, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    values.resize(size_t(tokens * heads * cols));
    for (float& x : values) x = u(rng);
    blocks.resize(values.size() / 32 * BlockBytes(type));
    QuantizeBlocksForTest(type, values.data(), int64_t(values.size()), blocks.data());
  }
};

class BlockServing : public ::testing::TestWithParam<DType> {};

TEST_P(BlockServing, VarlenWithBlockKAndV) {
  const DType type = GetParam();
  std::mt19937_64 rng(3);
  const std::vector<int32_t> cu_q{0, 1, 4, 4, 9}, cu_k{0, 37, 40, 77, 77};
  const int64_t hq = 4, hkv = 2, d = 64, dv = 32;
  std::vector<float> q(size_t(cu_q.back() * hq * d)), out(size_t(cu_q.back() * hq * dv)),
      lse(size_t(cu_q.back() * hq));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  BlockPacked k(type), v(type);
  k.Random(cu_k.back(), hkv, d, rng);
  v.Random(cu_k.back(), hkv, dv, rng);
  VarlenProblem p;
  p.batch = 4;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.head_dim = d;
  p.value_dim = dv;
  p.cu_seqlens_q = cu_q.data();
  p.cu_seqlens_k = cu_k.data();
  p.q = {q.data(), hq * d, d, kF32};
  p.k = {k.blocks.data(), hkv * d, d, type};
  p.v = {v.blocks.data(), hkv * dv, dv, type};
  p.out = {out.data(), hq * dv, dv, kF32};
  p.lse = {lse.data(), hq, 1};
  p.causal = Causal::kBottomRight;
  const reference::PackedResult ref = reference::VarlenAttention(p);
  std::vector<float> all_v(v.values.size());
  for (size_t i = 0; i < all_v.size(); ++i) {
    all_v[i] = DecodeBlockForTest(type, v.blocks.data(), int64_t(i));
  }
  Buffer out_buffer;
  ExpectServingVariantsWithinBound(
      [&](const Options& options) {
        std::fill(out.begin(), out.end(), kServingSentinel);
        std::fill(lse.begin(), lse.end(), kServingSentinel);
        VarlenAttention(p, options);
        out_buffer.type = kF32;
        out_buffer.f = out;
        return PackedErrors(out_buffer, lse, ref);
      },
      DenseNaiveErrors(p, ref),
      [&](const Errors& naive) { return PackedBound(naive, ref, all_v, dv, kF32, false); });
}

// A paged block cache (pools of q8_0 or q4_0 pages in shuffled order) with
// new tokens appended: float32 ones quantised by QuantizeQ8_0's or
// QuantizeQ4_0's rule, ones of the pool's type copied block for block; the
// pools are checked byte for byte afterwards.
TEST_P(BlockServing, PagedBlockPoolsWithAppend) {
  const DType type = GetParam();
  const size_t bytes = BlockBytes(type);
  for (const DType new_type : {kF32, type}) {
    std::mt19937_64 rng(5);
    const int64_t batch = 2, hq = 4, hkv = 2, d = 64, dv = 64, bs = 16, max_blocks = 4;
    const std::vector<int32_t> cached{20, 33}, fresh_cu{0, 1, 3};
    const int64_t num_blocks = batch * max_blocks;
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    for (int64_t i = 0; i < num_blocks; ++i) table[size_t(i)] = int32_t((i * 5 + 3) % num_blocks);
    // Pools: every slot quantised from random values (slots past a
    // sequence's keys are never read; their values are as good as any).
    BlockPacked k_pool(type), v_pool(type);
    k_pool.Random(num_blocks * bs, hkv, d, rng);
    v_pool.Random(num_blocks * bs, hkv, dv, rng);
    BlockPacked k_new(type), v_new(type);
    k_new.Random(fresh_cu.back(), hkv, d, rng);
    v_new.Random(fresh_cu.back(), hkv, dv, rng);
    std::vector<float> q(size_t(batch * hq * d)), out(size_t(batch * hq * dv)),
        lse(size_t(batch * hq));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : q) x = u(rng);
    PagedProblem p;
    p.batch = batch;
    p.q_heads = hq;
    p.kv_heads = hkv;
    p.head_dim = d;
    p.value_dim = dv;
    p.num_blocks = num_blocks;
    p.block_size = bs;
    p.k_cache = {k_pool.blocks.data(), bs * hkv * d, hkv * d, d, type};
    p.v_cache = {v_pool.blocks.data(), bs * hkv * dv, hkv * dv, dv, type};
    p.block_table = table.data();
    p.max_blocks = max_blocks;
    p.cache_seqlens = cached.data();
    p.q = {q.data(), hq * d, d, kF32};
    p.q_len = 1;
    if (new_type == type) {
      p.k_new = {k_new.blocks.data(), hkv * d, d, type};
      p.v_new = {v_new.blocks.data(), hkv * dv, dv, type};
    } else {
      p.k_new = {k_new.values.data(), hkv * d, d, kF32};
      p.v_new = {v_new.values.data(), hkv * dv, dv, kF32};
    }
    p.cu_seqlens_new = fresh_cu.data();
    p.out = {out.data(), hq * dv, dv, kF32};
    p.lse = {lse.data(), hq, 1};
    p.causal = Causal::kBottomRight;
    const reference::PackedResult ref = reference::PagedAttention(p);
    std::vector<float> all_v;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<float> s = reference::GatherPagedKeys(p, b, true);
      all_v.insert(all_v.end(), s.begin(), s.end());
    }
    // The pools after the append: the new rows' blocks (quantised by the
    // test's own ggml rule from the same float32 values, or the block bytes).
    std::vector<uint8_t> k_after = k_pool.blocks, v_after = v_pool.blocks;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = fresh_cu[size_t(b)]; i < fresh_cu[size_t(b) + 1]; ++i) {
        const int64_t t = cached[size_t(b)] + i - fresh_cu[size_t(b)];
        const int64_t block = table[size_t(b * max_blocks + t / bs)], slot = t % bs;
        const int64_t k_row = (block * bs + slot) * hkv * d, v_row = (block * bs + slot) * hkv * dv;
        std::memcpy(&k_after[size_t(k_row / 32) * bytes],
                    &k_new.blocks[size_t(i * hkv * d / 32) * bytes], size_t(hkv * d / 32) * bytes);
        std::memcpy(&v_after[size_t(v_row / 32) * bytes],
                    &v_new.blocks[size_t(i * hkv * dv / 32) * bytes],
                    size_t(hkv * dv / 32) * bytes);
      }
    }
    Buffer out_buffer;
    ExpectServingVariantsWithinBound(
        [&](const Options& options) {
          std::fill(out.begin(), out.end(), kServingSentinel);
          std::fill(lse.begin(), lse.end(), kServingSentinel);
          PagedAttention(p, options);
          EXPECT_EQ(k_pool.blocks, k_after) << DTypeName(new_type) << " k_cache after the append";
          EXPECT_EQ(v_pool.blocks, v_after) << DTypeName(new_type) << " v_cache after the append";
          out_buffer.type = kF32;
          out_buffer.f = out;
          return PackedErrors(out_buffer, lse, ref);
        },
        DenseNaiveErrors(p, ref),
        [&](const Errors& naive) { return PackedBound(naive, ref, all_v, dv, kF32, false); },
        /*extra_threads=*/0);
    // A new value that cannot be quantised: named, and nothing written.
    if (new_type == kF32) {
      const std::vector<uint8_t> pool_before = k_pool.blocks;
      const std::vector<float> out_before = out;
      k_new.values[size_t(hkv * d + 3)] = std::numeric_limits<float>::infinity();
      ExpectError("k_new[1][0][3]", "inf", [&] { PagedAttention(p); });
      EXPECT_EQ(k_pool.blocks, pool_before);
      EXPECT_EQ(std::memcmp(out.data(), out_before.data(), out.size() * sizeof(float)), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BlockServing, ::testing::ValuesIn(kBlockTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// ---- Validation --------------------------------------------------------------

// Each mistake names its field and value and writes nothing.
TEST(Q8Errors, InvalidQ8ProblemsNameTheFieldAndWriteNothing) {
  const Shape base = WithTypes(BaseShapes()[5], {kF32, kQ8, kQ8, kF32});  // d = dv = 64
  struct Case {
    const char* field;
    const char* value;
    void (*change)(Problem&);
  };
  const Case cases[] = {
      {"q.dtype", "q8_0", [](Problem& p) { p.q.dtype = DType::kQ8_0; }},
      {"out.dtype", "q8_0", [](Problem& p) { p.out.dtype = DType::kQ8_0; }},
      // head_dim 48: K's rows would end inside a block (Q's rows are read
      // as 48 of the 64 floats: valid strides otherwise).
      {"head_dim", "48", [](Problem& p) { p.head_dim = 48; }},
      {"value_dim", "40", [](Problem& p) { p.value_dim = 40; }},
      {"k.row_stride", "80", [](Problem& p) { p.k.row_stride = 80; }},
      {"v.head_stride", "19216", [](Problem& p) { p.v.head_stride = 19216; }},
      {"k.batch_stride", "38416", [](Problem& p) { p.k.batch_stride = 38416; }},
      {"k.dtype", "9", [](Problem& p) { p.k.dtype = static_cast<DType>(9); }},
  };
  for (const Case& c : cases) {
    OwnedProblem o = MakeProblem(base);
    Problem p = o.problem;
    c.change(p);
    const std::vector<float> out_before = o.out, lse_before = o.lse;
    try {
      attention(p);
      ADD_FAILURE() << c.field << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_EQ(e.value(), c.value) << e.what();
    }
    EXPECT_EQ(std::memcmp(out_before.data(), o.out.data(), out_before.size() * 4), 0) << c.field;
    EXPECT_EQ(std::memcmp(lse_before.data(), o.lse.data(), lse_before.size() * 4), 0) << c.field;
  }
  // The message of an unknown K type lists q8_0; Q's does not.
  OwnedProblem o = MakeProblem(base);
  Problem p = o.problem;
  p.k.dtype = static_cast<DType>(9);
  try {
    attention(p);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
  // A merge part's output can never be q8_0.
  MergePart part{o.problem.out, o.problem.lse};
  part.out.dtype = DType::kQ8_0;
  MergeProblem m;
  m.batch = base.batch;
  m.q_heads = base.q_heads;
  m.q_len = base.tq;
  m.value_dim = 64;
  m.parts = &part;
  m.n_parts = 1;
  std::vector<float> merged(o.out.size());
  m.out = DenseBHTD(merged.data(), base.q_heads, base.tq, 64);
  m.out.batch_stride = base.q_heads * base.tq * 64;
  ExpectError("parts[0].out.dtype", "q8_0", [&] { MergeAttention(m); });
}

// A q8_0 tensor's byte span is 34 bytes a block: a float32 output placed
// right after K's last block does not overlap it, one block earlier does.
TEST(Q8Errors, OverlapIsCheckedInBytesOfBlocks) {
  const int64_t T = 4, d = 32;
  // K: T rows of one block (136 bytes), then O (T x d floats, 512 bytes).
  std::vector<uint8_t> buffer(size_t(T * 34 + T * d * 4 + 34), 0);
  std::vector<float> q(size_t(T * d), 0.5f), v(size_t(T * d), 0.25f);
  for (int64_t r = 0; r < T; ++r) {
    buffer[size_t(r * 34 + 1)] = 0x3c;  // scale 1, q = 0
  }
  Problem p;
  p.q_len = p.kv_len = T;
  p.head_dim = d;
  p.q = DenseBHTD(q.data(), 1, T, d);
  p.k = DenseBHTD(buffer.data(), kQ8, 1, T, d);
  p.v = DenseBHTD(v.data(), 1, T, d);
  p.out = DenseBHTD(buffer.data() + T * 34, kF32, 1, T, d);
  EXPECT_NO_THROW(attention(p));
  float first;
  std::memcpy(&first, buffer.data() + T * 34, 4);
  EXPECT_EQ(first, 0.25f);  // mean of equal values
  p.out = DenseBHTD(buffer.data() + T * 34 - 1, kF32, 1, T, d);
  try {
    attention(p);
    ADD_FAILURE() << "overlap not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "out");
  }
}

TEST(Q8Errors, ServingCallsNameQ8Fields) {
  std::vector<float> q(64 * 2, 0.5f), out(64 * 2);
  std::vector<uint8_t> kv(size_t(4 * 48 / 32 * 34 + 64), 0);
  std::vector<int32_t> cu_q{0, 1}, cu_k{0, 2};
  VarlenProblem p;
  p.batch = 1;
  p.head_dim = 48;
  p.cu_seqlens_q = cu_q.data();
  p.cu_seqlens_k = cu_k.data();
  p.q = {q.data(), 48, 48, kF32};
  p.k = {kv.data(), 48, 48, kQ8};
  p.v = {kv.data(), 48, 48, kF16};
  p.out = {out.data(), 48, 48, kF32};
  ExpectError("head_dim", "48", [&] { VarlenAttention(p); });
  p.head_dim = 64;
  p.q = {q.data(), 64, 64, kQ8};
  ExpectError("q.dtype", "q8_0", [&] { VarlenAttention(p); });
  p.q = {q.data(), 64, 64, kF32};
  p.k = {kv.data(), 80, 64, kQ8};
  ExpectError("k.token_stride", "80", [&] { VarlenAttention(p); });
  PagedProblem pp;
  pp.batch = 1;
  pp.head_dim = 64;
  pp.num_blocks = 1;
  pp.block_size = 2;
  pp.max_blocks = 1;
  const int32_t table[1] = {0}, seqlens[1] = {2};
  pp.block_table = table;
  pp.cache_seqlens = seqlens;
  pp.k_cache = {kv.data(), 128, 64, 64, kQ8};
  pp.v_cache = {kv.data(), 128, 64, 64, kQ8};
  pp.q = {q.data(), 64, 64, kF32};
  pp.q_len = 1;
  pp.out = {out.data(), 64, 64, kF32};
  pp.k_cache.row_stride = 72;
  ExpectError("k_cache.row_stride", "72", [&] { PagedAttention(pp); });
}

// q4_0 follows q8_0's rules: K and V only, rows and strides in whole blocks,
// and a pool of it takes new tokens only where they can be quantised.
TEST(Q4Errors, BlockRulesNameTheFieldAndWriteNothing) {
  OwnedProblem o = MakeProblem(WithTypes(BaseShapes()[5], {kF32, kQ4, kQ4, kF32}));
  const std::vector<float> out_before = o.out;
  Problem p = o.problem;
  p.q.dtype = kQ4;
  ExpectError("q.dtype", "q4_0", [&] { attention(p); });
  p = o.problem;
  p.head_dim = 48;
  ExpectError("head_dim", "48", [&] { attention(p); });
  p = o.problem;
  p.v.row_stride = 80;
  ExpectError("v.row_stride", "80", [&] { attention(p); });
  EXPECT_EQ(std::memcmp(out_before.data(), o.out.data(), out_before.size() * 4), 0);
}

// ---- The quantisation error ----------------------------------------------------

// What q8_0 and q4_0 cost against float32 K/V of the same values, which
// the bound above leaves apart (it holds the kernels to the bytes, not to
// the values before quantisation). Analytic bound, per output row: each
// q8_0 value is off by at most half a step, s / 2 with s = amax_block /
// 127, plus the binary16 rounding of s (|q| <= 127 steps of relative
// 2^-11): e_v <= max_block amax · (1/254 + 2^-11) for V. A q4_0 value is
// off by at most one step s = amax_block / 8 (half a step, or a whole one
// where the block's largest value is negative and its opposite saturates
// at nibble 15: x / s = 8 stored as 7), plus the binary16 rounding of s
// (|n - 8| <= 8 steps): e_v <= max_block amax · (1/8 + 2^-11), and 2^-10
// in place of 2^-11 covers x · (1 / s) rounded in float32. The output is a convex
// combination of V rows, so V's error moves it by <= e_v; K's error moves
// each score by <= scale · Σ_c |q_c| · e_k, so each weight by a factor of
// at most e^(2 δ), and the output by <= (e^(2 δ) - 1) · max|V|. The test
// measures rms and max |out(q8_0) - out(f32)| on decode shapes (one
// thread, the narrow path), holds the max to that bound and prints both.
TEST(BlockQuantisationError, WithinTheAnalyticBound) {
  struct Case {
    const char* what;
    int64_t q_heads, kv_heads, tk, d;
  };
  for (const DType type : kBlockTypes)
  for (const Case& c : {Case{"16 heads", 16, 16, 4096, 128}, Case{"GQA 32/8", 32, 8, 4096, 128}}) {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t n_kv = c.kv_heads * c.tk * c.d;
    std::vector<float> q(static_cast<size_t>(c.q_heads * c.d)), k(static_cast<size_t>(n_kv)),
        v(static_cast<size_t>(n_kv));
    for (float& x : q) x = u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    std::vector<uint8_t> k8(size_t(n_kv / 32) * BlockBytes(type)),
        v8(size_t(n_kv / 32) * BlockBytes(type));
    auto quantize = type == kQ4 ? QuantizeQ4_0 : QuantizeQ8_0;
    quantize(k.data(), n_kv, k8.data());
    quantize(v.data(), n_kv, v8.data());
    std::vector<float> out32(size_t(c.q_heads * c.d)), out8(size_t(c.q_heads * c.d));
    Problem p;
    p.q_heads = c.q_heads;
    p.kv_heads = c.kv_heads;
    p.q_len = 1;
    p.kv_len = c.tk;
    p.head_dim = c.d;
    p.q = DenseBHTD(q.data(), c.q_heads, 1, c.d);
    p.k = DenseBHTD(k.data(), c.kv_heads, c.tk, c.d);
    p.v = DenseBHTD(v.data(), c.kv_heads, c.tk, c.d);
    p.out = DenseBHTD(out32.data(), c.q_heads, 1, c.d);
    Options one;
    one.threads = 1;
    attention(p, one);
    p.k = DenseBHTD(k8.data(), type, c.kv_heads, c.tk, c.d);
    p.v = DenseBHTD(v8.data(), type, c.kv_heads, c.tk, c.d);
    p.out = DenseBHTD(out8.data(), c.q_heads, 1, c.d);
    attention(p, one);
    // The bound's ingredients, from the values themselves.
    double e_kv = 0.0, max_v = 0.0, max_q1 = 0.0;
    for (int64_t b = 0; b < n_kv / 32; ++b) {
      double amax = 0.0;
      for (int j = 0; j < 32; ++j) {
        amax = std::max({amax, double(std::fabs(k[size_t(b * 32 + j)])),
                         double(std::fabs(v[size_t(b * 32 + j)]))});
        max_v = std::max(max_v, double(std::fabs(v[size_t(b * 32 + j)])));
      }
      e_kv = std::max(e_kv, type == kQ4 ? amax * (1.0 / 8.0 + std::ldexp(1.0, -10))
                                        : amax * (1.0 / 254.0 + std::ldexp(1.0, -11)));
    }
    for (int64_t h = 0; h < c.q_heads; ++h) {
      double l1 = 0.0;
      for (int64_t i = 0; i < c.d; ++i) l1 += std::fabs(q[size_t(h * c.d + i)]);
      max_q1 = std::max(max_q1, l1);
    }
    const double delta = p.Scale() * max_q1 * e_kv;
    const double bound = e_kv + std::expm1(2.0 * delta) * max_v;
    double sum2 = 0.0, max_err = 0.0, out2 = 0.0;
    for (size_t i = 0; i < out32.size(); ++i) {
      const double e = double(out8[i]) - double(out32[i]);
      sum2 += e * e;
      out2 += double(out32[i]) * double(out32[i]);
      max_err = std::max(max_err, std::fabs(e));
    }
    const double rms = std::sqrt(sum2 / double(out32.size()));
    std::printf("%s vs f32 K/V, decode %s, T_k = %lld, d = %lld: rms %.3g (%.2g of the "
                "output's rms), max %.3g (analytic bound %.3g)\n",
                DTypeName(type), c.what, static_cast<long long>(c.tk), static_cast<long long>(c.d), rms,
                std::sqrt(sum2 / out2), max_err, bound);
    EXPECT_LE(max_err, bound) << c.what;
    EXPECT_GT(max_err, 0.0) << c.what << ": " << DTypeName(type)
                            << " changed nothing (the bytes were not used?)";
  }
}

}  // namespace
}  // namespace attn::test
