#include "tests/oracle.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace attn::oracle {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, float32 unit roundoff
constexpr double kEpsExp = 1e-6;         // the kernels' exp, relative
constexpr double kMinNormal = 1.1754943508222875e-38;  // 2^-126
constexpr double kDenormStep = 1.401298464324817e-45;  // 2^-149
constexpr double kSafe = 1e37;
constexpr double kInf = std::numeric_limits<double>::infinity();

const float* QRow(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return p.q.data + b * p.q.batch_stride + h * p.q.head_stride + i * p.q.row_stride;
}
int64_t KvHead(const Problem& p, int64_t h) { return h / (p.q_heads / p.kv_heads); }
const float* KRow(const Problem& p, int64_t b, int64_t h, int64_t j) {
  return p.k.data + b * p.k.batch_stride + KvHead(p, h) * p.k.head_stride + j * p.k.row_stride;
}
const float* VRow(const Problem& p, int64_t b, int64_t h, int64_t j) {
  return p.v.data + b * p.v.batch_stride + KvHead(p, h) * p.v.head_stride + j * p.v.row_stride;
}
float MaskAt(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return p.mask.data[b * p.mask.batch_stride + h * p.mask.head_stride + i * p.mask.row_stride +
                     j * p.mask.col_stride];
}
bool CausallyVisible(const Problem& p, int64_t i, int64_t j) {
  switch (p.causal) {
    case Causal::kNone: return true;
    case Causal::kBottomRight: return j <= p.kv_len - p.q_len + i;
    case Causal::kTopLeft: return j <= i;
  }
  return true;
}

// Largest finite |V| of the kv head that query head h reads.
double MaxAbsV(const Problem& p, int64_t b, int64_t h) {
  double m = 0.0;
  for (int64_t j = 0; j < p.kv_len; ++j) {
    const float* v = VRow(p, b, h, j);
    for (int64_t c = 0; c < p.ValueDim(); ++c) {
      if (std::isfinite(v[c])) m = std::max(m, std::fabs(double(v[c])));
    }
  }
  return m;
}

struct RowFigures {
  double s = 0.0;      // max_j sum_c |q_c k_c| (finite products, visible keys)
  double a = 0.0;      // |scale| * s
  double m = 0.0;      // max finite |mask| over visible keys
  double sq = 0.0;     // max |scale * q_c|
  double kmax = 0.0;   // max finite |k| over visible keys
  bool safe = true;
};

RowFigures Figures(const Problem& p, int64_t b, int64_t h, int64_t i) {
  RowFigures f;
  const double scale = std::fabs(double(p.Scale()));
  const float* q = QRow(p, b, h, i);
  // The SIMD kernels fold the scale into Q: a q_c != 0 whose float32
  // product with the scale underflows to 0 meets an infinite k_c as
  // 0 * inf = NaN, where the reference has scale * (+-inf) = +-inf.
  bool q_underflows = false;
  bool k_infinite = false;
  for (int64_t c = 0; c < p.head_dim; ++c) {
    if (std::isfinite(q[c])) f.sq = std::max(f.sq, scale * std::fabs(double(q[c])));
    q_underflows |= q[c] != 0.0f && p.Scale() != 0.0f && p.Scale() * q[c] == 0.0f;
  }
  for (int64_t j = 0; j < p.kv_len; ++j) {
    if (!CausallyVisible(p, i, j)) continue;
    const float* k = KRow(p, b, h, j);
    double sum = 0.0;
    for (int64_t c = 0; c < p.head_dim; ++c) {
      const double t = std::fabs(double(q[c]) * double(k[c]));
      if (std::isfinite(t)) sum += t;
      if (std::isfinite(k[c])) f.kmax = std::max(f.kmax, std::fabs(double(k[c])));
      k_infinite |= std::isinf(k[c]);
    }
    f.s = std::max(f.s, sum);
    if (p.mask.data) {
      const float m = MaskAt(p, b, h, i, j);
      if (std::isfinite(m)) f.m = std::max(f.m, std::fabs(double(m)));
    }
  }
  f.a = scale * f.s;
  f.safe = f.s < kSafe && f.a < kSafe && f.a + f.m < kSafe && f.sq < kSafe &&
           MaxAbsV(p, b, h) * double(p.kv_len) < kSafe && !(q_underflows && k_infinite);
  return f;
}

// "<what>: reference <want>, kernel <got>[, bound <bound>]"
std::string Mismatch(const std::string& what, double want, double got, double bound = -1.0) {
  std::ostringstream os;
  os << std::setprecision(9) << what << ": reference " << want << ", kernel " << got;
  if (bound >= 0.0) os << ", bound " << std::setprecision(3) << bound;
  return os.str();
}

}  // namespace

bool RowIsFloat32Safe(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return Figures(p, b, h, i).safe;
}

