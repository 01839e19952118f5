// Pair-interleaved layouts of the bf16 dot-product kernels (bf16dot.cc),
// compiled once per Highway target (per-target include guard below). These
// are the parts of those kernels that do not depend on the instruction
// layer (kernels/common/bf16dot-inl.h), so the hardware and the emulated
// kernels share them.
//
// A pair is a u32 holding two bf16 values along the dot product's axis, the
// even element in bits 0-15 and the odd one in bits 16-31 (PairDot's lo and
// hi). The panel formulation of microkernels-inl.h is kept, lanes over the
// P query rows of a panel:
//   scores  St[j][i] = scale · Σ_t PairDot(Qp[t][i], K[j] pair t)
//            Qp[t][i] = (q[i][2t], q[i][2t+1]): pairs along d, packed once
//            per query block; K pairs are read in place (one 32-bit
//            broadcast from the row), so K is never copied;
//   mix     Ot[c][i] += Σ_u PairDot(Pp[u][i], Vp[u][c])
//            Pp[u][i] = (p[i][2u], p[i][2u+1]): the tile's float32 weights
//            rounded to bf16 (to nearest even), pairs along the keys;
//            Vp[u][c] = (v[2u][c], v[2u+1][c]): two V rows interleaved,
//            packed once per (query block, key tile) and shared by its
//            panels.
// Odd d, odd key counts and partial panels pad pairs with +0 bits, never
// with memory past a row.
#if defined(ATTN_KERNELS_BF16DOT_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_BF16DOT_PACK_INL_H_
#undef ATTN_KERNELS_BF16DOT_PACK_INL_H_
#else
#define ATTN_KERNELS_BF16DOT_PACK_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/common/bf16dot-inl.h"      // DPairF, DPairU
#include "kernels/common/microkernels-inl.h"  // PanelWidth, kPanelVectors
#include "kernels/common/scratch.h"           // GrowScratch
#include "kernels/common/softmax-inl.h"       // PanelStats
#include "kernels/kernel.h"                   // HeadView, KeyRun
#include "kernels/streaming/narrow-inl.h"     // NarrowScratch

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

// Scratch of one bf16 dot-product worker, sized for (q_block, kv_block, d, dv).
class Bf16DotScratch {
 public:
  void Reserve(int64_t q_block, int64_t kv_block, int64_t d, int64_t dv) {
    const size_t P = PanelWidth();
    const int64_t panels = (q_block + int64_t(P) - 1) / int64_t(P);
    const int64_t key_pairs = (kv_block + 1) / 2;
    internal::GrowScratch(qp_, qp_size_, size_t(panels * ((d + 1) / 2)) * P);
    internal::GrowScratch(ot_, ot_size_, size_t(panels * dv) * P);
    internal::GrowScratch(st_, st_size_, size_t(kv_block) * P);
    internal::GrowScratch(pp_, pp_size_, size_t(key_pairs) * P);
    internal::GrowScratch(vp_, vp_size_, size_t(key_pairs * dv));
    internal::GrowScratch(stats_, stats_size_, size_t(panels) * 3 * P);
  }
  // The float32 V tile, only for tiles holding NaN or ±Inf (see the kernel).
  void ReserveWidened(int64_t kv_block, int64_t dv) {
    internal::GrowScratch(vw_, vw_size_, size_t(kv_block * dv));
  }
  // The narrow (decode) path's bf16 pairs (narrow-body.h): each row's Q,
  // padded with zeros to whole vectors, and its rounded weights of a tile.
  void ReserveNarrow(int64_t rows, int64_t d, int64_t kv_block) {
    const int64_t N = int64_t(hn::Lanes(DPairU()));
    narrow_q_stride_ = ((d + 1) / 2 + N - 1) / N * N;
    narrow_p_stride_ = ((kv_block + 1) / 2 + N - 1) / N * N;
    internal::GrowScratch(nq_, nq_size_, size_t(rows * narrow_q_stride_));
    internal::GrowScratch(np_, np_size_, size_t(rows * narrow_p_stride_));
  }
  uint32_t* narrow_q(int64_t row) const { return nq_.get() + row * narrow_q_stride_; }
  int64_t narrow_q_stride() const { return narrow_q_stride_; }
  uint32_t* narrow_p(int64_t row) const { return np_.get() + row * narrow_p_stride_; }
  int64_t narrow_p_stride() const { return narrow_p_stride_; }
  uint32_t* qp(int64_t panel, int64_t d) const {
    return qp_.get() + panel * ((d + 1) / 2) * PanelWidth();
  }
  float* ot(int64_t panel, int64_t dv) const { return ot_.get() + panel * dv * PanelWidth(); }
  float* st() const { return st_.get(); }
  uint32_t* pp() const { return pp_.get(); }
  uint32_t* vp() const { return vp_.get(); }
  float* vw() const { return vw_.get(); }
  std::vector<TileRun>* runs() { return &runs_; }
  NarrowScratch& narrow() { return narrow_; }
  PanelStats stats(int64_t panel) const {
    float* base = stats_.get() + panel * 3 * PanelWidth();
    return PanelStats{base, base + PanelWidth(), base + 2 * PanelWidth()};
  }

 private:
  NarrowScratch narrow_;  // views of few rows (narrow-body.h)
  std::vector<TileRun> runs_;  // the current key tile's runs
  hwy::AlignedFreeUniquePtr<uint32_t[]> qp_, pp_, vp_, nq_, np_;
  size_t nq_size_ = 0, np_size_ = 0;
  int64_t narrow_q_stride_ = 0, narrow_p_stride_ = 0;
  hwy::AlignedFreeUniquePtr<float[]> ot_, st_, stats_, vw_;
  size_t qp_size_ = 0, pp_size_ = 0, vp_size_ = 0, ot_size_ = 0, st_size_ = 0, stats_size_ = 0,
         vw_size_ = 0;
};

// Qp[t][i] = (q[i][2t], q[i][2t+1]) for i < rows, +0 pairs for the padding
// rows: the raw bf16 bits, unscaled (the scale multiplies the float32
// scores, so Q is not rounded a second time). Once per query block.
HWY_INLINE void PackQueryPairs(const uint16_t* HWY_RESTRICT q, int64_t q_stride, int64_t rows,
                               int64_t d, uint32_t* HWY_RESTRICT qp) {
  const int64_t P = int64_t(PanelWidth());
  const int64_t pairs = (d + 1) / 2;
  for (int64_t t = 0; t < pairs; ++t) {
    uint32_t* HWY_RESTRICT dst = qp + t * P;
    for (int64_t i = 0; i < P; ++i) dst[i] = i < rows ? LoadPair(q + i * q_stride, t, d) : 0u;
  }
}

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

// Pp[u][i] = (p[2u][i], p[2u+1][i]) rounded to bf16, for the key pairs of a
// panel's weight tile St (keys x P floats), the missing odd key as +0.
HWY_INLINE void PackWeightPairs(const float* HWY_RESTRICT st, int64_t keys,
                                uint32_t* HWY_RESTRICT pp) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  for (int64_t u = 0; 2 * u < keys; ++u) {
    const float* HWY_RESTRICT even = st + 2 * u * int64_t(P);
    const bool has_odd = 2 * u + 1 < keys;
    for (size_t n = 0; n < kPanelVectors; ++n) {
      VPairU pair = RoundToBf16<false>(hn::Load(df, even + n * N));
      if (has_odd) pair = hn::Or(pair, RoundToBf16<true>(hn::Load(df, even + P + n * N)));
      hn::Store(pair, du, pp + u * int64_t(P) + n * N);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
