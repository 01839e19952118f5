// The serving executor (dispatch/serving_run.h).
//
// Plan. Each sequence's query rows are cut by its causal mask into
//   - fully masked rows (they see no key): written 0 / -inf directly;
//   - bottom-right rows [m, f): row i sees keys j < off + i + 1, with
//     off = T_k - T_q (kBottomRight) or 0 (kTopLeft), all within T_k;
//   - full rows [f, T_q): every key visible (also every row without causal).
// Any causal alignment thus becomes sub-problems of kNone and kBottomRight
// with their own lengths (a row range [a, b) over keys [k0, off + b) under
// kBottomRight is exactly the original mask). Those row ranges ("pieces"),
// times the kv heads (each item runs a GQA group's query heads, so that
// decode's grouped views read each K/V row once per group; or every kv
// head at once, for pieces of few rows when the kv heads' rows of a token
// lie in one token row: see HeadsShareRows), times key ranges ("parts",
// only to occupy threads) are the work items: one OpenMP
// loop, largest first, dynamic schedule. A piece split into parts is merged
// afterwards by log-sum-exp (kernels/common/merge.h), like the parallel
// kernel's split-KV, so one long sequence next to many short ones spreads
// over every thread.
//
// Execution. An item walks its key range segment by segment (a segment is
// contiguous in memory: the whole sequence for varlen, a run of physically
// consecutive pages for a paged cache) and runs the kernel row on each
// (rows, keys) "step" as an ordinary batch-1 Problem whose pointers and
// strides address the packed tokens or the page in place. One step covering
// the item writes its destination directly (varlen without splits writes
// the final output, as a dense call would). Several steps accumulate:
// each step's float32 (out, lse) goes to scratch and is merged into a
// float32 accumulator (AccumulateRows, the two-part log-sum-exp merge);
// the parts of a split piece are merged in double (MergePartialRows).
//
// Kernels with a span entry point (KernelImpl::run_spans: the streaming
// kernel and the bf16 dot-product and AMX rows, and the parallel rows,
// whose items run on one thread) take a paged item's whole key range in one
// call instead: the list of its page runs (KeySpan, per kv head), tiles
// following them and one online softmax across all of them, so there is no
// kernel call and no merge per page. The other kernels (naive, blocked) run
// a step per page run as above. Cost of that per-page path: per page run,
// one kernel call (a few hundred ns of setup) and one merge of group x rows
// x (d_v + 1) floats in L1; for decode with 4 query heads per kv head and
// d_v = 128 about 8 KiB of L1 traffic per page against 8 KiB of bf16 K+V
// per 16-token page read from memory.
#include "dispatch/serving_run.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "dispatch/kernel_table.h"
#include "dispatch/tiles.h"
#include "dispatch/tuning.h"
#include "kernels/common/convert.h"
#include "kernels/common/merge.h"
#include "kernels/decode/walk_table.h"
#include "kernels/kernel.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Parts of one piece hold at least this many keys: below, the merge and the
// extra kernel call cost more than the thread they occupy gains (the
// parallel kernel's tile rule uses the same 256).
constexpr int64_t kMinPartKeys = 256;
// Row blocks of a split piece are multiples of this (the widest SIMD panel,
// AVX-512's 32 rows), so that splitting rows never leaves partial panels
// the unsplit piece would not have had.
constexpr int64_t kRowQuantum = 32;

struct Piece {
  size_t seq = 0;
  int64_t r0 = 0, r1 = 0;  // query rows
  bool causal = false;     // bottom-right rows (else every key visible)
  int64_t key_begin = 0;   // keys before it no row sees (a window's left end)
  int64_t key_end = 0;     // keys the piece's last row sees
  int parts = 1;
  // Its items run every kv head in one kernel call (kv heads whose rows
  // share token rows, see HeadsShareRows) instead of one item per kv head.
  bool all_heads = false;
  double work = 0;         // visible (row, key) pairs per query head
  size_t partial = 0;      // first float of its partials (parts > 1)
  const KernelImpl* impl = nullptr;
  Tiles tiles;
  DotPath dot_path = DotPath::kWiden;
};

struct Item {
  size_t piece = 0;
  int64_t kv_head = 0;
  int part = 0;
  double work = 0;
};

