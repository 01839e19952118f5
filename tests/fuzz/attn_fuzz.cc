// libFuzzer harness for attn::attention (issue 7).
//
// Each input decodes into one problem: shapes (batch, GQA heads, T_q, T_k,
// d, d_v), per-tensor layouts ([B,H,T,d] or [B,T,H,d]), row padding and a
// start offset of 0..17 floats (any float alignment), causal mode, additive
// mask (dense, broadcast, column-broadcast), lse (dense, interleaved or
// none), scale (default, 0, negative, tiny, huge, NaN, Inf), values of any
// magnitude (denormal to 3e38) with NaN/+-Inf/-0/extremes injected, tile
// overrides, a SIMD target, a bf16 dot-product path (widen, the emulated
// instruction, or the instruction where this CPU has it; it matters only
// for all-bf16 problems), and sometimes one hostile mutation: a size of
// 0, negative or huge (byte count over int64), a bad stride, a null
// pointer, kv_heads not dividing q_heads, an output overlapping an input
// (or exactly adjacent to it, which is valid), negative threads/tiles.
//
// Buffers are exact-size heap allocations (ASan redzones right after the
// last element the problem may touch), padding holds NaN (a kernel reading
// it would poison its output) and every output buffer a sentinel.
//
// Then every kernel runs (auto, naive, blocked, streaming, parallel with 1
// and 2 threads) and:
//   - invalid problem (tests/oracle.h ValidityViolation, re-derived from the
//     documented rules): attn::Error must be thrown and no byte of any buffer
//     may change;
//   - valid problem: no exception, inputs unchanged, every element outside
//     the outputs unchanged, outputs within oracle::Check of the float64
//     reference (NaN where the reference has NaN, or the infinity float32
//     may keep where float64 underflowed a weight: oracle.h).
// Any violation prints the problem and aborts, which libFuzzer reports as a
// crash; so do ASan/UBSan findings, hangs (-timeout) and leaks.
//
// Build: CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan
//          -DATTN_SANITIZE=address,undefined -DATTN_BUILD_FUZZ=ON
// Run:   build-asan/tests/fuzz/attn-fuzz tests/fuzz/corpus -seed=1 -runs=20000
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/tuning.h"
#include "reference/reference.h"
#include "tests/oracle.h"

namespace {

using namespace attn;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kOutSentinel = -7777.25f;

std::string Describe(const Problem& p) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "B%lld Hq%lld Hkv%lld Tq%lld Tk%lld d%lld dv%lld causal%d scale%s%g mask%s lse%s "
                "q(%lld,%lld,%lld) k(%lld,%lld,%lld) v(%lld,%lld,%lld) out(%lld,%lld,%lld)",
                (long long)p.batch, (long long)p.q_heads, (long long)p.kv_heads,
                (long long)p.q_len, (long long)p.kv_len, (long long)p.head_dim,
                (long long)p.ValueDim(), int(p.causal), p.scale ? "=" : "(default)",
                double(p.Scale()), p.mask.data ? "yes" : "no", p.lse.data ? "yes" : "no",
                (long long)p.q.batch_stride, (long long)p.q.head_stride, (long long)p.q.row_stride,
                (long long)p.k.batch_stride, (long long)p.k.head_stride, (long long)p.k.row_stride,
                (long long)p.v.batch_stride, (long long)p.v.head_stride, (long long)p.v.row_stride,
                (long long)p.out.batch_stride, (long long)p.out.head_stride,
                (long long)p.out.row_stride);
  return buf;
}

// Every element of a tensor, "name[b,h,t] v v v ...", for ATTN_FUZZ_DUMP.
void Dump(const char* name, const void* data, DType type, int64_t B, int64_t H, int64_t T,
          int64_t C, int64_t bs, int64_t hs, int64_t rs, int64_t cs = 1) {
  if (!data) return;
  auto at = [&](int64_t i) {
    const uint16_t* half = static_cast<const uint16_t*>(data);
    return type == DType::kBF16  ? FromBFloat16Bits(half[i])
           : type == DType::kF16 ? FromFloat16Bits(half[i])
                                 : static_cast<const float*>(data)[i];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::fprintf(stderr, "  %s[%lld,%lld,%lld]", name, (long long)b, (long long)h, (long long)t);
        for (int64_t c = 0; c < C; ++c)
          std::fprintf(stderr, " %.9g", double(at(b * bs + h * hs + t * rs + c * cs)));
        std::fprintf(stderr, "\n");
      }
}

