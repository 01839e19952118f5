#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <tuple>

namespace attn::test {

std::string Shape::Name() const {
  std::ostringstream os;
  os << "B" << batch << "_H" << q_heads << "x" << kv_heads << "_Tq" << tq << "_Tk" << tk << "_d"
     << d << "_dv" << (dv ? dv : d) << "_causal" << int(causal) << (additive_mask ? "_mask" : "")
     << (fully_masked_rows ? "_fm" + std::to_string(fully_masked_rows) : "") << "_mag"
     << magnitude << (layout == Layout::kBTHD ? "_BTHD" : "") << "_pad" << row_padding;
  if (q_type != DType::kF32 || k_type != DType::kF32 || v_type != DType::kF32 ||
      out_type != DType::kF32) {
    os << "_" << DTypeName(q_type) << "_" << DTypeName(k_type) << "_" << DTypeName(v_type) << "_"
       << DTypeName(out_type);
  }
  return os.str();
}

namespace {
constexpr float kSentinel = -12345.0f;
}

void OwnedProblem::ClearOutputs() {
  std::fill(out.begin(), out.end(), kSentinel);
  const uint16_t sentinel16 =
      shape.out_type == DType::kF16 ? Float16Bits(kSentinel) : BFloat16Bits(kSentinel);
  std::fill(out16.begin(), out16.end(), sentinel16);
  std::fill(lse.begin(), lse.end(), kSentinel);
}

float DecodeQ8_0ForTest(const uint8_t* blocks, int64_t i) {
  const uint8_t* block = blocks + i / 32 * 34;
  const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
  return float(static_cast<int8_t>(block[2 + i % 32])) * scale;
}

float DecodeQ4_0ForTest(const uint8_t* blocks, int64_t i) {
  const uint8_t* block = blocks + i / 32 * 18;
  const float scale = FromFloat16Bits(uint16_t(block[0] | (block[1] << 8)));
  const int64_t c = i % 32;
  const int nibble = c < 16 ? block[2 + c] & 0x0f : block[2 + c - 16] >> 4;
  return float(nibble - 8) * scale;
}

float DecodeBlockForTest(DType type, const uint8_t* blocks, int64_t i) {
  return type == DType::kQ4_0 ? DecodeQ4_0ForTest(blocks, i) : DecodeQ8_0ForTest(blocks, i);
}

void QuantizeQ4_0ForTest(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    uint8_t* block = out + b * 18;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t bits = Float16Bits(d);
    block[0] = uint8_t(bits & 0xff);
    block[1] = uint8_t(bits >> 8);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, int(xb[j] * id + 8.5f));
      const int hi = std::min(15, int(xb[16 + j] * id + 8.5f));
      block[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

void QuantizeBlocksForTest(DType type, const float* x, int64_t n, uint8_t* out) {
  if (type == DType::kQ4_0) return QuantizeQ4_0ForTest(x, n, out);
  QuantizeForTest(x, n, out);
}

void QuantizeForTest(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    uint8_t* block = out + b * 34;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t bits = Float16Bits(d);
    block[0] = uint8_t(bits & 0xff);
    block[1] = uint8_t(bits >> 8);
    for (int j = 0; j < 32; ++j) block[2 + j] = uint8_t(int8_t(std::roundf(xb[j] * id)));
  }
}

float ElementAt(const ConstTensor& t, int64_t offset) {
  switch (t.dtype) {
    case DType::kBF16: return FromBFloat16Bits(static_cast<const uint16_t*>(t.data)[offset]);
    case DType::kF16: return FromFloat16Bits(static_cast<const uint16_t*>(t.data)[offset]);
    case DType::kQ8_0: return DecodeQ8_0ForTest(static_cast<const uint8_t*>(t.data), offset);
    case DType::kQ4_0: return DecodeQ4_0ForTest(static_cast<const uint8_t*>(t.data), offset);
    case DType::kF32: break;
  }
  return static_cast<const float*>(t.data)[offset];
}

namespace {
// Rounds `values` to `type` into bits (bf16 / f16) and keeps the rounded
// values in `values` too (what the reference and MaxErrors read back).
void RoundTo(DType type, std::vector<float>& values, std::vector<uint16_t>& bits) {
  if (type == DType::kF32) return;
  bits.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = type == DType::kBF16 ? BFloat16Bits(values[i]) : Float16Bits(values[i]);
    values[i] = type == DType::kBF16 ? FromBFloat16Bits(bits[i]) : FromFloat16Bits(bits[i]);
  }
}
// A block type (q8_0, q4_0): `values` (whole blocks; padding blocks NaN)
// quantised into `blocks`, the padding blocks given a NaN scale (a kernel
// that reads one fails the comparison), and `values` replaced by what the
// bytes decode to.
void QuantizeTo(DType type, std::vector<float>& values, std::vector<uint8_t>& blocks) {
  const size_t n = values.size(), bytes = size_t(DTypeBlockBytes(type));
  blocks.assign(n / 32 * bytes, 0);
  for (size_t b = 0; b < n / 32; ++b) {
    const bool padding = std::isnan(values[b * 32]);
    uint8_t* block = blocks.data() + b * bytes;
    if (padding) {
      block[0] = 0x00;  // binary16 0x7e00: NaN
      block[1] = 0x7e;
      std::fill(block + 2, block + bytes, uint8_t(0x7f));
      continue;
    }
    QuantizeBlocksForTest(type, values.data() + b * 32, 32, block);
    for (size_t j = 0; j < 32; ++j) {
      values[b * 32 + j] = DecodeBlockForTest(type, blocks.data(), int64_t(b * 32 + j));
    }
  }
}
// The tensor's data: the 16-bit bits when its type is bf16 / f16, the
// blocks for a block type.
void* DataOf(DType type, std::vector<float>& f32, std::vector<uint16_t>& bits,
             std::vector<uint8_t>* blocks = nullptr) {
  if (type == DType::kQ8_0 || type == DType::kQ4_0) return blocks->data();
  return type == DType::kF32 ? static_cast<void*>(f32.data()) : static_cast<void*>(bits.data());
}
}  // namespace

