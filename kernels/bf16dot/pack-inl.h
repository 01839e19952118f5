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
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch
#include "kernels/common/pairs-inl.h"         // TileRun, PackValuePairs, RoundToBf16
#include "kernels/common/scratch.h"           // GrowScratch
#include "kernels/common/softmax-inl.h"       // PanelStats
#include "kernels/kernel.h"                   // HeadView, KeyRun

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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