std::string Check(const Problem& p, const reference::Result& ref) {
  const int64_t dv = p.ValueDim();
  const int64_t d = p.head_dim;
  size_t r = 0, l = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const double max_v = MaxAbsV(p, b, h);
      for (int64_t i = 0; i < p.q_len; ++i, ++l) {
        const std::string where = "b" + std::to_string(b) + " h" + std::to_string(h) + " row " +
                                  std::to_string(i);
        const float* o = p.out.data + b * p.out.batch_stride + h * p.out.head_stride +
                         i * p.out.row_stride;
        const RowFigures f = Figures(p, b, h, i);
        const double score_err = (d + 4) * kU * f.a + 4 * kU * (f.a + f.m) +
                                 2 * d * kDenormStep * (f.kmax + std::fabs(double(p.Scale())) + 1) +
                                 d * kMinNormal * kU;
        const double delta = 2 * score_err;
        const double rel = 2 * (std::exp(delta) * (1 + kEpsExp) - 1) +
                           double(p.kv_len) * (kEpsExp + 2 * kU) + 16 * kU;
        // (V all zero: out is exactly 0 however wrong the weights, even
        // when rel is infinite.)
        const double bound_out = (max_v == 0.0 ? 0.0 : rel * max_v) + 4 * double(p.kv_len) * kDenormStep;
        const double want_lse = ref.lse[l];

        for (int64_t c = 0; c < dv; ++c, ++r) {
          const double want = ref.out[r];
          const double got = o[c];
          const std::string at = where + " col " + std::to_string(c);
          if (!f.safe) {
            // Outside float32's range: any value. Overflow may give NaN
            // (even in a fully masked row: inf * 0 + -inf), or turn a
            // visible key's score into -inf, so that its NaN value is not
            // read (the reference, in float64, gives NaN).
          } else if (std::isnan(want)) {
            if (!std::isnan(got)) return Mismatch(at, want, got);
          } else if (std::isinf(want)) {
            if (got != want && !std::isnan(got)) return Mismatch(at, want, got);
          } else if (want_lse == -kInf) {  // fully masked row: exactly 0
            if (got != 0.0) return Mismatch(at + " (fully masked row)", 0.0, got);
          } else if (!(std::fabs(got - want) <= bound_out)) {
            return Mismatch(at, want, got, bound_out);
          }
        }

        if (!p.lse.data) continue;
        const double got = p.lse.data[b * p.lse.batch_stride + h * p.lse.head_stride +
                                      i * p.lse.row_stride];
        if (!f.safe) {
          // Outside float32's range: any value.
        } else if (std::isnan(want_lse)) {
          if (!std::isnan(got)) return Mismatch(where + " lse", want_lse, got);
        } else if (std::isinf(want_lse)) {
          if (got != want_lse) return Mismatch(where + " lse", want_lse, got);
        } else {
          const double bound_lse = delta + rel + 4 * kU * std::fabs(want_lse);
          if (!(std::fabs(got - want_lse) <= bound_lse)) {
            return Mismatch(where + " lse", want_lse, got, bound_lse);
          }
        }
      }
    }
  }
  return "";
}

namespace {

struct Dim {
  int64_t extent, stride;
};

// Exact byte span of a strided tensor (last element + 1, times 4); -1 when it
// does not fit in int64. Extents >= 1 and strides >= 0 assumed.
__int128 SpanBytes(const Dim* dims, int n) {
  __int128 last = 0;
  for (int i = 0; i < n; ++i) last += __int128(dims[i].extent - 1) * dims[i].stride;
  const __int128 bytes = (last + 1) * 4;
  return bytes > std::numeric_limits<int64_t>::max() ? -1 : bytes;
}

// Whether two distinct indices map to one element: exact (enumerated) when
// the tensor is small, else the nesting rule (sorted by stride, each stride
// at least the span of the dims inside it), which is exact for nested
// layouts and only conservative for interleaved ones.
bool MapsTwoToOne(std::vector<Dim> dims) {
  __int128 count = 1;
  for (const Dim& d : dims) count *= d.extent;
  if (count <= (1 << 20)) {
    std::vector<int64_t> offsets{0};
    for (const Dim& d : dims) {
      std::vector<int64_t> next;
      next.reserve(offsets.size() * size_t(d.extent));
      for (int64_t o : offsets)
        for (int64_t e = 0; e < d.extent; ++e) next.push_back(o + e * d.stride);
      offsets.swap(next);
    }
    std::sort(offsets.begin(), offsets.end());
    return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
  }
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  __int128 inner = 1;
  for (const Dim& d : dims) {
    if (d.extent == 1) continue;
    if (d.stride < inner) return true;
    inner += __int128(d.stride) * (d.extent - 1);
  }
  return false;
}

}  // namespace