[[noreturn]] void Fail(const std::string& what, const Problem& p, const Options& o) {
  std::fprintf(stderr, "attn-fuzz FAILURE: %s\n  problem: %s\n  kernel %s threads %d tiles %d/%d/%d target %s\n",
               what.c_str(), Describe(p).c_str(), KernelName(o.kernel), o.threads, o.tiles.q_block,
               o.tiles.kv_block, o.tiles.kv_splits, CurrentTarget().c_str());
  std::fprintf(stderr, "  dot path %s\n", CurrentDotPath().c_str());
  if (std::getenv("ATTN_FUZZ_DUMP")) {  // the whole problem, to reproduce it
    const int64_t dv = p.ValueDim();
    Dump("q", p.q.data, p.q.dtype, p.batch, p.q_heads, p.q_len, p.head_dim, p.q.batch_stride, p.q.head_stride, p.q.row_stride);
    Dump("k", p.k.data, p.k.dtype, p.batch, p.kv_heads, p.kv_len, p.head_dim, p.k.batch_stride, p.k.head_stride, p.k.row_stride);
    Dump("v", p.v.data, p.v.dtype, p.batch, p.kv_heads, p.kv_len, dv, p.v.batch_stride, p.v.head_stride, p.v.row_stride);
    Dump("mask", p.mask.data, DType::kF32, p.batch, p.q_heads, p.q_len, p.kv_len, p.mask.batch_stride,
         p.mask.head_stride, p.mask.row_stride, p.mask.col_stride);
    Dump("out", p.out.data, p.out.dtype, p.batch, p.q_heads, p.q_len, dv, p.out.batch_stride, p.out.head_stride, p.out.row_stride);
  }
  std::abort();
}

// A value of the chosen magnitude class, sometimes an injected extreme.
float Value(FuzzedDataProvider& in, float magnitude) {
  const uint8_t kind = in.ConsumeIntegral<uint8_t>();
  if (kind < 232) {
    const float unit = float(int(kind) - 116) / 116.0f;  // [-1, 1]
    return unit * magnitude;
  }
  switch (kind % 8) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2: return -kInf;
    case 3: return -0.0f;
    case 4: return std::numeric_limits<float>::denorm_min();
    case 5: return std::numeric_limits<float>::max();
    case 6: return -std::numeric_limits<float>::max();
    default: return std::numeric_limits<float>::min();  // smallest normal
  }
}

float Magnitude(FuzzedDataProvider& in) {
  static const float kMagnitudes[] = {1.0f, 1.0f, 1.0f, 1.0f, 3.0f, 1e-3f, 1e-20f, 1e-39f,
                                      1e3f, 1e15f, 1e19f, 3e38f};
  return kMagnitudes[in.ConsumeIntegralInRange<size_t>(0, sizeof(kMagnitudes) / sizeof(float) - 1)];
}

// One strided tensor in its own exact-size buffer: `offset` floats of
// leading space, then the layout's span. Elements outside the layout hold
// `pad`.
struct Buffer {
  std::vector<float> data;
  int64_t offset = 0;
  std::vector<char> used;  // which elements the layout addresses
  float* base() { return data.data() + offset; }
};

// Strides of [B, H, T, cols] in layout BHTD (0) or BTHD (1), rows padded.
struct Strides {
  int64_t batch, head, row;
};
Strides Layout(int kind, int64_t heads, int64_t rows, int64_t cols, int64_t pad) {
  const int64_t row_len = cols + pad;
  if (kind == 0) return {heads * rows * row_len, rows * row_len, row_len};
  return {rows * heads * row_len, row_len, heads * row_len};
}

int64_t Span(int64_t b, int64_t h, int64_t t, int64_t c, const Strides& s, int64_t col_stride = 1) {
  return (b - 1) * s.batch + (h - 1) * s.head + (t - 1) * s.row + (c - 1) * col_stride + 1;
}

void Allocate(Buffer& buf, int64_t offset, int64_t span, float pad) {
  buf.offset = offset;
  buf.data.assign(size_t(offset + span), pad);
  buf.used.assign(size_t(offset + span), 0);
}

template <typename Fn>
void ForEach(int64_t B, int64_t H, int64_t T, int64_t C, const Strides& s, int64_t col_stride,
             Fn&& fn) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) fn(b * s.batch + h * s.head + t * s.row + c * col_stride);
}

