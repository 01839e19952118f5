// The bf16 dot-product kernel's views of 2 to NarrowMaxRows() rows (GQA
// decode groups): q pairs, o and the softmax state set up, the walk the
// decode walk table chooses (walk_table.cc: pair-row or pair-tiled), the
// rows finished. NOT a normal header: bf16dot.cc includes it per layer,
// after pair_blocks-body.h, pair_tiled-body.h and pair_row-body.h.

// Views of up to NarrowMaxRows() rows of an all-bf16 problem: normalised
// output and lse, as NarrowHead.
HWY_INLINE void PairNarrowHead(const internal::HeadView& h, const Tiles& tiles,
                               Bf16DotScratch& bs) {
  NarrowScratch& ns = bs.narrow();
  const int64_t rows = h.tq;
  // The widened path's L1 rule for the V tile, at 2 bytes an element; the
  // row walk reads each V row once and takes its longer tiles.
  internal::DecodeView facts = internal::DescribeDecodeView(
      h, int64_t(hn::Lanes(DPairU())), internal::DecodeProducts::kPairs);
  facts.pair_row_compiled = kPairRowWalkCompiled;
  const bool row_walk = kPairRowWalkCompiled && internal::ChooseDecodeWalk(facts, h.decode_walk) ==
                                                    internal::DecodeWalk::kPairRow;
  const int64_t l1_keys = std::max<int64_t>(8, (16 * 1024) / (2 * std::max<int64_t>(1, h.dv)));
  const int64_t kv_block = std::max<int64_t>(
      1, std::min<int64_t>(tiles.kv_block, row_walk ? kNarrowRowTileKeys : l1_keys));
  ns.Reserve(rows, h.d, kv_block, h.dv);
  bs.ReserveNarrow(rows, h.d, kv_block);
  NarrowRowStats* HWY_RESTRICT stats = ns.stats();
  for (int64_t r = 0; r < rows; ++r) {
    stats[r] = NarrowRowStats();
    const auto* HWY_RESTRICT q = static_cast<const uint16_t*>(h.QRow(r));
    float* HWY_RESTRICT qf = ns.q(r);
    auto* HWY_RESTRICT q16 = reinterpret_cast<uint16_t*>(bs.narrow_q(r));
    std::fill(q16, q16 + 2 * bs.narrow_q_stride(), uint16_t{0});  // zero padding pairs
    for (int64_t c = 0; c < h.d; ++c) {
      q16[c] = q[c];
      qf[c] = internal::FloatFromBF16(q[c]);
    }
    std::fill(ns.o(r), ns.o(r) + h.dv, 0.0f);
  }
  const int64_t key_end = h.VisibleEnd(rows - 1);
  int64_t hint = 0;
  std::vector<TileRun>& runs = *bs.runs();
  if constexpr (kPairRowWalkCompiled) {
    if (row_walk) {
      const bool four = h.d == 4 * 2 * int64_t(hn::Lanes(DPairU()));
      if (four && rows == 8) PairNarrowRowWalk<4, 8>(h, kv_block, ns, bs);
      if (four && rows == 4) PairNarrowRowWalk<4, 4>(h, kv_block, ns, bs);
      if (four && rows == 2) PairNarrowRowWalk<4, 2>(h, kv_block, ns, bs);
      if (!four && rows == 8) PairNarrowRowWalk<2, 8>(h, kv_block, ns, bs);
      if (!four && rows == 4) PairNarrowRowWalk<2, 4>(h, kv_block, ns, bs);
      if (!four && rows == 2) PairNarrowRowWalk<2, 2>(h, kv_block, ns, bs);
    }
  }
  for (int64_t j0 = h.KeyBegin(0); !row_walk && j0 < key_end; j0 += kv_block) {
    const int64_t keys = std::min(kv_block, key_end - j0);
    // The tile's K and V rows, read in place: one run of contiguous keys,
    // or one per page it meets (TileRun).
    FindTileRuns(h, j0, keys, &hint, &runs);
    for (int64_t row0 = 0; row0 < rows; row0 += kNarrowGroupRows) {
      switch (std::min<int64_t>(kNarrowGroupRows, rows - row0)) {
        case 1: PairNarrowGroupTile<1>(h, ns, bs, row0, j0, keys, key_end, runs, stats); break;
        case 2: PairNarrowGroupTile<2>(h, ns, bs, row0, j0, keys, key_end, runs, stats); break;
        case 3: PairNarrowGroupTile<3>(h, ns, bs, row0, j0, keys, key_end, runs, stats); break;
        default: PairNarrowGroupTile<4>(h, ns, bs, row0, j0, keys, key_end, runs, stats); break;
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    PairLayoutFromColumns(ns.o(r), h.dv, false);
    FinishNarrowRow(h, r, ns.o(r), stats[r]);
  }
}
