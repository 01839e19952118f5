// The bf16 pair dot product, the one instruction the bf16 dot-product
// kernels (kernels/bf16dot/) are written against, for two instructions
// (x86's vdpbf16ps, Arm's BFDOT), each in two implementations with the
// same semantics, compiled once per Highway target (per-target include
// guard below). x86 (AVX512-BF16):
//
//   PairDot(acc, a, b)[i] = (acc[i] + a.hi[i]·b.hi[i]) + a.lo[i]·b.lo[i]
//
// where each 32-bit lane of a and b holds two bf16 values, lo in bits 0-15
// (the even element of the pair in memory) and hi in bits 16-31 (the odd
// one); the odd pair is added first and every step is rounded to nearest
// even. A product of two bf16 values has at most 16 significant bits, so it
// is exact in float32 unless it overflows or is subnormal.
//
// - EmulatedBf16Dot: portable Highway code for every target, with the
//   instruction's denormal handling: bf16 inputs and the accumulator that
//   are subnormal count as zero (DAZ), and a subnormal product, partial sum
//   or result is flushed to a zero of its sign (FTZ), as AVX512-BF16's
//   vdpbf16ps does (it ignores MXCSR). The probe of ../shared/probes
//   (vdpbf16ps_semantics.c, 3.2 million random lanes) found vdpbf16ps
//   bit-equal to this model in every lane whose products and sums are
//   normal floats, on AMD Zen 4 (family 25 model 17) and AMD Zen 5
//   (family 26 model 2); the ~0.07% of lanes that differ all have a
//   product or partial sum that overflows or is subnormal, which attention
//   never produces on inputs float32 can evaluate (weights are in
//   [2^-126, 1], ExpNonPositive).
// - Avx512Bf16Dot (AVX3 target only; HardwareBf16Dot below):
//   _mm512_dpbf16_ps. Its functions are compiled with the avx512bf16
//   target attribute, so it is defined only inside the attribute region
//   that kernels/bf16dot/bf16dot.cc opens for its hardware kernels, and
//   nothing else may call it: a CPU without AVX512-BF16 never reaches it
//   (dispatch/dot_path.cc decides).
//
// Arm (FEAT_BF16's BFDOT, with FPCR.EBF = 0 as Linux leaves it):
//
//   PairDot(acc, a, b)[i] = RO(acc[i] + RO(a.lo[i]·b.lo[i] + a.hi[i]·b.hi[i]))
//
// with RO float32 addition rounded to odd (the Arm ARM's BFDotAdd /
// FPAdd_BF16: truncate toward zero, then set the last significand bit when
// the sum was inexact), the products exact, subnormal inputs read as zero
// and subnormal results flushed, whatever FPCR says.
//
// - EmulatedArmBfdot: portable Highway code for every target (so x86 runs
//   the Arm path's kernels too), RO by TwoSum: s = x + y rounded to
//   nearest and its exact error e; e = 0: s; otherwise the sum truncated is
//   s, or s one ulp toward zero where e has the other sign (s was rounded
//   away), and RO sets its last bit. tests/bf16dot_layer_test.cc checks it
//   against a scalar model that adds under fesetround(FE_TOWARDZERO) and
//   reads FE_INEXACT.
// - NeonBfdot (NEON target on aarch64 only; HardwareBf16Dot below): vbfdotq_f32, compiled with
//   +bf16 (ATTN_BEGIN_ARM_BF16 ... ATTN_END_ARM_BF16 around it and its
//   callers); dispatch/dot_path.cc offers it only where getauxval(AT_HWCAP2)
//   has HWCAP2_BF16. Tested against EmulatedArmBfdot bit for bit under
//   qemu-aarch64 -cpu max (FEAT_BF16).
//
// The kernels use nothing else from these layers: packing, pair layouts,
// tile loops and edges are the same code over all four (tests/
// bf16dot_layer_test.cc compares hardware and emulation bit for bit where
// the CPU has the instruction).
#if defined(ATTN_KERNELS_COMMON_BF16DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_BF16DOT_INL_H_
#undef ATTN_KERNELS_COMMON_BF16DOT_INL_H_
#else
#define ATTN_KERNELS_COMMON_BF16DOT_INL_H_
#endif

