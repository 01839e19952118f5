#include "tests/oracle.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
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
// Below x = -104, float32's e^x is 0: e^-103.98 < 2^-150, half the smallest
// subnormal, so any float32 exp rounds it to 0 (the kernels' ExpNonPositive
// already gives 0 below x·log2 e = -126, x = -87.3; std::exp at -103.97).
constexpr double kFloat32ExpZero = 104.0;

// One row of a tensor of any element type, read as float (exact: every
// bf16 / f16 value is a float, and so is a q8_0 or q4_0 element, an integer
// x binary16).
struct Row {
  const void* data;
  DType type;
  float operator[](int64_t c) const {
    const uint16_t* half = static_cast<const uint16_t*>(data);
    switch (type) {
      case DType::kBF16: return FromBFloat16Bits(half[c]);
      case DType::kF16: return FromFloat16Bits(half[c]);
      case DType::kQ8_0: {
        const unsigned char* block = static_cast<const unsigned char*>(data) + c / 32 * 34;
        const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
        return float(static_cast<signed char>(block[2 + c % 32])) * scale;
      }
      case DType::kQ4_0: {  // the scale, then nibbles: elements 0-15 low, 16-31 high
        const unsigned char* block = static_cast<const unsigned char*>(data) + c / 32 * 18;
        const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
        const int64_t e = c % 32;
        return float((e < 16 ? block[2 + e] & 15 : block[2 + e - 16] >> 4) - 8) * scale;
      }
      case DType::kF32: break;
    }
    return static_cast<const float*>(data)[c];
  }
};
Row RowAt(const ConstTensor& t, int64_t b, int64_t h, int64_t i) {
  const int64_t offset = b * t.batch_stride + h * t.head_stride + i * t.row_stride;
  return Row{static_cast<const char*>(t.data) + DTypeBytes(t.dtype, offset), t.dtype};
}
Row QRow(const Problem& p, int64_t b, int64_t h, int64_t i) { return RowAt(p.q, b, h, i); }
int64_t KvHead(const Problem& p, int64_t h) { return h / (p.q_heads / p.kv_heads); }
Row KRow(const Problem& p, int64_t b, int64_t h, int64_t j) {
  return RowAt(p.k, b, KvHead(p, h), j);
}
Row VRow(const Problem& p, int64_t b, int64_t h, int64_t j) {
  return RowAt(p.v, b, KvHead(p, h), j);
}

// Unit roundoff of an output element type and the largest finite value
// (a bf16 / f16 output is the float32 result rounded once to nearest).
double OutputRoundoff(DType t) {
  return t == DType::kBF16 ? 1.0 / 256 : t == DType::kF16 ? 1.0 / 2048 : 0.0;
}
// Half the spacing of the type's subnormals: the absolute rounding floor.
double OutputTinyStep(DType t) {
  return t == DType::kBF16 ? std::ldexp(1.0, -134) : t == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;
}
double OutputMax(DType t) { return t == DType::kF16 ? 65504.0 : 3.4028234663852886e38; }
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
    const Row v = VRow(p, b, h, j);
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
  // max_j sum_c |q_c k_c| over the terms with a subnormal q_c or k_c: what
  // the bf16 dot-product path's DAZ may drop from a score (below).
  double daz = 0.0;
  bool safe = true;
};

bool IsSubnormal(float x) { return x != 0.0f && std::fabs(x) < float(kMinNormal); }

// Whether the kernel may have run a bf16 dot-product path (attn.h
// ForceDotPath): Q, K and V all bf16 and a path other than widen in force.
// Its contract (docs/precision.md) differs from float32's in three ways,
// each a term of Check's bounds:
// - the weights are rounded to bf16 before P·V: each off by at most 2^-9
//   relative, so the output by 2^-9 Σ p_j |v_j| <= 2^-9 max|V| (rel gets
//   2^-8, twice that);
// - DAZ: a subnormal bf16 q_c, k_c or v is read as 0 (the instruction
//   ignores MXCSR): a score loses at most scale·daz, an output at most
//   2^-126 (a convex combination of V values each moved <= 2^-126);
// - FTZ: a subnormal product or partial sum becomes 0: each score's d pair
//   steps lose at most 2·d·2^-126 before the scale, each output's T_k
//   steps 2·T_k·2^-126 before the normalisation by a sum >= 1.
// A subnormal q_c read as 0 against an infinite k_c gives 0·inf = NaN
// where the reference has ±inf (and the other way round): such rows are
// outside the contract, as the float32 kernels' folded-scale case is.
bool DotPathMayRun(const Problem& p) {
  return p.q.dtype == DType::kBF16 && p.k.dtype == DType::kBF16 && p.v.dtype == DType::kBF16 &&
         CurrentDotPath() != "widen";
}

