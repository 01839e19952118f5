// bf16 pairs, the unit of the bf16 dot-product instructions (vdpbf16ps,
// tdpbf16ps, BFDOT): a u32 holding two bf16 values along the dot product's
// axis, the even element in bits 0-15, the odd one in bits 16-31. The
// pieces that the bf16 dot-product kernel (kernels/bf16dot) and the AMX
// kernel (kernels/amx) share to build their pair layouts: reading a pair
// without touching memory past a row, a key tile's runs of contiguous keys
// (one per page of a paged cache) and a cursor over their rows, V rows
// interleaved in pairs (with the NaN / Inf check the mix needs), and
// float32 weights rounded to bf16. Per target (per-target include guard).
#if defined(ATTN_KERNELS_COMMON_PAIRS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_PAIRS_INL_H_
#undef ATTN_KERNELS_COMMON_PAIRS_INL_H_
#else
#define ATTN_KERNELS_COMMON_PAIRS_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "hwy/highway.h"
#include "kernels/common/bf16dot-inl.h"  // DPairF, DPairU, VPairF, VPairU
#include "kernels/kernel.h"              // HeadView, KeyRun

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The pair holding bf16 bits lo (even element) and hi (odd element).
HWY_INLINE uint32_t MakePair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// The pair of row[2t], row[2t + 1] (hi = +0 when 2t + 1 == cols), read
// without touching memory past the row.
HWY_INLINE uint32_t LoadPair(const uint16_t* HWY_RESTRICT row, int64_t t, int64_t cols) {
  if (2 * t + 1 < cols) {
    uint32_t pair;
    memcpy(&pair, row + 2 * t, sizeof(pair));  // little-endian: row[2t] is lo
    return pair;
  }
  return row[2 * t];
}

// Keys [at, at + keys) of a key tile, contiguous in memory from k and v at
// the view's row strides: a tile of a dense view is one run, a tile of a
// paged cache's view one per page it meets (kernel.h KeyRun).
struct TileRun {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t at = 0, keys = 0;
  // Keys contiguous from k and v, past the tile's end too (to the end of
  // the page or of the view): how far K may be requested ahead.
  int64_t contiguous = 0;
};

// The runs of the view's keys [j0, j0 + keys) into *runs (hint: RunAt's,
// kept across the tiles of a walk). The tiles of the bf16 dot-product and
// AMX kernels span pages this way rather than ending at each: with
// 16-token pages, tiles of a page each ran a chunked prefill at 0.86 of
// the contiguous layout's rate (AMD EPYC Zen 4, vdpbf16ps), and AMX pads
// a tile to whole 32-key tiles.
HWY_INLINE void FindTileRuns(const internal::HeadView& h, int64_t j0, int64_t keys,
                             int64_t* hint, std::vector<TileRun>* runs) {
  runs->clear();
  for (int64_t j = j0; j < j0 + keys;) {
    const internal::KeyRun run = h.RunAt(j, hint);
    const int64_t n = std::min(run.keys, j0 + keys - j);
    runs->push_back({static_cast<const uint16_t*>(run.k), static_cast<const uint16_t*>(run.v),
                     j - j0, n, run.keys});
    j += n;
  }
}

// Row j of a tile's K (kValues false) or V rows, for j that never
// decreases from one call to the next (the packing loops).
template <bool kValues>
class TileRowCursor {
 public:
  TileRowCursor(const std::vector<TileRun>& runs, int64_t stride)
      : run_(runs.data()), stride_(stride) {}
  HWY_INLINE const uint16_t* operator()(int64_t j) {
    while (j >= run_->at + run_->keys) ++run_;
    return (kValues ? run_->v : run_->k) + (j - run_->at) * stride_;
  }

 private:
  const TileRun* run_;
  int64_t stride_;
};

// Whether a pair holds a NaN or ±Inf in either half (exponent bits all ones).
template <class V>
HWY_INLINE auto PairHasNonFinite(V pair) {
  const DPairU du;
  const V lo_exp = hn::Set(du, 0x7F80u), hi_exp = hn::Set(du, 0x7F800000u);
  return hn::Or(hn::Eq(hn::And(pair, lo_exp), lo_exp), hn::Eq(hn::And(pair, hi_exp), hi_exp));
}

// Vp[u][c] = (v[2u][c], v[2u+1][c]) for u < ceil(keys / 2), c < dv (row
// stride vp_stride >= dv), the missing odd row of an odd tile as +0;
// returns whether any of the tile's values is NaN or ±Inf. A vector of N
// columns is two zero-extending loads of N bf16 (vpmovzxwd on AVX-512), a
// shift and an OR.
// v_row(j) gives V row j of the tile, for j increasing (TileRowCursor, or
// a fixed stride: PackValuePairs below).
template <class VRow>
HWY_INLINE bool PackValuePairsOf(VRow&& v_row, int64_t keys, int64_t dv,
                                 uint32_t* HWY_RESTRICT vp, int64_t vp_stride) {
  const DPairU du;
  const hn::Rebind<uint16_t, DPairU> du16;
  const int64_t N = int64_t(hn::Lanes(du));
  auto bad = hn::FirstN(du, 0);
  bool bad_tail = false;
  for (int64_t u = 0; 2 * u < keys; ++u) {
    const uint16_t* HWY_RESTRICT even = v_row(2 * u);
    const uint16_t* HWY_RESTRICT odd = 2 * u + 1 < keys ? v_row(2 * u + 1) : nullptr;
    uint32_t* HWY_RESTRICT dst = vp + u * vp_stride;
    int64_t c = 0;
    for (; c + N <= dv; c += N) {
      auto pair = hn::PromoteTo(du, hn::LoadU(du16, even + c));
      if (odd) pair = hn::Or(pair, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, odd + c))));
      bad = hn::Or(bad, PairHasNonFinite(pair));
      hn::StoreU(pair, du, dst + c);
    }
    for (; c < dv; ++c) {
      const uint32_t pair = MakePair(even[c], odd ? odd[c] : uint16_t{0});
      bad_tail |= (pair & 0x7F80u) == 0x7F80u || (pair & 0x7F800000u) == 0x7F800000u;
      dst[c] = pair;
    }
  }
  return bad_tail || !hn::AllFalse(du, bad);
}
HWY_INLINE bool PackValuePairs(const uint16_t* HWY_RESTRICT v, int64_t v_stride, int64_t keys,
                               int64_t dv, uint32_t* HWY_RESTRICT vp, int64_t vp_stride) {
  return PackValuePairsOf([&](int64_t j) { return v + j * v_stride; }, keys, dv, vp, vp_stride);
}

// bf16 bits of float32 x, rounded to nearest even, in the low 16 bits
// (kHigh = false) or the high 16 bits (kHigh = true, low bits 0) of each
// lane. x is a softmax weight: finite and >= 0 (a NaN row's weights are
// garbage that its NaN flag overrides; FinishRow).
template <bool kHigh>
HWY_INLINE VPairU RoundToBf16(VPairF x) {
  const DPairU du;
  const VPairU bits = hn::BitCast(du, x);
  const VPairU lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const VPairU rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb));
  if constexpr (kHigh) return hn::And(rounded, hn::Set(du, 0xFFFF0000u));
  return hn::ShiftRight<16>(rounded);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
