// The bf16 dot-product kernel for one head (or a sub-view of rows/keys of
// one), written once against an instruction layer `Dot` (kernels/common/
// bf16dot-inl.h: Dot::PairDot). NOT a normal header: layer-body.h includes
// it inside a namespace per layer (emulated:: and arm_emulated:: on every
// target, hardware:: on AVX3 and NEON within the instruction's attribute
// region), after the headers it uses (bf16dot/pack-inl.h,
// common/microkernels-inl.h, common/modifiers-inl.h, common/softmax-inl.h,
// common/widen-inl.h, decode/blocks-inl.h), with `using Dot = ...` in
// scope. Including the same text per layer is what lets the hardware copy
// be compiled with its instruction enabled while the emulated copies,
// which CPUs without the instruction run, are compiled without it.
//
// Algorithm, per head: the streaming kernel's (streaming-inl.h: query
// blocks of whole panels, key tiles, online softmax, causal skipping), with
// both products on bf16 pairs (pack-inl.h):
//   1. Q of each panel packed into pairs along d (once per query block);
//   2. per key tile, V packed into pairs of rows (once per query block and
//      tile, shared by its panels), checked for NaN / ±Inf on the way;
//   3. per panel: scores from Qp and K pairs read in place, times the scale
//      in float32; mask, causal mask and online softmax in float32 as the
//      other kernels; the weights rounded to bf16 pairs along the keys;
//      Ot += Pp · Vp with float32 accumulators.
// The score modifiers (attn.h: soft-cap, ALiBi, window, sinks) are the
// streaming kernel's, on the float32 scores (modifiers-inl.h); a window
// skips the key tiles outside the block's keys and the panels whose window
// ends before a tile, but a panel's keys start at the tile's first key (not
// its own window start) so that the V pairs packed per tile stay aligned:
// keys before the window are -inf like those past the causal limit.
// A V tile holding NaN or ±Inf is mixed by the float32 path of the other
// kernels instead (widened V, float32 weights, microkernels-inl.h
// NonFiniteV), so those values reach exactly the rows that can see their
// key, as everywhere else. Views of 2 to NarrowMaxRows() rows (a GQA decode
// group) take the narrow formulation on the same pairs (kernels/decode/pair_head-body.h),
// views of one row the widened walks (kernels/decode/walk-inl.h).
//
// Memory traffic: the streaming kernel's, at 2 bytes an element: K and V
// read once per query block, in place (a paged cache's pages too: a key
// tile spans pages, TileRun), Q once, O written once; extra memory
// O(q_block·(d + dv) + kv_block·(P + dv)) (Bf16DotScratch).

// St[r][:] = scale · Σ_t PairDot(Qp[t][:], K[r] pair t) for R keys at k.
template <int R>
HWY_INLINE void PairScoreRows(const uint32_t* HWY_RESTRICT qp, int64_t d,
                              const uint16_t* HWY_RESTRICT k, int64_t k_stride, float scale,
                              float* HWY_RESTRICT st) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  constexpr size_t NV = kPanelVectors;
  ATTN_VEC_ARRAY2(VPairF, acc, R, NV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n) ATTN_AT2(acc, r, n) = hn::Zero(df);
  const int64_t pairs = (d + 1) / 2;
  for (int64_t t = 0; t < pairs; ++t) {
    ATTN_VEC_ARRAY(VPairU, q, NV);
    for (size_t n = 0; n < NV; ++n) ATTN_AT(q, n) = hn::Load(du, qp + t * P + n * N);
    for (int r = 0; r < R; ++r) {
      const VPairU kb = hn::Set(du, LoadPair(k + r * k_stride, t, d));
      for (size_t n = 0; n < NV; ++n)
        ATTN_AT2(acc, r, n) = Dot::PairDot(ATTN_AT2(acc, r, n), ATTN_AT(q, n), kb);
    }
  }
  const VPairF s = hn::Set(df, scale);
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n)
      hn::Store(hn::Mul(ATTN_AT2(acc, r, n), s), df, st + r * P + n * N);
}

