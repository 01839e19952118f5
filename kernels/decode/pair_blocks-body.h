// The bf16 dot-product decode walks' building blocks, written once against
// an instruction layer `Dot` (kernels/common/bf16dot-inl.h: Dot::PairDot).
// NOT a normal header: bf16dot/layer-body.h includes it per layer, before
// pair_tiled-body.h, pair_row-body.h and pair_head-body.h, after
// kernels/decode/blocks-inl.h, whose scratch, softmax step and float32 mix
// it shares.
//
// Algorithm: the widened walks' (blocks-inl.h: lanes along the head
// dimension, key tiles that stay in L1, online softmax per row, row groups
// of up to four sharing every loaded K and V vector), with both products on
// bf16 pairs read in place, so a bf16 K and V are never widened:
//   scores  s[r][j] = scale · Σ PairDot(Q pairs, K[j] pairs): one load and
//           one PairDot per 2N elements of d and row (the widened path: two
//           loads, two widenings and two FMAs), reduced across lanes as there;
//   mix     the float32 softmax weights rounded to bf16 (to nearest even) in
//           pairs of keys (j, j+1), and each V column pair (V[j][c],
//           V[j+1][c]) made by interleaving the two rows' 16-bit lanes, so
//           one PairDot adds two keys' terms to N columns. Within each
//           128-bit block the interleave takes columns 0-3 (lower) and 4-7
//           (upper), so a row's accumulator o holds each chunk of 2N columns
//           in that order (PairLayout), put back in column order once, at
//           the row's finish (the softmax rescales o elementwise, which the
//           order does not change).
// A tile where some row has a hidden key (weight -0: masked with -inf,
// causally hidden, outside the window) is mixed by the widened path's
// float32 code instead, which skips such keys for that row, so NaN or Inf
// in V there never reaches it, as in the reference; in a tile whose keys
// every row sees, NaN / Inf in V reaches every row, as it should. The
// arithmetic is the panel kernel's (docs/precision.md, bf16 dot-product
// paths): products exact, float32 sums in pairs, P rounded to bf16.
//
// GQA groups of 2, 4 or 8 rows with K and V rows adjacent (d = 64 or 128
// on AVX3) take a row walk instead of the tiles (PairNarrowRowWalk below: K
// and V read as two sequential streams, a tile's mix beside the next
// tile's scores), with the tiles' bits.
//
// Memory traffic: the widened narrow path's, K and V read once per view at
// 2 bytes an element, in place (a paged cache's pages too: a key tile spans
// pages, TileRun); extra memory R·(d + dv + kv_block) floats
// (NarrowScratch) and rows·(d + kv_block) / 2 words of bf16 pairs
// (Bf16DotScratch::ReserveNarrow).
//
// GQA groups gain from the pairs; one-row views measured faster widened and
// keep the widened path (docs/performance.md, "Decode walks: measurements
// behind the kernel choices"). The pairs halve the product instructions;
// what is left is the per-key reductions and softmax the two formulations
// share.

