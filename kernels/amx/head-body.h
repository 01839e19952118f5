// The AMX attention kernel for one head (or a sub-view of rows/keys of
// one), written once against a tile layer `Amx` (kernels/common/
// amx-inl.h). NOT a normal header: amx.cc includes it inside a namespace
// per layer (emulated:: on every target, hardware:: on AVX3 within the
// amx-tile/amx-bf16 attribute region), after the headers it uses
// (amx/pack-inl.h, common/amx-inl.h, common/microkernels-inl.h,
// common/softmax-inl.h, common/widen-inl.h, decode/blocks-inl.h), with
// `using Amx = ...` in scope.
//
// Algorithm, per head: the streaming kernel's loop (query blocks, key
// tiles, online softmax, causal skipping) with both products in AMX tiles
// (layouts in amx/pack-inl.h), in groups of 32 query rows:
//   1. Q of the block copied into zero-padded bf16 rows (once per block);
//   2. per key tile, K transposed into pair tiles and V interleaved into
//      pair rows (once per block and tile, shared by its groups), V checked
//      for NaN / ±Inf on the way;
//   3. per group: S = Q·Kᵀ in 2 x 2 tiles of 16 x 16 (tiles 0-3 accumulate,
//      4-5 hold two Q row tiles, 6-7 two Kp tiles: four tdpbf16ps per four
//      loads) stored row-major; then per row the weights, rounded to bf16
//      (to nearest even) into P, in two passes (AmxRowWeightsTwoPass: the
//      max, then the exponent, sum and rounding in one), over the raw
//      scores where the row has no score modifiers or mask, else over the
//      scores made final first (AmxPrepareRow: the scale, soft-cap, ALiBi,
//      mask, causal limit and window; a group's keys start at the tile's
//      first key, where the packed K and V tiles start; a window skips the
//      tiles outside it); then O += P·V in 2 x 2 tiles (tiles 0-3 load O
//      and accumulate every 32-key step of the tile before storing it
//      back). AmxRowWeights, the simple path (the online softmax of the
//      narrow path, NarrowSoftmaxRow), takes the rows of a V tile holding
//      NaN or ±Inf, rows whose scores the fast form cannot take, and every
//      row when AmxRun::plain_weights is false.
// attn-bench's amx-stages rows time these stages apart (AmxRun::clock).
// A V tile holding NaN or ±Inf is mixed in float32 instead (the weights
// unrounded, a key the row cannot see skipped, as in the narrow path), so
// those values reach exactly the rows that see their key. Views of fewer
// than 8 rows (decode, small GQA groups) take the bf16 dot-product kernel's
// narrow path (amx.cc AmxTakesView).
//
// Each call configures the tiles of its thread (every tile 16 x 64 bytes)
// and releases them before it returns, so OpenMP workers and callers'
// threads never inherit a configuration.
//
// Memory traffic: K and V read once per query block, in place (a paged
// cache's pages too: a key tile spans pages, TileRun), and packed into
// L1/L2 sized tiles, Q once, O written once; the row-major S, P and O of a group
// stay in L1 (32 x kv_block floats and bf16, 32 x d_v floats). Extra memory
// O(q_block·(d + d_v) + kv_block·(d + d_v)) (AmxScratch).