struct Decoded {
  Problem p;
  Buffer q, k, v, out, mask, lse;
  std::vector<float> arena;  // backing store for aliasing mutations
  int64_t arena_input = 0;   // floats of the moved input at the arena's start
  bool honest = true;        // every buffer holds the declared layout
  std::string mutation;
};

std::vector<Options> KernelRuns(FuzzedDataProvider& in) {
  Tiles t;
  if (in.ConsumeBool()) {
    t.q_block = in.ConsumeIntegralInRange<int>(0, 70);
    t.kv_block = in.ConsumeIntegralInRange<int>(0, 150);
    t.kv_splits = in.ConsumeIntegralInRange<int>(0, 6);
  }
  std::vector<Options> runs;
  auto add = [&](KernelId k, int threads) {
    Options o;
    o.kernel = k;
    o.threads = threads;
    o.tiles = t;
    runs.push_back(o);
  };
  // auto, and every kernel of the table (threaded ones on 1 and 2 threads).
  add(KernelId::kAuto, 0);
  for (const KernelInfo& k : Kernels()) {
    add(k.id, 1);
    if (k.threaded) add(k.id, 2);
  }
  return runs;
}

void Decode(FuzzedDataProvider& in, Decoded& x) {
  Problem& p = x.p;
  p.batch = in.ConsumeIntegralInRange<int64_t>(1, 2);
  p.kv_heads = in.ConsumeIntegralInRange<int64_t>(1, 2);
  p.q_heads = p.kv_heads * in.ConsumeIntegralInRange<int64_t>(1, 2);
  p.q_len = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 24 : 80);
  p.kv_len = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 40 : 160);
  p.head_dim = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 20 : 70);
  if (in.ConsumeBool()) p.value_dim = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t dv = p.ValueDim();
  p.causal = static_cast<Causal>(in.ConsumeIntegralInRange<int>(0, 2));

  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: p.scale = 0.0f; break;
    case 1: p.scale = -in.ConsumeFloatingPointInRange<float>(0.0f, 10.0f); break;
    case 2: p.scale = 1e-30f; break;
    case 3: p.scale = 1e20f; break;
    case 4: p.scale = in.ConsumeFloatingPointInRange<float>(-100.0f, 100.0f); break;
    case 5: p.scale = std::numeric_limits<float>::denorm_min(); break;
    default: break;  // 1/sqrt(d)
  }

  auto tensor = [&](Buffer& buf, int64_t heads, int64_t rows, int64_t cols, float magnitude,
                    float pad, bool fill) {
    const int kind = in.ConsumeIntegralInRange<int>(0, 1);
    const int64_t padding = in.ConsumeIntegralInRange<int64_t>(0, 3);
    const int64_t offset = in.ConsumeIntegralInRange<int64_t>(0, 17);
    const Strides s = Layout(kind, heads, rows, cols, padding);
    Allocate(buf, offset, Span(p.batch, heads, rows, cols, s), pad);
    ForEach(p.batch, heads, rows, cols, s, 1, [&](int64_t e) {
      buf.used[size_t(offset + e)] = 1;
      if (fill) buf.data[size_t(offset + e)] = Value(in, magnitude);
    });
    return s;
  };
  const Strides qs = tensor(x.q, p.q_heads, p.q_len, p.head_dim, Magnitude(in), kNaN, true);
  const Strides ks = tensor(x.k, p.kv_heads, p.kv_len, p.head_dim, Magnitude(in), kNaN, true);
  const Strides vs = tensor(x.v, p.kv_heads, p.kv_len, dv, Magnitude(in), kNaN, true);
  const Strides os = tensor(x.out, p.q_heads, p.q_len, dv, 0.0f, kOutSentinel, false);
  for (float& f : x.out.data) f = kOutSentinel;
  p.q = ConstTensor{x.q.base(), qs.batch, qs.head, qs.row};
  p.k = ConstTensor{x.k.base(), ks.batch, ks.head, ks.row};
  p.v = ConstTensor{x.v.base(), vs.batch, vs.head, vs.row};
  p.out = Tensor{x.out.base(), os.batch, os.head, os.row};

  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 1: {  // dense per (b, h)
      const Strides s = Layout(0, p.q_heads, p.q_len, p.kv_len, 0);
      Allocate(x.mask, in.ConsumeIntegralInRange<int64_t>(0, 5),
               Span(p.batch, p.q_heads, p.q_len, p.kv_len, s), kNaN);
      const float m = Magnitude(in);
      ForEach(p.batch, p.q_heads, p.q_len, p.kv_len, s, 1, [&](int64_t e) {
        x.mask.used[size_t(x.mask.offset + e)] = 1;
        const uint8_t r = in.ConsumeIntegral<uint8_t>();
        x.mask.data[size_t(x.mask.offset + e)] = r < 40 ? -kInf : Value(in, m);
      });
      p.mask = AdditiveMask{x.mask.base(), s.batch, s.head, s.row, 1};
      break;
    }
    case 2:    // one [T_q, T_k] mask for every batch and head
    case 3: {  // or one column per row, broadcast over keys (col stride 0)
      const bool cols = in.ConsumeBool();
      const int64_t width = cols ? 1 : p.kv_len;
      Allocate(x.mask, in.ConsumeIntegralInRange<int64_t>(0, 5), p.q_len * width, kNaN);
      for (int64_t e = 0; e < p.q_len * width; ++e) {
        x.mask.used[size_t(x.mask.offset + e)] = 1;
        const uint8_t r = in.ConsumeIntegral<uint8_t>();
        x.mask.data[size_t(x.mask.offset + e)] = r < 50 ? -kInf : Value(in, 2.0f);
      }
      p.mask = AdditiveMask{x.mask.base(), 0, 0, width, cols ? 0 : 1};
      break;
    }
    default: break;
  }
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 1: {  // dense [B, H, T]
      const int64_t n = p.batch * p.q_heads * p.q_len;
      Allocate(x.lse, in.ConsumeIntegralInRange<int64_t>(0, 3), n, kOutSentinel);
      for (int64_t e = 0; e < n; ++e) x.lse.used[size_t(x.lse.offset + e)] = 1;
      p.lse = LseOutput{x.lse.base(), p.q_heads * p.q_len, p.q_len, 1};
      break;
    }
    case 2: {  // [B, T, H] with a gap after every row
      const int64_t n = p.batch * p.q_len * (p.q_heads + 1);
      Allocate(x.lse, 0, n, kOutSentinel);
      const LseOutput l{x.lse.base(), p.q_len * (p.q_heads + 1), 1, p.q_heads + 1};
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.q_heads; ++h)
          for (int64_t i = 0; i < p.q_len; ++i)
            x.lse.used[size_t(b * l.batch_stride + h * l.head_stride + i * l.row_stride)] = 1;
      p.lse = l;
      break;
    }
    default: break;
  }
}