// Scores of R rows (bf16 pairs at qp, rows qp_stride words apart; their
// unscaled float32 values in ns.q for the ragged d) against KB keys at k:
// ns.s(row0 + r)[j + b].
template <int R, int KB>
HWY_INLINE void PairNarrowScoreBlock(const NarrowScratch& ns, const uint32_t* HWY_RESTRICT qp,
                                     int64_t qp_stride, int64_t row0, int64_t d,
                                     const uint16_t* HWY_RESTRICT k, int64_t k_stride, int64_t j,
                                     float scale) {
  const DPairF df;
  const DPairU du;
  const int64_t N = int64_t(hn::Lanes(du));
  ATTN_VEC_ARRAY(VPairF, acc, R * KB);  // vec_array-inl.h
  for (int a = 0; a < R * KB; ++a) ATTN_AT(acc, a) = hn::Zero(df);
  const int64_t full = d / (2 * N) * (2 * N);  // elements in whole vectors of pairs
  for (int64_t c = 0; c < full; c += 2 * N) {
    ATTN_VEC_ARRAY(VPairU, q, R);
    for (int r = 0; r < R; ++r) ATTN_AT(q, r) = hn::Load(du, qp + r * qp_stride + c / 2);
    for (int b = 0; b < KB; ++b) {
      const VPairU kv =
          hn::LoadU(du, reinterpret_cast<const uint32_t*>(k + b * k_stride + c));
      for (int r = 0; r < R; ++r)
        ATTN_AT(acc, r * KB + b) = Dot::PairDot(ATTN_AT(acc, r * KB + b), ATTN_AT(q, r), kv);
    }
  }
  float sums[R * KB + 15];
  SumLanes<R * KB>(acc, sums);  // lane_sums-inl.h
  for (int r = 0; r < R; ++r) {
    const float* HWY_RESTRICT qf = ns.q(row0 + r);
    for (int b = 0; b < KB; ++b) {
      float total = sums[r * KB + b];
      const uint16_t* HWY_RESTRICT kb = k + b * k_stride;
      // Ragged d: bf16 products are exact in float32.
      for (int64_t c = full; c < d; ++c) total += qf[c] * internal::FloatFromBF16(kb[c]);
      ns.s(row0 + r)[j + b] = total * scale;
    }
  }
}

// Scores of a tile whose K and V rows are at k and v (the tile's first
// key): blocks of KB keys, then the rest one at a time, with the narrow
// path's prefetching (key_rows-inl.h PrefetchRows) of K rows up to keys_left
// keys from k (the tile's run of contiguous keys).
template <int R>
HWY_INLINE void PairNarrowScoreTile(const internal::HeadView& h, const NarrowScratch& ns,
                                    const uint32_t* HWY_RESTRICT qp, int64_t qp_stride,
                                    int64_t row0, const uint16_t* HWY_RESTRICT k,
                                    const uint16_t* HWY_RESTRICT v, int64_t keys,
                                    int64_t keys_left, bool prefetch) {
  constexpr int KB = NarrowKeysPerBlock<R>();
  const int64_t ahead = KeyPrefetchDistance(DType::kBF16);
  int64_t j = 0;
  for (; j + KB <= keys; j += KB) {
    if (prefetch) PrefetchRows(v + j * h.v_stride, DType::kBF16, h.v_stride, KB, h.dv);
    if (prefetch && j + ahead + KB <= keys_left) {
      PrefetchRows(k + (j + ahead) * h.k_stride, DType::kBF16, h.k_stride, KB, h.d);
    }
    PairNarrowScoreBlock<R, KB>(ns, qp, qp_stride, row0, h.d, k + j * h.k_stride, h.k_stride, j,
                                h.scale);
  }
  if (prefetch) PrefetchRows(v + j * h.v_stride, DType::kBF16, h.v_stride, keys - j, h.dv);
  for (; j < keys; ++j) {
    PairNarrowScoreBlock<R, 1>(ns, qp, qp_stride, row0, h.d, k + j * h.k_stride, h.k_stride, j,
                               h.scale);
  }
}