// S rows [0, 32) x keys [32·step, 32·step + 32) of a group: raw dot
// products q·k, into s (rows scratch.s_stride() floats apart).
HWY_INLINE void AmxScoreStep(const AmxScratch& scratch, const uint16_t* HWY_RESTRICT q,
                             int64_t step, float* HWY_RESTRICT s) {
  const int64_t d_pad = scratch.d_pad(), chunks = d_pad / kAmxPad;
  const int64_t q_bytes = d_pad * int64_t(sizeof(uint16_t));
  const int64_t s_bytes = scratch.s_stride() * int64_t(sizeof(float));
  const uint32_t* HWY_RESTRICT kp = scratch.kp();
  const int64_t n = 2 * step;  // the first of two 16-key tiles
  Amx::Zero<0>();
  Amx::Zero<1>();
  Amx::Zero<2>();
  Amx::Zero<3>();
  for (int64_t t = 0; t < chunks; ++t) {
    Amx::Load<4>(q + t * kAmxPad, q_bytes);
    Amx::Load<5>(q + 16 * d_pad + t * kAmxPad, q_bytes);
    Amx::Load<6>(kp + (n * chunks + t) * kAmxTileWords, 64);
    Amx::Load<7>(kp + ((n + 1) * chunks + t) * kAmxTileWords, 64);
    Amx::DotBf16<0, 4, 6>();
    Amx::DotBf16<1, 4, 7>();
    Amx::DotBf16<2, 5, 6>();
    Amx::DotBf16<3, 5, 7>();
  }
  Amx::Store<0>(s + n * 16, s_bytes);
  Amx::Store<1>(s + (n + 1) * 16, s_bytes);
  Amx::Store<2>(s + 16 * scratch.s_stride() + n * 16, s_bytes);
  Amx::Store<3>(s + 16 * scratch.s_stride() + (n + 1) * 16, s_bytes);
}

// S of a group over keys [0, keys_pad).
HWY_INLINE void AmxScoreGroup(const AmxScratch& scratch, const uint16_t* HWY_RESTRICT q,
                              int64_t keys_pad, float* HWY_RESTRICT s) {
  for (int64_t step = 0; step < keys_pad / kAmxPad; ++step) AmxScoreStep(scratch, q, step, s);
}

// O rows [0, 32) x columns [c, c + 32) of a group (o, d_v_pad floats a row)
// += P · Vp over keys_pad keys (p: the group's bf16 weights, rows
// scratch.p_stride() apart).
HWY_INLINE void AmxMixChunk(const AmxScratch& scratch, int64_t keys_pad, int64_t c,
                            const uint16_t* HWY_RESTRICT p, float* HWY_RESTRICT o) {
  const int64_t dv_pad = scratch.dv_pad();
  const int64_t o_bytes = dv_pad * int64_t(sizeof(float));
  const int64_t p_bytes = scratch.p_stride() * int64_t(sizeof(uint16_t));
  const int64_t v_bytes = dv_pad * int64_t(sizeof(uint32_t));
  const uint32_t* HWY_RESTRICT vp = scratch.vp();
  const uint16_t* HWY_RESTRICT p16 = p + 16 * scratch.p_stride();
  Amx::Load<0>(o + c, o_bytes);
  Amx::Load<1>(o + c + 16, o_bytes);
  Amx::Load<2>(o + 16 * dv_pad + c, o_bytes);
  Amx::Load<3>(o + 16 * dv_pad + c + 16, o_bytes);
  for (int64_t u = 0; u < keys_pad; u += kAmxPad) {
    Amx::Load<4>(p + u, p_bytes);
    Amx::Load<5>(p16 + u, p_bytes);
    Amx::Load<6>(vp + (u / 2) * dv_pad + c, v_bytes);
    Amx::Load<7>(vp + (u / 2) * dv_pad + c + 16, v_bytes);
    Amx::DotBf16<0, 4, 6>();
    Amx::DotBf16<1, 4, 7>();
    Amx::DotBf16<2, 5, 6>();
    Amx::DotBf16<3, 5, 7>();
  }
  Amx::Store<0>(o + c, o_bytes);
  Amx::Store<1>(o + c + 16, o_bytes);
  Amx::Store<2>(o + 16 * dv_pad + c, o_bytes);
  Amx::Store<3>(o + 16 * dv_pad + c + 16, o_bytes);
}

// O rows [0, 32) of a group += P · Vp over keys_pad keys.
HWY_INLINE void AmxMixGroup(const AmxScratch& scratch, int64_t keys_pad,
                            const uint16_t* HWY_RESTRICT p, float* HWY_RESTRICT o) {
  for (int64_t c = 0; c < scratch.dv_pad(); c += kAmxPad) AmxMixChunk(scratch, keys_pad, c, p, o);
}