// Visible (row, key) pairs of rows [a, b) whose row i sees keys
// [0, off + i + 1): an arithmetic series.
double CausalPairs(int64_t a, int64_t b, int64_t off) {
  const double rows = double(b - a);
  return rows * double(off + 1) + rows * double(a + b - 1) / 2.0;
}

// Runs body() inside an OpenMP region (no exception may leave one): the
// first exception of any thread is kept for the caller to rethrow.
template <class Body>
void KeepFirst(std::exception_ptr* error, const Body& body) {
  try {
    body();
  } catch (...) {
#pragma omp critical(attn_serving_error)
    if (!*error) *error = std::current_exception();
  }
}

size_t Floats(double count) {
  if (!(count < double(std::vector<float>().max_size()))) throw std::bad_alloc();
  return size_t(count);
}

// acc = merge(acc, part) for `rows` contiguous float32 rows: the two-part
// case of MergePartialRows (kernels/common/merge.h), which runs per page,
// in float32 and without per-element type dispatch so that it stays a
// small share of a 16-token page's work. Same conventions: a part with lse
// -inf contributes nothing (its output is not read), NaN or +inf in either
// lse gives NaN.
void AccumulateRows(int64_t rows, int64_t dv, const float* part, const float* part_lse,
                    float* acc, float* acc_lse) {
  for (int64_t i = 0; i < rows; ++i) {
    const float la = acc_lse[i], lp = part_lse[i];
    float* a = acc + i * dv;
    const float* x = part + i * dv;
    if (std::isnan(la) || std::isnan(lp) || la == -kNegInf || lp == -kNegInf) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::fill(a, a + dv, nan);
      acc_lse[i] = nan;
      continue;
    }
    if (lp == kNegInf) continue;
    if (la == kNegInf) {
      std::copy(x, x + dv, a);
      acc_lse[i] = lp;
      continue;
    }
    const float m = std::max(la, lp);
    const float wa = std::exp(la - m), wp = std::exp(lp - m), total = wa + wp;
    const float ca = wa / total, cp = wp / total;
    for (int64_t c = 0; c < dv; ++c) a[c] = ca * a[c] + cp * x[c];
    acc_lse[i] = m + std::log(total);
  }
}

// acc = merge(acc, a part with output 0 and lse `sink`), as AccumulateRows
// (a sink is a key of value 0): rows with lse -inf get output 0 and lse
// sink; a sink of -inf changes nothing.
void AddSink(int64_t rows, int64_t dv, float sink, float* acc, float* acc_lse) {
  if (sink == kNegInf) return;
  for (int64_t i = 0; i < rows; ++i) {
    float* a = acc + i * dv;
    const float la = acc_lse[i];
    if (std::isnan(la) || la == -kNegInf) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::fill(a, a + dv, nan);
      acc_lse[i] = nan;
      continue;
    }
    if (la == kNegInf) {
      std::fill(a, a + dv, 0.0f);
      acc_lse[i] = sink;
      continue;
    }
    const float m = std::max(la, sink);
    const float wa = std::exp(la - m), ws = std::exp(sink - m), total = wa + ws;
    const float ca = wa / total;
    for (int64_t c = 0; c < dv; ++c) a[c] *= ca;
    acc_lse[i] = m + std::log(total);
  }
}

class Runner {
 public:
  Runner(const ServingBatch& b, const Options& o)
      : b_(b), o_(o), decode_walk_(ParseDecodeWalk(o.decode_walk)) {}

  // Everything that can fail (a kernel declining, scratch allocation)
  // happens before the first write: before_write(), then the outputs.
  void Run(const std::function<void()>& before_write) {
    group_ = b_.q_heads / b_.kv_heads;
    heads_share_rows_ = HeadsShareRows();
    requested_threads_ = ResolveThreads(o_.threads);
    MakePieces();
    ChooseThreads();
    SplitForThreads();
    ResolveKernels();
    MakeItems();
    if (before_write) before_write();
    WriteMaskedRows();
    Execute();
  }