std::string ValidityViolation(const Problem& p, const Options& o) {
  auto bad = [](const std::string& field) { return field; };
  if (o.threads < 0) return bad("threads");
  if (o.tiles.q_block < 0) return bad("tiles.q_block");
  if (o.tiles.kv_block < 0) return bad("tiles.kv_block");
  if (o.tiles.kv_splits < 0) return bad("tiles.kv_splits");
  const int kernel = int(o.kernel);
  if (kernel < int(KernelId::kAuto) || kernel > int(KernelId::kParallel)) return bad("kernel");
  if (p.batch < 1) return bad("batch");
  if (p.q_heads < 1) return bad("q_heads");
  if (p.kv_heads < 1) return bad("kv_heads");
  if (p.q_heads % p.kv_heads != 0) return bad("kv_heads");
  if (p.q_len < 1) return bad("q_len");
  if (p.kv_len < 1) return bad("kv_len");
  if (p.head_dim < 1) return bad("head_dim");
  if (p.value_dim && *p.value_dim < 1) return bad("value_dim");
  if (p.scale && !std::isfinite(*p.scale)) return bad("scale");
  const int64_t dv = p.ValueDim();

  struct Range {
    std::string name;
    __int128 begin, end;
    bool writable;
  };
  std::vector<Range> ranges;
  auto tensor = [&](const std::string& n, const void* data, int64_t heads, int64_t rows,
                    int64_t cols, int64_t bs, int64_t hs, int64_t rs, bool writable) -> std::string {
    if (!data) return n + ".data";
    if (bs < 0) return n + ".batch_stride";
    if (hs < 0) return n + ".head_stride";
    if (rs < 0) return n + ".row_stride";
    if (rows > 1 && rs < cols) return n + ".row_stride";
    const Dim dims[4] = {{p.batch, bs}, {heads, hs}, {rows, rs}, {cols, 1}};
    const __int128 bytes = SpanBytes(dims, 4);
    if (bytes < 0) return n;
    if (writable && MapsTwoToOne({dims, dims + 4})) return n;
    const __int128 begin = __int128(reinterpret_cast<uintptr_t>(data));
    ranges.push_back({n, begin, begin + bytes, writable});
    return "";
  };
  std::string why;
  if (!(why = tensor("q", p.q.data, p.q_heads, p.q_len, p.head_dim, p.q.batch_stride,
                     p.q.head_stride, p.q.row_stride, false)).empty()) return why;
  if (!(why = tensor("k", p.k.data, p.kv_heads, p.kv_len, p.head_dim, p.k.batch_stride,
                     p.k.head_stride, p.k.row_stride, false)).empty()) return why;
  if (!(why = tensor("v", p.v.data, p.kv_heads, p.kv_len, dv, p.v.batch_stride,
                     p.v.head_stride, p.v.row_stride, false)).empty()) return why;
  if (!(why = tensor("out", p.out.data, p.q_heads, p.q_len, dv, p.out.batch_stride,
                     p.out.head_stride, p.out.row_stride, true)).empty()) return why;
  if (p.mask.data) {
    const AdditiveMask& m = p.mask;
    if (m.batch_stride < 0) return bad("mask.batch_stride");
    if (m.head_stride < 0) return bad("mask.head_stride");
    if (m.row_stride < 0) return bad("mask.row_stride");
    if (m.col_stride < 0) return bad("mask.col_stride");
    const Dim dims[4] = {{p.batch, m.batch_stride}, {p.q_heads, m.head_stride},
                         {p.q_len, m.row_stride}, {p.kv_len, m.col_stride}};
    const __int128 bytes = SpanBytes(dims, 4);
    if (bytes < 0) return bad("mask");
    const __int128 begin = __int128(reinterpret_cast<uintptr_t>(m.data));
    ranges.push_back({"mask", begin, begin + bytes, false});
  }
  if (p.lse.data) {
    const LseOutput& s = p.lse;
    if (s.batch_stride < 0) return bad("lse.batch_stride");
    if (s.head_stride < 0) return bad("lse.head_stride");
    if (s.row_stride < 0) return bad("lse.row_stride");
    const Dim dims[3] = {{p.batch, s.batch_stride}, {p.q_heads, s.head_stride},
                         {p.q_len, s.row_stride}};
    const __int128 bytes = SpanBytes(dims, 3);
    if (bytes < 0) return bad("lse");
    if (MapsTwoToOne({dims, dims + 3})) return bad("lse");
    const __int128 begin = __int128(reinterpret_cast<uintptr_t>(s.data));
    ranges.push_back({"lse", begin, begin + bytes, true});
  }
  for (const Range& w : ranges) {
    if (!w.writable) continue;
    for (const Range& r : ranges) {
      if (&r == &w) continue;
      if (w.begin < r.end && r.begin < w.end) return w.name;
    }
  }
  return "";
}

}  // namespace attn::oracle
