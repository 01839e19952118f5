// Ring attention across MPI processes: self-attention over a sequence of T
// tokens that no single process holds. Each of the N ranks holds a block of
// the queries, keys and values; the K/V blocks travel around the ring, and
// every rank attends its queries to each block as it passes, merging the
// partial results with attn::MergeAttention.
//
//   mpirun -np 4 ./ring_attention_mpi [T] [q_heads] [kv_heads] [d] [causal|full] [f32|bf16|f16]
//
// (defaults: 4096 8 2 64 causal f32). Rank 0 then gathers the result and
// compares it with one attn::attention call over the whole sequence.
//
// ---- Layout: zig-zag ----------------------------------------------------
// The sequence is cut into 2N chunks of ⌊T/2N⌋ or ⌈T/2N⌉ tokens (any T
// works: the chunk sizes differ by at most one, and a chunk may be empty
// when T < 2N); rank r holds chunks r and 2N-1-r, in that order, for its
// queries, keys and values alike. Why this layout: with causal attention a
// query sees only earlier keys, so with one contiguous block per rank,
// rank N-1 would attend to every block while rank 0 attends to its own
// diagonal only (2N-1 times less work), and the ring runs at the speed of
// the slowest rank. Pairing an early chunk with the mirrored late one gives
// every rank the same causal work: 2N·c² query-key pairs with c = T/2N,
// one N-th of the T²/2 in total (the example prints the per-rank counts).
// A striped layout (token i on rank i mod N) balances too, but there every
// pair of blocks is partly masked and would need an additive mask; with
// zig-zag chunks every (query chunk, key chunk) pair is either fully
// visible, fully masked or a diagonal, which is exactly what Causal::kNone,
// skipping and Causal::kTopLeft express.
//
// ---- Algorithm (rank r, steps t = 0 .. N-1) -----------------------------
// At step t rank r holds the K/V block of rank s = (r - t) mod N. It starts
// sending that block on to rank r+1 and receiving the next one from rank
// r-1 (MPI_Isend / MPI_Irecv), computes with the block while the transfer
// runs, then waits for both. The computation of step t, causal:
//   s == r (t = 0): its own block: the local positions are global positions
//           in increasing order, so causal attention over the local
//           sequence is exactly the global causal mask: one call with
//           Causal::kTopLeft (T_q = T_k).
//   s <  r: both of r's query chunks come after s's first key chunk and
//           before its second: queries [all] x keys [chunk s], no mask.
//   s >  r: r's first query chunk precedes both of s's key chunks
//           (skipped: fully masked); r's second chunk follows both:
//           queries [chunk 2N-1-r] x keys [all of s], no mask.
// Without causal masking every step is queries [all] x keys [all], no mask.
// Step 0 writes (out, lse) directly; every later step writes a partial
// (out, lse) to scratch and merges it into the accumulator in place
//   lse = log(e^lse + e^lse_t),  out = e^(lse - lse_new) out + e^(lse_t - lse_new) out_t
// (attn::MergeAttention, in double, rounded once to float32 per step).
//
// ---- Cost per rank (L = its tokens ≈ T/N, H = q_heads, G = kv_heads) ---
// Communication: N-1 steps send one K/V block and receive one, each
//   L·G·(d + d_v)·sizeof(K/V element) bytes,
// so (N-1)/N of the whole K/V per rank in total: half as much in bf16/f16.
// Memory: Q, out and its lse (L·H·(d + d_v + 1) floats), the scratch
// partial (L·H·(d_v + 1) floats), its own K/V block and two ring buffers
// for visiting blocks (3 blocks of the size above): O(T/N), never O(T).
// The queries never move; only K/V do (GQA makes that G/H as much data).
#include <attn/attn.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ring {

// The global problem (batch 1): T queries attending to the same T keys.
struct Shape {
  int64_t seq_len = 0;  // T
  int64_t q_heads = 1, kv_heads = 1;
  int64_t head_dim = 0, value_dim = 0;
  bool causal = false;
  attn::DType kv_type = attn::DType::kF32;  // K/V blocks, also on the wire
};