// Query row `row`'s scores over keys [j0, j0 + keys) of the tile (s) made
// final in place: scaled, soft-capped or ALiBi-shifted, masked, causally
// limited and windowed, in that order, which decides what NaN and -inf do.
HWY_INLINE void AmxPrepareRow(const internal::HeadView& h, float* HWY_RESTRICT s, int64_t row,
                              int64_t j0, int64_t keys) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const VF scale = hn::Set(df, h.scale);
  const bool modified = h.HasScoreModifiers();
  const float* HWY_RESTRICT m =
      h.mask ? h.mask + row * h.mask_row_stride + j0 * h.mask_col_stride : nullptr;
  const bool fused = m && !modified && h.mask_col_stride == 1;
  if (fused) {
    // Scale and mask in one pass over the row.
    int64_t j = 0;
    for (; j + N <= keys; j += N) {
      hn::Store(hn::Add(hn::Mul(hn::Load(df, s + j), scale), hn::LoadU(df, m + j)), df, s + j);
    }
    for (; j < keys; ++j) s[j] = s[j] * h.scale + m[j];
  } else {
    for (int64_t j = 0; j < keys; j += N) {
      ATTN_MCA_BEGIN("amx_general_scale_1_vector_" ATTN_AMX_LAYER_NAME);
      hn::Store(hn::Mul(hn::Load(df, s + j), scale), df, s + j);
      ATTN_MCA_END();
    }
  }
  PrepareRowScores(h, modified, row, j0, keys, s, /*mask_added=*/fused);  // modifiers-inl.h
}

// Query row `row` of the view (row g of its group), keys [j0, j0 + keys) of
// the tile, the simple path: its scores prepared (AmxPrepareRow, unless
// `prepared` says s already holds them), one online-softmax step (rescaling
// its O row), and its weights rounded to bf16 into P, zero from `keys` to
// keys_pad. The weights also stay in s as float32, which AmxMixNonFinite
// reads.
HWY_INLINE void AmxRowWeights(const internal::HeadView& h, AmxScratch& scratch, int64_t row,
                              int64_t g, int64_t j0, int64_t keys, int64_t keys_pad,
                              NarrowRowStats& stats, float* HWY_RESTRICT o,
                              bool prepared = false) {
  const DF df;
  const hn::Rebind<uint16_t, DPairU> du16;
  const int64_t N = int64_t(hn::Lanes(df));
  float* HWY_RESTRICT s = scratch.s(g);
  if (!prepared) AmxPrepareRow(h, s, row, j0, keys);
  // Pads s with -inf to whole vectors: those weights come out -0.
  NarrowSoftmaxRow(s, keys, stats, o, h.dv);
  uint16_t* HWY_RESTRICT p = scratch.p(g);
  const int64_t vectors_end = (keys + N - 1) / N * N;
  for (int64_t j = 0; j < vectors_end; j += N) {
    ATTN_MCA_BEGIN("amx_general_bf16_1_vector_" ATTN_AMX_LAYER_NAME);
    hn::StoreU(hn::TruncateTo(du16, RoundToBf16<false>(hn::Load(df, s + j))), du16, p + j);
    ATTN_MCA_END();
  }
  std::fill(p + vectors_end, p + keys_pad, uint16_t{0});
}