#include <math.h>
#include <stdint.h>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Float lanes, and the same lanes as u32 bf16 pairs.
using DPairF = hn::ScalableTag<float>;
using DPairU = hn::RebindToUnsigned<DPairF>;
using VPairF = hn::Vec<DPairF>;
using VPairU = hn::Vec<DPairU>;

struct EmulatedBf16Dot {
  static constexpr bool kHardware = false;

  // x, or a zero of x's sign where x is subnormal (|x| < 2^-126, x != 0).
  static HWY_INLINE VPairF FlushSubnormal(VPairF x) {
    const DPairF df;
    const VPairF min_normal = hn::Set(df, 1.17549435e-38f);
    const VPairF sign = hn::And(x, hn::Set(df, -0.0f));
    return hn::IfThenElse(hn::Lt(hn::Abs(x), min_normal), sign, x);
  }

  static HWY_INLINE VPairF PairDot(VPairF acc, VPairU a, VPairU b) {
    const DPairF df;
    const DPairU du;
    const VPairU hi_bits = hn::Set(du, 0xFFFF0000u);
    const VPairF a_hi = FlushSubnormal(hn::BitCast(df, hn::And(a, hi_bits)));
    const VPairF b_hi = FlushSubnormal(hn::BitCast(df, hn::And(b, hi_bits)));
    const VPairF a_lo = FlushSubnormal(hn::BitCast(df, hn::ShiftLeft<16>(a)));
    const VPairF b_lo = FlushSubnormal(hn::BitCast(df, hn::ShiftLeft<16>(b)));
    // Mul then Add, not MulAdd: the product is exact (or flushed), so this is
    // the instruction's result on every target, with or without FMA.
    const VPairF sum = FlushSubnormal(
        hn::Add(FlushSubnormal(acc), FlushSubnormal(hn::Mul(a_hi, b_hi))));
    return FlushSubnormal(hn::Add(sum, FlushSubnormal(hn::Mul(a_lo, b_lo))));
  }
};

// Arm's BFDOT (see the top of this file).
struct EmulatedArmBfdot {
  static constexpr bool kHardware = false;

  // x + y rounded to odd, for x, y normal or zero. Where the rounded sum is
  // not finite (overflow; the instruction's "_inf" rounding gives the
  // infinity too) or NaN, it is returned as is.
  static HWY_INLINE VPairF AddRoundToOdd(VPairF x, VPairF y) {
    const DPairF df;
    const DPairU du;
    const VPairF s = hn::Add(x, y);
    const VPairF y_part = hn::Sub(s, x);
    const VPairF e = hn::Add(hn::Sub(x, hn::Sub(s, y_part)), hn::Sub(y, y_part));
    const VPairU s_bits = hn::BitCast(du, s);
    const VPairU sign = hn::Set(du, 0x80000000u);
    const auto inexact = hn::RebindMask(du, hn::And(hn::Ne(e, hn::Zero(df)),
                                                    hn::Lt(hn::Abs(s), hn::Set(df, HUGE_VALF))));
    // Rounded away from zero: the error's sign is the other one.
    const auto away =
        hn::Ne(hn::And(hn::Xor(s_bits, hn::BitCast(du, e)), sign), hn::Zero(du));
    const VPairU truncated = hn::IfThenElse(away, hn::Sub(s_bits, hn::Set(du, 1u)), s_bits);
    const VPairU odd = hn::Or(truncated, hn::Set(du, 1u));
    return hn::BitCast(df, hn::IfThenElse(inexact, odd, s_bits));
  }