// Global rows [begin, end) of chunk c of 2N.
struct Chunk {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline Chunk ChunkOf(int64_t seq_len, int n_ranks, int c) {
  const int64_t n_chunks = 2 * int64_t(n_ranks);
  return {c * seq_len / n_chunks, (c + 1) * seq_len / n_chunks};
}
// A rank's rows: chunk r then chunk 2N-1-r (local rows [0, first.size())
// are `first`, the rest are `second`).
struct RankRows {
  Chunk first, second;
  int64_t size() const { return first.size() + second.size(); }
  // The global row of local row i.
  int64_t Global(int64_t i) const {
    return i < first.size() ? first.begin + i : second.begin + (i - first.size());
  }
};
inline RankRows RowsOf(int64_t seq_len, int n_ranks, int rank) {
  return {ChunkOf(seq_len, n_ranks, rank), ChunkOf(seq_len, n_ranks, 2 * n_ranks - 1 - rank)};
}

// A K/V block as it travels: K [kv_heads, rows, d] then V [kv_heads, rows,
// d_v], dense, of element type kv_type, in one buffer so that one message
// carries it.
inline int64_t KvBlockBytes(const Shape& s, int64_t rows) {
  return s.kv_heads * rows * (s.head_dim + s.value_dim) * attn::DTypeSize(s.kv_type);
}
inline int64_t VOffsetBytes(const Shape& s, int64_t rows) {
  return s.kv_heads * rows * s.head_dim * attn::DTypeSize(s.kv_type);
}

// Deliberate mistakes that tests/mpi/ring_attention_mpi_test.cc plants to
// show that its error bound catches a wrong ring. Always kNone in real use.
enum class PlantedBug {
  kNone,
  kDropBlock,       // rank 1 ignores the block it receives at step 1
  kUnmaskedDiagonal, // the diagonal (own) block without its causal mask
  kStaleLse,        // merges update out but not the accumulated lse
};

// What one rank did, for the example's report.
struct Stats {
  int64_t pairs = 0;       // query-key pairs attended (visible ones on diagonals)
  int64_t bytes_sent = 0;  // K/V bytes this rank sent
  double compute_s = 0;    // in attn::attention and attn::MergeAttention
  double wait_s = 0;       // waiting for the transfer after computing
};

// Rank r's part of the ring. q: float32 [q_heads, L, d]; kv: this rank's
// K/V block (KvBlockBytes(s, L) bytes, laid out as above); out: float32
// [q_heads, L, d_v] and lse [q_heads, L], written; L = RowsOf(...).size().
// Collective: every rank of `comm` calls it with the same shape.
inline Stats RingAttention(MPI_Comm comm, const Shape& s, const float* q,
                           const std::vector<uint8_t>& kv, float* out, float* lse,
                           const attn::Options& options = {},
                           PlantedBug bug = PlantedBug::kNone) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const RankRows mine = RowsOf(s.seq_len, n, rank);
  const int64_t L = mine.size(), H = s.q_heads, d = s.head_dim, dv = s.value_dim;
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  Stats stats;

  // Two buffers for visiting blocks, sized for the largest block; the own
  // block is sent from `kv` itself (never overwritten).
  int64_t max_rows = 0;
  for (int r = 0; r < n; ++r) max_rows = std::max(max_rows, RowsOf(s.seq_len, n, r).size());
  std::vector<uint8_t> ring_buf[2] = {std::vector<uint8_t>(size_t(KvBlockBytes(s, max_rows))),
                                      std::vector<uint8_t>(size_t(KvBlockBytes(s, max_rows)))};
  // The partial result of one step (rows = up to L).
  std::vector<float> part_out(size_t(H * L * dv)), part_lse(size_t(H * L));