// The fast weights of a row whose V tile is finite: two passes over s, the
// max and then the exponent, sum and bf16 rounding in one, where
// AmxRowWeights takes four. s holds the row's scores divided by `scale` >
// 0: the raw dot products (scale = h.scale) of a row without score
// modifiers (sinks apart, which FinishRow adds) or mask, or the scores
// AmxPrepareRow made (scale = 1). The max of s times the scale is the max
// of the scores (x -> fl(x·scale) is monotone), so the scale goes into the
// exponent: w = 2^(s·c - base), c = scale·log2 e, base = max·log2 e, one
// MulSub a vector; the weights go straight to bf16 in P, their float32 sum
// (NaN iff a score is NaN, which sets the row's flag) into the stats. Keys
// past the row's causal limit get 0, and so do -inf scores (masked, outside
// the window). The base is the row's running max, moved (and O and the sum
// rescaled) whenever a tile raises it, so the largest weight is exactly 1
// in bf16 too: a base lagging the max by up to 8, which skips most
// rescales, measured 2-3% more rms error on the output
// (docs/performance.md), and rescales cost little once per row and 512-key
// tile. Returns false, with the stats, O and P untouched, where the base
// would not be finite: a max beyond FLT_MAX / (scale·log2 e) in size
// (a row masked wholly by -FLT_MAX, as transformers writes its masks), or
// NaN or +inf; AmxRowWeights then takes the row.
// s: the row's scores, p: its weights, o: its O row (dv_pad floats).
HWY_INLINE bool AmxRowWeightsTwoPass(const internal::HeadView& h, float* HWY_RESTRICT s,
                                     uint16_t* HWY_RESTRICT p, int64_t row, int64_t j0,
                                     int64_t keys, int64_t keys_pad, float scale,
                                     NarrowRowStats& stats, float* HWY_RESTRICT o,
                                     int64_t dv_pad) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t visible = std::clamp<int64_t>(h.KeyEnd(row) - j0, 0, keys);
  const int64_t end = (visible + N - 1) / N * N;
  std::fill(s + visible, s + end, neg_inf);
  // Four running maxima: one would wait on vmaxps's latency every vector.
  VF m0 = hn::Set(df, neg_inf), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * N <= end; j += 4 * N) {
    ATTN_MCA_BEGIN("amx_max_pass_4_vectors_" ATTN_AMX_LAYER_NAME);
    m0 = hn::Max(m0, hn::Load(df, s + j));
    m1 = hn::Max(m1, hn::Load(df, s + j + N));
    m2 = hn::Max(m2, hn::Load(df, s + j + 2 * N));
    m3 = hn::Max(m3, hn::Load(df, s + j + 3 * N));
    ATTN_MCA_END();
  }
  for (; j < end; j += N) m0 = hn::Max(m0, hn::Load(df, s + j));
  const VF m = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  // Every lane -inf: MaxOfLanes may give -FLT_MAX (EMU128 starts from it).
  const bool none = end == 0 || hn::AllTrue(df, hn::Eq(m, hn::Set(df, neg_inf)));
  const float s_max = none ? neg_inf : hn::GetLane(hn::MaxOfLanes(df, m));
  const float log2e = 1.44269504088896341f;
  const float tile_max = s_max * scale;
  if (!none && !(std::isfinite(tile_max * log2e) &&
                 std::isfinite(std::max(tile_max, stats.max) * log2e))) {
    return false;
  }
  if (tile_max > stats.max) {
    if (stats.sum > 0.0f) {
      const float alpha = std::exp(stats.max - tile_max);
      stats.sum *= alpha;
      const VF valpha = hn::Set(df, alpha);
      for (int64_t c = 0; c < dv_pad; c += N) hn::Store(hn::Mul(hn::Load(df, o + c), valpha), df, o + c);
    }
    stats.max = tile_max;
  }
  const VF c = hn::Set(df, scale * log2e);
  const VF base = hn::Set(df, (stats.max == neg_inf ? 0.0f : stats.max) * log2e);
  VF sum0 = hn::Zero(df), sum1 = sum0;
  for (j = 0; j + 2 * N <= end; j += 2 * N) {
    ATTN_MCA_BEGIN("amx_exp_pass_2_vectors_" ATTN_AMX_LAYER_NAME);
    const VF w0 = Exp2Weight(hn::MulSub(hn::Load(df, s + j), c, base));
    const VF w1 = Exp2Weight(hn::MulSub(hn::Load(df, s + j + N), c, base));
    sum0 = hn::Add(sum0, w0);
    sum1 = hn::Add(sum1, w1);
    Amx::StoreWeightsBf16x2(w0, w1, p + j);
    ATTN_MCA_END();
  }
  if (j < end) {
    const VF w = Exp2Weight(hn::MulSub(hn::Load(df, s + j), c, base));
    sum0 = hn::Add(sum0, w);
    Amx::StoreWeightsBf16(w, p + j);
  }
  const VF sum = hn::Add(sum0, sum1);
  std::fill(p + end, p + keys_pad, uint16_t{0});
  const float tile_sum = hn::GetLane(hn::SumOfLanes(df, sum));
  if (std::isnan(tile_sum)) stats.nan = true;  // a NaN score (vmaxps may drop it)
  stats.sum += tile_sum;
  return true;
}

