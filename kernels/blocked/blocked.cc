// Blocked kernel: query panel x key tile SIMD scores with scale and mask
// fused, an exact softmax over whole rows, then a SIMD mix.
//
// Algorithm, per panel of P query rows: score every visible key in tiles of
// kv_block into a row scratch St (keys x P floats), take the exact row max,
// exponentiate and sum (no rescaling ever), then mix all weights with V and
// normalise. Memory traffic: K and V are read once per panel (P rows) rather
// than once per q_block as in the streaming kernel, and the score rows make
// one round trip through the scratch (4·T_k·P bytes per panel: in L2 up to a
// few thousand keys). Extra memory O(T_k·P): bounded per panel, but not
// independent of T_k; the streaming kernel is the one for long contexts.
// bf16 / f16 K and V tiles are widened per panel, one at a time, into
// kv_block·max(d, dv) floats (widen-inl.h); Q is widened when packed, O
// rounded when written. The score modifiers (attn.h) are the streaming
// kernel's (modifiers-inl.h) on each score tile; a window starts a panel's
// scores at the tile holding its first row's window start, so a windowed
// call costs O(T·(W + kv_block)), and the sink joins at the finish.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/blocked/blocked.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/kernel.h"
#include "kernels/common/microkernels-inl.h"
#include "kernels/common/modifiers-inl.h"
#include "kernels/common/softmax-inl.h"
#include "kernels/common/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

void BlockedHead(const internal::HeadView& h, const Tiles& tiles, float* HWY_RESTRICT qt,
                 float* HWY_RESTRICT ot, float* HWY_RESTRICT st, float* HWY_RESTRICT stats,
                 uint8_t* HWY_RESTRICT v_bad, float* HWY_RESTRICT widened) {
  const int64_t P = int64_t(PanelWidth());
  const int64_t kv_block = std::max<int64_t>(1, tiles.kv_block);
  const PanelStats s{stats, stats + P, stats + 2 * P};
  // NaN / Inf in V (microkernels-inl.h, NonFiniteV): each key tile the head
  // reads is checked once here, not once per panel, then v_bad[tile] says
  // which tiles take the slow path.
  const int64_t head_keys = h.VisibleEnd(h.tq - 1);
  bool any_bad = false;
  for (int64_t j0 = 0; j0 < head_keys; j0 += kv_block) {
    const int64_t tile_keys = std::min(kv_block, head_keys - j0);
    const FloatRows v = WidenRows(h.VRow(j0), h.v_type, h.v_stride, tile_keys, h.dv, widened);
    v_bad[j0 / kv_block] = HasNonFinite(v.data, v.stride, tile_keys, h.dv);
    any_bad |= v_bad[j0 / kv_block] != 0;
  }
  NonFiniteV bad_v;
  for (int64_t r0 = 0; r0 < h.tq; r0 += P) {
    const int64_t rows = std::min(P, h.tq - r0);
    PackQueryPanel(h.QRow(r0), h.q_type, h.q_stride, rows, h.d, h.scale, qt);
    ResetStats(s);
    std::fill(ot, ot + h.dv * P, 0.0f);
    const int64_t keys = h.VisibleEnd(r0 + rows - 1);
    // The first tile any row of the panel sees (0 without a window).
    const int64_t first = std::min(h.KeyBegin(r0), keys) / kv_block * kv_block;
    for (int64_t j0 = first; j0 < keys; j0 += kv_block) {
      const int64_t tile_keys = std::min(kv_block, keys - j0);
      float* tile = st + j0 * P;
      const FloatRows k = WidenRows(h.KRow(j0), h.k_type, h.k_stride, tile_keys, h.d, widened);
      ScoreTile(qt, h.d, k.data, k.stride, tile_keys, tile);
      PreparePanelScores(h, r0, rows, j0, tile_keys, tile);  // modifiers-inl.h
    }
    if (any_bad) {
      FullSoftmax<true>(st + first * P, keys - first, s);
    } else {
      FullSoftmax(st + first * P, keys - first, s);
    }
    for (int64_t j0 = first; j0 < keys; j0 += kv_block) {
      const int64_t tile_keys = std::min(kv_block, keys - j0);
      const bool bad = any_bad && v_bad[j0 / kv_block];
      const FloatRows v = WidenRows(h.VRow(j0), h.v_type, h.v_stride, tile_keys, h.dv, widened);
      if (bad) bad_v.Clean(v.data, v.stride, tile_keys, h.dv);
      MixTile(st + j0 * P, tile_keys, bad ? bad_v.clean() : v.data, bad ? h.dv : v.stride, h.dv,
              ot);
      if (bad) bad_v.AddTo(st + j0 * P, tile_keys, ot);
    }
    FinishViewPanel(h, r0, ot, s);  // softmax-inl.h
  }
}

void BlockedAttentionImpl(const Problem& p, const internal::RunConfig& config) {
  const size_t P = PanelWidth();
  const int64_t dv = p.ValueDim();
  auto qt = hwy::AllocateAligned<float>(size_t(p.head_dim) * P);
  auto ot = hwy::AllocateAligned<float>(size_t(dv) * P);
  auto st = hwy::AllocateAligned<float>(size_t(p.kv_len) * P);
  auto stats = hwy::AllocateAligned<float>(3 * P);
  const int64_t kv_block = std::max<int64_t>(1, config.tiles.kv_block);
  auto v_bad = hwy::AllocateAligned<uint8_t>(size_t((p.kv_len + kv_block - 1) / kv_block));
  // One widened K or V tile (bf16 / f16 only).
  const bool f32_kv = p.k.dtype == DType::kF32 && p.v.dtype == DType::kF32;
  auto widened = hwy::AllocateAligned<float>(
      f32_kv ? 1 : size_t(std::min<int64_t>(kv_block, p.kv_len) * std::max(p.head_dim, dv)));
  if (!qt || !ot || !st || !stats || !v_bad || !widened) throw std::bad_alloc();
  const internal::HeadViews views(p, config);
  for (int64_t i = 0; i < views.size(); ++i) {
    BlockedHead(views[i], config.tiles, qt.get(), ot.get(), st.get(), stats.get(), v_bad.get(),
                widened.get());
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_EXPORT(BlockedAttentionImpl);
namespace internal {
void BlockedAttention(const Problem& p, const RunConfig& config) {
  HWY_DYNAMIC_DISPATCH(BlockedAttentionImpl)(p, config);
}
}  // namespace internal
}  // namespace attn
#endif  // HWY_ONCE