 private:
  // A sequence's causal row split: rows [0, m) see nothing, [m, f) are
  // bottom-right with offset off, [f, T_q) see every key.
  void RowSplit(const ServingSeq& s, int64_t* m, int64_t* f, int64_t* off) const {
    if (b_.causal == Causal::kNone || s.tk == 0) {
      *off = 0;
      *m = s.tk == 0 ? s.tq : 0;
      *f = *m;
      return;
    }
    *off = b_.causal == Causal::kBottomRight ? s.tk - s.tq : 0;
    *m = std::clamp<int64_t>(-*off, 0, s.tq);
    *f = std::clamp<int64_t>(s.tk - *off, *m, s.tq);
  }

  void StoreMasked(const ServingSeq& s, int64_t r0, int64_t r1) const {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t h = 0; h < b_.q_heads; ++h) {
        void* o = ElementOffset(s.out, b_.out_type, r * b_.out_row + h * b_.out_head);
        for (int64_t c = 0; c < b_.dv; ++c) StoreElement(o, b_.out_type, c, 0.0f);
        // A sink is the one "key" a row that sees none still has.
        if (s.lse) s.lse[r * b_.lse_row + h * b_.lse_head] = b_.sinks ? b_.sinks[h] : kNegInf;
      }
    }
  }

  void WriteMaskedRows() const {
    for (const ServingSeq& s : b_.seqs) {
      int64_t m, f, off;
      RowSplit(s, &m, &f, &off);
      StoreMasked(s, 0, m);
    }
  }

  void MakePieces() {
    for (size_t i = 0; i < b_.seqs.size(); ++i) {
      const ServingSeq& s = b_.seqs[i];
      if (s.tq == 0 || s.tk == 0) continue;
      int64_t m, f, off;
      RowSplit(s, &m, &f, &off);
      if (m < f) AddPiece(i, m, f, true, off);
      if (f < s.tq) AddPiece(i, f, s.tq, false, off);
    }
  }

  // Whether the kv heads' K and V rows of a token lie within one token row
  // (token-major [tokens, kv_heads, d], packed or in pages): then one kernel
  // call over every kv head lets the streaming kernel walk the heads side by
  // side (narrow-inl.h NarrowHeads), reading each token row, and each page,
  // whole and once. One item per kv head read d of every kv_heads x d
  // elements, and a page once per head: paged decode with 16-token bf16
  // pages ran at 0.56-0.63 of the contiguous layout's rate (AMD EPYC Zen 5,
  // docs/serving.md).
  bool HeadsShareRows() const {
    if (b_.kv_heads < 2) return false;
    // The last kv head's row starts within kv head 0's token row.
    const auto within = [&](DType t, int64_t head, int64_t row) {
      return BytesOf(t, std::abs(head) * (b_.kv_heads - 1)) < BytesOf(t, std::abs(row));
    };
    return within(b_.k_type, b_.k_head, b_.k_row) && within(b_.v_type, b_.v_head, b_.v_row);
  }

  void AddPiece(size_t seq, int64_t r0, int64_t r1, bool causal, int64_t off) {
    Piece p;
    p.seq = seq;
    p.r0 = r0;
    p.r1 = r1;
    p.causal = causal;
    const int64_t tk = b_.seqs[seq].tk;
    p.key_end = causal ? off + r1 : tk;
    p.key_begin = KeyBegin(p);
    p.work = causal ? CausalPairs(r0, r1, off) : double(r1 - r0) * double(tk);
    p.work = std::min(p.work, double(r1 - r0) * double(p.key_end - p.key_begin));
    // Views of few rows (the streaming kernel's narrow path: half a panel)
    // are what NarrowHeads walks side by side.
    p.all_heads = heads_share_rows_ && r1 - r0 <= PanelWidth() / 2;
    pieces_.push_back(p);
  }

  int64_t Offset(const Piece& p) const {
    const ServingSeq& s = b_.seqs[p.seq];
    return b_.causal == Causal::kBottomRight ? s.tk - s.tq : 0;
  }

  // Row i's diagonal key minus i (attn.h "Score modifiers"), in the
  // sequence's keys.
  int64_t DiagOffset(const ServingSeq& s) const {
    return b_.causal == Causal::kTopLeft ? 0 : s.tk - s.tq;
  }

  // The first key the piece's first row (and so any of its rows) can see:
  // its window's left end, 0 without one.
  int64_t KeyBegin(const Piece& p) const {
    if (b_.window.left < 0) return 0;
    const ServingSeq& s = b_.seqs[p.seq];
    return std::clamp<int64_t>(p.r0 + DiagOffset(s) - b_.window.left, 0, p.key_end);
  }

  // attention()'s rule: threads for a threaded kernel; for auto only when
  // the whole batch has enough FLOPs per thread (ThreadsPayOff's measure).
  void ChooseThreads() {
    double pairs = 0;
    for (const Piece& p : pieces_) pairs += p.work;
    flops_per_pair_ = 2.0 * double(b_.q_heads) * double(b_.d + b_.dv);
    total_flops_ = pairs * flops_per_pair_;
    threads_ = 1;
    if (requested_threads_ > 1 && !omp_in_parallel()) {
      if (o_.kernel == KernelId::kAuto) {
        if (total_flops_ >= double(requested_threads_) * kMinFlopsPerThread) {
          threads_ = requested_threads_;
        }
      } else if (GetKernelInfo(o_.kernel).threaded) {
        threads_ = requested_threads_;
      }
    }
  }

  // With threads: pieces above the target work are cut into row blocks, and
  // those still above it (few rows over many keys: decode, long chunked
  // prefill) into key parts. About 4 items per thread, so that the largest-
  // first dynamic schedule can even them out.
  void SplitForThreads() {
    if (threads_ <= 1) return;
    // In (row, key) pairs per query head: an item runs a GQA group of query
    // heads, 2 (d + d_v) FLOPs per pair and head.
    const double target = std::max(total_flops_ / (4.0 * threads_), kMinFlopsPerThread) /
                          (double(group_) * 2.0 * double(b_.d + b_.dv));
    std::vector<Piece> split;
    for (const Piece& p : pieces_) {
      const double work = p.work;
      const int64_t rows = p.r1 - p.r0;
      int64_t blocks = std::min<int64_t>(int64_t(std::ceil(work / target)),
                                         (rows + kRowQuantum - 1) / kRowQuantum);
      blocks = std::max<int64_t>(1, blocks);
      const int64_t step = (rows + blocks - 1) / blocks;
      const int64_t block_rows =
          blocks == 1 ? rows : (step + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
      const int64_t off = Offset(p);
      for (int64_t r = p.r0; r < p.r1; r += block_rows) {
        Piece q = p;
        q.r0 = r;
        q.r1 = std::min(p.r1, r + block_rows);
        q.key_end = p.causal ? off + q.r1 : p.key_end;
        q.key_begin = KeyBegin(q);
        q.work = p.causal ? CausalPairs(q.r0, q.r1, off) : double(q.r1 - q.r0) * double(p.key_end);
        q.work = std::min(q.work, double(q.r1 - q.r0) * double(q.key_end - q.key_begin));
        const int64_t max_parts =
            std::max<int64_t>(1, (q.key_end - q.key_begin) / kMinPartKeys);
        const double item_work = q.work * double(q.all_heads ? b_.kv_heads : 1);
        q.parts = int(std::clamp<int64_t>(int64_t(std::ceil(item_work / target)), 1,
                                          std::min<int64_t>(max_parts, kMaxKvSplits)));
        split.push_back(q);
      }
    }
    pieces_ = std::move(split);
  }

  // The kernel row and tiles of each piece, as attention() would choose
  // them for the piece as a dense problem (one kv head, its GQA group of
  // query heads) run on one thread: every item runs on one thread.
  void ResolveKernels() {
    Problem dense;
    dense.q_heads = group_;
    dense.kv_heads = 1;
    dense.head_dim = b_.d;
    dense.value_dim = b_.dv;
    dense.scale = b_.scale;
    dense.q.dtype = b_.q_type;
    dense.k.dtype = b_.k_type;
    dense.v.dtype = b_.v_type;
    dense.out.dtype = b_.out_type;
    dense.window = b_.window;  // a tuning key's field
    dense.softcap = b_.softcap;
    for (Piece& p : pieces_) {
      dense.q_len = p.r1 - p.r0;
      dense.kv_len = p.key_end;
      dense.causal = p.causal ? Causal::kBottomRight : Causal::kNone;
      const DotPathRequest dot = RequestedDotPath(dense, o_.dot_path);
      const TileInputs in = TileInputsFor(dense, 1, dot.path);
      KernelId kernel = o_.kernel;
      Tiles tiles;
      p.dot_path = dot.path;
      if (kernel == KernelId::kAuto) {
        const AutoChoice choice = ChooseAuto(dense, in, o_.tiles, false, dot);
        kernel = choice.kernel;
        tiles = choice.tiles;
        p.dot_path = ChosenDotPath(choice, dot.path);
      } else {
        tiles = ResolveTiles(o_.tiles, in);
      }
      p.impl = &ImplFor(kernel, dense, p.dot_path);
      p.tiles = ClampTiles(tiles, in);
      p.tiles.kv_splits = 1;  // keys are split here, across the whole batch
    }
  }

  void MakeItems() {
    double partial_floats = 0;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      Piece& p = pieces_[i];
      if (p.parts > 1) {
        p.partial = size_t(partial_floats);
        partial_floats += double(p.parts) * double(b_.kv_heads) * double(group_) *
                          double(p.r1 - p.r0) * double(b_.dv + 1);
      }
      if (p.all_heads) {
        for (int c = 0; c < p.parts; ++c) {
          items_.push_back({i, 0, c, p.work * double(b_.kv_heads) / p.parts});
        }
        continue;
      }
      for (int64_t g = 0; g < b_.kv_heads; ++g) {
        for (int c = 0; c < p.parts; ++c) items_.push_back({i, g, c, p.work / p.parts});
      }
    }
    partials_.resize(Floats(partial_floats));
    // Largest first: the dynamic schedule then ends with the small items.
    std::stable_sort(items_.begin(), items_.end(),
                     [](const Item& x, const Item& y) { return x.work > y.work; });
  }

  // Destination of an item: float32 partials or the final output.
  struct Dest {
    void* out;
    DType type;
    int64_t row, head;  // element strides
    float* lse;
    int64_t lse_row, lse_head;
  };

  // A part's partials: outputs [q_heads][rows][dv], then lse [q_heads][rows];
  // kv head g's query heads from g * group on, so that one call over every
  // kv head (Piece::all_heads) writes them at uniform head strides.
  Dest PartialDest(const Piece& p, int64_t g, int part) {
    const int64_t rows = p.r1 - p.r0;
    float* base = partials_.data() + p.partial +
                  size_t(part * b_.q_heads * rows * (b_.dv + 1));
    return {base + g * group_ * rows * b_.dv, DType::kF32, b_.dv, rows * b_.dv,
            base + b_.q_heads * rows * b_.dv + g * group_ * rows, 1, rows};
  }

  Dest FinalDest(const Piece& p, int64_t g) const {
    const ServingSeq& s = b_.seqs[p.seq];
    const int64_t h0 = g * group_;
    Dest d;
    d.out = ElementOffset(s.out, b_.out_type, p.r0 * b_.out_row + h0 * b_.out_head);
    d.type = b_.out_type;
    d.row = b_.out_row;
    d.head = b_.out_head;
    d.lse = s.lse ? s.lse + p.r0 * b_.lse_row + h0 * b_.lse_head : nullptr;
    d.lse_row = b_.lse_row;
    d.lse_head = b_.lse_head;
    return d;
  }

  // One kernel call of a piece: rows [a, b) of the sequence over keys
  // [k0, k1) of segment `seg` (kSpans: of every segment, through the
  // kernel's span entry point), causal (kBottomRight over those keys) or
  // not.
  static constexpr size_t kSpans = ~size_t{0};
  struct Step {
    size_t seg;
    int64_t a, b, k0, k1;
    bool causal;
  };

  // The batch-1 sub-problem of a step for kv heads [g, g + heads), whose
  // first K and V rows (kv head g) are at k and v, writing rows' results at
  // `dest` (its row 0 = sequence row st.a, its head 0 = kv head g's first
  // query head). The score modifiers are the sequence's (with Config's
  // diag_shift), the sinks only with `sinks` (one sub-problem of each row
  // carries them).
  Problem SubProblem(const Piece& p, int64_t g, int64_t heads, const void* k, const void* v,
                     const Step& st, const Dest& dest, bool sinks) const {
    const ServingSeq& s = b_.seqs[p.seq];
    const int64_t a = st.a;
    Problem sub;
    sub.q_heads = group_ * heads;
    sub.kv_heads = heads;
    sub.q_len = st.b - a;
    sub.kv_len = st.k1 - st.k0;
    sub.head_dim = b_.d;
    sub.value_dim = b_.dv;
    sub.scale = b_.scale;
    sub.causal = st.causal ? Causal::kBottomRight : Causal::kNone;
    sub.q = {ElementOffset(s.q, b_.q_type, a * b_.q_row + g * group_ * b_.q_head), 0, b_.q_head,
             b_.q_row, b_.q_type};
    sub.k = {k, 0, b_.k_head, b_.k_row, b_.k_type};
    sub.v = {v, 0, b_.v_head, b_.v_row, b_.v_type};
    sub.out = {dest.out, 0, dest.head, dest.row, dest.type};
    sub.lse = {dest.lse, 0, dest.lse_head, dest.lse_row};
    sub.window = b_.window;
    sub.softcap = b_.softcap;
    if (b_.alibi) {
      sub.alibi_slopes = {b_.alibi + int64_t(p.seq) * b_.alibi_batch_stride + g * group_, 0};
    }
    if (sinks && b_.sinks) sub.sinks = {b_.sinks + g * group_, sub.q_heads};
    return sub;
  }

  // The kernel call's configuration for a step: diag_shift moves the
  // sub-problem's diagonal (key i + (k1 - k0) - (b - a) for its row i) to
  // the sequence's (key a + i + DiagOffset - k0 in the sub-problem's keys).
  RunConfig Config(const Piece& p, const Step& st) const {
    RunConfig config;
    config.tiles = p.tiles;
    config.threads = 1;
    config.dot_path = p.dot_path;
    config.decode_walk = decode_walk_;
    config.diag_shift = DiagOffset(b_.seqs[p.seq]) + st.b - st.k1;
    return config;
  }

  // Runs the piece's kernel row on a step of one segment, writing rows'
  // results at `dest` (its row 0 = sequence row st.a).
  void RunStep(const Piece& p, int64_t g, int64_t heads, const Step& st, const Dest& dest,
               bool sinks) const {
    const KeySegment& seg = b_.segments[st.seg];
    const int64_t key = st.k0 - seg.begin;
    const void* k = ElementOffset(seg.k, b_.k_type, key * b_.k_row + g * b_.k_head);
    const void* v = ElementOffset(seg.v, b_.v_type, key * b_.v_row + g * b_.v_head);
    p.impl->run(SubProblem(p, g, heads, k, v, st, dest, sinks), Config(p, st));
  }

  // The same for a kSpans step, over keys [k0, k1) of every segment of the
  // sequence, in one call of the kernel's span entry point
  // (KernelImpl::run_spans): the kernel's tiles follow the segments, one
  // online softmax across them.
  void RunSpansStep(const Piece& p, int64_t g, int64_t heads, const Step& st, const Dest& dest,
                    bool sinks) const {
    const ServingSeq& s = b_.seqs[p.seq];
    const int64_t k0 = st.k0, k1 = st.k1;
    thread_local std::vector<KeySpan> spans;
    spans.clear();
    for (size_t si = s.seg_begin; si < s.seg_end; ++si) {
      const KeySegment& seg = b_.segments[si];
      const int64_t lo = std::max(seg.begin, k0), hi = std::min(seg.end, k1);
      if (lo >= hi) continue;
      const int64_t key = lo - seg.begin;
      spans.push_back({lo - k0, hi - k0,
                       ElementOffset(seg.k, b_.k_type, key * b_.k_row + g * b_.k_head),
                       ElementOffset(seg.v, b_.v_type, key * b_.v_row + g * b_.v_head)});
    }
    p.impl->run_spans(SubProblem(p, g, heads, spans[0].k, spans[0].v, st, dest, sinks),
                      spans.data(), int64_t(spans.size()), Config(p, st));
  }

  // One item: the piece's rows, its kv head (or every kv head), keys of
  // part `part`.
  void RunItem(const Item& item) {
    const Piece& p = pieces_[item.piece];
    if (p.all_heads) {
      RunItemHeads(item, 0, b_.kv_heads);
    } else {
      RunItemHeads(item, item.kv_head, 1);
    }
  }

  // The item's rows and keys for kv heads [g, g + heads): in one kernel
  // call when that is one step covering the rows, else per kv head.
  void RunItemHeads(const Item& item, int64_t g, int64_t heads) {
    const Piece& p = pieces_[item.piece];
    const ServingSeq& s = b_.seqs[p.seq];
    const int64_t rows = p.r1 - p.r0, dv = b_.dv;
    const int64_t off = Offset(p);
    // The part's keys, on granule (page) boundaries, from the granule
    // holding the piece's first visible key.
    const int64_t first = p.key_begin / b_.key_granule;
    const int64_t granules = (p.key_end + b_.key_granule - 1) / b_.key_granule - first;
    const int64_t pk0 = std::clamp((first + granules * item.part / p.parts) * b_.key_granule,
                                   p.key_begin, p.key_end);
    const int64_t pk1 = std::min(
        p.key_end, (first + granules * (item.part + 1) / p.parts) * b_.key_granule);
    const Dest target = p.parts > 1 ? PartialDest(p, g, item.part) : FinalDest(p, g);

    // The steps: (rows [a, b), keys [k0, k1), causal) per segment; with a
    // kernel that takes spans, for the whole part as one segment (kSpans),
    // when the sequence has more than one.
    const bool spans = p.impl->run_spans && s.seg_end - s.seg_begin > 1;
    thread_local std::vector<Step> steps;
    steps.clear();
    // Keys [seg_begin, seg_end) of segment si (or of every segment: kSpans).
    auto add_steps = [&](size_t si, int64_t seg_begin, int64_t seg_end) {
      const int64_t k0 = std::max(seg_begin, pk0), k1 = std::min(seg_end, pk1);
      if (k0 >= k1) return;
      if (!p.causal) {
        steps.push_back({si, p.r0, p.r1, k0, k1, false});
        return;
      }
      // Rows [aa, bb) see part of [k0, k1) (exactly kBottomRight over keys
      // [k0, off + bb)); rows [bb, r1) see all of it; rows below aa none.
      const int64_t aa = std::clamp(k0 - off, p.r0, p.r1);
      const int64_t bb = std::clamp(k1 - off, p.r0, p.r1);
      if (aa < bb) steps.push_back({si, aa, bb, k0, off + bb, true});
      if (bb < p.r1) steps.push_back({si, bb, p.r1, k0, k1, false});
    };
    if (spans) {
      add_steps(kSpans, 0, s.tk);  // [pk0, pk1) of it
    } else {
      for (size_t si = s.seg_begin; si < s.seg_end; ++si) {
        add_steps(si, b_.segments[si].begin, b_.segments[si].end);
      }
    }

    auto run = [&](const Step& st, int64_t n_heads, const Dest& dest, bool sinks) {
      if (st.seg == kSpans) {
        RunSpansStep(p, g, n_heads, st, dest, sinks);
      } else {
        RunStep(p, g, n_heads, st, dest, sinks);
      }
    };
    auto covers = [&](const Step& st) { return st.a == p.r0 && st.b == p.r1; };
    // The sinks join part 0 of each piece, once per row (attn.h: exactly
    // one part of a split may carry them).
    const bool sinks = b_.sinks && item.part == 0;
    if (steps.size() == 1 && covers(steps[0])) {
      run(steps[0], heads, target, sinks);
      return;
    }
    if (heads > 1) {
      for (int64_t h = g; h < g + heads; ++h) RunItemHeads(item, h, 1);
      return;
    }

    // Accumulate in float32: the partial slot itself, or scratch when the
    // destination is the final output.
    thread_local std::vector<float> acc_buf, step_buf;
    Dest acc = target;
    if (p.parts == 1) {
      acc_buf.resize(size_t(group_ * rows * (dv + 1)));
      acc = {acc_buf.data(), DType::kF32, dv, rows * dv, acc_buf.data() + group_ * rows * dv, 1,
             rows};
    }
    float* acc_out = static_cast<float*>(acc.out);
    std::fill(acc.lse, acc.lse + group_ * rows, kNegInf);  // no key seen yet
    step_buf.resize(size_t(group_ * rows * (dv + 1)));
    bool empty = true;
    internal::PartialRows parts[2];
    double weights[2];
    for (const Step& st : steps) {
      const int64_t n = st.b - st.a;
      if (empty && covers(st)) {
        run(st, 1, acc, false);
        empty = false;
        continue;
      }
      float* so = step_buf.data();
      float* sl = so + group_ * n * dv;
      const Dest sd{so, DType::kF32, dv, n * dv, sl, 1, n};
      run(st, 1, sd, false);
      for (int64_t h = 0; h < group_; ++h) {
        AccumulateRows(n, dv, so + h * n * dv, sl + h * n,
                       acc_out + h * rows * dv + (st.a - p.r0) * dv,
                       acc.lse + h * rows + (st.a - p.r0));
      }
      empty = false;
    }
    // The sinks, merged in as one more part of output 0 (rows no step
    // reached have lse -inf and get output 0, lse = sink).
    if (sinks) {
      for (int64_t h = 0; h < group_; ++h) {
        AddSink(rows, dv, b_.sinks[g * group_ + h], acc_out + h * rows * dv, acc.lse + h * rows);
      }
    }
    if (p.parts > 1) return;  // the partial slot holds the result
    // A row no step reached saw no key (lse -inf): the merge of that one
    // part writes 0 and -inf, the fully masked row.
    const Dest fin = FinalDest(p, g);
    for (int64_t h = 0; h < group_; ++h) {
      parts[0] = {acc_out + h * rows * dv, DType::kF32, dv, acc.lse + h * rows, 1};
      void* o = ElementOffset(fin.out, fin.type, h * fin.head);
      float* l = fin.lse ? fin.lse + h * fin.lse_head : nullptr;
      MergePartialRows(rows, dv, 1, parts, weights, o, fin.type, fin.row, l, fin.lse_row);
    }
  }

  // The merge of a split piece's parts for kv head g into the output.
  void MergeParts(const Piece& p, int64_t g) {
    const int64_t rows = p.r1 - p.r0;
    std::vector<PartialRows> parts(size_t(p.parts));
    std::vector<double> weights(size_t(p.parts));
    const Dest fin = FinalDest(p, g);
    for (int64_t h = 0; h < group_; ++h) {
      for (int c = 0; c < p.parts; ++c) {
        const Dest d = PartialDest(p, g, c);
        parts[size_t(c)] = {static_cast<float*>(d.out) + h * d.head, DType::kF32, d.row,
                            d.lse + h * d.lse_head, 1};
      }
      void* o = ElementOffset(fin.out, fin.type, h * fin.head);
      float* l = fin.lse ? fin.lse + h * fin.lse_head : nullptr;
      MergePartialRows(rows, b_.dv, p.parts, parts.data(), weights.data(), o, fin.type, fin.row,
                       l, fin.lse_row);
    }
  }

  void Execute() {
    std::exception_ptr error;
    std::vector<std::pair<size_t, int64_t>> merges;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i].parts < 2) continue;
      for (int64_t g = 0; g < b_.kv_heads; ++g) merges.push_back({i, g});
    }
    const int64_t n_items = int64_t(items_.size()), n_merges = int64_t(merges.size());
    const int threads = int(std::clamp<int64_t>(n_items, 1, threads_));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < n_items; ++i) {
        KeepFirst(&error, [&] { RunItem(items_[size_t(i)]); });
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < n_merges; ++i) {
        if (error) continue;
        KeepFirst(&error, [&] {
          MergeParts(pieces_[merges[size_t(i)].first], merges[size_t(i)].second);
        });
      }
    }
    if (error) std::rethrow_exception(error);
  }

  const ServingBatch& b_;
  const Options& o_;
  const DecodeWalk decode_walk_;
  int64_t group_ = 1;
  bool heads_share_rows_ = false;
  int requested_threads_ = 1, threads_ = 1;
  double flops_per_pair_ = 1, total_flops_ = 0;
  std::vector<Piece> pieces_;
  std::vector<Item> items_;
  std::vector<float> partials_;
};

}  // namespace

void RunServing(const ServingBatch& batch, const Options& options,
                const std::function<void()>& before_write) {
  try {
    Runner(batch, options).Run(before_write);
  } catch (const std::bad_alloc&) {
    throw Error("memory", "exhausted",
                "attn: the serving call could not allocate its scratch memory, got exhausted");
  }
}

}  // namespace attn::internal