// o(row0 + r)[c0 .. c0 + 2N·C) (PairLayout) += the terms of every key pair
// of the tile: pp holds each row's weight pairs, pp_stride words apart.
template <int R, int C>
HWY_INLINE void PairNarrowMixChunk(const NarrowScratch& ns, int64_t row0,
                                   const uint32_t* HWY_RESTRICT pp, int64_t pp_stride,
                                   int64_t keys, const std::vector<TileRun>& runs,
                                   int64_t v_stride, int64_t c0) {
  const DPairF df;
  const DPairU du;
  const hn::Repartition<uint16_t, DPairU> dh;
  const int64_t N = int64_t(hn::Lanes(du));
  ATTN_VEC_ARRAY2(VPairF, acc, R, 2 * C);  // vec_array-inl.h
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < 2 * C; ++n)
      ATTN_AT2(acc, r, n) = hn::Load(df, ns.o(row0 + r) + c0 + n * N);
  }
  auto add_pair = [&](int64_t u, const uint16_t* HWY_RESTRICT even,
                      const uint16_t* HWY_RESTRICT odd) {
    for (int ch = 0; ch < C; ++ch) {
      const auto a = hn::LoadU(dh, even + c0 + ch * 2 * N);
      const auto b = odd ? hn::LoadU(dh, odd + c0 + ch * 2 * N) : hn::Zero(dh);
      const VPairU lo = hn::BitCast(du, hn::InterleaveLower(dh, a, b));
      const VPairU hi = hn::BitCast(du, hn::InterleaveUpper(dh, a, b));
      for (int r = 0; r < R; ++r) {
        const VPairU w = hn::Set(du, pp[r * pp_stride + u]);
        ATTN_AT2(acc, r, 2 * ch) = Dot::PairDot(ATTN_AT2(acc, r, 2 * ch), w, lo);
        ATTN_AT2(acc, r, 2 * ch + 1) = Dot::PairDot(ATTN_AT2(acc, r, 2 * ch + 1), w, hi);
      }
    }
  };
  // A pair's two rows may lie in two pages (a run of odd length).
  TileRowCursor<true> v_row(runs, v_stride);
  int64_t u = 0;
  for (; 2 * u + 1 < keys; ++u) {
    const uint16_t* HWY_RESTRICT even = v_row(2 * u);
    add_pair(u, even, v_row(2 * u + 1));
  }
  if (2 * u < keys) add_pair(u, v_row(2 * u), nullptr);  // odd tile: (last, 0)
  for (int r = 0; r < R; ++r) {
    for (int n = 0; n < 2 * C; ++n)
      hn::Store(ATTN_AT2(acc, r, n), df, ns.o(row0 + r) + c0 + n * N);
  }
}

// o(r) += P·V for one tile whose keys every row sees: chunks of 2N columns
// on pairs, the ragged columns past the last whole chunk in float32 from
// the unrounded weights.
template <int R>
HWY_INLINE void PairNarrowMixTile(const NarrowScratch& ns, int64_t row0,
                                  const uint32_t* HWY_RESTRICT pp, int64_t pp_stride,
                                  int64_t keys, const std::vector<TileRun>& runs,
                                  int64_t v_stride, int64_t dv) {
  // 2·R·C accumulators and 4 V vectors within 32 (or 16) registers.
  constexpr int C = kNarrowWideRegisters ? (R <= 2 ? 4 : 2) : (R <= 2 ? 2 : 1);
  const int64_t width = 2 * int64_t(hn::Lanes(DPairU()));
  const int64_t chunks = dv / width;
  for (int64_t c = 0; c < chunks; c += C) {
    WithTileSize<C>(std::min<int64_t>(C, chunks - c), [&](auto n) ATTN_INLINE_LAMBDA {
      PairNarrowMixChunk<R, decltype(n)::value>(ns, row0, pp, pp_stride, keys, runs, v_stride,
                                                c * width);
    });
  }
  for (int64_t c = chunks * width; c < dv; ++c) {
    for (int r = 0; r < R; ++r) {
      const float* HWY_RESTRICT p = ns.s(row0 + r);
      float total = ns.o(row0 + r)[c];
      TileRowCursor<true> v_row(runs, v_stride);
      for (int64_t j = 0; j < keys; ++j) total += p[j] * internal::FloatFromBF16(v_row(j)[c]);
      ns.o(row0 + r)[c] = total;
    }
  }
}

