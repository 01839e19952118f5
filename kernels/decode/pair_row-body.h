// The pair row walk (bf16 dot-product paths, AVX3: GQA groups of 2, 4 or 8
// rows with K and V rows adjacent, d = d_v of 2 or 4 vectors of pairs): K
// and V as two sequential streams, a tile's mix beside the next tile's
// scores; the pair tiled walk's bits at equal tiles. NOT a normal header:
// included per layer after pair_blocks-body.h (walk_table.cc "pair-row").

// The row walk's mix of one pair of V rows (even, and odd or null for a
// tile's last key without a pair) into RM rows' accumulators acc (RM x
// 2·VP vectors in PairLayout, row major) with their weight pairs
// w[0..RM): the operations of PairNarrowMixChunk for that pair, per lane
// in its order.
template <int VP, int RM>
HWY_INLINE void PairNarrowRowMixPair(const uint16_t* HWY_RESTRICT even,
                                     const uint16_t* HWY_RESTRICT odd,
                                     const uint32_t* HWY_RESTRICT w,
                                     ATTN_VEC_ARRAY_PARAM(VPairF, acc)) {
  const DPairU du;
  const hn::Repartition<uint16_t, DPairU> dh;
  const int64_t N = int64_t(hn::Lanes(du));
  constexpr int OV = 2 * VP;
  for (int ch = 0; ch < VP; ++ch) {
    const auto a = hn::LoadU(dh, even + ch * 2 * N);
    const auto b = odd ? hn::LoadU(dh, odd + ch * 2 * N) : hn::Zero(dh);
    const VPairU lo = hn::BitCast(du, hn::InterleaveLower(dh, a, b));
    const VPairU hi = hn::BitCast(du, hn::InterleaveUpper(dh, a, b));
    for (int r = 0; r < RM; ++r) {
      const VPairU wr = hn::Set(du, w[r]);
      ATTN_AT(acc, r * OV + 2 * ch) = Dot::PairDot(ATTN_AT(acc, r * OV + 2 * ch), wr, lo);
      ATTN_AT(acc, r * OV + 2 * ch + 1) = Dot::PairDot(ATTN_AT(acc, r * OV + 2 * ch + 1), wr, hi);
    }
  }
}

// The pair path's row walk (as the widened path's, row-inl.h) for
// a GQA group view of R = 2, 4 or 8 rows whose K and V rows are adjacent
// in memory (no pages), d = dv of VP = 2 or 4 whole vectors of bf16 pairs
// (64 or 128 on AVX-512): one step mixes tile t's key pairs beside the
// scores of tile t + 1, a K row and a pair of V rows at a time, so K and V
// are two sequential streams read once, each row whole, with the output
// accumulators in registers for the tile: every row's where they fit in
// 16 vectors (4 rows at d = 64: one pass over K and V), else rows 0 and
// 1's, the other rows then mixed two at a time over the tile's V rows
// again (from L2). Per score and per output lane the operations of the tiled
// walk (PairNarrowScoreBlock, PairNarrowMixChunk) in its order, so its bits
// at equal tiles (tests/decode_walks_test.cc). From DRAM it gains over
// the tiled walk but stays below the read probe, as the widened group walk
// does (docs/performance.md).
//
// Only these 6 sizes (VP 2 or 4, R 2, 4 or 8) are compiled, on AVX3 (32
// registers), in the layers that run there in earnest (bf16dot.cc
// kPairRowWalkLayer): more sizes and targets cost compile time, and rows
// or VP as runtime values ran the walk at half its speed or less
// (docs/performance.md, "Compile time").
// K and V rows are requested 2 KiB ahead (PrefetchPairRowAhead), as the
// widened group walk requests 16-bit rows (row-inl.h,
// kGroupPrefetchBytes): faster from DRAM on the Intel Xeon with AMX (whose
// decode views run this walk), no change on Zen 4 (docs/performance.md).
// Rows are adjacent (the walk table admits only k_stride == d), so the
// row kGroupPrefetchBytes ahead is whole.
HWY_INLINE void PrefetchPairRowAhead(const uint16_t* HWY_RESTRICT row, int64_t row_elements) {
  const int64_t row_bytes = row_elements * int64_t(sizeof(uint16_t));
  PrefetchRowLines(reinterpret_cast<const char*>(row) +
                       std::max<int64_t>(1, kGroupPrefetchBytes / row_bytes) * row_bytes,
                   row_bytes);
}

