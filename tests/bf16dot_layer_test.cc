// The bf16 pair dot product's two implementations (kernels/common/
// bf16dot-inl.h) and the pair packings of the bf16 dot-product kernels
// (kernels/bf16dot/pack-inl.h), on every Highway target this CPU supports
// (one test case per target, hwy/tests/hwy_gtest.h):
// - EmulatedBf16Dot::PairDot against a scalar model of the instruction
//   written here from its documented semantics (odd pair first, each step
//   rounded, subnormal inputs as zero, subnormal results flushed), on
//   normal, subnormal, infinite and NaN lanes;
// - on AVX3, where this CPU has AVX512-BF16, the instruction itself against
//   the emulation bit for bit, on lanes whose products and sums are normal
//   (the documented model) and on subnormal inputs (DAZ);
// - EmulatedArmBfdot::PairDot (Arm BFDOT: lo + hi products, then the
//   accumulator, each addition rounded to odd) against a scalar model that
//   adds under fesetround(FE_TOWARDZERO) and sets the last bit when
//   FE_INEXACT was raised, on normal and subnormal lanes;
// - on aarch64's NEON with FEAT_BF16 (qemu-aarch64 -cpu max), BFDOT itself
//   against that emulation bit for bit;
// - the packings against scalar expectations at odd and even lengths.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/bf16dot_layer_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/bf16dot/pack-inl.h"
#include "kernels/common/bf16dot-inl.h"

#include <stdint.h>
#include <string.h>

#include <cfenv>
#include <cmath>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"

#if HWY_ARCH_X86
#include <cpuid.h>
#endif
#if HWY_ARCH_ARM_A64 && defined(__linux__)
#include <sys/auxv.h>
#endif

