// bf16 and f16: the conversions exhaustively, then every kernel x every SIMD
// target this CPU supports x element-type combinations x ragged shapes,
// GQA, masks, decode and every causal alignment, against the float64
// reference reading the same 16-bit values.
//
// The precision contract (docs/precision.md): every path
// widens 16-bit inputs exactly and computes in float32, so the reference on
// the rounded inputs is the exact answer the float32 kernels approximate,
// with the float32 tests' own bound (tests/test_util.cc BoundFromNaive:
// 4x the naive kernel's error on the same input); a 16-bit output adds one
// rounding to nearest (the bound's one-ULP-of-the-output-type floor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "reference/reference.h"
#include "tests/oracle.h"
#include "tests/test_util.h"

namespace attn::test {
namespace {

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16, kF16 = DType::kF16;

// ---- Conversions --------------------------------------------------------

// IEEE binary16 decoded from its definition, in double.
double DecodeF16(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e == 31) return f ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(f, -24);
  return sign * std::ldexp(1024 + f, e - 25);
}
double DecodeBF16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Conversions, WideningIsExactForEveryBitPattern) {
  // (what, the definition, the library's widening)
  const struct {
    const char* what;
    double (*want)(uint16_t);
    float (*got)(uint16_t);
  } kTypes[] = {{"f16", DecodeF16, FromFloat16Bits}, {"bf16", DecodeBF16, FromBFloat16Bits}};
  for (const auto& type : kTypes) {
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const uint16_t h = uint16_t(bits);
      const double want = type.want(h);
      const float got = type.got(h);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << type.what << " " << bits;
      } else {
        ASSERT_EQ(double(got), want) << type.what << " " << bits;
        ASSERT_EQ(std::signbit(got), bool(h & 0x8000)) << type.what << " " << bits;
      }
    }
  }
}

// Narrowing: every representable value maps to itself, and every midpoint
// between neighbours goes to the one with an even last bit, values just off
// the midpoint to the nearer one (rounding to nearest, ties to even).
template <class Decode, class Narrow>
void CheckRoundToNearestEven(Decode decode, Narrow narrow, uint16_t max_finite, const char* what) {
  for (uint32_t bits = 0; bits <= max_finite; ++bits) {
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const uint16_t h = uint16_t(bits | sign);
      const float x = float(decode(h));
      ASSERT_EQ(narrow(x), h) << what << " round trip of " << x;
      if (bits == max_finite) continue;
      const uint16_t next = uint16_t((bits + 1) | sign);
      const double mid = (decode(h) + decode(next)) / 2;  // exact in float
      const float midf = float(mid);
      ASSERT_EQ(double(midf), mid);
      const uint16_t even = (bits & 1) ? next : h;
      ASSERT_EQ(narrow(midf), even) << what << " tie at " << mid;
      ASSERT_EQ(narrow(std::nextafter(midf, 0.0f)), h) << what << " below " << mid;
      ASSERT_EQ(narrow(std::nextafter(midf, sign ? -INFINITY : INFINITY)), next)
          << what << " above " << mid;
    }
  }
}

TEST(Conversions, NarrowingRoundsToNearestEven) {
  CheckRoundToNearestEven(DecodeF16, Float16Bits, 0x7bff, "f16");
  CheckRoundToNearestEven(DecodeBF16, BFloat16Bits, 0x7f7f, "bf16");
}

