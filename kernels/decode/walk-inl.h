// A narrow view's walk, per Highway target: the view's rows set up (q
// scaled, o zeroed), the walk the decode walk table chooses for it
// (walk_table.h: row, pipelined or tiled) taken a tile at a time, so that
// several views can take their tiles in turn or in lockstep (heads.cc), and
// the rows finished. Views of at most NarrowMaxRows() rows come here from
// the streaming and parallel kernels, and the one-row views of the bf16
// dot-product and AMX kernels. Memory traffic: K and V once per view;
// scratch R·(d + 2·kv_block + dv + padding) floats (NarrowScratch).
#if defined(ATTN_KERNELS_DECODE_WALK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_DECODE_WALK_INL_H_
#undef ATTN_KERNELS_DECODE_WALK_INL_H_
#else
#define ATTN_KERNELS_DECODE_WALK_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "attn/attn.h"  // Tiles
#include "hwy/highway.h"
#include "kernels/common/key_rows-inl.h"      // KeyRowCursor, KeyPrefetchDistance
#include "kernels/common/narrow_state-inl.h"  // NarrowScratch, NarrowRowStats, FinishNarrowRow
#include "kernels/common/widen-inl.h"         // WithStorageType, Q8_0Row, Q4_0Row
#include "kernels/decode/blocks-inl.h"        // NarrowSoftmaxTile
#include "kernels/decode/pipelined-inl.h"     // NarrowPipelinedKeys
#include "kernels/decode/row-inl.h"           // NarrowRowStep, RowAheadKeys
#include "kernels/decode/tiled-inl.h"         // NarrowGroupTile
#include "kernels/decode/walk_table.h"        // ChooseDecodeWalk
#include "kernels/kernel.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// A narrow view's walk over its key tiles, one tile a call, so that several
// views can take their tiles in turn (NarrowHeads). Rows go in groups of up
// to kNarrowGroupRows; every group of a key tile runs while the tile's K and
// V rows are in L1/L2, so K and V come from memory once per view whatever
// its row count.
class NarrowWalk {
 public:
  // in_run: the view is one of several that share token rows, taken a
  // pipelined step each in turn (NarrowHeads), where groups of 2 or 4 rows
  // take the pipelined walk too (walk_table.cc).
  NarrowWalk(const internal::HeadView& h, const Tiles& tiles, NarrowScratch& scratch,
             bool in_run = false)
      : h_(h), scratch_(scratch), k_rows_(h, false), v_rows_(h, true), k_ahead_(h, false),
        v_ahead_(h, true), v_again_(h, true) {
    const int64_t rows = h.tq;
    // The mix walks the tile's V rows once per column chunk: the tile must
    // stay in L1 (16 KiB of V, in V's own element type: a 16-bit V fits
    // twice the keys), or with power-of-two row strides the passes evict
    // each other even from L2 (kv_block 128 at d = 128 ran at a quarter of
    // the speed for 4 rows, float32 V).
    const int64_t l1_keys = std::max<int64_t>(
        8, (16 * 1024) / std::max<int64_t>(1, internal::BytesOf(h.v_type, h.dv)));
    internal::DecodeView facts =
        internal::DescribeDecodeView(h, int64_t(hn::Lanes(DF())), internal::DecodeProducts::kWidened);
    facts.in_run = in_run;
    const internal::DecodeWalk walk = internal::ChooseDecodeWalk(facts, h.decode_walk);
    row_walk_ = walk == internal::DecodeWalk::kRow;
    // The row walk reads each V row once, so its tile is not held to L1:
    // longer tiles make fewer softmax steps (kNarrowRowTileKeys).
    kv_block_ = std::max<int64_t>(
        1, std::min<int64_t>(tiles.kv_block, row_walk_ ? kNarrowRowTileKeys : l1_keys));
    scratch.Reserve(rows, h.d, kv_block_, h.dv);
    NarrowRowStats* HWY_RESTRICT stats = scratch.stats();
    for (int64_t r = 0; r < rows; ++r) {
      stats[r] = NarrowRowStats();
      const void* HWY_RESTRICT q = h.QRow(r);
      float* HWY_RESTRICT qs = scratch.q(r);
      for (int64_t c = 0; c < h.d; ++c) qs[c] = h.scale * internal::LoadElement(q, h.q_type, c);
      std::fill(scratch.o(r), scratch.o(r) + h.dv, 0.0f);
    }
    // Keys outside [first row's window start, last row's last visible key)
    // are never read: a windowed decode reads the window's keys only.
    key_end_ = h.VisibleEnd(rows - 1);
    j0_ = h.KeyBegin(0);
    pipelined_ = row_walk_ || walk == internal::DecodeWalk::kPipelined;
  }

  bool Done() const { return primed_ ? keys_ == 0 : j0_ >= key_end_; }