  const uint8_t* block = kv.data();  // the block held at this step
  for (int t = 0; t < n; ++t) {
    const int src = (rank - t + n) % n;  // whose block this is
    const RankRows theirs = RowsOf(s.seq_len, n, src);
    const int64_t S = theirs.size();

    // Pass the block on while computing with it (not after the last step:
    // every rank has then seen every block).
    MPI_Request reqs[2];
    int n_reqs = 0;
    uint8_t* incoming = ring_buf[t % 2].data();
    if (t + 1 < n && n > 1) {
      const int64_t in_rows = RowsOf(s.seq_len, n, (rank - t - 1 + 2 * n) % n).size();
      MPI_Irecv(incoming, int(KvBlockBytes(s, in_rows)), MPI_BYTE, prev, t, comm, &reqs[n_reqs++]);
      MPI_Isend(block, int(KvBlockBytes(s, S)), MPI_BYTE, next, t, comm, &reqs[n_reqs++]);
      stats.bytes_sent += KvBlockBytes(s, S);
    }

    const double t0 = MPI_Wtime();
    // Which queries attend to which keys of this block (see the top).
    int64_t q_begin = 0, q_rows = L, k_rows = S;
    attn::Causal causal = attn::Causal::kNone;
    if (s.causal) {
      if (src == rank) {
        causal = bug == PlantedBug::kUnmaskedDiagonal ? attn::Causal::kNone : attn::Causal::kTopLeft;
      } else if (src < rank) {
        k_rows = theirs.first.size();  // their first chunk only
      } else {
        q_begin = mine.first.size();  // our second chunk only
        q_rows = mine.second.size();
      }
    }
    const bool dropped = bug == PlantedBug::kDropBlock && rank == 1 && t == 1;
    if (q_rows > 0 && k_rows > 0 && !dropped) {
      // Step 0 writes the accumulator itself; later steps write scratch.
      const bool first = t == 0;
      float* o = first ? out : part_out.data();
      float* l = first ? lse : part_lse.data();
      const int64_t o_rows = first ? L : q_rows;  // rows of o's layout
      const int64_t o_begin = first ? q_begin : 0;

      attn::Problem p;
      p.q_heads = H;
      p.kv_heads = s.kv_heads;
      p.q_len = q_rows;
      p.kv_len = k_rows;
      p.head_dim = d;
      p.value_dim = dv;
      // Views of rows [q_begin, q_begin + q_rows) of the local queries and
      // of the first k_rows keys of the block (head strides keep L and S).
      p.q = attn::DenseBHTD(q + q_begin * d, H, L, d);
      p.k = attn::DenseBHTD(block, s.kv_type, s.kv_heads, S, d);
      p.v = attn::DenseBHTD(block + VOffsetBytes(s, S), s.kv_type, s.kv_heads, S, dv);
      p.out = attn::DenseBHTD(o + o_begin * dv, H, o_rows, dv);
      p.lse = {l + o_begin, H * o_rows, o_rows, 1};
      p.causal = causal;
      attn::attention(p, options);
      stats.pairs += causal == attn::Causal::kNone ? q_rows * k_rows : q_rows * (q_rows + 1) / 2;

      if (!first) {
        // acc[rows q_begin..] = merge(acc[rows q_begin..], partial), in place.
        const attn::Tensor acc = attn::DenseBHTD(out + q_begin * dv, H, L, dv);
        const attn::LseOutput acc_lse{lse + q_begin, H * L, L, 1};
        const attn::MergePart parts[] = {{acc, acc_lse}, {p.out, p.lse}};
        attn::MergeProblem m;
        m.q_heads = H;
        m.q_len = q_rows;
        m.value_dim = dv;
        m.parts = parts;
        m.n_parts = 2;
        m.out = acc;
        if (bug != PlantedBug::kStaleLse) m.lse = acc_lse;
        attn::MergeAttention(m);
      }
    } else if (t == 0) {
      // No rows (T < 2N leaves some ranks empty) or a dropped block: an
      // empty accumulator (lse -inf contributes nothing to later merges).
      std::fill(out, out + H * L * dv, 0.0f);
      std::fill(lse, lse + H * L, -INFINITY);
    }
    stats.compute_s += MPI_Wtime() - t0;

    const double t1 = MPI_Wtime();
    MPI_Waitall(n_reqs, reqs, MPI_STATUSES_IGNORE);
    stats.wait_s += MPI_Wtime() - t1;
    block = incoming;
  }
  return stats;
}

}  // namespace ring