// Between column order and PairLayout (see the file comment) for the whole
// chunks of 2N columns of o; the columns after them stay in order.
HWY_INLINE void PairLayoutFromColumns(float* HWY_RESTRICT o, int64_t dv, bool to_pairs) {
  const int64_t N = int64_t(hn::Lanes(DPairU()));
  HWY_ALIGN float chunk[2 * hn::MaxLanes(DPairU())];
  for (int64_t c0 = 0; c0 + 2 * N <= dv; c0 += 2 * N) {
    std::copy(o + c0, o + c0 + 2 * N, chunk);
    for (int64_t block = 0; block < N / 4; ++block) {
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t lower = 8 * block + i, upper = 8 * block + 4 + i;  // columns
        const int64_t lo_lane = 4 * block + i, hi_lane = N + 4 * block + i;
        if (to_pairs) {
          o[c0 + lo_lane] = chunk[lower];
          o[c0 + hi_lane] = chunk[upper];
        } else {
          o[c0 + lower] = chunk[lo_lane];
          o[c0 + upper] = chunk[hi_lane];
        }
      }
    }
  }
}

// pp[u] = (s[2u], s[2u+1]) rounded to bf16 for the key pairs of one row's
// weights s (keys valid, padded with -0 to whole vectors by
// NarrowSoftmaxRow; a missing odd key is that padding, whose V is zero);
// returns whether a valid weight is hidden (-0). Vectors of 2N weights at a
// time: scalar rounding was a third of the tile's time (Zen 5, 4 rows).
HWY_INLINE bool PackNarrowWeightPairs(const float* HWY_RESTRICT s, int64_t keys,
                                      uint32_t* HWY_RESTRICT pp) {
  const DPairF df;
  const DPairU du;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t padded = (keys + N - 1) / N * N;
  const VPairU hidden_bits = hn::Set(du, 0x80000000u);
  auto hidden = hn::FirstN(du, 0);
  for (int64_t j = 0; j < keys; j += 2 * N) {
    const VPairF a = hn::Load(df, s + j);
    const VPairF b = j + N < padded ? hn::Load(df, s + j + N) : hn::Set(df, -0.0f);
    const auto valid_a = hn::FirstN(du, size_t(std::clamp<int64_t>(keys - j, 0, N)));
    const auto valid_b = hn::FirstN(du, size_t(std::clamp<int64_t>(keys - j - N, 0, N)));
    hidden = hn::Or(hidden, hn::And(valid_a, hn::Eq(hn::BitCast(du, a), hidden_bits)));
    hidden = hn::Or(hidden, hn::And(valid_b, hn::Eq(hn::BitCast(du, b), hidden_bits)));
    // Lane u of the pair vector: keys j + 2u (low half) and j + 2u + 1.
    const VPairF even = hn::ConcatEven(df, b, a);
    const VPairF odd = hn::ConcatOdd(df, b, a);
    hn::Store(hn::Or(RoundToBf16<false>(even), RoundToBf16<true>(odd)), du, pp + j / 2);
  }
  return !hn::AllFalse(du, hidden);
}

// The scores of rows [row0, row0 + rows) for the tile's keys [j0, j0 +
// keys) (in the current score buffer) made weights, as NarrowSoftmaxTile
// (soft-cap and ALiBi, the mask, the causal limit and the window, then the
// online-softmax step, which rescales o in PairLayout elementwise), and
// rounded to bf16 pairs into bs.narrow_p(r - row0); returns whether a valid
// weight is hidden (-0), which the pair mix cannot skip.
HWY_INLINE bool PairNarrowWeights(const internal::HeadView& h, NarrowScratch& ns,
                                  Bf16DotScratch& bs, int64_t row0, int64_t rows, int64_t j0,
                                  int64_t keys, NarrowRowStats* HWY_RESTRICT stats) {
  bool any_hidden = false;
  const bool modified = h.HasScoreModifiers();
  for (int64_t r = row0; r < row0 + rows; ++r) {
    float* HWY_RESTRICT s = ns.s(r);
    PrepareRowScores(h, modified, r, j0, keys, s);  // modifiers-inl.h
    NarrowSoftmaxRow(s, keys, stats[r], ns.o(r), h.dv);
    any_hidden |= PackNarrowWeightPairs(s, keys, bs.narrow_p(r - row0));
  }
  return any_hidden;
}
