// Ring attention over MPI (examples/ring_attention_mpi.cc) against one
// attn::attention call over the whole sequence. Run under mpirun with any
// number of ranks (CTest: 4, and 3 for an odd ring):
//
//   mpirun -np 4 ring_attention_mpi_test [--plant=drop|diagonal|lse]
//
// Every rank builds the same full random problem (tests/test_util.h,
// MakeProblem: same seed), keeps only its zig-zag rows of Q, K and V, and
// runs the example's ring::RingAttention; rank 0 gathers the ring's out and
// lse and compares them, and the single-process result, with the float64
// reference (reference/reference.h).
//
// The bound. The ring evaluates the same formula with the same kernels as
// the single-process call; what differs:
//  1. each partial (queries x one visiting block) is a kernel run over a
//     subset of the keys: the same d-term dot products per score and
//     shorter softmax sums, so its out and lse errors are of the kind and
//     size of the single-process kernel's own error e_single on this
//     input; as in tests/test_util.cc (BoundFromNaive) a factor 4 covers
//     the different summation order;
//  2. N-1 merges, each computed in double and rounded once to float32:
//     half an ULP of |lse| for the accumulated lse and of |out| <= max|V|
//     for out per merge: N/2 ULPs over the ring (+1 for the last rounding).
//  3. An lse error δ_s of part s moves its merge weight e^(lse_s - lse) by
//     a factor e^(δ_s - δ̄) and so out by Σ_s w_s (δ_s - δ̄)(out_s - out):
//     only the parts' differential lse error, times how far the parts'
//     outputs are apart. Both are small here (δ_s ~ 1 ULP of |lse|, the
//     parts' outputs are averages of similar random V rows), measured
//     rather than bounded by 2 max|δ| max|V| (which made the bound ~100x
//     the kernel's own error): the ring's out error stays at 0.5-1.4x the
//     single-process one on every case (run the test to see both).
// So, with u = FLT_EPSILON (one ULP at 1):
//   lse:  4 e_single.lse + (N/2 + 1) u max(1, max|lse|)
//   out:  4 e_single.out + (N + 1) u max|V|
// That is 0.6-1.1e-6 for out and 0.6-4.7e-6 for lse on these shapes, 7-11x
// the single-process kernel's own error, while a ring that loses one block,
// one mask or one lse update is off by ~1e-2 to 1e-1 (1/N of the keys'
// weight): the --plant runs show each of those fails (CTest expects them
// to).
#define RING_ATTENTION_MPI_NO_MAIN
#include "examples/ring_attention_mpi.cc"

#include <cfloat>
#include <cstring>
#include <exception>
#include <string>

#include "reference/reference.h"
#include "tests/test_util.h"

namespace {

using attn::DType;

struct Case {
  int64_t T, q_heads, kv_heads, d, dv;
  bool causal;
  DType kv_type;
};

// Ragged lengths (none divisible by 2N for N = 3 or 4, some below 2N so
// that chunks or whole ranks are empty), GQA and MQA, d = 64 and odd ones,
// d_v != d, causal and not, float32 and 16-bit K/V.
const Case kCases[] = {
    {64, 4, 4, 64, 0, false, DType::kF32},   // divisible: the plain case
    {64, 4, 4, 64, 0, true, DType::kF32},
    {203, 8, 2, 64, 0, true, DType::kF32},   // GQA, ragged
    {97, 6, 3, 37, 0, false, DType::kF32},   // odd d
    {131, 4, 1, 37, 24, true, DType::kF32},  // MQA, odd d, d_v != d
    {509, 2, 2, 64, 0, true, DType::kF32},   // longer
    {150, 8, 2, 64, 0, true, DType::kBF16},
    {77, 4, 2, 33, 0, false, DType::kF16},
    {5, 2, 1, 8, 0, true, DType::kF32},      // T < 2N: empty chunks
    {2, 2, 1, 8, 0, true, DType::kF32},      // some ranks hold no rows
};

std::string Name(const Case& c) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "T=%lld H=%lld/%lld d=%lld dv=%lld %s K/V %s", (long long)c.T,
                (long long)c.q_heads, (long long)c.kv_heads, (long long)c.d,
                (long long)(c.dv ? c.dv : c.d), c.causal ? "causal" : "full",
                attn::DTypeName(c.kv_type));
  return buf;
}