// One hostile mutation (or none). Sizes made huge leave the buffers
// dishonest: such problems are only run when they must be rejected.
void Mutate(FuzzedDataProvider& in, Decoded& x, Options* options) {
  Problem& p = x.p;
  static const int64_t kHuge[] = {int64_t{1} << 31, int64_t{1} << 40, int64_t{1} << 61,
                                  (int64_t{1} << 62) + 3, std::numeric_limits<int64_t>::max()};
  const int64_t huge = kHuge[in.ConsumeIntegralInRange<size_t>(0, 4)];
  const int64_t small_bad = in.ConsumeIntegralInRange<int64_t>(-3, 0);
  const int which = in.ConsumeIntegralInRange<int>(0, 63);
  auto size = [&](int64_t& field, const char* name) {
    if (in.ConsumeBool()) {
      field = small_bad;
    } else {
      field = huge;
      x.honest = false;
    }
    x.mutation = name;
  };
  switch (which) {
    case 0: size(p.batch, "batch"); break;
    case 1: size(p.q_heads, "q_heads"); break;
    case 2: size(p.kv_heads, "kv_heads"); break;
    case 3: size(p.q_len, "q_len"); break;
    case 4: size(p.kv_len, "kv_len"); break;
    case 5: size(p.head_dim, "head_dim"); break;
    case 6: {
      int64_t dv = p.ValueDim();
      size(dv, "value_dim");
      p.value_dim = dv;
      break;
    }
    case 7: p.kv_heads = p.q_heads + 1; x.mutation = "kv_heads > q_heads"; break;
    case 8: p.scale = in.ConsumeBool() ? kNaN : (in.ConsumeBool() ? kInf : -kInf); x.mutation = "scale"; break;
    case 9: p.q.data = nullptr; x.mutation = "q null"; break;
    case 10: p.k.data = nullptr; x.mutation = "k null"; break;
    case 11: p.v.data = nullptr; x.mutation = "v null"; break;
    case 12: p.out.data = nullptr; x.mutation = "out null"; break;
    case 13: p.q.row_stride = in.ConsumeIntegralInRange<int64_t>(-2, p.head_dim - 1); x.mutation = "q.row_stride"; break;
    case 14: p.v.head_stride = -1 - in.ConsumeIntegralInRange<int64_t>(0, 9); x.mutation = "v.head_stride"; break;
    case 15: p.out.head_stride = 0; x.mutation = "out.head_stride 0"; break;
    case 16: p.out.batch_stride = 0; x.mutation = "out.batch_stride 0"; break;
    case 17: p.out.row_stride = in.ConsumeIntegralInRange<int64_t>(0, p.ValueDim() - 1); x.mutation = "out.row_stride"; break;
    case 18:
      if (p.lse.data) { p.lse.row_stride = 0; x.mutation = "lse.row_stride 0"; }
      break;
    case 19:
      if (p.mask.data) { p.mask.col_stride = -1; x.mutation = "mask.col_stride"; }
      break;
    case 20: p.k.batch_stride = std::numeric_limits<int64_t>::max() / 2 + 1; x.honest = false; x.mutation = "k.batch_stride huge"; break;
    case 21: options->threads = -1; x.mutation = "threads"; break;
    case 22: options->tiles.kv_block = -1; x.mutation = "tiles.kv_block"; break;
    case 23: options->tiles.kv_splits = -2; x.mutation = "tiles.kv_splits"; break;
    case 24:
    case 25:
    case 26:
    case 27: {
      // An output inside (or exactly after) an input: both in one arena.
      const int src = which - 24;  // q, k, v, mask
      const float* from = src == 0   ? static_cast<const float*>(p.q.data)
                          : src == 1 ? static_cast<const float*>(p.k.data)
                          : src == 2 ? static_cast<const float*>(p.v.data)
                                     : p.mask.data;
      const Buffer& buf = src == 0 ? x.q : src == 1 ? x.k : src == 2 ? x.v : x.mask;
      if (!from) break;
      const bool lse = p.lse.data && in.ConsumeBool();
      Buffer& w = lse ? x.lse : x.out;
      const int64_t in_span = int64_t(buf.data.size()) - buf.offset;
      const bool adjacent = in.ConsumeIntegralInRange<int>(0, 3) == 0;
      const int64_t shift = adjacent ? in_span : in.ConsumeIntegralInRange<int64_t>(0, in_span - 1);
      const int64_t w_span = int64_t(w.data.size()) - w.offset;
      x.arena.assign(size_t(std::max(in_span, shift + w_span)), 0.0f);
      x.arena_input = in_span;
      std::memcpy(x.arena.data(), from, size_t(in_span) * sizeof(float));
      float* moved_in = x.arena.data();
      float* moved_w = x.arena.data() + shift;
      std::memcpy(moved_w, w.data.data() + w.offset, size_t(w_span) * sizeof(float));
      if (src == 0) p.q.data = moved_in;
      if (src == 1) p.k.data = moved_in;
      if (src == 2) p.v.data = moved_in;
      if (src == 3) p.mask.data = moved_in;
      if (lse) p.lse.data = moved_w; else p.out.data = moved_w;
      x.mutation = std::string(lse ? "lse" : "out") + (adjacent ? " adjacent to " : " overlapping ") +
                   (src == 0 ? "q" : src == 1 ? "k" : src == 2 ? "v" : "mask");
      break;
    }
    default: break;  // most inputs: no mutation
  }
}