OwnedProblem MakeProblem(const Shape& s) {
  OwnedProblem o;
  o.shape = s;
  const int64_t dv = s.dv ? s.dv : s.d;
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<float> qk(-s.magnitude, s.magnitude);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);

  // Each tensor: [B, H, T, cols] in the chosen layout, rows padded.
  auto layout = [&](int64_t heads, int64_t rows, int64_t cols, std::vector<float>& buf,
                    auto&& fill) {
    const int64_t row_len = cols + s.row_padding;
    buf.assign(size_t(s.batch * heads * rows * row_len), std::nanf(""));  // padding = NaN
    int64_t bs, hs, rs;
    if (s.layout == Layout::kBHTD) {
      rs = row_len; hs = rows * row_len; bs = heads * rows * row_len;
    } else {
      hs = row_len; rs = heads * row_len; bs = rows * heads * row_len;
    }
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) buf[size_t(b * bs + h * hs + r * rs + c)] = fill();
    return std::array<int64_t, 3>{bs, hs, rs};
  };
  const auto qs = layout(s.q_heads, s.tq, s.d, o.q, [&] { return qk(rng); });
  const auto ks = layout(s.kv_heads, s.tk, s.d, o.k, [&] { return qk(rng); });
  const auto vs = layout(s.kv_heads, s.tk, dv, o.v, [&] { return unit(rng); });
  const auto os = layout(s.q_heads, s.tq, dv, o.out, [] { return 0.0f; });
  o.lse.assign(size_t(s.batch * s.q_heads * s.tq), 0.0f);
  RoundTo(s.q_type, o.q, o.q16);
  for (const auto& [type, cols, values, blocks, bits] :
       {std::tuple<DType, int64_t, std::vector<float>*, std::vector<uint8_t>*, std::vector<uint16_t>*>{
            s.k_type, s.d, &o.k, &o.k8, &o.k16},
        {s.v_type, dv, &o.v, &o.v8, &o.v16}}) {
    if (type != DType::kQ8_0 && type != DType::kQ4_0) {
      RoundTo(type, *values, *bits);
      continue;
    }
    // Whole blocks only (the shape's own mistake otherwise, not the kernel's).
    if (cols % 32 != 0 || s.row_padding % 32 != 0) {
      ADD_FAILURE() << "a block-type tensor needs d, dv and row_padding multiples of 32: "
                    << s.Name();
    }
    QuantizeTo(type, *values, *blocks);
  }
  RoundTo(s.out_type, o.out, o.out16);

  Problem& p = o.problem;
  p.batch = s.batch;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.q_len = s.tq;
  p.kv_len = s.tk;
  p.head_dim = s.d;
  if (s.dv) p.value_dim = s.dv;
  p.q = ConstTensor{DataOf(s.q_type, o.q, o.q16), qs[0], qs[1], qs[2], s.q_type};
  p.k = ConstTensor{DataOf(s.k_type, o.k, o.k16, &o.k8), ks[0], ks[1], ks[2], s.k_type};
  p.v = ConstTensor{DataOf(s.v_type, o.v, o.v16, &o.v8), vs[0], vs[1], vs[2], s.v_type};
  p.out = Tensor{DataOf(s.out_type, o.out, o.out16), os[0], os[1], os[2], s.out_type};
  p.lse = LseOutput{o.lse.data(), s.q_heads * s.tq, s.tq, 1};
  p.causal = s.causal;
  if (s.additive_mask) {
    // One [tq, tk] mask broadcast over batch and heads (stride 0), with ~10%
    // -inf entries and the first fully_masked_rows rows entirely -inf.
    o.mask.resize(size_t(s.tq * s.tk));
    std::uniform_real_distribution<float> m(-2.0f, 2.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t j = 0; j < s.tk; ++j) {
        float x = u(rng) < 0.1f ? -std::numeric_limits<float>::infinity() : m(rng);
        if (i < s.fully_masked_rows) x = -std::numeric_limits<float>::infinity();
        o.mask[size_t(i * s.tk + j)] = x;
      }
    p.mask = AdditiveMask{o.mask.data(), 0, 0, s.tk, 1};
  }
  o.ClearOutputs();
  return o;
}