#ifndef RING_ATTENTION_MPI_NO_MAIN
namespace {

// A deterministic input value for (tensor, head, global row, column), so
// that each rank fills just its own rows, and rank 0 the whole sequence
// for the check, with the same numbers.
float Input(uint64_t tensor, int64_t head, int64_t row, int64_t col) {
  uint64_t x = tensor * 0x9E3779B97F4A7C15ull ^ uint64_t(head) << 48 ^ uint64_t(row) << 20 ^
               uint64_t(col);
  x ^= x >> 33;  x *= 0xFF51AFD7ED558CCDull;  x ^= x >> 33;  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return float(x >> 40) / float(1 << 23) - 1.0f;  // uniform in [-1, 1)
}

// Fills rows `rows(i)` (i < n) of a [heads, n, cols] tensor in `type`.
template <typename RowOf>
void Fill(uint64_t tensor, int64_t heads, int64_t n, int64_t cols, attn::DType type, RowOf row_of,
          void* dst) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        const float x = Input(tensor, h, row_of(i), c);
        const int64_t at = (h * n + i) * cols + c;
        switch (type) {
          case attn::DType::kF32: static_cast<float*>(dst)[at] = x; break;
          case attn::DType::kBF16: static_cast<uint16_t*>(dst)[at] = attn::BFloat16Bits(x); break;
          case attn::DType::kF16: static_cast<uint16_t*>(dst)[at] = attn::Float16Bits(x); break;
          case attn::DType::kQ8_0:
          case attn::DType::kQ4_0: break;  // refused by Run
        }
      }
}

int64_t Arg(int argc, char** argv, int i, int64_t fallback) {
  return argc > i ? std::atoll(argv[i]) : fallback;
}