  // Whether the tiles can be taken a step at a time (BeginTile, Steps,
  // EndTile): the pipelined walk, not the row walk.
  bool Stepped() const { return pipelined_ && !row_walk_; }
  // Walks that cover the same keys in the same tiles take their steps in
  // lockstep.
  bool SameTilesAs(const NarrowWalk& o) const {
    return j0_ == o.j0_ && key_end_ == o.key_end_ && kv_block_ == o.kv_block_;
  }

  // The next tile of keys, for every row group.
  void Tile() {
    if (pipelined_) return PipelinedTile();
    const internal::HeadView& h = h_;
    const int64_t j0 = j0_, keys = std::min(kv_block_, key_end_ - j0);
    // The tile's runs of contiguous keys: one for strided keys; with spans
    // one per run the tile meets (RunAt). K is requested ahead across runs
    // (KeyPrefetcher); a q8_0 K within its run (k_ahead) and the next run's
    // first keys (next_k).
    std::vector<NarrowChunk>& chunks = scratch_.chunks();
    chunks.clear();
    for (int64_t j = j0; j < j0 + keys;) {
      const internal::KeyRun run = h.RunAt(j, &hint_);
      NarrowChunk ch;
      ch.k = run.k;
      ch.v = run.v;
      ch.at = j - j0;
      ch.keys = std::min(run.keys, j0 + keys - j);
      ch.k_ahead = std::min(run.keys, key_end_ - j);
      if (internal::IsBlockType(h.k_type) && h.spans && run.keys == ch.keys &&
          j + ch.keys < key_end_) {
        int64_t next_hint = hint_;
        const internal::KeyRun next = h.RunAt(j + ch.keys, &next_hint);
        ch.next_k = next.k;
        ch.next_keys = std::min(next.keys, key_end_ - (j + ch.keys));
      }
      chunks.push_back(ch);
      j += ch.keys;
    }
    const NarrowChunk* ch = chunks.data();
    const size_t n = chunks.size();
    NarrowRowStats* HWY_RESTRICT stats = scratch_.stats();
    for (int64_t row0 = 0; row0 < h.tq; row0 += kNarrowGroupRows) {
      switch (std::min<int64_t>(kNarrowGroupRows, h.tq - row0)) {
        case 1: NarrowGroupTile<1>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        case 2: NarrowGroupTile<2>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        case 3: NarrowGroupTile<3>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
        default: NarrowGroupTile<4>(h, scratch_, row0, j0, keys, key_end_, ch, n, stats); break;
      }
    }
    j0_ += keys;
  }

  void Finish() const {
    for (int64_t r = 0; r < h_.tq; ++r) FinishNarrowRow(h_, r, scratch_.o(r), scratch_.stats()[r]);
  }

 private:
  // The pipelined walk (NarrowPipelinedKeys): tile t's mix beside tile t +
  // 1's scores, then tile t + 1's softmax step, which rescales o only after
  // tile t is mixed into it: the operations of the tiled walk in the same
  // order per row and column, so the same bits.
  void PipelinedTile() {
    BeginTile();
    Steps(std::numeric_limits<int64_t>::max());
    EndTile();
  }

 public:
  // A pipelined tile in parts: BeginTile (the first tile's scores alone,
  // once), Steps until the tile's keys are done (each call runs the steps
  // up to a key; false once none is left), EndTile (the next tile's softmax
  // step). The same operations as PipelinedTile in one call.
  void BeginTile() {
    const internal::HeadView& h = h_;
    if (!primed_) {  // the first tile's scores alone
      primed_ = true;
      keys_ = std::min(kv_block_, key_end_ - j0_);
      k_rows_.Seek(j0_);
      v_rows_.Seek(j0_);
      // The row walk requests rows RowAheadKeys ahead (row-inl.h),
      // the pipelined walk KeyPrefetchDistance.
      k_ahead_.Seek(j0_ + (row_walk_ ? RowAheadKeys(h.k_type, h.d) : KeyPrefetchDistance(h.k_type)));
      v_ahead_.Seek(j0_ + (row_walk_ ? RowAheadKeys(h.v_type, h.dv) : KeyPrefetchDistance(h.v_type)));
      Pipelined(1, 0, keys_, 0, std::numeric_limits<int64_t>::max());
      scratch_.SetScoreBuffer(cur_);
      NarrowSoftmaxTile(h, scratch_, 0, h.tq, j0_, keys_, scratch_.stats());
    }
    next_keys_ = std::min(kv_block_, key_end_ - (j0_ + keys_));
    step_j_ = 0;
  }
  bool Steps(int64_t until) {
    step_j_ = Pipelined(cur_, keys_, next_keys_, step_j_, until);
    return step_j_ < std::max(keys_, next_keys_);
  }
  void EndTile() {
    const int64_t next_j0 = j0_ + keys_;
    cur_ = 1 - cur_;
    if (next_keys_ > 0) {
      scratch_.SetScoreBuffer(cur_);
      NarrowSoftmaxTile(h_, scratch_, 0, h_.tq, next_j0, next_keys_, scratch_.stats());
    }
    scratch_.SetScoreBuffer(0);
    j0_ = next_j0;
    keys_ = next_keys_;
  }