// qp: the rows' Q pairs (qp_stride words apart); pp: tile t's weight pairs
// (pp_stride apart); v: tile t's first V row, `keys` keys (0: scores only);
// k: tile t + 1's first K row, `next_keys` keys, scores into s_next[r].
template <int VP, int R>
HWY_INLINE void PairNarrowRowGroupKeys(const internal::HeadView& h,
                                       const uint32_t* HWY_RESTRICT qp, int64_t qp_stride,
                                       const uint32_t* HWY_RESTRICT pp, int64_t pp_stride,
                                       int64_t keys, const uint16_t* HWY_RESTRICT v,
                                       float* const* HWY_RESTRICT s_next, int64_t next_keys,
                                       const uint16_t* HWY_RESTRICT k,
                                       float* const* HWY_RESTRICT o) {
  static_assert(R == 2 || R == 4 || R == 8, "a group of 2, 4 or 8 rows");
  constexpr int OV = 2 * VP;
  const DPairF df;
  const DPairU du;
  const int64_t N = int64_t(hn::Lanes(du));
  const int64_t k_stride = h.k_stride, v_stride = h.v_stride;
  const float scale = h.scale;
  // Rows mixed beside the scores: all of them where their outputs fit in
  // half the registers (kRowWalkOutputVectors, the widened walk's rule: 4
  // rows at d = 64), so K and V are read once in one pass; otherwise rows 0
  // and 1, then the others two at a time.
  constexpr int RA = R * OV <= kRowWalkOutputVectors ? R : 2;
  ATTN_VEC_ARRAY(VPairF, acc, RA * OV);  // vec_array-inl.h; row r at r·OV
  for (int r = 0; r < RA; ++r) {
    for (int n = 0; n < OV; ++n) ATTN_AT(acc, r * OV + n) = hn::Load(df, o[r] + n * N);
  }
  const int64_t steps = std::max((keys + 1) / 2 * 2, next_keys);
  for (int64_t i = 0; i < steps; i += 2) {
    for (int64_t j = i; j < std::min(i + 2, next_keys); ++j) {  // K row j, whole
      constexpr int RD = R < 4 ? 4 : R;  // dot products, in fours
      ATTN_VEC_ARRAY(VPairF, dot, RD);
      for (int r = 0; r < RD; ++r) ATTN_AT(dot, r) = hn::Zero(df);
      const uint32_t* HWY_RESTRICT kr = reinterpret_cast<const uint32_t*>(k + j * k_stride);
      PrefetchPairRowAhead(k + j * k_stride, k_stride);
      for (int n = 0; n < VP; ++n) {
        const VPairU kv = hn::LoadU(du, kr + n * N);
        for (int r = 0; r < R; ++r) {
          ATTN_AT(dot, r) =
              Dot::PairDot(ATTN_AT(dot, r), hn::Load(du, qp + r * qp_stride + n * N), kv);
        }
      }
      for (int r0 = 0; r0 < R; r0 += 4) {
        float sums[4];
        SumFourDots(ATTN_AT(dot, r0), ATTN_AT(dot, r0 + 1), ATTN_AT(dot, r0 + 2),
                    ATTN_AT(dot, r0 + 3), std::min(R, 4), sums);
        for (int r = 0; r < std::min(R, 4); ++r) s_next[r0 + r][j] = sums[r] * scale;
      }
    }
    if (i < keys) {  // the pair (i, i + 1); a missing odd key is (last, 0)
      const uint16_t* HWY_RESTRICT even = v + i * v_stride;
      PrefetchPairRowAhead(even, v_stride);
      PrefetchPairRowAhead(even + v_stride, v_stride);
      uint32_t w[RA];
      for (int r = 0; r < RA; ++r) w[r] = pp[r * pp_stride + i / 2];
      PairNarrowRowMixPair<VP, RA>(even, i + 1 < keys ? even + v_stride : nullptr, w, acc);
    }
  }
  for (int r = 0; r < RA; ++r) {
    for (int n = 0; n < OV; ++n) hn::Store(ATTN_AT(acc, r * OV + n), df, o[r] + n * N);
  }
  if (keys == 0) return;
  for (int r0 = RA; r0 < R; r0 += 2) {  // rows r0, r0 + 1 over the tile's V rows again
    for (int r = 0; r < 2; ++r) {
      for (int n = 0; n < OV; ++n) ATTN_AT(acc, r * OV + n) = hn::Load(df, o[r0 + r] + n * N);
    }
    for (int64_t i = 0; i < keys; i += 2) {
      const uint16_t* HWY_RESTRICT even = v + i * v_stride;
      const uint32_t w[2] = {pp[r0 * pp_stride + i / 2], pp[(r0 + 1) * pp_stride + i / 2]};
      PairNarrowRowMixPair<VP, 2>(even, i + 1 < keys ? even + v_stride : nullptr, w, acc);
    }
    for (int r = 0; r < 2; ++r) {
      for (int n = 0; n < OV; ++n) hn::Store(ATTN_AT(acc, r * OV + n), df, o[r0 + r] + n * N);
    }
  }
}