TEST(Conversions, SpecialValues) {
  EXPECT_EQ(Float16Bits(65504.0f), 0x7bff);
  EXPECT_EQ(Float16Bits(65519.996f), 0x7bff);  // below the midpoint to "65536"
  EXPECT_EQ(Float16Bits(65520.0f), 0x7c00);    // the tie rounds to even: inf
  EXPECT_EQ(Float16Bits(1e30f), 0x7c00);
  EXPECT_EQ(Float16Bits(-INFINITY), 0xfc00);
  EXPECT_EQ(Float16Bits(-0.0f), 0x8000);
  EXPECT_EQ(Float16Bits(1e-10f), 0x0000);          // below half the smallest subnormal
  EXPECT_EQ(Float16Bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(BFloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(BFloat16Bits(INFINITY), 0x7f80);
  for (float nan : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN(), -std::nanf("")}) {
    EXPECT_TRUE(std::isnan(FromFloat16Bits(Float16Bits(nan))));
    EXPECT_TRUE(std::isnan(FromBFloat16Bits(BFloat16Bits(nan))));
    EXPECT_TRUE(Float16Bits(nan) & 0x0200) << "quiet NaN";
    EXPECT_TRUE(BFloat16Bits(nan) & 0x0040) << "quiet NaN";
  }
  EXPECT_EQ(DTypeSize(kBF16), 2);
  EXPECT_EQ(DTypeSize(kF32), 4);
  EXPECT_EQ(ParseDType("bfloat16"), kBF16);
  EXPECT_EQ(std::string(DTypeName(kF16)), "f16");
  EXPECT_THROW(ParseDType("f64"), Error);
}

// ---- Kernels ----------------------------------------------------------------

struct Types {
  DType q, k, v, out;
};
// bf16 and f16 everywhere; float32 queries and outputs over a 16-bit KV
// cache; float32 inputs with a 16-bit output; every tensor different.
const Types kTypeCombos[] = {
    {kBF16, kBF16, kBF16, kBF16}, {kF16, kF16, kF16, kF16},   {kF32, kBF16, kBF16, kF32},
    {kF32, kF16, kF16, kF32},     {kF32, kF32, kF32, kBF16},  {kF32, kF32, kF32, kF16},
    {kBF16, kF16, kF32, kF16},    {kF16, kBF16, kF16, kF32},
};

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
    s.seed = uint64_t(shapes.size() + 11);
    shapes.push_back(s);
  };
  // Ragged everything: partial panels and vectors, odd d and d_v.
  add(2, 1, 37, 53, 19, 11, Causal::kNone);
  add(2, 2, 37, 53, 19, 11, Causal::kBottomRight, true);
  add(3, 3, 41, 29, 33, 7, Causal::kTopLeft);
  // Head dims of real models, sequence-major with padded rows (a KV cache).
  add(4, 2, 70, 130, 64, 64, Causal::kBottomRight, false, Layout::kBTHD, 5);
  add(1, 1, 33, 33, 128, 128, Causal::kTopLeft, true);
  // Decode: one query over a long cache (the narrow path), GQA groups of 4,
  // MHA, and a few rows (speculative decoding).
  add(8, 2, 1, 300, 64, 64, Causal::kBottomRight);
  add(3, 3, 1, 257, 17, 23, Causal::kNone, true);
  add(4, 1, 3, 200, 128, 128, Causal::kBottomRight, false, Layout::kBTHD, 3);
  return shapes;
}

std::vector<Shape> DTypeShapes() {
  std::vector<Shape> shapes;
  for (const Shape& base : BaseShapes()) {
    for (const Types& t : kTypeCombos) shapes.push_back(WithTypes(base, t));
  }
  return shapes;
}

// The bf16 / f16 output elements outside the logical tensor (row padding)
// must keep the sentinel: no kernel writes past a row.
void ExpectPaddingUntouched(const OwnedProblem& o, const std::string& where) {
  if (o.out16.empty() || o.shape.row_padding == 0) return;
  const Problem& p = o.problem;
  const int64_t dv = p.ValueDim();
  std::vector<bool> logical(o.out16.size(), false);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        for (int64_t c = 0; c < dv; ++c) {
          logical[size_t(b * p.out.batch_stride + h * p.out.head_stride + i * p.out.row_stride +
                         c)] = true;
        }
  const uint16_t want = p.out.dtype == kF16 ? Float16Bits(-12345.0f) : BFloat16Bits(-12345.0f);
  for (size_t i = 0; i < o.out16.size(); ++i) {
    if (!logical[i]) {
      ASSERT_EQ(o.out16[i], want) << where << ": padding element " << i;
    }
  }
}

class DTypeKernels : public ::testing::TestWithParam<Shape> {};

TEST_P(DTypeKernels, EveryKernelAndTargetMatchesReference) {
  OwnedProblem owned = MakeProblem(GetParam());
  {
    // The bound must be tight enough to catch a wrong kernel at all.
    const reference::Result ref = reference::Attention(owned.problem);
    Options naive;
    naive.kernel = KernelId::kNaive;
    const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);
    ASSERT_LT(bound.out, 0.05);
  }
  ExpectVariantsWithinNaiveBound(owned, KernelVariants(), [&](const std::string& where) {
    ExpectPaddingUntouched(owned, where);
  });
}