// Copies rows `rows` of a dense [heads, T, cols] tensor (element size
// esize) into a dense [heads, rows.size(), cols] one at dst.
void TakeRows(const void* src, int64_t heads, int64_t T, int64_t cols, int esize,
              const ring::RankRows& rows, void* dst) {
  const int64_t L = rows.size(), row_bytes = cols * esize;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < L; ++i)
      std::memcpy(static_cast<uint8_t*>(dst) + (h * L + i) * row_bytes,
                  static_cast<const uint8_t*>(src) + (h * T + rows.Global(i)) * row_bytes,
                  size_t(row_bytes));
}

// Runs one case on every rank; on rank 0 returns whether it met the bound
// (and prints a line), elsewhere true.
bool RunCase(const Case& c, ring::PlantedBug bug) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  attn::test::Shape shape;
  shape.q_heads = c.q_heads;
  shape.kv_heads = c.kv_heads;
  shape.tq = shape.tk = c.T;
  shape.d = c.d;
  shape.dv = c.dv;
  shape.causal = c.causal ? attn::Causal::kTopLeft : attn::Causal::kNone;
  shape.k_type = shape.v_type = c.kv_type;
  shape.seed = uint64_t(c.T * 1000 + c.d);
  attn::test::OwnedProblem owned = attn::test::MakeProblem(shape);
  const attn::Problem& full = owned.problem;

  ring::Shape s;
  s.seq_len = c.T;
  s.q_heads = c.q_heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.d;
  s.value_dim = full.ValueDim();
  s.causal = c.causal;
  s.kv_type = c.kv_type;
  const int64_t H = s.q_heads, G = s.kv_heads, d = s.head_dim, dv = s.value_dim;
  const int esize = attn::DTypeSize(c.kv_type);

  // This rank's rows, in the ring's local layout.
  const ring::RankRows mine = ring::RowsOf(c.T, n, rank);
  const int64_t L = mine.size();
  std::vector<float> q(size_t(H * L * d)), out(size_t(H * L * dv)), lse(size_t(H * L));
  std::vector<uint8_t> kv(size_t(ring::KvBlockBytes(s, L)));
  TakeRows(full.q.data, H, c.T, d, 4, mine, q.data());
  TakeRows(full.k.data, G, c.T, d, esize, mine, kv.data());
  TakeRows(full.v.data, G, c.T, dv, esize, mine, kv.data() + ring::VOffsetBytes(s, L));

  ring::RingAttention(MPI_COMM_WORLD, s, q.data(), kv, out.data(), lse.data(), {}, bug);

  // Gather every rank's rows on rank 0, back into [H, T, ·] order.
  const size_t ranks = size_t(n);
  std::vector<int> out_counts(ranks), out_displs(ranks), lse_counts(ranks), lse_displs(ranks);
  for (int r = 0; r < n; ++r) {
    const int64_t rows = ring::RowsOf(c.T, n, r).size();
    out_counts[size_t(r)] = int(H * rows * dv);
    lse_counts[size_t(r)] = int(H * rows);
    out_displs[size_t(r)] = r ? out_displs[size_t(r - 1)] + out_counts[size_t(r - 1)] : 0;
    lse_displs[size_t(r)] = r ? lse_displs[size_t(r - 1)] + lse_counts[size_t(r - 1)] : 0;
  }
  std::vector<float> all_out(size_t(H * c.T * dv)), all_lse(size_t(H * c.T));
  MPI_Gatherv(out.data(), int(out.size()), MPI_FLOAT, all_out.data(), out_counts.data(),
              out_displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Gatherv(lse.data(), int(lse.size()), MPI_FLOAT, all_lse.data(), lse_counts.data(),
              lse_displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (rank != 0) return true;

  std::vector<float> ring_out(all_out.size()), ring_lse(all_lse.size());
  for (int r = 0; r < n; ++r) {
    const ring::RankRows rows = ring::RowsOf(c.T, n, r);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < rows.size(); ++i) {
        const int64_t g = h * c.T + rows.Global(i), l = h * rows.size() + i;
        std::memcpy(&ring_out[size_t(g * dv)], &all_out[size_t(out_displs[size_t(r)] + l * dv)],
                    size_t(dv) * sizeof(float));
        ring_lse[size_t(g)] = all_lse[size_t(lse_displs[size_t(r)] + l)];
      }
  }

  // The float64 reference, the single-process kernel, and the ring.
  const attn::reference::Result ref = attn::reference::Attention(full);
  attn::attention(full);  // into owned.out / owned.lse
  const attn::test::Errors single = attn::test::MaxErrors(full, ref);
  attn::Problem ring_problem = full;
  ring_problem.out = attn::DenseBHTD(ring_out.data(), H, c.T, dv);
  ring_problem.lse = {ring_lse.data(), H * c.T, c.T, 1};
  const attn::test::Errors err = attn::test::MaxErrors(ring_problem, ref);
  double ring_vs_single = 0;
  for (size_t i = 0; i < ring_out.size(); ++i)
    ring_vs_single = std::max(ring_vs_single, double(std::fabs(ring_out[i] - owned.out[i])));

  // The bound (see the top of the file).
  double max_v = 0, max_lse = 1;
  for (int64_t h = 0; h < G; ++h)
    for (int64_t j = 0; j < c.T; ++j)
      for (int64_t k = 0; k < dv; ++k)
        max_v = std::max(max_v, double(std::fabs(
                                    attn::test::ElementAt(full.v, h * full.v.head_stride +
                                                                      j * full.v.row_stride + k))));
  for (double x : ref.lse)
    if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(x));
  const double u = FLT_EPSILON;
  const double bound_lse = 4 * single.lse + (0.5 * n + 1) * u * max_lse;
  const double bound_out = 4 * single.out + (n + 1) * u * max_v;
  const bool ok = err.out <= bound_out && err.lse <= bound_lse;
  std::printf("%s %-44s out err %.2e (single %.2e, bound %.2e)  lse err %.2e (single %.2e, "
              "bound %.2e)  |ring - single| %.2e%s\n",
              ok ? "ok  " : "FAIL", Name(c).c_str(), err.out, single.out, bound_out, err.lse,
              single.lse, bound_lse, ring_vs_single, ok ? "" : "  <- exceeds the bound");
  return ok;
}

int Run(int argc, char** argv) {
  ring::PlantedBug bug = ring::PlantedBug::kNone;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plant=drop") bug = ring::PlantedBug::kDropBlock;
    else if (a == "--plant=diagonal") bug = ring::PlantedBug::kUnmaskedDiagonal;
    else if (a == "--plant=lse") bug = ring::PlantedBug::kStaleLse;
    else {
      std::fprintf(stderr, "usage: ring_attention_mpi_test [--plant=drop|diagonal|lse]\n");
      return 2;
    }
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank == 0) {
    std::printf("ring attention on %d ranks (zig-zag layout), %s, target %s%s\n", n,
                "vs one process and the float64 reference", attn::CurrentTarget().c_str(),
                bug == ring::PlantedBug::kNone ? "" : ", with a PLANTED BUG");
  }
  int failed = 0, total = 0;
  for (const Case& c : kCases) {
    failed += RunCase(c, bug) ? 0 : 1;
    ++total;
  }
  if (rank != 0) return 0;
  if (failed) {
    std::printf("%d of %d cases exceed the bound\n", failed, total);
    return 1;
  }
  std::printf("all %d cases within the bound\n", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 0;
  try {
    rc = Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_attention_mpi_test: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return rc;
}