// O rows of a group += P·V in float32 for a V tile (rows in `runs`)
// holding NaN or ±Inf: the unrounded weights, keys a row cannot see
// (weight -0) skipped.
HWY_INLINE void AmxMixNonFinite(const internal::HeadView& h, const AmxScratch& scratch,
                                int64_t rows, const std::vector<TileRun>& runs, int64_t keys,
                                float* HWY_RESTRICT o) {
  for (int64_t g = 0; g < rows; ++g) {
    const float* HWY_RESTRICT w = scratch.s(g);
    float* HWY_RESTRICT o_row = o + g * scratch.dv_pad();
    TileRowCursor<true> v_row(runs, h.v_stride);
    for (int64_t j = 0; j < keys; ++j) {
      if (IsHiddenWeight(w[j])) continue;
      const auto* v = reinterpret_cast<const hwy::bfloat16_t*>(v_row(j));
      for (int64_t c = 0; c < h.dv; ++c) o_row[c] += w[j] * WidenScalar(v + c);
    }
  }
}

// Query row r of the view from its O row (dv_pad floats of scratch, scaled
// in place) and stats: FinishNarrowRow in whole vectors (StoreNarrowed
// rounds as StoreElement does, element for element).
HWY_INLINE void AmxFinishRow(const internal::HeadView& h, int64_t r, float* HWY_RESTRICT o,
                             int64_t dv_pad, const NarrowRowStats& stats) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const RowFinish f = FinishRow(stats.max, stats.sum, stats.nan, h.Sink(r));
  if (f.empty) {
    std::fill(o, o + dv_pad, 0.0f);
  } else {
    const VF inv = hn::Set(df, f.inv);
    for (int64_t c = 0; c < dv_pad; c += N) {
      ATTN_MCA_BEGIN("amx_finish_1_vector_" ATTN_AMX_LAYER_NAME);
      hn::Store(hn::Mul(hn::Load(df, o + c), inv), df, o + c);
      ATTN_MCA_END();
    }
  }
  void* HWY_RESTRICT out = h.OutRow(r);
  if (h.out_type == DType::kF32) {
    memcpy(out, o, size_t(h.dv) * sizeof(float));
  } else {
    StoreNarrowed(o, h.dv, out, h.out_type);
  }
  if (h.lse) h.lse[r * h.lse_stride] = f.lse;
}

