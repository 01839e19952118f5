// The pair tiled walk (bf16 dot-product paths, views of 2 or more rows):
// per key tile, each group of up to four rows scores the tile on bf16
// pairs, takes the softmax step, then mixes the tile on pairs, or with the
// float32 mix where some row has a hidden key. Memory traffic: K and V once
// per view at 2 bytes an element, in place (a tile spans pages: TileRun).
// NOT a normal header: included per layer after pair_blocks-body.h.

// One tile of keys [j0, j0 + keys) for the R rows [row0, row0 + R):
// scores, modifiers, mask and causal limits, online softmax, mix. The
// tile's K and V rows are in `runs` (one, or one per page it meets).
template <int R>
HWY_INLINE void PairNarrowGroupTile(const internal::HeadView& h, NarrowScratch& ns,
                                    Bf16DotScratch& bs, int64_t row0, int64_t j0, int64_t keys,
                                    int64_t key_end, const std::vector<TileRun>& runs,
                                    NarrowRowStats* HWY_RESTRICT stats) {
  for (const TileRun& run : runs) {  // scores of each run at its place in the tile
    ns.SetScoreAt(run.at);
    PairNarrowScoreTile<R>(h, ns, bs.narrow_q(row0), bs.narrow_q_stride(), row0, run.k, run.v,
                           run.keys, std::min(run.contiguous, key_end - (j0 + run.at)),
                           /*prefetch=*/row0 == 0);
  }
  ns.SetScoreAt(0);
  const bool any_hidden = PairNarrowWeights(h, ns, bs, row0, R, j0, keys, stats);
  if (!any_hidden) {
    PairNarrowMixTile<R>(ns, row0, bs.narrow_p(0), bs.narrow_p_stride(), keys, runs, h.v_stride,
                         h.dv);
    return;
  }
  // Some row cannot see some key: the float32 mix, which skips it, a run
  // at a time.
  for (int64_t r = row0; r < row0 + R; ++r) PairLayoutFromColumns(ns.o(r), h.dv, false);
  for (const TileRun& run : runs) {
    ns.SetScoreAt(run.at);
    NarrowMixTile<R>(ns, row0, run.keys, reinterpret_cast<const hwy::bfloat16_t*>(run.v),
                     h.v_stride, h.dv);
  }
  ns.SetScoreAt(0);
  for (int64_t r = row0; r < row0 + R; ++r) PairLayoutFromColumns(ns.o(r), h.dv, true);
}