 private:
  // Mix `keys` keys from buffer `cur` beside scoring `next_keys` into the
  // other, the steps from key j_begin until j_until (the row walk: all of
  // them); returns the key reached.
  int64_t Pipelined(int64_t cur, int64_t keys, int64_t next_keys, int64_t j_begin,
                    int64_t j_until) {
    // The table gives the row walk 1, 2 or 4 rows, the pipelined walk one
    // row (2 or 4 in a run); both K and V of one type.
    if (row_walk_) {
      const int64_t rows = h_.tq;
      const float* q[kNarrowGroupRows];
      const float* p[kNarrowGroupRows];
      float* s_next[kNarrowGroupRows];
      float* o[kNarrowGroupRows];
      bool any_hidden = false;
      for (int64_t r = 0; r < rows; ++r) {
        q[r] = scratch_.q(r);
        o[r] = scratch_.o(r);
        scratch_.SetScoreBuffer(cur);
        p[r] = scratch_.s(r);
        scratch_.SetScoreBuffer(1 - cur);
        s_next[r] = scratch_.s(r);
        for (int64_t j = 0; j < keys; ++j) any_hidden |= IsHiddenWeight(p[r][j]);
      }
      scratch_.SetScoreBuffer(0);
      v_again_.Seek(j0_);
      RowWalkCursors cursors{k_rows_, v_rows_, v_again_, k_ahead_, v_ahead_, key_end_};
      const int64_t vectors = h_.dv / int64_t(hn::Lanes(DF()));
      auto row_keys = [&](auto tag) {
        using T = decltype(tag);
        auto step = [&](auto rows_tag) {
          NarrowRowStep<decltype(rows_tag)::value, T, T>(vectors, any_hidden, q, p, keys, s_next,
                                                          next_keys, o, cursors);
        };
        if (rows == 1) return step(std::integral_constant<int, 1>());
        // Block groups take the tiled walk (walk_table.cc): their steps are
        // not instantiated, which saves their compile time in every target.
        if constexpr (!kIsBlockRow<T>) {
          if (rows == 2) return step(std::integral_constant<int, 2>());
          step(std::integral_constant<int, 4>());
        }
      };
      if (h_.k_type == DType::kQ8_0) {
        row_keys(Q8_0Row());
      } else if (h_.k_type == DType::kQ4_0) {
        row_keys(Q4_0Row());
      } else {
        WithStorageType(h_.k_type, row_keys);
      }
      return std::max(keys, next_keys);
    }
    int64_t reached = j_begin;
    WithStorageType(h_.k_type, [&](auto tag) {
      using T = decltype(tag);
      auto step = [&](auto rows_tag) {
        reached = NarrowPipelinedKeys<decltype(rows_tag)::value, T, T>(
            h_, scratch_, cur, keys, next_keys, key_end_, k_rows_, v_rows_, k_ahead_, v_ahead_,
            j_begin, j_until);
      };
      // One row, or a group of 2 or 4 in a run of views (walk_table.cc).
      if (h_.tq == 1) return step(std::integral_constant<int, 1>());
      if (h_.tq == 2) return step(std::integral_constant<int, 2>());
      step(std::integral_constant<int, 4>());
    });
    return reached;
  }

  const internal::HeadView& h_;
  NarrowScratch& scratch_;
  int64_t kv_block_ = 1, key_end_ = 0, j0_ = 0, hint_ = 0;
  // The pipelined walk's state: the tile at j0_ has keys_ keys, scored and
  // made weights in buffer cur_ once primed_.
  bool pipelined_ = false, primed_ = false, row_walk_ = false;
  int64_t keys_ = 0, cur_ = 0;
  // The tile in parts (BeginTile): the next tile's keys, the step reached.
  int64_t next_keys_ = 0, step_j_ = 0;
  KeyRowCursor k_rows_, v_rows_, k_ahead_, v_ahead_, v_again_;
};

// The narrow path's entry points, defined once per target in
// heads.cc (see there). Out of line so that the walk above is
// compiled once per target, not inlined into every kernel that takes the
// narrow path (the streaming and parallel kernels, each bf16 dot-product
// layer): the streaming kernel's translation unit was the longest step of
// every build, with the parallel and bf16dot ones next (docs/performance.md,
// "Compile time").
//
// Views of up to NarrowMaxRows() rows: normalised output and lse.
void NarrowHead(const internal::HeadView& h, const Tiles& tiles, NarrowScratch& scratch);
// Several narrow views whose K and V rows interleave in memory (the kv
// heads of one sequence in a token-major layout), taken side by side.
void NarrowHeads(const internal::HeadView* views, int64_t count, const Tiles& tiles,
                 NarrowScratch* const* scratches);

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