INSTANTIATE_TEST_SUITE_P(Combos, DTypeKernels, ::testing::ValuesIn(DTypeShapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::string name = info.param.Name();
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name + "_" + std::to_string(info.index);
                         });

// The bound catches the mistakes a 16-bit path could make: (1) f16 inputs
// silently rounded to bf16 (3 mantissa bits fewer); (2) a bf16 tensor read
// as f16 (a kernel that mixes up the types); both must exceed the bound on
// the very inputs the test above uses.
TEST(DTypeBound, FailsWhenF16IsRoundedToBF16OrTypesAreSwapped) {
  Shape s = WithTypes(BaseShapes()[0], {kF16, kF16, kF16, kF32});
  OwnedProblem owned = MakeProblem(s);
  const reference::Result ref = reference::Attention(owned.problem);
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Bound bound = BoundFromNaive(RunAndCompare(owned, ref, naive), owned.problem, ref);

  // (1) The same f16 values rounded to bf16, run through the bf16 path.
  OwnedProblem rounded = MakeProblem(WithTypes(s, {kBF16, kBF16, kBF16, kF32}));
  auto to_bf16 = [](const std::vector<uint16_t>& f16, std::vector<uint16_t>& bf16) {
    bf16.resize(f16.size());
    for (size_t i = 0; i < f16.size(); ++i) bf16[i] = BFloat16Bits(FromFloat16Bits(f16[i]));
  };
  to_bf16(owned.q16, rounded.q16);
  to_bf16(owned.k16, rounded.k16);
  to_bf16(owned.v16, rounded.v16);
  rounded.problem.q.data = rounded.q16.data();
  rounded.problem.k.data = rounded.k16.data();
  rounded.problem.v.data = rounded.v16.data();
  Options streaming;
  streaming.kernel = KernelId::kStreaming;
  const Errors e1 = RunAndCompare(rounded, ref, streaming);
  EXPECT_GT(e1.out, bound.out) << "f16 rounded to bf16 went unnoticed";

  // (2) The f16 bit patterns of K read as bf16.
  OwnedProblem swapped = MakeProblem(s);
  swapped.problem.k.dtype = kBF16;
  const Errors e2 = RunAndCompare(swapped, ref, streaming);
  EXPECT_GT(e2.out, bound.out) << "f16 K read as bf16 went unnoticed";
}

// NaN and ±inf stored in 16-bit tensors (and f16 subnormals) keep their
// meaning on every path: the hostile-input oracle (tests/oracle.h) on every
// target and kernel. Highway 1.0.3's f16 widening without F16C turned inf
// into 65536 (the fuzzer found it); this test fails on that.
TEST(DTypeHostile, NonFiniteAndSubnormal16BitValuesOnEveryTarget) {
  for (DType type : {kF16, kBF16}) {
    for (const Shape& base : {BaseShapes()[0], BaseShapes()[5]}) {  // panels; decode
      OwnedProblem owned = MakeProblem(WithTypes(base, {type, type, type, type}));
      const uint16_t inf = type == kF16 ? 0x7c00 : 0x7f80, nan = type == kF16 ? 0x7e00 : 0x7fc0;
      const uint16_t subnormal = type == kF16 ? 0x0003 : 0x0005;
      owned.v16[owned.v16.size() / 3] = inf;
      owned.v16[owned.v16.size() / 2] = uint16_t(inf | 0x8000);
      owned.v16[owned.v16.size() * 3 / 4] = nan;
      owned.k16[owned.k16.size() / 5] = inf;
      owned.q16[owned.q16.size() / 7] = subnormal;
      owned.k16[owned.k16.size() / 2 + 1] = subnormal;
      const reference::Result ref = reference::Attention(owned.problem);
      for (const std::string& target : TestTargets()) {
        ForceTarget(target);
        for (const Variant& variant : KernelVariants()) {
          owned.ClearOutputs();
          attention(owned.problem, variant.options);
          EXPECT_EQ(oracle::Check(owned.problem, ref), "")
              << DTypeName(type) << " " << base.Name() << " " << target << " " << variant.name;
        }
      }
      ForceTarget("auto");
    }
  }
}