RowFigures Figures(const Problem& p, int64_t b, int64_t h, int64_t i) {
  RowFigures f;
  const double scale = std::fabs(double(p.Scale()));
  const Row q = QRow(p, b, h, i);
  // The SIMD kernels fold the scale into Q: a q_c != 0 whose float32
  // product with the scale underflows to 0 meets an infinite k_c as
  // 0 * inf = NaN, where the reference has scale * (+-inf) = +-inf.
  bool q_underflows = false;
  bool k_infinite = false;
  bool daz_meets_inf = false;  // a subnormal against an infinity (dot path)
  for (int64_t c = 0; c < p.head_dim; ++c) {
    if (std::isfinite(q[c])) f.sq = std::max(f.sq, scale * std::fabs(double(q[c])));
    q_underflows |= q[c] != 0.0f && p.Scale() != 0.0f && p.Scale() * q[c] == 0.0f;
  }
  for (int64_t j = 0; j < p.kv_len; ++j) {
    if (!CausallyVisible(p, i, j)) continue;
    const Row k = KRow(p, b, h, j);
    double sum = 0.0, daz = 0.0;
    for (int64_t c = 0; c < p.head_dim; ++c) {
      const double t = std::fabs(double(q[c]) * double(k[c]));
      if (std::isfinite(t)) sum += t;
      if (std::isfinite(t) && (IsSubnormal(q[c]) || IsSubnormal(k[c]))) daz += t;
      daz_meets_inf |= (IsSubnormal(q[c]) && std::isinf(k[c])) ||
                       (IsSubnormal(k[c]) && std::isinf(q[c]));
      if (std::isfinite(k[c])) f.kmax = std::max(f.kmax, std::fabs(double(k[c])));
      k_infinite |= std::isinf(k[c]);
    }
    f.s = std::max(f.s, sum);
    f.daz = std::max(f.daz, daz);
    if (p.mask.data) {
      const float m = MaskAt(p, b, h, i, j);
      if (std::isfinite(m)) f.m = std::max(f.m, std::fabs(double(m)));
    }
  }
  f.a = scale * f.s;
  f.safe = f.s < kSafe && f.a < kSafe && f.a + f.m < kSafe && f.sq < kSafe &&
           MaxAbsV(p, b, h) * double(p.kv_len) < kSafe && !(q_underflows && k_infinite) &&
           !(daz_meets_inf && DotPathMayRun(p));
  return f;
}