int Run(int argc, char** argv) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  ring::Shape s;
  s.seq_len = Arg(argc, argv, 1, 4096);
  s.q_heads = Arg(argc, argv, 2, 8);
  s.kv_heads = Arg(argc, argv, 3, 2);
  s.head_dim = s.value_dim = Arg(argc, argv, 4, 64);
  s.causal = argc <= 5 || std::string(argv[5]) != "full";
  s.kv_type = attn::ParseDType(argc > 6 ? argv[6] : "f32");
  // The blocks on the wire are whole elements (f32, bf16, f16): a q8_0 or
  // q4_0 K/V block would need its rows quantised here, which this example
  // does not do.
  if (s.seq_len < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.head_dim < 1 ||
      attn::DTypeSize(s.kv_type) == 0) {
    if (rank == 0) {
      std::fprintf(stderr, "usage: ring_attention_mpi [T] [q_heads] [kv_heads] [d] "
                           "[causal|full] [f32|bf16|f16]\n");
    }
    return 2;
  }
  const int64_t H = s.q_heads, G = s.kv_heads, d = s.head_dim, dv = s.value_dim;

  // This rank's rows only: queries, its K/V block, and room for the result.
  const ring::RankRows mine = ring::RowsOf(s.seq_len, n, rank);
  const int64_t L = mine.size();
  auto global = [&](int64_t i) { return mine.Global(i); };
  std::vector<float> q(size_t(H * L * d)), out(size_t(H * L * dv)), lse(size_t(H * L));
  std::vector<uint8_t> kv(size_t(ring::KvBlockBytes(s, L)));
  Fill(0, H, L, d, attn::DType::kF32, global, q.data());
  Fill(1, G, L, d, s.kv_type, global, kv.data());
  Fill(2, G, L, dv, s.kv_type, global, kv.data() + ring::VOffsetBytes(s, L));

  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  const ring::Stats st = ring::RingAttention(MPI_COMM_WORLD, s, q.data(), kv, out.data(), lse.data());
  const double ring_s = MPI_Wtime() - t0;

  // Per-rank statistics to rank 0: pairs, bytes, compute and wait time.
  double mine_stats[5] = {double(L), double(st.pairs), double(st.bytes_sent), st.compute_s, st.wait_s};
  std::vector<double> all(5 * size_t(n));
  MPI_Gather(mine_stats, 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  // The whole result to rank 0 (only for the check: a real model keeps its
  // rows where they are, for the next layer).
  const size_t ranks = size_t(n);
  std::vector<int> counts(ranks), displs(ranks);
  for (int r = 0; r < n; ++r) {
    counts[size_t(r)] = int(H * ring::RowsOf(s.seq_len, n, r).size() * dv);
    displs[size_t(r)] = r ? displs[size_t(r - 1)] + counts[size_t(r - 1)] : 0;
  }
  std::vector<float> gathered(rank == 0 ? size_t(H * s.seq_len * dv) : 0);
  MPI_Gatherv(out.data(), int(out.size()), MPI_FLOAT, gathered.data(), counts.data(),
              displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (rank != 0) return 0;

  const char* kind = s.causal ? "causal" : "full";
  std::printf("ring_attention_mpi: %d ranks, T=%lld, %lld query heads over %lld KV heads, d=%lld, "
              "%s, K/V %s, zig-zag layout, %s\n",
              n, (long long)s.seq_len, (long long)H, (long long)G, (long long)d, kind,
              attn::DTypeName(s.kv_type), attn::CurrentTarget().c_str());
  for (int r = 0; r < n; ++r) {
    const double* a = &all[5 * size_t(r)];
    std::printf("  rank %d: %5lld rows, %10lld query-key pairs per head, sent %8.2f MiB, compute %.3f s, "
                "waited %.3f s\n",
                r, (long long)a[0], (long long)a[1], a[2] / (1 << 20), a[3], a[4]);
  }

  // The check: one process, the whole sequence, the same inputs.
  const int64_t T = s.seq_len;
  auto identity = [](int64_t i) { return i; };
  const int esize = attn::DTypeSize(s.kv_type);
  std::vector<float> fq(size_t(H * T * d)), fout(size_t(H * T * dv));
  std::vector<uint8_t> fk(size_t(G * T * d * esize)), fv(size_t(G * T * dv * esize));
  Fill(0, H, T, d, attn::DType::kF32, identity, fq.data());
  Fill(1, G, T, d, s.kv_type, identity, fk.data());
  Fill(2, G, T, dv, s.kv_type, identity, fv.data());
  attn::Problem p;
  p.q_heads = H;
  p.kv_heads = G;
  p.q_len = p.kv_len = T;
  p.head_dim = d;
  p.q = attn::DenseBHTD(fq.data(), H, T, d);
  p.k = attn::DenseBHTD(fk.data(), s.kv_type, G, T, d);
  p.v = attn::DenseBHTD(fv.data(), s.kv_type, G, T, dv);
  p.out = attn::DenseBHTD(fout.data(), H, T, dv);
  p.causal = s.causal ? attn::Causal::kTopLeft : attn::Causal::kNone;
  const double t1 = MPI_Wtime();
  attn::attention(p);
  const double single_s = MPI_Wtime() - t1;

  double max_diff = 0;
  for (int r = 0, base = 0; r < n; base += counts[size_t(r)], ++r) {
    const ring::RankRows rows = ring::RowsOf(T, n, r);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < rows.size(); ++i)
        for (int64_t c = 0; c < dv; ++c) {
          const float a = gathered[size_t(base + (h * rows.size() + i) * dv + c)];
          const float b = fout[size_t((h * T + rows.Global(i)) * dv + c)];
          max_diff = std::max(max_diff, double(std::fabs(a - b)));
        }
  }
  std::printf("  ring %.3f s; one process over the whole sequence %.3f s; max |ring - single| = "
              "%.1e\n", ring_s, single_s, max_diff);
  return max_diff < 1e-4 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // attn runs OpenMP threads inside each call; only the main thread calls MPI.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 0;
  try {
    rc = Run(argc, argv);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
#endif  // RING_ATTENTION_MPI_NO_MAIN