namespace {
double Diff(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) {
    return std::isnan(want) && std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isinf(want) || std::isinf(got)) {
    return got == want ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::fabs(got - want);
}
}  // namespace

Errors MaxErrors(const Problem& p, const reference::Result& ref) {
  Errors e;
  const int64_t dv = p.ValueDim();
  size_t r = 0, l = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t o = b * p.out.batch_stride + h * p.out.head_stride + i * p.out.row_stride;
        for (int64_t c = 0; c < dv; ++c) {
          e.out = std::max(e.out, Diff(ElementAt(p.out, o + c), ref.out[r++]));
        }
        if (p.lse.data) {
          const float got = p.lse.data[b * p.lse.batch_stride + h * p.lse.head_stride +
                                       i * p.lse.row_stride];
          e.lse = std::max(e.lse, Diff(got, ref.lse[l]));
        }
        ++l;
      }
  return e;
}

// The error bound.
//
// Every kernel evaluates the same formula in float32; they differ only in
// summation order (blocked tiles, register accumulators, split-KV merges),
// in folding the scale into Q before the dot product, and in the exp
// (Highway's hn::Exp, <= 1 ULP, vs libm's). To first order each of these
// perturbs the same quantities as the naive kernel's own rounding does
// (the d-term dot products, the T_k-term softmax sum and mix), with a
// comparable magnitude, so the naive kernel's measured error on the very
// same input is the natural yardstick: a kernel may be at most 4x worse.
// The floor of 16 float ULPs of the largest |V| (the output is a convex
// combination of V rows, so |out| <= max|V|) covers inputs where the naive
// kernel happens to be exact (T_k = 1, equal scores, fully masked rows)
// while a reordered sum is off by a few ULPs. For lse the floor is 16 ULPs
// of max(1, |lse|). Bound-tightness is tested in kernels_test.cc (an
// off-by-one key and a 0.1% scale error both exceed it).
Bound BoundFromNaive(const Errors& naive, const Problem& p, const reference::Result& ref) {
  double max_v = 0.0;
  for (double x : ref.out) {
    if (std::isfinite(x)) max_v = std::max(max_v, std::fabs(x));
  }
  // |out| <= max|V|; use the V tensor itself for the floor.
  const int64_t dv = p.ValueDim();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.kv_heads; ++h)
      for (int64_t j = 0; j < p.kv_len; ++j) {
        const int64_t v = b * p.v.batch_stride + h * p.v.head_stride + j * p.v.row_stride;
        for (int64_t c = 0; c < dv; ++c) {
          const float x = ElementAt(p.v, v + c);
          if (std::isfinite(x)) max_v = std::max(max_v, double(std::fabs(x)));
        }
      }
  double max_lse = 1.0;
  for (double x : ref.lse) {
    if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(x));
  }
  Bound b;
  // A bf16 / f16 output is each kernel's float32 result rounded once; two
  // float32 results a few ULPs apart can round to neighbouring values of the
  // output type, one of its ULPs of |out| <= max|V| apart, whatever naive's
  // own error happened to be.
  const double out_ulp = p.out.dtype == DType::kBF16 ? 1.0 / 128
                         : p.out.dtype == DType::kF16 ? 1.0 / 1024
                                                      : 0.0;
  b.out = 4.0 * naive.out + 16.0 * FLT_EPSILON * max_v + out_ulp * max_v;
  b.lse = 4.0 * naive.lse + 16.0 * FLT_EPSILON * max_lse;
  return b;
}

