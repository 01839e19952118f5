// Horizontal sums of several dot-product accumulators at once, for the
// decode walks' score blocks: four or sixteen dot products finished in
// vector registers, in one fixed order, so that every walk that sums its
// scores this way gets the same bits. Also how many keys a score block
// takes for R rows on a target (its register count).
#if defined(ATTN_KERNELS_COMMON_LANE_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_LANE_SUMS_INL_H_
#undef ATTN_KERNELS_COMMON_LANE_SUMS_INL_H_
#else
#define ATTN_KERNELS_COMMON_LANE_SUMS_INL_H_
#endif

#include <stdint.h>

#include "hwy/highway.h"
#include "kernels/common/microkernels-inl.h"  // DF, VF
#include "kernels/common/vec_array-inl.h"     // ATTN_VEC_ARRAY_PARAM, ATTN_AT

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// w[4b + m] = Σ of a_m's lanes in 128-bit block b, for m < 4: four
// horizontal sums in six shuffles/adds (interleaves within 128-bit blocks).
HWY_INLINE VF SumFourPerBlock(VF a0, VF a1, VF a2, VF a3) {
  const DF df;
  const hn::Repartition<double, DF> dd;
  // [a0_0 + a0_2, a1_0 + a1_2, a0_1 + a0_3, a1_1 + a1_3] per block.
  const VF s01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
  const VF s23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
  const auto lo = hn::InterleaveLower(dd, hn::BitCast(dd, s01), hn::BitCast(dd, s23));
  const auto hi = hn::InterleaveUpper(dd, hn::BitCast(dd, s01), hn::BitCast(dd, s23));
  return hn::Add(hn::BitCast(df, lo), hn::BitCast(df, hi));
}

// Whether the target has 32 vector registers (AVX-512) for the blocks
// below; other targets are sized for 16.
constexpr bool kNarrowWideRegisters = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3;

// Keys per score block for R rows: R·KB independent accumulators, enough to
// hide the FMA latency with 16 registers (R·KB + R q vectors + 1 temporary).
// With 32 registers, 16 accumulators (12 for R = 3), which SumBlocksOfFour
// reduces at once: a GQA group of 4 rows then takes 4 keys at a time
// instead of 2 (the reduction, not the FMAs, was most of the score time:
// docs/performance.md).
template <int R>
constexpr int NarrowKeysPerBlock() {
  if (kNarrowWideRegisters) return R == 1 ? 16 : R == 2 ? 8 : 4;
  return R == 1 ? 8 : R == 2 ? 4 : R == 3 ? 4 : 2;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Lane 4g + m = Σ of w[g]'s lanes 4b + m over its four 128-bit blocks b
// (w[g] = SumFourPerBlock of accumulators 4g..4g+3): sixteen dot products
// finished in vector registers, with no store and scalar adds per block.
HWY_INLINE VF SumBlocksOfFour(VF w0, VF w1, VF w2, VF w3) {
  const DF df;
  // Blocks [b0 + b1, b0 + b1, b2 + b3, b2 + b3] of each.
  const VF t0 = hn::Add(w0, hn::SwapAdjacentBlocks(w0));
  const VF t1 = hn::Add(w1, hn::SwapAdjacentBlocks(w1));
  const VF t2 = hn::Add(w2, hn::SwapAdjacentBlocks(w2));
  const VF t3 = hn::Add(w3, hn::SwapAdjacentBlocks(w3));
  // [w0 (b0+b1), w1 (b0+b1), w0 (b2+b3), w1 (b2+b3)], and w2, w3 likewise.
  const VF u01 = hn::OddEvenBlocks(t1, t0);
  const VF u23 = hn::OddEvenBlocks(t3, t2);
  return hn::Add(hn::ConcatLowerLower(df, u23, u01), hn::ConcatUpperUpper(df, u23, u01));
}
#endif

// out[b] = Σ of dot[b]'s lanes for b < count (<= 4), summed in the order of
// NarrowScoreBlock (SumFourPerBlock, then the 128-bit blocks), so a score
// has the tiled walk's bits.
HWY_INLINE void SumFourDots(VF d0, VF d1, VF d2, VF d3, int64_t count, float* HWY_RESTRICT out) {
  const DF df;
  const VF w = SumFourPerBlock(d0, d1, d2, d3);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // As SumBlocksOfFour: (block 0 + block 1) + (block 2 + block 3).
  const VF t = hn::Add(w, hn::SwapAdjacentBlocks(w));
  const VF sums = hn::Add(t, hn::ConcatUpperUpper(df, t, t));
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(sums, df, lanes);
  for (int64_t b = 0; b < count; ++b) out[b] = lanes[b];
#else
  const int64_t N = int64_t(hn::Lanes(df));
  HWY_ALIGN float blocks[hn::MaxLanes(DF())];
  hn::Store(w, df, blocks);
  for (int64_t b = 0; b < count; ++b) {
    float total = 0.0f;
    for (int64_t blk = 0; blk < N / 4; ++blk) total += blocks[blk * 4 + b];
    out[b] = total;
  }
#endif
}

// sums[a] = the sum of acc[a]'s lanes for a < A: sixteen accumulators at a
// time on AVX-512 (SumBlocksOfFour), four otherwise (SumFourDots); sums
// has room for A rounded up to 16.
template <int A>
HWY_INLINE void SumLanes(ATTN_VEC_ARRAY_PARAM(const VF, acc), float* HWY_RESTRICT sums) {
  const DF df;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  auto acc_or_zero = [&](int a) { return a < A ? ATTN_AT(acc, a) : hn::Zero(df); };
  for (int a = 0; a < A; a += 16) {
    VF w[4];
    for (int g = 0; g < 4; ++g) {
      const int b = a + 4 * g;
      w[g] = SumFourPerBlock(acc_or_zero(b), acc_or_zero(b + 1), acc_or_zero(b + 2),
                             acc_or_zero(b + 3));
    }
    hn::StoreU(SumBlocksOfFour(w[0], w[1], w[2], w[3]), df, sums + a);
  }
#else
  for (int a = 0; a < A; a += 4) {
    SumFourDots(ATTN_AT(acc, a), a + 1 < A ? ATTN_AT(acc, a + 1) : hn::Zero(df),
                a + 2 < A ? ATTN_AT(acc, a + 2) : hn::Zero(df),
                a + 3 < A ? ATTN_AT(acc, a + 3) : hn::Zero(df), 4, sums + a);
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