bool SameBytes(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Element types (issue 15): the problem once more with Q, K, V and O each
// f32, bf16 or f16 as the input picks (`combo` in [1, 80], base 3), every
// 16-bit tensor holding the fuzzed values rounded to its type in the same
// layout (padding stays NaN), against the reference on those values, with
// every kernel run; nothing outside the output tensor is written.
void CheckElementTypes(Decoded& x, int combo, const std::vector<Options>& runs) {
  static constexpr DType kTypes[3] = {DType::kF32, DType::kBF16, DType::kF16};
  const DType q_type = kTypes[combo % 3], k_type = kTypes[combo / 3 % 3],
              v_type = kTypes[combo / 9 % 3], out_type = kTypes[combo / 27 % 3];
  auto bits = [](DType t, float f) {
    return t == DType::kBF16 ? BFloat16Bits(f) : Float16Bits(f);
  };
  // A 16-bit copy of a buffer (same element offsets), or none for f32.
  auto narrow = [&](const Buffer& b, DType t) {
    std::vector<uint16_t> copy;
    if (t == DType::kF32) return copy;
    copy.resize(b.data.size());
    for (size_t i = 0; i < b.data.size(); ++i) copy[i] = bits(t, b.data[i]);
    return copy;
  };
  std::vector<uint16_t> q16 = narrow(x.q, q_type), k16 = narrow(x.k, k_type),
                        v16 = narrow(x.v, v_type);
  const uint16_t sentinel = out_type == DType::kF32 ? 0 : bits(out_type, kOutSentinel);
  std::vector<uint16_t> out16(out_type == DType::kF32 ? 0 : x.out.data.size(), sentinel);
  Problem p = x.p;
  auto point = [](auto& tensor, DType t, std::vector<uint16_t>& copy, int64_t offset) {
    if (t == DType::kF32) return;
    tensor.data = copy.data() + offset;
    tensor.dtype = t;
  };
  point(p.q, q_type, q16, x.q.offset);
  point(p.k, k_type, k16, x.k.offset);
  point(p.v, v_type, v16, x.v.offset);
  point(p.out, out_type, out16, x.out.offset);
  const std::vector<uint16_t> q0 = q16, k0 = k16, v0 = v16;
  const reference::Result ref = reference::Attention(p);
  const std::string types = std::string(" (q ") + DTypeName(q_type) + ", k " + DTypeName(k_type) +
                            ", v " + DTypeName(v_type) + ", out " + DTypeName(out_type) + ")";
  for (const Options& o : runs) {
    std::fill(x.out.data.begin(), x.out.data.end(), kOutSentinel);
    std::fill(out16.begin(), out16.end(), sentinel);
    try {
      attention(p, o);
    } catch (const std::exception& e) {
      Fail(std::string("valid problem threw: ") + e.what() + types, p, o);
    }
    const std::string why = attn::oracle::Check(p, ref);
    if (!why.empty()) Fail("wrong result: " + why + types, p, o);
    if (q16 != q0 || k16 != k0 || v16 != v0) Fail("a 16-bit input changed" + types, p, o);
    for (size_t i = 0; i < out16.size(); ++i) {
      if (!x.out.used[i] && out16[i] != sentinel) {
        Fail("16-bit out written outside its tensor at element " + std::to_string(i) + types, p, o);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No tuning table: `auto` follows the default rule, whatever the machine
  // has cached.
  setenv("ATTN_TUNING_FILE", "", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // The target: an index into CompiledTargets(), the same list on every CPU
  // for one build (AVX3 AVX2 SSE4 SSSE3 EMU128 on x86; CI's ASan build
  // leaves out SSSE3), so that an input (a corpus file, a crash reproducer)
  // runs the same target wherever that CPU has it; an
  // index into SupportedTargets() (4 entries on AVX2, 5 on AVX-512) would
  // pick different ones. A target this CPU lacks falls back to "auto", the
  // best it supports, so the input still runs, deterministically.
  const std::vector<std::string> compiled = CompiledTargets();
  const std::vector<std::string> supported = SupportedTargets();
  const std::string& target = compiled[in.ConsumeIntegralInRange<size_t>(0, compiled.size() - 1)];
  const bool here = std::find(supported.begin(), supported.end(), target) != supported.end();
  ForceTarget(here ? target : "auto");
  // The dot path from a hash of the whole input, not from its bytes, so the
  // corpus decodes into the same problems as before the paths existed:
  // widen, an emulated instruction layer, or the instruction (its emulated
  // layer where this CPU or target cannot run it: the same kernel code).
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  const std::vector<std::string> paths = SupportedDotPaths();
  const char* const kPaths[] = {"widen", "avx512bf16-emulated", "avx512bf16", "amx-emulated",
                                "amx"};
  const std::string path = kPaths[hash % 5];
  const bool path_runs = std::find(paths.begin(), paths.end(), path) != paths.end();
  ForceDotPath(path_runs ? path : path.find("amx") == 0 ? "amx-emulated" : "avx512bf16-emulated");
  struct RestoreDefaults {
    ~RestoreDefaults() {
      ForceDotPath("auto");
      ForceTarget("auto");
    }
  } restore;

  Decoded x;
  std::vector<Options> runs = KernelRuns(in);
  Decode(in, x);
  Options mutation_options = runs[0];
  Mutate(in, x, &mutation_options);
  Problem& p = x.p;
  const bool options_mutated = mutation_options.threads != runs[0].threads ||
                               mutation_options.tiles.kv_block != runs[0].tiles.kv_block ||
                               mutation_options.tiles.kv_splits != runs[0].tiles.kv_splits;
  if (options_mutated) {
    for (Options& o : runs) {
      o.threads = mutation_options.threads < 0 ? mutation_options.threads : o.threads;
      o.tiles.kv_block = mutation_options.tiles.kv_block;
      o.tiles.kv_splits = mutation_options.tiles.kv_splits;
    }
  }
  const std::string invalid = attn::oracle::ValidityViolation(p, runs[0]);
  if (invalid.empty() && !x.honest) return 0;  // would read past real buffers

  // Snapshot every byte the call may not change.
  std::vector<std::vector<float>*> all = {&x.q.data, &x.k.data, &x.v.data, &x.mask.data,
                                          &x.arena};
  std::vector<std::vector<float>> inputs;
  for (auto* b : all) inputs.push_back(*b);

  if (!invalid.empty()) {
    const std::vector<float> out0 = x.out.data, lse0 = x.lse.data;
    for (const Options& o : runs) {
      try {
        attention(p, o);
        Fail("invalid problem (" + invalid + ", mutation " + x.mutation + ") was accepted", p, o);
      } catch (const Error& e) {
        // The error names a field; for a rejected overlap it is the output.
        if (e.field().empty()) Fail("attn::Error without a field", p, o);
      } catch (const std::exception& e) {
        Fail(std::string("invalid problem threw a non-attn exception: ") + e.what(), p, o);
      }
      for (size_t i = 0; i < all.size(); ++i) {
        if (!SameBytes(all[i]->data(), inputs[i].data(), inputs[i].size())) {
          Fail("a rejected call wrote into a buffer", p, o);
        }
      }
      if (!SameBytes(x.out.data.data(), out0.data(), out0.size()) ||
          !SameBytes(x.lse.data.data(), lse0.data(), lse0.size())) {
        Fail("a rejected call wrote its outputs", p, o);
      }
    }
    ForceTarget("auto");
    return 0;
  }

  const reference::Result ref = reference::Attention(p);
  // The output tensors as the problem sees them (they may live in the arena).
  float* out_base = static_cast<float*>(p.out.data);
  const size_t out_len = x.out.data.size() - size_t(x.out.offset);
  for (const Options& o : runs) {
    // Reset the outputs to the sentinel, wherever they live.
    for (size_t i = 0; i < out_len; ++i) out_base[i] = kOutSentinel;
    if (p.lse.data) {
      for (size_t i = 0; i < x.lse.data.size() - size_t(x.lse.offset); ++i) p.lse.data[i] = kOutSentinel;
    }
    try {
      attention(p, o);
    } catch (const std::exception& e) {
      Fail(std::string("valid problem threw: ") + e.what(), p, o);
    }
    const std::string why = attn::oracle::Check(p, ref);
    if (!why.empty()) Fail("wrong result: " + why, p, o);
    for (size_t i = 0; i < all.size(); ++i) {
      // The arena holds an output after its moved input: compare the input.
      const size_t n = all[i] == &x.arena ? size_t(x.arena_input) : inputs[i].size();
      if (!SameBytes(all[i]->data(), inputs[i].data(), n)) Fail("an input buffer changed", p, o);
    }
    // Outside the addressed elements, the outputs' buffers are untouched.
    for (size_t i = 0; i < out_len; ++i) {
      if (!x.out.used[size_t(x.out.offset) + i] && !(out_base[i] == kOutSentinel)) {
        Fail("out written outside its tensor at element " + std::to_string(i), p, o);
      }
    }
    if (p.lse.data) {
      for (size_t i = 0; i < x.lse.data.size() - size_t(x.lse.offset); ++i) {
        if (!x.lse.used[size_t(x.lse.offset) + i] && !(p.lse.data[i] == kOutSentinel)) {
          Fail("lse written outside its tensor at element " + std::to_string(i), p, o);
        }
      }
    }
  }
  const int combo = in.ConsumeIntegralInRange<int>(0, 80);  // 0: float32 only
  if (combo != 0 && x.mutation.empty()) CheckElementTypes(x, combo, runs);
  ForceTarget("auto");
  return 0;
}