Errors RunAndCompare(OwnedProblem& owned, const reference::Result& ref, const Options& options) {
  owned.ClearOutputs();
  attention(owned.problem, options);
  return MaxErrors(owned.problem, ref);
}

std::vector<std::string> TestTargets() {
  const std::vector<std::string> supported = SupportedTargets();
  const char* env = std::getenv("ATTN_TEST_TARGETS");
  if (env == nullptr || *env == '\0') return supported;
  std::vector<std::string> chosen, removed;
  bool named = false;  // any name without '-'
  std::stringstream names(env);
  for (std::string name; std::getline(names, name, ',');) {
    if (name.empty()) continue;
    const bool remove = name[0] == '-';
    if (remove) name.erase(0, 1);
    named |= !remove;
    // A target to remove need not run here (the same list serves every CPU).
    if (remove) {
      removed.push_back(name);
    } else if (std::find(supported.begin(), supported.end(), name) == supported.end()) {
      ADD_FAILURE() << "ATTN_TEST_TARGETS names " << name << ", which this CPU does not run";
    } else {
      chosen.push_back(name);
    }
  }
  if (!named && !removed.empty()) chosen = supported;  // removals alone: from every target
  for (const std::string& name : removed) {
    chosen.erase(std::remove(chosen.begin(), chosen.end(), name), chosen.end());
  }
  if (chosen.empty()) ADD_FAILURE() << "ATTN_TEST_TARGETS=" << env << " leaves no target to test";
  return chosen;
}

void ExpectVariantsWithinNaiveBound(OwnedProblem& owned, const std::vector<Variant>& variants,
                                    const std::function<void(const std::string&)>& after) {
  const reference::Result ref = reference::Attention(owned.problem);
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Errors naive_err = RunAndCompare(owned, ref, naive);
  const Bound bound = BoundFromNaive(naive_err, owned.problem, ref);
  const std::vector<std::string> targets = TestTargets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    ForceTarget(target);
    for (const Variant& variant : variants) {
      const std::string where = target + " " + variant.name;
      SCOPED_TRACE(where);
      const Errors e = RunAndCompare(owned, ref, variant.options);
      EXPECT_LE(e.out, bound.out) << "naive error " << naive_err.out;
      EXPECT_LE(e.lse, bound.lse) << "naive lse error " << naive_err.lse;
      if (after) after(where);
    }
  }
  ForceTarget("auto");
}