// The walk is compiled on AVX3 in the layers that say so (bf16dot.cc
// kPairRowWalkLayer: vdpbf16ps and its emulation); the walk table
// (DecodeView::pair_row_compiled) offers it only there.
constexpr bool kPairRowWalkCompiled = HWY_TARGET == HWY_AVX3 && kPairRowWalkLayer;

// The row walk over a view's key tiles of kv_block keys (the walk table
// admits it; q pairs, o and the softmax state set up by PairNarrowHead):
// the first tile's scores alone, then each tile's weights and a step
// (PairNarrowRowGroupKeys) mixing it beside the next tile's scores. A tile
// where some row has a hidden weight takes the float32 mix instead, after
// a scores-only step, as the tiled walk (PairNarrowGroupTile) does.
template <int VP, int R>
HWY_INLINE void PairNarrowRowWalk(const internal::HeadView& h, int64_t kv_block,
                                  NarrowScratch& ns, Bf16DotScratch& bs) {
  NarrowRowStats* HWY_RESTRICT stats = ns.stats();
  const int64_t key_end = h.VisibleEnd(R - 1);
  int64_t j0 = h.KeyBegin(0);
  if (j0 >= key_end) return;
  float* o[R];
  float* s[2][R];
  for (int r = 0; r < R; ++r) {
    o[r] = ns.o(r);
    for (int b = 0; b < 2; ++b) {
      ns.SetScoreBuffer(b);
      s[b][r] = ns.s(r);
    }
  }
  const uint32_t* HWY_RESTRICT qp = bs.narrow_q(0);
  const int64_t qp_stride = bs.narrow_q_stride();
  const uint32_t* HWY_RESTRICT pp = bs.narrow_p(0);
  const int64_t pp_stride = bs.narrow_p_stride();
  auto k_row = [&](int64_t j) { return static_cast<const uint16_t*>(h.KRow(j)); };
  auto v_row = [&](int64_t j) { return static_cast<const uint16_t*>(h.VRow(j)); };
  int64_t keys = std::min(kv_block, key_end - j0), cur = 0;
  PairNarrowRowGroupKeys<VP, R>(h, qp, qp_stride, pp, pp_stride, 0, nullptr, s[cur], keys,
                                k_row(j0), o);
  ns.SetScoreBuffer(cur);
  bool hidden = PairNarrowWeights(h, ns, bs, 0, R, j0, keys, stats);
  for (;;) {
    const int64_t next_j0 = j0 + keys, next_keys = std::min(kv_block, key_end - next_j0);
    const uint16_t* HWY_RESTRICT next_k = next_keys > 0 ? k_row(next_j0) : nullptr;
    PairNarrowRowGroupKeys<VP, R>(h, qp, qp_stride, pp, pp_stride, hidden ? 0 : keys,
                                  v_row(j0), s[1 - cur], next_keys, next_k, o);
    if (hidden) {  // the float32 mix, which skips hidden keys
      ns.SetScoreBuffer(cur);
      const auto* HWY_RESTRICT v = reinterpret_cast<const hwy::bfloat16_t*>(v_row(j0));
      for (int r = 0; r < R; ++r) PairLayoutFromColumns(o[r], h.dv, false);
      for (int row0 = 0; row0 < R; row0 += 4) {  // the tiled walk's row groups
        NarrowMixTile<R < 4 ? R : 4>(ns, row0, keys, v, h.v_stride, h.dv);
      }
      for (int r = 0; r < R; ++r) PairLayoutFromColumns(o[r], h.dv, true);
    }
    if (next_keys == 0) break;
    cur = 1 - cur;
    j0 = next_j0;
    keys = next_keys;
    ns.SetScoreBuffer(cur);
    hidden = PairNarrowWeights(h, ns, bs, 0, R, j0, keys, stats);
  }
  ns.SetScoreBuffer(0);
}