// St[j][:] for keys j < keys: the score tile of one panel.
HWY_INLINE void PairScoreTile(const uint32_t* HWY_RESTRICT qp, int64_t d,
                              const uint16_t* HWY_RESTRICT k, int64_t k_stride, int64_t keys,
                              float scale, float* HWY_RESTRICT st) {
  const int64_t P = int64_t(PanelWidth());
  ForEachRowBlock(keys, [&](int64_t j, int64_t rows) {
    WithTileSize<kRows>(rows, [&](auto r) ATTN_INLINE_LAMBDA {
      PairScoreRows<decltype(r)::value>(qp, d, k + j * k_stride, k_stride, scale, st + j * P);
    });
  });
}

// Ot[r][:] += Σ_u PairDot(Pp[u][:], Vp[u][r]) for R value columns at vp.
template <int R>
HWY_INLINE void PairMixColumns(const uint32_t* HWY_RESTRICT pp, int64_t key_pairs,
                               const uint32_t* HWY_RESTRICT vp, int64_t dv,
                               float* HWY_RESTRICT ot) {
  const DPairF df;
  const DPairU du;
  const size_t N = hn::Lanes(df);
  const size_t P = PanelWidth();
  constexpr size_t NV = kPanelVectors;
  ATTN_VEC_ARRAY2(VPairF, acc, R, NV);  // vec_array-inl.h
  for (int r = 0; r < R; ++r)
    for (size_t n = 0; n < NV; ++n) ATTN_AT2(acc, r, n) = hn::Zero(df);
  for (int64_t u = 0; u < key_pairs; ++u) {
    ATTN_VEC_ARRAY(VPairU, p, NV);
    for (size_t n = 0; n < NV; ++n) ATTN_AT(p, n) = hn::Load(du, pp + u * P + n * N);
    const uint32_t* HWY_RESTRICT vu = vp + u * dv;
    for (int r = 0; r < R; ++r) {
      const VPairU vb = hn::Set(du, vu[r]);
      for (size_t n = 0; n < NV; ++n)
        ATTN_AT2(acc, r, n) = Dot::PairDot(ATTN_AT2(acc, r, n), ATTN_AT(p, n), vb);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (size_t n = 0; n < NV; ++n) {
      float* HWY_RESTRICT o = ot + r * P + n * N;
      hn::Store(hn::Add(hn::Load(df, o), ATTN_AT2(acc, r, n)), df, o);
    }
  }
}

// Ot[c][:] += Σ_u PairDot(Pp[u][:], Vp[u][c]) for every value column c < dv.
HWY_INLINE void PairMixTile(const uint32_t* HWY_RESTRICT pp, int64_t key_pairs,
                            const uint32_t* HWY_RESTRICT vp, int64_t dv, float* HWY_RESTRICT ot) {
  const int64_t P = int64_t(PanelWidth());
  ForEachRowBlock(dv, [&](int64_t c, int64_t columns) {
    WithTileSize<kRows>(columns, [&](auto r) ATTN_INLINE_LAMBDA {
      PairMixColumns<decltype(r)::value>(pp, key_pairs, vp + c, dv, ot + c * P);
    });
  });
}

HWY_INLINE void Bf16DotHead(const internal::HeadView& h, const Tiles& tiles,
                            Bf16DotScratch& scratch) {
  // Views of few rows: the pair formulation for a GQA group (kernels/decode/pair_head-body.h;
  // it measured slower than widening for a single row, see there).
  if (h.tq <= NarrowMaxRows()) {
    if (h.tq == 1) return NarrowHead(h, tiles, scratch.narrow());
    return PairNarrowHead(h, tiles, scratch);
  }
  const int64_t P = int64_t(PanelWidth());
  const int64_t q_block = std::max<int64_t>(P, (tiles.q_block + P - 1) / P * P);
  const int64_t kv_block = std::max<int64_t>(1, tiles.kv_block);
  scratch.Reserve(q_block, kv_block, h.d, h.dv);
  float* HWY_RESTRICT st = scratch.st();
  const auto* q = static_cast<const uint16_t*>(h.q);

  for (int64_t q0 = 0; q0 < h.tq; q0 += q_block) {
    const int64_t rows = std::min(q_block, h.tq - q0);
    const int64_t panels = (rows + P - 1) / P;
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = q0 + p * P;
      PackQueryPairs(q + r0 * h.q_stride, h.q_stride, std::min(P, h.tq - r0), h.d,
                     scratch.qp(p, h.d));
      ResetStats(scratch.stats(p));
      std::fill(scratch.ot(p, h.dv), scratch.ot(p, h.dv) + h.dv * P, 0.0f);
    }
    // Keys outside [the block's first window start, its last visible key)
    // are never read.
    const int64_t key_end = h.VisibleEnd(q0 + rows - 1);
    NonFiniteV bad_v;  // float32 path for a V tile with NaN / Inf
    int64_t hint = 0;
    std::vector<TileRun>& runs = *scratch.runs();
    for (int64_t j0 = h.KeyBegin(q0); j0 < key_end; j0 += kv_block) {
      const int64_t tile_keys = std::min(kv_block, key_end - j0);
      // The tile's K and V rows, read in place: one run of contiguous keys,
      // or one per page it meets (TileRun).
      FindTileRuns(h, j0, tile_keys, &hint, &runs);
      const bool bad = PackValuePairsOf(TileRowCursor<true>(runs, h.v_stride), tile_keys, h.dv,
                                        scratch.vp(), h.dv);
      if (bad) {
        scratch.ReserveWidened(kv_block, h.dv);
        for (const TileRun& run : runs) {  // rows of dv floats
          WidenRows(run.v, DType::kBF16, h.v_stride, run.keys, h.dv, scratch.vw() + run.at * h.dv);
        }
        bad_v.Clean(scratch.vw(), h.dv, tile_keys, h.dv);
      }
      for (int64_t p = 0; p < panels; ++p) {
        const int64_t r0 = q0 + p * P;
        const int64_t panel_rows = std::min(P, h.tq - r0);
        // Keys this panel may see: up to its last row's causal limit.
        const int64_t keys =
            std::clamp<int64_t>(h.VisibleEnd(r0 + panel_rows - 1), j0, j0 + tile_keys) - j0;
        // Tile wholly above this panel's diagonal, or before its window.
        if (keys <= 0 || h.KeyBegin(r0) >= j0 + keys) continue;
        for (const TileRun& run : runs) {
          if (run.at >= keys) break;
          PairScoreTile(scratch.qp(p, h.d), h.d, run.k, h.k_stride,
                        std::min(run.keys, keys - run.at), h.scale, st + run.at * P);
        }
        PreparePanelScores(h, r0, panel_rows, j0, keys, st);  // modifiers-inl.h
        float* HWY_RESTRICT ot = scratch.ot(p, h.dv);
        if (bad) {
          OnlineSoftmaxTile<true>(st, keys, scratch.stats(p), ot, h.dv);
          MixTile(st, keys, bad_v.clean(), h.dv, h.dv, ot);
          bad_v.AddTo(st, keys, ot);
        } else {
          OnlineSoftmaxTile(st, keys, scratch.stats(p), ot, h.dv);
          PackWeightPairs(st, keys, scratch.pp());
          PairMixTile(scratch.pp(), (keys + 1) / 2, scratch.vp(), h.dv, ot);
        }
      }
    }
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = q0 + p * P;
      FinishViewPanel(h, r0, scratch.ot(p, h.dv), scratch.stats(p));  // softmax-inl.h
    }
  }
}