// A 16-bit output is exactly the float32 result rounded once to nearest
// even: the same kernel, target and inputs with a float32 output, rounded
// by attn::BFloat16Bits / Float16Bits (checked exhaustively above), gives
// the same bits, element for element (NaN for NaN).
TEST(DTypeOutput, SixteenBitOutputIsTheFloat32ResultRoundedOnce) {
  for (DType type : {kBF16, kF16}) {
    for (const Shape& base : {BaseShapes()[0], BaseShapes()[3], BaseShapes()[5]}) {
      Shape s = WithTypes(base, {kBF16, kBF16, kBF16, kF32});
      s.magnitude = type == kF16 ? 3.0f : 1.0f;
      OwnedProblem f32_out = MakeProblem(s);
      s.out_type = type;
      OwnedProblem narrow_out = MakeProblem(s);
      for (const std::string& target : TestTargets()) {
        ForceTarget(target);
        for (const Variant& variant : KernelVariants()) {
          f32_out.ClearOutputs();
          narrow_out.ClearOutputs();
          attention(f32_out.problem, variant.options);
          attention(narrow_out.problem, variant.options);
          int bad = 0;
          for (size_t i = 0; i < f32_out.out.size(); ++i) {
            const float x = f32_out.out[i];
            const uint16_t want = type == kBF16 ? BFloat16Bits(x) : Float16Bits(x);
            const uint16_t got = narrow_out.out16[i];
            const bool both_nan = std::isnan(x) && std::isnan(type == kBF16 ? FromBFloat16Bits(got)
                                                                          : FromFloat16Bits(got));
            if (got != want && !both_nan && ++bad <= 3) {
              ADD_FAILURE() << DTypeName(type) << " " << target << " " << variant.name << " "
                            << base.Name() << " element " << i << ": float32 " << x << ", got 0x"
                            << std::hex << got << ", want 0x" << want;
            }
          }
        }
      }
      ForceTarget("auto");
    }
  }
}

// ---- Validation -------------------------------------------------------------

TEST(DTypeErrors, InvalidTypeNamesTheFieldAndWritesNothing) {
  Shape s = BaseShapes()[0];
  for (const char* field : {"q", "k", "v", "out"}) {
    OwnedProblem o = MakeProblem(s);
    Problem p = o.problem;
    const DType bad = static_cast<DType>(7);
    if (std::string(field) == "q") p.q.dtype = bad;
    if (std::string(field) == "k") p.k.dtype = bad;
    if (std::string(field) == "v") p.v.dtype = bad;
    if (std::string(field) == "out") p.out.dtype = bad;
    const std::vector<float> before = o.out;
    try {
      attention(p);
      ADD_FAILURE() << field << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.field(), std::string(field) + ".dtype");
      EXPECT_EQ(e.value(), "7");
      EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::memcmp(before.data(), o.out.data(), before.size() * 4), 0) << field;
  }
}

// A 16-bit tensor's byte span is two bytes an element: an f16 output right
// after an f16 input of the same element count does not overlap it, one
// element earlier does.
TEST(DTypeErrors, OverlapIsCheckedInBytesOfTheElementType) {
  const int64_t T = 4, d = 8;
  std::vector<uint16_t> buffer(size_t(4 * T * d), Float16Bits(0.5f));
  Problem p;
  p.q_len = p.kv_len = T;
  p.head_dim = d;
  p.q = DenseBHTD(buffer.data(), kF16, 1, T, d);
  p.k = DenseBHTD(buffer.data() + T * d, kF16, 1, T, d);
  p.v = DenseBHTD(buffer.data() + 2 * T * d, kF16, 1, T, d);
  p.out = DenseBHTD(buffer.data() + 3 * T * d, kF16, 1, T, d);
  EXPECT_NO_THROW(attention(p));
  EXPECT_EQ(FromFloat16Bits(buffer[size_t(3 * T * d)]), 0.5f);  // mean of equal values
  p.out = DenseBHTD(buffer.data() + 3 * T * d - 1, kF16, 1, T, d);
  try {
    attention(p);
    ADD_FAILURE() << "overlap not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.field(), "out");
  }
}

}  // namespace
}  // namespace attn::test