HWY_INLINE void AmxHead(const internal::HeadView& h, const Tiles& tiles, AmxScratch& scratch,
                        const internal::AmxRun& run = {}) {
  using internal::AmxStage;
  internal::StageClock* clock = run.clock;
  const auto lap = [clock](AmxStage stage) {
    if (clock) clock->Lap(stage);
  };
  if (clock) clock->Start();
  // Views of few rows come here only through AmxHeads: amx.cc hands them
  // to the bf16 dot-product kernel (AmxTakesView).
  const int64_t q_block = AmxRoundUp(std::max<int64_t>(tiles.q_block, kAmxGroupRows));
  const int64_t kv_block = AmxRoundUp(std::max<int64_t>(tiles.kv_block, kAmxPad));
  scratch.Reserve(q_block, kv_block, h.d, h.dv);
  const auto* q = static_cast<const uint16_t*>(h.q);
  NarrowRowStats* HWY_RESTRICT stats = scratch.stats();
  // With the fast weights (AmxRowWeightsTwoPass, for tiles whose V is
  // finite), whether they start from the raw scores, or from scores that
  // AmxPrepareRow made final first.
  const bool raw = h.softcap == 0.0f && h.alibi_slope == 0.0f && h.window_left < 0 &&
                   h.window_right < 0 && !h.mask && h.scale > 0.0f;
  const internal::AmxTileConfig config = internal::FullAmxTiles();
  Amx::Configure(config);

  for (int64_t q0 = 0; q0 < h.tq; q0 += q_block) {
    const int64_t rows = std::min(q_block, h.tq - q0);
    const int64_t groups = (rows + kAmxGroupRows - 1) / kAmxGroupRows;
    PackAmxQueries(q + q0 * h.q_stride, h.q_stride, rows, groups * kAmxGroupRows, h.d,
                   scratch.d_pad(), scratch.q(0));
    for (int64_t r = 0; r < groups * kAmxGroupRows; ++r) stats[r] = NarrowRowStats();
    std::fill(scratch.o(0), scratch.o(groups * kAmxGroupRows), 0.0f);
    lap(AmxStage::kPackQ);
    // Keys outside [the block's first window start, its last visible key)
    // are never read.
    const int64_t key_end = h.VisibleEnd(q0 + rows - 1);
    int64_t hint = 0;
    std::vector<TileRun>& runs = *scratch.runs();
    for (int64_t j0 = h.KeyBegin(q0); j0 < key_end; j0 += kv_block) {
      const int64_t tile_keys = std::min(kv_block, key_end - j0);
      const int64_t tile_pad = AmxRoundUp(tile_keys);
      // Packed from the K and V rows in place: one run of contiguous keys,
      // or one per page the tile meets (TileRun).
      FindTileRuns(h, j0, tile_keys, &hint, &runs);
      PackAmxKeys(TileRowCursor<false>(runs, h.k_stride), tile_keys, tile_pad, h.d,
                  scratch.d_pad(), scratch.kp());
      const bool bad = PackAmxValues(TileRowCursor<true>(runs, h.v_stride), tile_keys, tile_pad,
                                     h.dv, scratch.dv_pad(), scratch.vp());
      lap(AmxStage::kPackKV);
      for (int64_t g0 = 0; g0 < rows; g0 += kAmxGroupRows) {
        const int64_t r0 = q0 + g0;
        const int64_t group_rows = std::min(kAmxGroupRows, rows - g0);
        // Keys this group may see: up to its last row's causal limit.
        // From the tile's first key (the packed K and V tiles start there),
        // the keys before a row's window being -inf.
        const int64_t keys =
            std::clamp<int64_t>(h.VisibleEnd(r0 + group_rows - 1), j0, j0 + tile_keys) - j0;
        // Tile wholly above this group's diagonal, or before its window.
        if (keys <= 0 || h.KeyBegin(r0) >= j0 + keys) continue;
        const int64_t keys_pad = AmxRoundUp(keys);
        AmxScoreGroup(scratch, scratch.q(g0), keys_pad, scratch.s(0));
        lap(AmxStage::kScores);
        float* HWY_RESTRICT o = scratch.o(g0);
        for (int64_t g = 0; g < group_rows; ++g) {
          float* HWY_RESTRICT s = scratch.s(g);
          float* HWY_RESTRICT o_row = o + g * scratch.dv_pad();
          const bool fast = run.plain_weights && !bad;
          if (fast && !raw) AmxPrepareRow(h, s, r0 + g, j0, keys);
          if (!fast || !AmxRowWeightsTwoPass(h, s, scratch.p(g), r0 + g, j0, keys, keys_pad,
                                             raw ? h.scale : 1.0f, stats[g0 + g], o_row,
                                             scratch.dv_pad())) {
            AmxRowWeights(h, scratch, r0 + g, g, j0, keys, keys_pad, stats[g0 + g], o_row,
                          fast && !raw);
          }
        }
        if (bad) {
          lap(AmxStage::kWeights);
          AmxMixNonFinite(h, scratch, group_rows, runs, keys, o);
        } else {
          for (int64_t g = group_rows; g < kAmxGroupRows; ++g) {
            std::fill(scratch.p(g), scratch.p(g) + keys_pad, uint16_t{0});  // padding rows
          }
          lap(AmxStage::kWeights);
          AmxMixGroup(scratch, keys_pad, scratch.p(0), o);
        }
        lap(AmxStage::kMix);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      AmxFinishRow(h, q0 + r, scratch.o(r), scratch.dv_pad(), stats[r]);
    }
    lap(AmxStage::kFinish);
  }
  Amx::Release();
}