  static HWY_INLINE VPairF PairDot(VPairF acc, VPairU a, VPairU b) {
    const DPairF df;
    const DPairU du;
    using X = EmulatedBf16Dot;
    const VPairU hi_bits = hn::Set(du, 0xFFFF0000u);
    const VPairF a_hi = X::FlushSubnormal(hn::BitCast(df, hn::And(a, hi_bits)));
    const VPairF b_hi = X::FlushSubnormal(hn::BitCast(df, hn::And(b, hi_bits)));
    const VPairF a_lo = X::FlushSubnormal(hn::BitCast(df, hn::ShiftLeft<16>(a)));
    const VPairF b_lo = X::FlushSubnormal(hn::BitCast(df, hn::ShiftLeft<16>(b)));
    // Exact products (or flushed), then the two rounded-to-odd additions.
    const VPairF pair = X::FlushSubnormal(AddRoundToOdd(
        X::FlushSubnormal(hn::Mul(a_lo, b_lo)), X::FlushSubnormal(hn::Mul(a_hi, b_hi))));
    return X::FlushSubnormal(AddRoundToOdd(X::FlushSubnormal(acc), pair));
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

// The hardware instruction, at most one per target, in a region of its own
// compiled with the instruction's attributes: only functions in such a
// region, reached where the CPU has the instruction (dispatch/dot_path.cc),
// use it, and its callers must be defined in such a region too
// (ATTN_BEGIN_HARDWARE_BF16 ... ATTN_END_HARDWARE_BF16): neither GCC nor
// clang inlines it into other code. The region sits at file scope rather
// than nested in HWY_BEFORE_NAMESPACE's (clang keeps the outer target
// attribute of nested pushes).
#if HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64 && defined(__GNUC__) && !defined(__clang__)
// Arm's BFDOT: GCC's arm_neon.h defines the bf16 intrinsics for
// armv8.2-a+bf16, and Highway's NEON functions carry +crypto
// (HWY_TARGET_STR): the region has both, so that either inlines into it.
#include <arm_neon.h>
#define ATTN_HAVE_ARM_BFDOT 1
#undef ATTN_HAVE_AVX512BF16_DOT
#define ATTN_BEGIN_ARM_BF16 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"arch=armv8.2-a+crypto+bf16\")")
#define ATTN_END_ARM_BF16 _Pragma("GCC pop_options")
#define ATTN_BEGIN_HARDWARE_BF16 ATTN_BEGIN_ARM_BF16
#define ATTN_END_HARDWARE_BF16 ATTN_END_ARM_BF16
#define ATTN_HARDWARE_PAIR_DOT(acc, a, b) \
  vbfdotq_f32(acc, vreinterpretq_bf16_u32(a), vreinterpretq_bf16_u32(b))
#elif HWY_TARGET == HWY_AVX3
// x86's vdpbf16ps: the AVX3 target's attributes plus avx512bf16.
#define ATTN_HAVE_AVX512BF16_DOT 1
#undef ATTN_HAVE_ARM_BFDOT
#define ATTN_BEGIN_AVX512BF16 HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#define ATTN_BEGIN_HARDWARE_BF16 ATTN_BEGIN_AVX512BF16
#define ATTN_END_HARDWARE_BF16 HWY_POP_ATTRIBUTES
#define ATTN_HARDWARE_PAIR_DOT(acc, a, b) _mm512_dpbf16_ps(acc, (__m512bh)(a), (__m512bh)(b))
#else
#undef ATTN_HAVE_ARM_BFDOT
#undef ATTN_HAVE_AVX512BF16_DOT
#endif

#if defined(ATTN_HAVE_ARM_BFDOT) || defined(ATTN_HAVE_AVX512BF16_DOT)
#define ATTN_HAVE_HARDWARE_BF16_DOT 1
ATTN_BEGIN_HARDWARE_BF16
namespace attn::HWY_NAMESPACE {
struct HardwareBf16Dot {
  static constexpr bool kHardware = true;
  static HWY_INLINE VPairF PairDot(VPairF acc, VPairU a, VPairU b) {
    return VPairF{ATTN_HARDWARE_PAIR_DOT(acc.raw, a.raw, b.raw)};
  }
};
#ifdef ATTN_HAVE_AVX512BF16_DOT
using Avx512Bf16Dot = HardwareBf16Dot;
#else
using NeonBfdot = HardwareBf16Dot;
#endif
}  // namespace attn::HWY_NAMESPACE
ATTN_END_HARDWARE_BF16
#else
#undef ATTN_HAVE_HARDWARE_BF16_DOT
#endif

#endif  // per-target include guard