#ifndef ATTN_TESTS_BF16DOT_LAYER_TEST_HELPERS_
#define ATTN_TESTS_BF16DOT_LAYER_TEST_HELPERS_
namespace attn::bf16dot_layer_test {

float Bf(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
float Ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// The instruction's lane, from its definition: acc + a1·b1 first (the odd,
// high halves), then + a0·b0, each product and sum rounded to float to
// nearest even, subnormal inputs read as zero and subnormal results flushed.
// volatile keeps the compiler from contracting into an FMA.
float ModelLane(float acc, uint32_t a, uint32_t b) {
  const float a0 = Ftz(Bf(uint16_t(a))), a1 = Ftz(Bf(uint16_t(a >> 16)));
  const float b0 = Ftz(Bf(uint16_t(b))), b1 = Ftz(Bf(uint16_t(b >> 16)));
  volatile float p1 = Ftz(a1 * b1);
  volatile float s = Ftz(Ftz(acc) + p1);
  volatile float p0 = Ftz(a0 * b0);
  return Ftz(s + p0);
}

// Random bf16: normal with exponents within ±8 of 1 (kNarrow: every
// product and sum normal), or over the whole range with 2% subnormals and
// 1% infinities / NaNs (kWide).
enum class Spread { kNarrow, kWide };
uint16_t RandomBf16(std::mt19937& rng, Spread spread) {
  const uint32_t r = rng();
  int e = spread == Spread::kNarrow ? 127 + int(r % 17) - 8 : int(r % 254) + 1;
  if (spread == Spread::kWide) {
    if ((r >> 8) % 50 == 0) e = 0;
    if ((r >> 8) % 100 == 1) e = 255;
  }
  return uint16_t(((r >> 20) & 1) << 15 | uint32_t(e) << 7 | (rng() & 0x7F));
}

bool SameBits(float x, float y) { return Bits(x) == Bits(y) || (std::isnan(x) && std::isnan(y)); }

// x + y rounded to odd, by the FPU: truncated toward zero, and the last
// significand bit set when the sum was inexact (FE_INEXACT). volatile keeps
// the addition at run time, under the mode set here.
float AddRoundToOddModel(float x, float y) {
  const int mode = std::fegetround();
  std::fesetround(FE_TOWARDZERO);
  std::feclearexcept(FE_INEXACT);
  volatile float vx = x, vy = y;
  volatile float sum = vx + vy;
  const bool inexact = std::fetestexcept(FE_INEXACT) != 0;
  std::fesetround(mode);
  float r = sum;
  if (inexact && std::isfinite(r)) {
    const uint32_t u = Bits(r) | 1u;
    memcpy(&r, &u, 4);
  }
  return r;
}

// Arm's BFDOT lane (the Arm ARM's BFDotAdd with FPCR.EBF = 0): the two
// exact products summed, then added to the accumulator, both additions
// rounded to odd; subnormal inputs read as zero, subnormal results flushed.
// *finite: every product, sum and the result below FLT_MAX in magnitude
// (the model's overflow is the FPU's truncation to FLT_MAX, the
// instruction's an infinity).
float ArmModelLane(float acc, uint32_t a, uint32_t b, bool* finite) {
  const float a0 = Ftz(Bf(uint16_t(a))), a1 = Ftz(Bf(uint16_t(a >> 16)));
  const float b0 = Ftz(Bf(uint16_t(b))), b1 = Ftz(Bf(uint16_t(b >> 16)));
  volatile float p0 = Ftz(a0 * b0), p1 = Ftz(a1 * b1);
  const float pair = Ftz(AddRoundToOddModel(p0, p1));
  const float r = Ftz(AddRoundToOddModel(Ftz(acc), pair));
  *finite = true;
  for (float x : {float(p0), float(p1), pair, r, acc}) {
    if (!(std::fabs(x) < 3.4028234663852886e38f)) *finite = false;
  }
  return r;
}

// getauxval(AT_HWCAP2) & HWCAP2_BF16 (the library's test is internal).
bool CpuHasArmBf16() {
#if HWY_ARCH_ARM_A64 && defined(__linux__)
  return (getauxval(AT_HWCAP2) & (1u << 14)) != 0;
#else
  return false;
#endif
}

bool CpuHasAvx512Bf16() {
#if HWY_ARCH_X86
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

}  // namespace attn::bf16dot_layer_test
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace bt = attn::bf16dot_layer_test;

// Lanes of random inputs: acc (float), a and b (pairs).
struct Lanes {
  hwy::AlignedFreeUniquePtr<float[]> acc;
  hwy::AlignedFreeUniquePtr<uint32_t[]> a, b;
  size_t n;
};
Lanes RandomLanes(size_t n, bt::Spread spread, uint32_t seed) {
  std::mt19937 rng(seed);
  Lanes l{hwy::AllocateAligned<float>(n), hwy::AllocateAligned<uint32_t>(n),
          hwy::AllocateAligned<uint32_t>(n), n};
  for (size_t i = 0; i < n; ++i) {
    l.acc[i] = bt::Bf(bt::RandomBf16(rng, spread)) * (1.0f + float(rng() % 1000) * 1e-4f);
    l.a[i] = bt::RandomBf16(rng, spread) | uint32_t(bt::RandomBf16(rng, spread)) << 16;
    l.b[i] = bt::RandomBf16(rng, spread) | uint32_t(bt::RandomBf16(rng, spread)) << 16;
  }
  return l;
}

template <class Dot>
void RunPairDot(const Lanes& l, float* out) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < l.n; i += N) {
    hn::Store(Dot::PairDot(hn::Load(df, l.acc.get() + i), hn::Load(du, l.a.get() + i),
                           hn::Load(du, l.b.get() + i)),
              df, out + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#ifdef ATTN_HAVE_AVX512BF16_DOT
ATTN_BEGIN_AVX512BF16
namespace attn {
namespace HWY_NAMESPACE {
// RunPairDot's loop again: a template defined outside this region could not
// inline the instruction (GCC: "target specific option mismatch").
void RunHardwarePairDot(const Lanes& l, float* out) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < l.n; i += N) {
    hn::Store(Avx512Bf16Dot::PairDot(hn::Load(df, l.acc.get() + i), hn::Load(du, l.a.get() + i),
                                     hn::Load(du, l.b.get() + i)),
              df, out + i);
  }
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_POP_ATTRIBUTES
#endif

#ifdef ATTN_HAVE_ARM_BFDOT
ATTN_BEGIN_ARM_BF16
namespace attn {
namespace HWY_NAMESPACE {
void RunArmHardwarePairDot(const Lanes& l, float* out) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < l.n; i += N) {
    hn::Store(NeonBfdot::PairDot(hn::Load(df, l.acc.get() + i), hn::Load(du, l.a.get() + i),
                                 hn::Load(du, l.b.get() + i)),
              df, out + i);
  }
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
ATTN_END_ARM_BF16
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace bt = attn::bf16dot_layer_test;

void TestEmulationMatchesTheModel() {
  const size_t kLanes = 1 << 16;
  for (bt::Spread spread : {bt::Spread::kNarrow, bt::Spread::kWide}) {
    const Lanes l = RandomLanes(kLanes, spread, 7 + int(spread));
    auto out = hwy::AllocateAligned<float>(kLanes);
    RunPairDot<EmulatedBf16Dot>(l, out.get());
    size_t bad = 0;
    for (size_t i = 0; i < kLanes; ++i) {
      const float want = bt::ModelLane(l.acc[i], l.a[i], l.b[i]);
      if (!bt::SameBits(out[i], want) && bad++ < 5) {
        ADD_FAILURE() << hwy::TargetName(HWY_TARGET) << " lane " << i << ": acc " << l.acc[i]
                      << " a " << std::hex << l.a[i] << " b " << l.b[i] << std::dec << " got "
                      << out[i] << " want " << want;
      }
    }
    EXPECT_EQ(bad, 0u) << hwy::TargetName(HWY_TARGET);
  }
  // The order is the instruction's: odd halves first. With acc = 2^24,
  // a1·b1 = 1 and a0·b0 = 1, odd-first gives (2^24 + 1 -> 2^24) + 1 ->
  // 2^24 (ties to even twice), a single rounding would give 2^24 + 2.
  const DPairF df;
  const DPairU du;
  const uint32_t one_one = 0x3F803F80u;  // (1, 1)
  const float r = hn::GetLane(
      EmulatedBf16Dot::PairDot(hn::Set(df, 16777216.0f), hn::Set(du, one_one), hn::Set(du, one_one)));
  EXPECT_EQ(r, 16777216.0f);
  // Subnormal inputs are zero: 2^-130 (bf16 subnormal) x 2^100.
  const uint32_t tiny = 0x0008u, big = uint32_t(0x7180u);  // lo halves only
  EXPECT_EQ(hn::GetLane(EmulatedBf16Dot::PairDot(hn::Zero(df), hn::Set(du, tiny), hn::Set(du, big))),
            0.0f);
}

void TestHardwareMatchesTheEmulation() {
#ifdef ATTN_HAVE_AVX512BF16_DOT
  if (!bt::CpuHasAvx512Bf16()) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the emulation alone is tested here";
  }
  const size_t kLanes = 1 << 18;
  // Normal products and sums: the documented model, bit for bit.
  {
    const Lanes l = RandomLanes(kLanes, bt::Spread::kNarrow, 11);
    auto hw = hwy::AllocateAligned<float>(kLanes), emu = hwy::AllocateAligned<float>(kLanes);
    RunHardwarePairDot(l, hw.get());
    RunPairDot<EmulatedBf16Dot>(l, emu.get());
    size_t bad = 0;
    for (size_t i = 0; i < kLanes; ++i) {
      if (!bt::SameBits(hw[i], emu[i]) && bad++ < 5) {
        ADD_FAILURE() << "lane " << i << ": hardware " << hw[i] << " emulation " << emu[i];
      }
    }
    EXPECT_EQ(bad, 0u);
  }
  // DAZ: subnormal bf16 inputs times normal ones whose exact product would
  // be normal count as zero on the instruction too.
  {
    Lanes l = RandomLanes(1024, bt::Spread::kNarrow, 13);
    for (size_t i = 0; i < l.n; ++i) {
      l.a[i] = (l.a[i] & 0xFFFF0000u) | (0x0001u + (i % 0x7F));  // lo half subnormal
      l.b[i] = (l.b[i] & 0xFFFF0000u) | 0x6000u;                 // lo half 2^65
    }
    auto hw = hwy::AllocateAligned<float>(l.n), emu = hwy::AllocateAligned<float>(l.n);
    RunHardwarePairDot(l, hw.get());
    RunPairDot<EmulatedBf16Dot>(l, emu.get());
    size_t bad = 0;
    for (size_t i = 0; i < l.n; ++i) bad += !bt::SameBits(hw[i], emu[i]);
    EXPECT_EQ(bad, 0u) << "subnormal bf16 inputs are not read as zero by this CPU's vdpbf16ps";
  }
#else
  GTEST_SKIP() << "the instruction layer is compiled for the AVX3 target only";
#endif
}

// Arm BFDOT's emulation against the rounding-mode model, on normal lanes
// (kNarrow: every product and sum normal) and over the whole range (kWide,
// where the lanes whose products, sums or result overflow are left out: the
// model truncates them to FLT_MAX, the instruction gives an infinity); and
// the rounding itself on lanes where round to odd and to nearest differ.
void TestArmEmulationMatchesTheModel() {
  const size_t kLanes = 1 << 16;
  for (bt::Spread spread : {bt::Spread::kNarrow, bt::Spread::kWide}) {
    const Lanes l = RandomLanes(kLanes, spread, 17 + int(spread));
    auto out = hwy::AllocateAligned<float>(kLanes);
    RunPairDot<EmulatedArmBfdot>(l, out.get());
    size_t bad = 0, compared = 0;
    for (size_t i = 0; i < kLanes; ++i) {
      bool finite = false;
      const float want = bt::ArmModelLane(l.acc[i], l.a[i], l.b[i], &finite);
      if (spread == bt::Spread::kWide && !finite) continue;
      if (spread == bt::Spread::kNarrow) {
        EXPECT_TRUE(finite);
      }
      ++compared;
      if (!bt::SameBits(out[i], want) && bad++ < 5) {
        ADD_FAILURE() << hwy::TargetName(HWY_TARGET) << " lane " << i << ": acc " << l.acc[i]
                      << " a " << std::hex << l.a[i] << " b " << l.b[i] << std::dec << " got "
                      << out[i] << " want " << want;
      }
    }
    EXPECT_EQ(bad, 0u) << hwy::TargetName(HWY_TARGET);
    EXPECT_GT(compared, kLanes / 2);
  }
  const DPairF df;
  const DPairU du;
  // (1 + 2^-23) + 2^-24·... : acc = 1, products 2^-24 and 0 (hi half 0):
  // 1 + 2^-24 to nearest even is 1; to odd it is 1 + 2^-23.
  const uint32_t tiny = 0x3380u;  // bf16 2^-24 in the lo half, hi half +0
  const uint32_t one = 0x3F80u;   // bf16 1 in the lo half
  const float r = hn::GetLane(
      EmulatedArmBfdot::PairDot(hn::Set(df, 1.0f), hn::Set(du, tiny), hn::Set(du, one)));
  EXPECT_EQ(bt::Bits(r), bt::Bits(1.0f) | 1u);
  // Exact sums keep their last bit: 2 + 1·1 = 3.
  EXPECT_EQ(hn::GetLane(EmulatedArmBfdot::PairDot(hn::Set(df, 2.0f), hn::Set(du, one),
                                                  hn::Set(du, one))),
            3.0f);
  // A tie that nearest-even rounds away: 2^24 + (1 + 2) = 2^24 + 3 lies
  // between 2^24 + 2 (odd significand) and 2^24 + 4; to nearest even it is
  // 2^24 + 4, to odd 2^24 + 2 (truncated, already odd).
  const uint32_t one_two = 0x40003F80u;  // lo 1, hi 2
  EXPECT_EQ(hn::GetLane(EmulatedArmBfdot::PairDot(hn::Set(df, 16777216.0f), hn::Set(du, one_two),
                                                  hn::Set(du, 0x3F803F80u))),
            16777218.0f);
  EXPECT_EQ(hn::GetLane(EmulatedArmBfdot::PairDot(hn::Set(df, -16777216.0f),
                                                  hn::Set(du, one_two), hn::Set(du, 0xBF80BF80u))),
            -16777218.0f);
}

void TestArmHardwareMatchesTheEmulation() {
#ifdef ATTN_HAVE_ARM_BFDOT
  if (!bt::CpuHasArmBf16()) {
    GTEST_SKIP() << "this CPU has no FEAT_BF16: the emulation alone is tested here";
  }
  const size_t kLanes = 1 << 18;
  for (bt::Spread spread : {bt::Spread::kNarrow, bt::Spread::kWide}) {
    const Lanes l = RandomLanes(kLanes, spread, 23 + int(spread));
    auto hw = hwy::AllocateAligned<float>(kLanes), emu = hwy::AllocateAligned<float>(kLanes);
    RunArmHardwarePairDot(l, hw.get());
    RunPairDot<EmulatedArmBfdot>(l, emu.get());
    size_t bad = 0;
    for (size_t i = 0; i < kLanes; ++i) {
      if (spread == bt::Spread::kWide && !(std::isnormal(emu[i]) || emu[i] == 0.0f)) continue;
      if (!bt::SameBits(hw[i], emu[i]) && bad++ < 5) {
        ADD_FAILURE() << "lane " << i << ": acc " << l.acc[i] << " a " << std::hex << l.a[i]
                      << " b " << l.b[i] << std::dec << " hardware " << hw[i] << " emulation "
                      << emu[i];
      }
    }
    EXPECT_EQ(bad, 0u) << (spread == bt::Spread::kNarrow ? "normal lanes" : "whole range");
  }
#else
  GTEST_SKIP() << "BFDOT is compiled for aarch64's NEON target only";
#endif
}

void TestPackings() {
  const size_t P = PanelWidth();
  std::mt19937 rng(5);
  for (int64_t keys : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t(P) + 1}) {
    for (int64_t dv : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, int64_t{33}}) {
      const int64_t stride = dv + 3;
      std::vector<uint16_t> v(size_t(keys * stride));
      for (uint16_t& x : v) x = uint16_t(0x3F00u + rng() % 0x100);
      std::vector<uint32_t> vp(size_t((keys + 1) / 2 * dv), 0xDEADBEEFu);
      EXPECT_FALSE(PackValuePairs(v.data(), stride, keys, dv, vp.data(), dv));
      for (int64_t u = 0; 2 * u < keys; ++u)
        for (int64_t c = 0; c < dv; ++c) {
          const uint32_t hi = 2 * u + 1 < keys ? v[size_t((2 * u + 1) * stride + c)] : 0u;
          ASSERT_EQ(vp[size_t(u * dv + c)], v[size_t(2 * u * stride + c)] | hi << 16)
              << "keys " << keys << " dv " << dv << " u " << u << " c " << c;
        }
      // A NaN or Inf anywhere in the tile is reported, in either half.
      for (uint16_t bad : {uint16_t(0x7FC0), uint16_t(0xFF80)}) {
        std::vector<uint16_t> w = v;
        w[size_t((keys - 1) * stride + dv - 1)] = bad;
        EXPECT_TRUE(PackValuePairs(w.data(), stride, keys, dv, vp.data(), dv));
      }
    }
    // Weights: each rounded to bf16 to nearest even, odd key in the high half.
    auto st = hwy::AllocateAligned<float>(size_t(keys) * P);
    for (int64_t i = 0; i < keys * int64_t(P); ++i) {
      st[size_t(i)] = float(rng() % 100000) / 100000.0f;
    }
    st[0] = bt::Bf(0x3F80) + std::ldexp(1.0f, -8);  // a tie: rounds to even (1.0)
    auto pp = hwy::AllocateAligned<uint32_t>(size_t((keys + 1) / 2) * P);
    PackWeightPairs(st.get(), keys, pp.get());
    const auto rne = [](float x) {
      const uint32_t b = bt::Bits(x);
      return uint16_t((b + 0x7FFFu + ((b >> 16) & 1)) >> 16);
    };
    EXPECT_EQ(pp[0] & 0xFFFFu, 0x3F80u);
    for (int64_t u = 0; 2 * u < keys; ++u)
      for (size_t i = 0; i < P; ++i) {
        const uint32_t lo = rne(st[size_t(2 * u) * P + i]);
        const uint32_t hi = 2 * u + 1 < keys ? rne(st[size_t(2 * u + 1) * P + i]) : 0u;
        ASSERT_EQ(pp[size_t(u) * P + i], lo | hi << 16) << "keys " << keys << " u " << u;
      }
  }
  // Query pairs: odd d pads the last pair's high half with +0, padding rows 0.
  const int64_t d = 5, rows = 3, stride = 9;
  std::vector<uint16_t> q(size_t(rows * stride));
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint16_t(0x4000u + i);
  auto qp = hwy::AllocateAligned<uint32_t>(3 * P);
  PackQueryPairs(q.data(), stride, rows, d, qp.get());
  for (int64_t t = 0; t < 3; ++t)
    for (size_t i = 0; i < P; ++i) {
      uint32_t want = 0;
      if (int64_t(i) < rows) {
        const uint32_t lo = q[size_t(int64_t(i) * stride + 2 * t)];
        const uint32_t hi = 2 * t + 1 < d ? q[size_t(int64_t(i) * stride + 2 * t + 1)] : 0u;
        want = lo | hi << 16;
      }
      EXPECT_EQ(qp[size_t(t) * P + i], want) << "t " << t << " i " << i;
    }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_BEFORE_TEST(Bf16DotLayer);
HWY_EXPORT_AND_TEST_P(Bf16DotLayer, TestEmulationMatchesTheModel);
HWY_EXPORT_AND_TEST_P(Bf16DotLayer, TestHardwareMatchesTheEmulation);
HWY_EXPORT_AND_TEST_P(Bf16DotLayer, TestArmEmulationMatchesTheModel);
HWY_EXPORT_AND_TEST_P(Bf16DotLayer, TestArmHardwareMatchesTheEmulation);
HWY_EXPORT_AND_TEST_P(Bf16DotLayer, TestPackings);
}  // namespace attn
#endif