Variant MakeVariant(const std::string& name, KernelId kernel, int threads, Tiles tiles) {
  Options o;
  o.kernel = kernel;
  o.threads = threads;
  o.tiles = tiles;
  return {name, o};
}

std::vector<Variant> KernelVariants(int extra_threads) {
  std::vector<Variant> variants;
  auto add = [&](const std::string& name, KernelId kernel, int threads, Tiles tiles) {
    variants.push_back(MakeVariant(name, kernel, threads, tiles));
  };
  for (const KernelInfo& k : Kernels()) {
    const std::string name = k.name;
    const bool tiled = k.uses_q_block || k.uses_kv_block;
    const Tiles ragged{k.uses_q_block ? 1 : 0, k.uses_kv_block ? 7 : 0, 0};
    add(k.threaded ? name + "/t1" : name, k.id, 1, {});
    if (tiled) add(name + "/ragged", k.id, 1, ragged);
    if (!k.threaded) continue;
    add(name + "/t2", k.id, 2, {});
    if (k.uses_kv_splits) add(name + "/t2/split3/ragged", k.id, 2, {ragged.q_block, 5, 3});
    if (extra_threads > 2) {
      const std::string t = "/t" + std::to_string(extra_threads);
      add(name + t, k.id, extra_threads, {});
      if (k.uses_kv_splits) add(name + t + "/split4", k.id, extra_threads, {0, 0, 4});
    }
  }
  add("auto/t1", KernelId::kAuto, 1, {});
  add("auto/t2", KernelId::kAuto, 2, {});
  return variants;
}

namespace {
// The reference with |V| in place of V (ref(|V|) of the bf16 dot-path
// bound, test_util.h).
reference::Result ReferenceOfAbsV(OwnedProblem& o) {
  std::vector<uint16_t> saved = o.v16;
  for (uint16_t& bits : o.v16) bits &= 0x7FFF;
  reference::Result r = reference::Attention(o.problem);
  o.v16 = saved;
  return r;
}
}  // namespace

Bf16DotBound MakeBf16DotBound(OwnedProblem& o, const reference::Result& ref) {
  Options naive;
  naive.kernel = KernelId::kNaive;
  const Errors naive_err = RunAndCompare(o, ref, naive);
  const Bound b = BoundFromNaive(naive_err, o.problem, ref);
  return {b.out, b.lse, ReferenceOfAbsV(o)};
}

// The first element of o's outputs outside the bound, or "".
std::string FirstBf16DotViolation(const OwnedProblem& o, const reference::Result& ref,
                           const Bf16DotBound& bound) {
  const Problem& p = o.problem;
  const int64_t dv = p.ValueDim();
  size_t r = 0, l = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i, ++l) {
        const int64_t base = b * p.out.batch_stride + h * p.out.head_stride + i * p.out.row_stride;
        for (int64_t c = 0; c < dv; ++c, ++r) {
          const double got = ElementAt(p.out, base + c), want = ref.out[r];
          const double limit = bound.b32 + std::ldexp(bound.abs_v.out[r], -8);
          const bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= limit;
          if (!ok) {
            return "out b" + std::to_string(b) + " h" + std::to_string(h) + " row " +
                   std::to_string(i) + " col " + std::to_string(c) + ": " + std::to_string(got) +
                   " vs reference " + std::to_string(want) + ", bound " + std::to_string(limit);
          }
        }
        if (p.lse.data) {
          const double got = p.lse.data[b * p.lse.batch_stride + h * p.lse.head_stride +
                                        i * p.lse.row_stride];
          const double want = ref.lse[l];
          const bool ok = std::isinf(want) ? got == want : std::fabs(got - want) <= bound.lse;
          if (!ok) {
            return "lse b" + std::to_string(b) + " h" + std::to_string(h) + " row " +
                   std::to_string(i) + ": " + std::to_string(got) + " vs " + std::to_string(want);
          }
        }
      }
  return "";
}

}  // namespace attn::test