// Whether float32 attention may return `got` (+-inf) in column c of row i
// of head (b, h) where the float64 reference is NaN; `s` is the reference's
// Stages of that head, `delta` Check's bound on the error of a float32
// score difference. The row must be safe (RowIsFloat32Safe) with a finite
// reference lse (so its scores are finite: no NaN row).
//
// The exact weight e^(s_j - max) of a key the row sees is positive for
// every finite score, so +-inf in V there gives +-inf in exact arithmetic;
// NaN is what a weight that underflowed to 0 makes of it (0 * inf). The
// reference reads every key whose score is not -inf and so gives NaN where
// float64's weight underflows (below e^-745); the float32 kernels read the
// same keys (a hidden key's weight is -0 and skipped, an underflowed one is
// +0 and read) and give NaN where theirs underflows. Which weights
// underflow differs: float32's scores carry an error (delta) that grows
// with |score| (at 1e18, 768 apart in float64 is one float32 value), and
// the streaming, parallel and split-KV kernels do not take one e^(s_j - max):
// key j's weight is e^(s_j - m) at the running max m of its tile, times a
// rescale e^(m_old - m_new) each time the running max grows (and a merge
// weight e^(lse_part - lse)), and an infinite accumulator times any positive
// factor stays infinite, however small their product. So `got` is accepted
// where, and only where, float32 attention can produce it:
// - every key the reference reads with a non-finite V[j][c] holds an
//   infinity of got's sign (NaN in V, or infinities of both signs, are NaN
//   in every precision: NaN, inf - inf, or 0 * inf);
// - the reference is NaN because of at least one of them whose float64
//   weight is exactly 0 (a key with a positive float64 weight makes the
//   reference +-inf, not NaN);
// - for each such key, float32 can keep its weight positive: no factor on
//   the way from s_j to the row max is below e^-104 (float32's 0). Every
//   factor is e^(a - b) for two values a < b of the running max, which are
//   scores of visible keys (or, for a merge, lse_part <= max_part + ln T_k),
//   so if the visible scores at or above s_j, sorted, have a gap wider than
//   104 + ln T_k, the running max has to cross it in one step and the
//   float32 weight is 0 on every kernel and tiling. In float64 terms, with
//   each float32 score within delta / 2 of the reference's: no gap wider
//   than 104 + ln T_k + delta (times 1 + 4u for the float32 subtractions).
// Where a kernel reaches the row max in steps (kv_block 1: one key a tile)
// such gaps are exactly where it turns inf into NaN
// (Hostile.InfInVSurvivesTileRescalesThatUnderflowInFloat64). (With a 16-bit
// output an Inf could also be a finite float32 result rounded past the
// type's largest value; no output check can tell the two apart.)
bool InfMayStandForNaN(const Problem& p, const reference::HeadStages& s, int64_t b, int64_t h,
                       int64_t i, int64_t c, double got, double delta) {
  const int64_t tk = p.kv_len;
  const double* masked = &s.masked[size_t(i * tk)];
  const double* weight = &s.weights[size_t(i * tk)];
  std::vector<double> visible;  // the scores of the keys the reference reads
  for (int64_t j = 0; j < tk; ++j) {
    if (masked[j] != -kInf) visible.push_back(masked[j]);
  }
  if (visible.empty()) return false;  // (a fully masked row: out is 0)
  std::sort(visible.begin(), visible.end());
  // widest[n]: the widest gap between consecutive visible[n..].
  std::vector<double> widest(visible.size(), 0.0);
  for (size_t n = visible.size() - 1; n-- > 0;) {
    widest[n] = std::max(widest[n + 1], visible[n + 1] - visible[n]);
  }
  const double limit = (kFloat32ExpZero + std::log(double(tk)) + delta) * (1 + 4 * kU);
  bool underflowed = false;
  for (int64_t j = 0; j < tk; ++j) {
    if (masked[j] == -kInf) continue;  // never read, by either side
    const double v = VRow(p, b, h, j)[c];
    if (std::isfinite(v)) continue;
    if (std::isnan(v) || (v > 0) != (got > 0)) return false;
    if (weight[j] != 0.0) continue;
    underflowed = true;
    const size_t n = size_t(std::lower_bound(visible.begin(), visible.end(), masked[j]) -
                            visible.begin());
    if (!(widest[n] <= limit)) return false;
  }
  return underflowed;
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
      // The reference's stages of this head, computed only when a NaN in
      // the reference meets an infinity from the kernel (InfMayStandForNaN).
      std::optional<reference::HeadStages> stages;
      auto head_stages = [&]() -> const reference::HeadStages& {
        if (!stages) stages = reference::Stages(p, b, h);
        return *stages;
      };
      for (int64_t i = 0; i < p.q_len; ++i, ++l) {
        const std::string where = "b" + std::to_string(b) + " h" + std::to_string(h) + " row " +
                                  std::to_string(i);
        const Row o = RowAt(p.out, b, h, i);
        const RowFigures f = Figures(p, b, h, i);
        const double score_err = (d + 4) * kU * f.a + 4 * kU * (f.a + f.m) +
                                 2 * d * kDenormStep * (f.kmax + std::fabs(double(p.Scale())) + 1) +
                                 d * kMinNormal * kU;
        // The bf16 dot-product path's terms (DotPathMayRun).
        const bool dot = DotPathMayRun(p);
        const double dot_score_err =
            dot ? std::fabs(double(p.Scale())) * (f.daz + 2 * d * kMinNormal) : 0.0;
        const double delta = 2 * (score_err + dot_score_err);
        const double rel = 2 * (std::exp(delta) * (1 + kEpsExp) - 1) +
                           double(p.kv_len) * (kEpsExp + 2 * kU) + 16 * kU +
                           (dot ? 1.0 / 256 : 0.0);
        // (V all zero: out is exactly 0 however wrong the weights, even
        // when rel is infinite.)
        const double bound_out = (max_v == 0.0 ? 0.0 : rel * max_v) +
                                 4 * double(p.kv_len) * kDenormStep +
                                 (dot ? (2 * double(p.kv_len) + 1) * kMinNormal : 0.0);
        const double want_lse = ref.lse[l];

        for (int64_t c = 0; c < dv; ++c, ++r) {
          const double want = ref.out[r];
          const double got = o[c];
          const std::string at = where + " col " + std::to_string(c);
          // A 16-bit output adds its own rounding of the float32 result
          // (whose own error is bound_out); f16 overflows to inf past 65504.
          const double roundoff = OutputRoundoff(p.out.dtype);
          const double bound =
              roundoff == 0.0 ? bound_out  // (bound_out may be inf: no 0 * inf)
                              : bound_out + roundoff * (std::fabs(want) + bound_out) +
                                    OutputTinyStep(p.out.dtype);
          const bool may_overflow = std::fabs(want) + bound > OutputMax(p.out.dtype);
          if (!f.safe) {
            // Outside float32's range: any value. Overflow may give NaN
            // (even in a fully masked row: inf * 0 + -inf), or turn a
            // visible key's score into -inf, so that its NaN value is not
            // read (the reference, in float64, gives NaN).
          } else if (std::isnan(want)) {
            // NaN, or an infinity where the reference is NaN only because
            // float64 underflowed the weight of a key holding it and
            // float32 may not have (InfMayStandForNaN).
            if (!std::isnan(got) &&
                !(std::isinf(got) && std::isfinite(want_lse) &&
                  InfMayStandForNaN(p, head_stages(), b, h, i, c, got, delta))) {
              return Mismatch(at, want, got);
            }
          } else if (std::isinf(want)) {
            if (got != want && !std::isnan(got)) return Mismatch(at, want, got);
          } else if (want_lse == -kInf) {  // fully masked row: exactly 0
            if (got != 0.0) return Mismatch(at + " (fully masked row)", 0.0, got);
          } else if (may_overflow && std::isinf(got) &&
                     (bound >= std::fabs(want) || (got > 0) == (want > 0))) {
            // Rounded past the output type's largest value: with that sign,
            // or with either when the bound does not fix the sign (a float32
            // result anywhere within it may round to +inf or -inf).
          } else if (!(std::fabs(got - want) <= bound)) {
            return Mismatch(at, want, got, bound);
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
__int128 SpanBytes(const Dim* dims, int n, int element_bytes = 4) {
  __int128 last = 0;
  for (int i = 0; i < n; ++i) last += __int128(dims[i].extent - 1) * dims[i].stride;
  const __int128 bytes = (last + 1) * element_bytes;
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
  // kv: K or V, which may be q8_0 or q4_0 (attn.h DType::kQ8_0, kQ4_0:
  // rows and strides of whole 32-element blocks, 34 or 18 bytes each);
  // `cols_field` names its row length.
  auto tensor = [&](const std::string& n, const ConstTensor& t, int64_t heads, int64_t rows,
                    int64_t cols, bool writable, bool kv = false,
                    const std::string& cols_field = "") -> std::string {
    const void* data = t.data;
    const int64_t bs = t.batch_stride, hs = t.head_stride, rs = t.row_stride;
    const bool q8 = t.dtype == DType::kQ8_0 || t.dtype == DType::kQ4_0;  // a block type
    const int element_bytes = q8 ? DTypeBlockBytes(t.dtype) : DTypeSize(t.dtype);
    if (element_bytes == 0 || (q8 && !kv)) return n + ".dtype";
    if (q8 && cols % 32 != 0) return cols_field;
    if (!data) return n + ".data";
    if (bs < 0) return n + ".batch_stride";
    if (hs < 0) return n + ".head_stride";
    if (rs < 0) return n + ".row_stride";
    if (rows > 1 && rs < cols) return n + ".row_stride";
    if (q8 && bs % 32 != 0) return n + ".batch_stride";
    if (q8 && hs % 32 != 0) return n + ".head_stride";
    if (q8 && rs % 32 != 0) return n + ".row_stride";
    const Dim dims[4] = {{p.batch, bs}, {heads, hs}, {rows, rs}, {cols, 1}};
    // A block type: the span in elements is whole blocks; element_bytes each.
    const __int128 elements = SpanBytes(dims, 4, 1);
    const __int128 bytes =
        !q8 ? SpanBytes(dims, 4, element_bytes)
        : elements < 0 || elements / 32 * element_bytes > std::numeric_limits<int64_t>::max()
            ? -1
            : elements / 32 * element_bytes;
    if (bytes < 0) return n;
    if (writable && MapsTwoToOne({dims, dims + 4})) return n;
    const __int128 begin = __int128(reinterpret_cast<uintptr_t>(data));
    ranges.push_back({n, begin, begin + bytes, writable});
    return "";
  };
  std::string why;
  if (!(why = tensor("q", p.q, p.q_heads, p.q_len, p.head_dim, false)).empty()) return why;
  if (!(why = tensor("k", p.k, p.kv_heads, p.kv_len, p.head_dim, false, true, "head_dim")).empty()) {
    return why;
  }
  if (!(why = tensor("v", p.v, p.kv_heads, p.kv_len, dv, false, true,
                     p.value_dim ? "value_dim" : "head_dim"))
           .empty()) {
    return why;
  }
  if (!(why = tensor("out", p.out, p.q_heads, p.q_len, dv, true)).empty()) return why;
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
