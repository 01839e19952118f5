// Invalid input: every invalid field of attn::Problem / attn::Options (and
// the name-parsing entry points) throws attn::Error naming the field and the
// bad value, before anything is written: out, lse and every input buffer are
// compared bit for bit with a snapshot taken before the call. Valid edge
// cases (scale 0, negative scale, T = 1, d = 1, broadcast input strides)
// must not throw and must match the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "hwy/targets.h"
#include "reference/reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

constexpr float kSentinel = -12345.5f;

const std::vector<KernelId>& AllKernels() {
  static const std::vector<KernelId> kernels = [] {  // auto and every kernel of the table
    std::vector<KernelId> ids{KernelId::kAuto};
    for (const KernelInfo& k : Kernels()) ids.push_back(k.id);
    return ids;
  }();
  return kernels;
}

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A valid problem with its own buffers: batch 2, 2 query heads sharing one
// KV head, T_q 3, T_k 5, d 4, d_v 3, with lse. `arena` is spare memory for
// tests that alias tensors.
struct Buffers {
  static constexpr int64_t kB = 2, kHq = 2, kHkv = 1, kTq = 3, kTk = 5, kD = 4, kDv = 3;
  std::vector<float> q, k, v, out, lse, arena;
  Problem p;

  Buffers() {
    q.resize(kB * kHq * kTq * kD);
    k.resize(kB * kHkv * kTk * kD);
    v.resize(kB * kHkv * kTk * kDv);
    out.assign(kB * kHq * kTq * kDv, kSentinel);
    lse.assign(kB * kHq * kTq, kSentinel);
    arena.assign(1024, kSentinel);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * float(i % 17) - 0.05f;
    for (size_t i = 0; i < k.size(); ++i) k[i] = 0.02f * float(i % 13) - 0.1f;
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float(i % 7);
    p.batch = kB;
    p.q_heads = kHq;
    p.kv_heads = kHkv;
    p.q_len = kTq;
    p.kv_len = kTk;
    p.head_dim = kD;
    p.value_dim = kDv;
    p.q = DenseBHTD(q.data(), kHq, kTq, kD);
    p.k = DenseBHTD(k.data(), kHkv, kTk, kD);
    p.v = DenseBHTD(v.data(), kHkv, kTk, kDv);
    p.out = DenseBHTD(out.data(), kHq, kTq, kDv);
    p.lse = LseOutput{lse.data(), kHq * kTq, kTq, 1};
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  std::vector<std::vector<float>*> All() { return {&q, &k, &v, &out, &lse, &arena}; }
};

// Byte snapshot of every buffer (NaN-safe comparison).
std::vector<std::vector<unsigned char>> Snapshot(Buffers& b) {
  std::vector<std::vector<unsigned char>> s;
  for (std::vector<float>* buf : b.All()) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(buf->data());
    s.emplace_back(bytes, bytes + buf->size() * sizeof(float));
  }
  return s;
}

void ExpectUntouched(Buffers& b, const std::vector<std::vector<unsigned char>>& before) {
  const char* names[] = {"q", "k", "v", "out", "lse", "arena"};
  std::vector<std::vector<float>*> all = b.All();
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(all[i]->size() * sizeof(float), before[i].size());
    EXPECT_EQ(std::memcmp(all[i]->data(), before[i].data(), before[i].size()), 0)
        << "buffer " << names[i] << " was written";
  }
  // And explicitly: every output element still holds the sentinel.
  for (float x : b.out) ASSERT_EQ(x, kSentinel);
  for (float x : b.lse) ASSERT_EQ(x, kSentinel);
}

// What a rejection must look like. `value` must equal Error::value() unless
// value_is_substring, in which case value() must contain it. what() must
// contain the field name and the value (case-insensitively for nan/inf).
struct Expected {
  std::string field;
  std::string value;
  bool value_is_substring = false;
};

void CheckError(const Error& e, const Expected& x) {
  const std::string what = e.what();
  EXPECT_EQ(e.field(), x.field) << what;
  if (x.value_is_substring) {
    EXPECT_NE(Lower(e.value()).find(Lower(x.value)), std::string::npos)
        << "value '" << e.value() << "' lacks '" << x.value << "'; " << what;
  } else {
    EXPECT_EQ(Lower(e.value()), Lower(x.value)) << what;
  }
  EXPECT_NE(what.find(x.field), std::string::npos) << "what() lacks the field: " << what;
  EXPECT_NE(what.find(e.value()), std::string::npos) << "what() lacks the value: " << what;
  EXPECT_NE(Lower(what).find(Lower(x.value)), std::string::npos)
      << "what() lacks '" << x.value << "': " << what;
}

// Calls fn, which must throw attn::Error as described.
void ExpectError(const std::function<void()>& fn, const Expected& x) {
  try {
    fn();
    ADD_FAILURE() << "no attn::Error thrown (expected field " << x.field << ")";
  } catch (const Error& e) {
    CheckError(e, x);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected attn::Error for " << x.field << ", got another exception: "
                  << e.what();
  }
}

// attention(problem, options) must be rejected as described, with every
// kernel (unless the options' kernel is the point of the test) and without
// writing to any buffer.
void ExpectRejected(Buffers& b, const Problem& p, const Expected& x, Options o = {},
                    bool every_kernel = true) {
  const auto before = Snapshot(b);
  std::vector<KernelId> kernels = every_kernel ? AllKernels() : std::vector<KernelId>{o.kernel};
  for (KernelId kernel : kernels) {
    SCOPED_TRACE(std::string("kernel ") + KernelName(kernel));
    o.kernel = kernel;
    ExpectError([&] { attention(p, o); }, x);
    ExpectUntouched(b, before);
  }
}

// ---- Problem sizes ---------------------------------------------------------

TEST(Errors, ValidProblemIsAccepted) {
  // The baseline every test below breaks in exactly one field.
  Buffers b;
  const reference::Result ref = reference::Attention(b.p);
  for (KernelId kernel : AllKernels()) {
    SCOPED_TRACE(KernelName(kernel));
    Options o;
    o.kernel = kernel;
    EXPECT_NO_THROW(attention(b.p, o));
    const test::Errors e = test::MaxErrors(b.p, ref);
    EXPECT_LE(e.out, 1e-5);
    EXPECT_LE(e.lse, 1e-5);
  }
}

TEST(Errors, SizesMustBePositive) {
  struct Case {
    const char* field;
    int64_t Problem::*member;
  };
  const Case cases[] = {{"batch", &Problem::batch},       {"q_heads", &Problem::q_heads},
                        {"kv_heads", &Problem::kv_heads}, {"q_len", &Problem::q_len},
                        {"kv_len", &Problem::kv_len},     {"head_dim", &Problem::head_dim}};
  for (const Case& c : cases) {
    for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{-7}, std::numeric_limits<int64_t>::min()}) {
      SCOPED_TRACE(std::string(c.field) + " = " + std::to_string(bad));
      Buffers b;
      Problem p = b.p;
      p.*c.member = bad;
      if (c.member == &Problem::q_heads) p.kv_heads = 1;  // so kv_heads still divides
      ExpectRejected(b, p, {c.field, std::to_string(bad)});
    }
  }
  for (int64_t bad : {int64_t{0}, int64_t{-1}}) {
    Buffers b;
    Problem p = b.p;
    p.value_dim = bad;
    ExpectRejected(b, p, {"value_dim", std::to_string(bad)});
  }
}

TEST(Errors, KvHeadsMustDivideQHeads) {
  Buffers b;
  Problem p = b.p;
  p.q_heads = 3;
  p.kv_heads = 2;
  ExpectRejected(b, p, {"kv_heads", "2"});
  try {
    attention(p);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_heads (3)"), std::string::npos) << e.what();
  }
  p.q_heads = 2;
  p.kv_heads = 4;  // more KV heads than query heads
  ExpectRejected(b, p, {"kv_heads", "4"});
}

// ---- Tensors ---------------------------------------------------------------

TEST(Errors, NullDataIsRejected) {
  for (const char* name : {"q", "k", "v", "out"}) {
    SCOPED_TRACE(name);
    Buffers b;
    Problem p = b.p;
    const std::string n = name;
    if (n == "q") p.q.data = nullptr;
    if (n == "k") p.k.data = nullptr;
    if (n == "v") p.v.data = nullptr;
    if (n == "out") p.out.data = nullptr;
    ExpectRejected(b, p, {n + ".data", "null"});
  }
}

// Pointers to the three strides of each tensor, by name.
struct StrideRef {
  std::string field;
  int64_t* stride;
};
std::vector<StrideRef> Strides(Problem& p) {
  return {{"q.batch_stride", &p.q.batch_stride},
          {"q.head_stride", &p.q.head_stride},
          {"q.row_stride", &p.q.row_stride},
          {"k.batch_stride", &p.k.batch_stride},
          {"k.head_stride", &p.k.head_stride},
          {"k.row_stride", &p.k.row_stride},
          {"v.batch_stride", &p.v.batch_stride},
          {"v.head_stride", &p.v.head_stride},
          {"v.row_stride", &p.v.row_stride},
          {"out.batch_stride", &p.out.batch_stride},
          {"out.head_stride", &p.out.head_stride},
          {"out.row_stride", &p.out.row_stride},
          {"lse.batch_stride", &p.lse.batch_stride},
          {"lse.head_stride", &p.lse.head_stride},
          {"lse.row_stride", &p.lse.row_stride}};
}

TEST(Errors, NegativeStridesAreRejected) {
  Buffers b;
  Problem probe = b.p;
  const size_t n = Strides(probe).size();
  for (size_t i = 0; i < n; ++i) {
    for (int64_t bad : {int64_t{-1}, int64_t{-1000}}) {
      Problem p = b.p;
      StrideRef s = Strides(p)[i];
      SCOPED_TRACE(s.field + " = " + std::to_string(bad));
      *s.stride = bad;
      ExpectRejected(b, p, {s.field, std::to_string(bad)});
    }
  }
}

TEST(Errors, NegativeMaskStridesAreRejected) {
  Buffers b;
  std::vector<float> mask(Buffers::kTq * Buffers::kTk, 0.0f);
  b.p.mask = AdditiveMask{mask.data(), 0, 0, Buffers::kTk, 1};
  for (const char* field : {"mask.batch_stride", "mask.head_stride", "mask.row_stride",
                            "mask.col_stride"}) {
    SCOPED_TRACE(field);
    Problem p = b.p;
    const std::string f = field;
    if (f == "mask.batch_stride") p.mask.batch_stride = -1;
    if (f == "mask.head_stride") p.mask.head_stride = -1;
    if (f == "mask.row_stride") p.mask.row_stride = -1;
    if (f == "mask.col_stride") p.mask.col_stride = -1;
    ExpectRejected(b, p, {f, "-1"});
  }
}

TEST(Errors, RowStrideShorterThanTheRowIsRejected) {
  {
    Buffers b;
    Problem p = b.p;
    p.q.row_stride = Buffers::kD - 1;  // rows of 4 floats 3 apart
    ExpectRejected(b, p, {"q.row_stride", "3"});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.k.row_stride = 1;
    ExpectRejected(b, p, {"k.row_stride", "1"});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.v.row_stride = Buffers::kDv - 1;
    ExpectRejected(b, p, {"v.row_stride", "2"});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.out.row_stride = Buffers::kDv - 1;
    ExpectRejected(b, p, {"out.row_stride", "2"});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.out.row_stride = 0;  // every query row onto the same output row
    ExpectRejected(b, p, {"out.row_stride", "0"});
  }
  // The message names the row length.
  Buffers b;
  Problem p = b.p;
  p.q.row_stride = 3;
  try {
    attention(p);
    ADD_FAILURE() << "not rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4"), std::string::npos) << e.what();
  }
}

TEST(Errors, SelfOverlappingOutputStridesAreRejected) {
  {
    Buffers b;
    Problem p = b.p;
    p.out.head_stride = 0;  // both query heads write the same rows
    ExpectRejected(b, p, {"out", "strides", true});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.out.batch_stride = 0;  // both batches write the same heads
    ExpectRejected(b, p, {"out", "strides", true});
  }
  {
    Buffers b;
    Problem p = b.p;
    // batch 1 / head 0 lands on batch 0 / head 1.
    p.out.batch_stride = p.out.head_stride;
    ExpectRejected(b, p, {"out", "strides", true});
  }
  {
    Buffers b;
    Problem p = b.p;
    // Rows of 3 at stride 3, heads 2 rows apart: head 1 row 0 = head 0 row 2.
    p.out.head_stride = 2 * Buffers::kDv;
    p.out.batch_stride = 2 * p.out.head_stride + Buffers::kTq * Buffers::kDv;
    ExpectRejected(b, p, {"out", "strides", true});
  }
  {
    Buffers b;
    Problem p = b.p;
    p.lse.head_stride = 0;  // two heads' lse in one element
    ExpectRejected(b, p, {"lse", "strides", true});
  }
}

TEST(Errors, OutputsOverlappingOtherTensorsAreRejected) {
  {  // out overlapping q: q and out in one arena, out starting inside q.
    Buffers b;
    Problem p = b.p;
    std::copy(b.q.begin(), b.q.end(), b.arena.begin());
    p.q.data = b.arena.data();
    p.out.data = b.arena.data() + b.q.size() - 1;  // shares q's last element
    ExpectRejected(b, p, {"out", "memory overlapping q", false});
  }
  {  // out overlapping k and v
    Buffers b;
    Problem p = b.p;
    p.out.data = b.k.data();
    ExpectRejected(b, p, {"out", "memory overlapping k", false});
    p = b.p;
    p.out.data = b.v.data() + 1;
    ExpectRejected(b, p, {"out", "memory overlapping v", false});
  }
  {  // lse overlapping out: the pair is reported by whichever of the two
     // outputs is checked first, with the other one named in the value.
    Buffers b;
    Problem p = b.p;
    p.lse.data = b.out.data() + b.out.size() - 2;
    const auto before = Snapshot(b);
    for (KernelId kernel : AllKernels()) {
      Options o;
      o.kernel = kernel;
      try {
        attention(p, o);
        ADD_FAILURE() << "lse overlapping out not rejected";
      } catch (const Error& e) {
        const std::string other = e.field() == "out" ? "lse" : "out";
        EXPECT_TRUE(e.field() == "out" || e.field() == "lse") << e.what();
        CheckError(e, {e.field(), "memory overlapping " + other});
      }
      ExpectUntouched(b, before);
    }
  }
  {  // lse overlapping q
    Buffers b;
    Problem p = b.p;
    p.lse.data = test::F32Mutable(p.q);
    ExpectRejected(b, p, {"lse", "memory overlapping q", false});
  }
  {  // out overlapping the additive mask
    Buffers b;
    Problem p = b.p;
    p.mask = AdditiveMask{b.out.data(), 0, 0, 0, 0};  // one broadcast element
    ExpectRejected(b, p, {"out", "memory overlapping mask", false});
  }
}

TEST(Errors, NonFiniteScaleIsRejected) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, const char*> cases[] = {
      {std::numeric_limits<float>::quiet_NaN(), "nan"}, {inf, "inf"}, {-inf, "-inf"}};
  for (const auto& [scale, text] : cases) {
    SCOPED_TRACE(text);
    Buffers b;
    Problem p = b.p;
    p.scale = scale;
    ExpectRejected(b, p, {"scale", text});
  }
}

// Sizes whose byte count does not fit in 64 bits must be rejected by the
// overflow-checked span arithmetic (never wrapped). The data pointers are
// dummies: validation reads no data.
TEST(Errors, SizeOverflowIsRejected) {
  const float* dummy_in = reinterpret_cast<const float*>(uintptr_t{1} << 20);
  float* dummy_out = reinterpret_cast<float*>(uintptr_t{1} << 44);
  Buffers b;  // only for the snapshot of real buffers (untouched anyway)
  const int64_t big = int64_t{1} << 40;
  {
    Problem p;
    p.q_len = big;
    p.kv_len = 1;
    p.head_dim = big;
    p.q = ConstTensor{dummy_in, 0, 0, big};
    p.k = ConstTensor{dummy_in, 0, 0, big};
    p.v = ConstTensor{dummy_in, 0, 0, big};
    p.out = Tensor{dummy_out, 0, 0, big};
    ExpectRejected(b, p, {"q", std::to_string(big), true});
  }
  {  // elements fit in int64 but bytes (x4) do not
    Problem p;
    p.q_len = int64_t{1} << 62;
    p.kv_len = 1;
    p.head_dim = 1;
    p.q = ConstTensor{dummy_in, 0, 0, 1};
    p.k = ConstTensor{dummy_in, 0, 0, 1};
    p.v = ConstTensor{dummy_in, 0, 0, 1};
    p.out = Tensor{dummy_out, 0, 0, 1};
    ExpectRejected(b, p, {"q", "[1,1,4611686018427387904,1] with strides (0,0,1)"});
  }
  {  // a batch stride whose offset overflows
    Problem p;
    p.batch = 3;
    p.q_len = p.kv_len = p.head_dim = 1;
    p.q = ConstTensor{dummy_in, std::numeric_limits<int64_t>::max() / 2 + 1, 0, 1};
    p.k = ConstTensor{dummy_in, 0, 0, 1};
    p.v = ConstTensor{dummy_in, 0, 0, 1};
    p.out = Tensor{dummy_out, 1, 0, 1};
    ExpectRejected(b, p, {"q", "[3,1,1,1] with strides (4611686018427387904,0,1)"});
  }
}

// The naive kernel materialises T_q x T_k float scores per head; above its
// limit (1 GiB) it refuses with a clear error instead of allocating. The
// buffers are real (65536 floats each) so that nothing could go wrong if
// the check were missing... other than the 16 GiB allocation it prevents.
TEST(Errors, NaiveKernelRefusesAHugeScoreMatrix) {
  const int64_t t = int64_t{1} << 16;
  std::vector<float> q(t, 0.5f), k(t, 0.25f), v(t, 1.0f), out(t, kSentinel);
  Problem p;
  p.q_len = p.kv_len = t;
  p.head_dim = 1;
  p.q = DenseBHTD(q.data(), 1, t, 1);
  p.k = DenseBHTD(k.data(), 1, t, 1);
  p.v = DenseBHTD(v.data(), 1, t, 1);
  p.out = DenseBHTD(out.data(), 1, t, 1);
  Options o;
  o.kernel = KernelId::kNaive;
  ExpectError([&] { attention(p, o); }, {"kernel", "naive"});
  try {
    attention(p, o);
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("65536 x 65536"), std::string::npos) << what;
    EXPECT_NE(what.find("streaming"), std::string::npos) << "should suggest a kernel: " << what;
  }
  for (float x : out) ASSERT_EQ(x, kSentinel);
}

// q_len * kv_len * 4 overflows int64 here (2^64): the naive kernel's size
// guard must see that, not a wrapped 0. The inputs pass validation (their
// spans fit in 64 bits); the pointers are dummies, never read.
TEST(Errors, NaiveScoreCountOverflowIsRejected) {
  const int64_t t = int64_t{1} << 31;
  Problem p;
  p.q_len = p.kv_len = t;
  p.head_dim = 1;
  p.q = ConstTensor{reinterpret_cast<const float*>(uintptr_t{1} << 40), 0, 0, 1};
  p.k = ConstTensor{reinterpret_cast<const float*>(uintptr_t{2} << 40), 0, 0, 1};
  p.v = ConstTensor{reinterpret_cast<const float*>(uintptr_t{3} << 40), 0, 0, 1};
  p.out = Tensor{reinterpret_cast<float*>(uintptr_t{4} << 40), 0, 0, 1};
  Options o;
  o.kernel = KernelId::kNaive;
  ExpectError([&] { attention(p, o); }, {"kernel", "naive"});
}

// ---- Options ---------------------------------------------------------------

TEST(Errors, NegativeThreadsAndTilesAreRejected) {
  {
    Buffers b;
    Options o;
    o.threads = -1;
    ExpectRejected(b, b.p, {"threads", "-1"}, o);
  }
  {
    Buffers b;
    Options o;
    o.tiles.q_block = -2;
    ExpectRejected(b, b.p, {"tiles.q_block", "-2"}, o);
  }
  {
    Buffers b;
    Options o;
    o.tiles.kv_block = -1;
    ExpectRejected(b, b.p, {"tiles.kv_block", "-1"}, o);
  }
  {
    Buffers b;
    Options o;
    o.tiles.kv_splits = -3;
    ExpectRejected(b, b.p, {"tiles.kv_splits", "-3"}, o);
  }
}

TEST(Errors, UnknownKernelIdIsRejected) {
  Buffers b;
  Options o;
  o.kernel = static_cast<KernelId>(99);
  ExpectRejected(b, b.p, {"kernel", "99"}, o, /*every_kernel=*/false);
}

TEST(Errors, ParseKernelRejectsUnknownNames) {
  for (const char* bad : {"bogus", "", "Naive", "streaming "}) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    ExpectError([&] { ParseKernel(bad); }, {"kernel", bad});
  }
  // and the known names round-trip.
  for (KernelId id : AllKernels()) EXPECT_EQ(ParseKernel(KernelName(id)), id);
}

// ---- SIMD targets ----------------------------------------------------------

TEST(Errors, ForceTargetRejectsUnknownNames) {
  const std::string before = CurrentTarget();
  for (const char* bad : {"NOPE", "avx2x", "AVX9"}) {
    SCOPED_TRACE(bad);
    ExpectError([&] { ForceTarget(bad); }, {"target", bad});
    EXPECT_EQ(CurrentTarget(), before);
  }
  try {
    ForceTarget("NOPE");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown"), std::string::npos) << e.what();
  }
}

TEST(Errors, ForceTargetRejectsCompiledButUnsupportedTargets) {
  const std::vector<std::string> compiled = CompiledTargets();
  const std::vector<std::string> supported = SupportedTargets();
  std::vector<std::string> unsupported;
  for (const std::string& t : compiled) {
    if (std::find(supported.begin(), supported.end(), t) == supported.end()) unsupported.push_back(t);
  }
  if (unsupported.empty()) {
    std::string names;
    for (const std::string& t : compiled) names += " " + t;
    GTEST_SKIP() << "this CPU supports every compiled target (" << names.substr(1)
                 << "): there is no compiled target it lacks, so none can be forced for real "
                    "(an AVX-512 CPU runs AVX3 down to EMU128). ErrorsDeathTest."
                    "ForceTargetRejectsATargetHighwayReportsMissing covers the same rejection "
                    "by hiding this CPU's best target from Highway in a child process";
  }
  const std::string before = CurrentTarget();
  for (const std::string& t : unsupported) {
    SCOPED_TRACE(t);
    ExpectError([&] { ForceTarget(t); }, {"target", t});
    try {
      ForceTarget(t);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
    EXPECT_EQ(CurrentTarget(), before);
  }
  // Supported targets can be forced, and "auto" restores the best (the
  // first of SupportedTargets(); not `before`, which ATTN_TARGET may have
  // forced lower).
  for (const std::string& t : supported) {
    EXPECT_NO_THROW(ForceTarget(t));
    EXPECT_EQ(CurrentTarget(), t);
  }
  ForceTarget("auto");
  EXPECT_EQ(CurrentTarget(), supported.front());
}

// The rejection above on every CPU, including those that run every compiled
// target (AVX-512: nothing there to reject for real). attn reads the CPU's
// targets from Highway once, at first use; hwy::DisableTargets, Highway's
// switch for targets to avoid, makes Highway report the best one as missing,
// which attn cannot tell from a CPU without it. A death test in the
// threadsafe style runs this in a re-executed child process, whose first use
// of attn comes after DisableTargets; the test body makes no attn call
// before EXPECT_EXIT, since the child re-runs it up to there. The child's
// checks cannot use EXPECT_* (the parent would not see them): it prints
// what it found and exits 0 only if all of them hold.
[[noreturn]] void ForceTargetHiddenFromHighway(const std::string& hidden, int64_t bit) {
  unsetenv("ATTN_TARGET");  // the first use must not force a target itself
  hwy::DisableTargets(bit);
  std::string failures;
  const std::vector<std::string> supported = SupportedTargets();
  if (std::find(supported.begin(), supported.end(), hidden) != supported.end()) {
    failures += " SupportedTargets() still lists " + hidden + ";";
  }
  const std::string before = CurrentTarget();
  if (before == hidden) failures += " the hidden " + hidden + " is the current target;";
  try {
    ForceTarget(hidden);
    failures += " ForceTarget(" + hidden + ") did not throw;";
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    if (e.field() != "target") failures += " the error names field " + e.field() + ";";
  }
  if (CurrentTarget() != before) failures += " the rejected ForceTarget changed the target;";
  if (!failures.empty()) std::fprintf(stderr, "FAILED:%s\n", failures.c_str());
  std::fflush(stderr);
  // _Exit: no exit-time handlers (LeakSanitizer's) in this short-lived child.
  std::_Exit(failures.empty() ? 0 : 1);
}

TEST(ErrorsDeathTest, ForceTargetRejectsATargetHighwayReportsMissing) {
  // The best compiled target this CPU runs, from Highway alone (no attn call
  // here, see above), without any target attn forced earlier in this
  // process (the child, a fresh process, has none). Hiding a CPU's only
  // runnable target would leave Highway nothing to run.
  hwy::SetSupportedTargetsForTest(0);
  const int64_t cpu = hwy::SupportedTargets();
  std::string hidden;
  int64_t hidden_bit = 0;
  int runnable = 0;
  for (const std::string& t : CompiledTargets()) {  // best first
    for (int64_t m = cpu; m != 0; m &= m - 1) {
      const int64_t bit = m & -m;
      if (t == hwy::TargetName(bit) && ++runnable == 1) hidden = t, hidden_bit = bit;
    }
  }
#ifdef ATTN_TESTS_UNDER_EMULATOR
  // A threadsafe death test re-executes this binary (execv of /proc/self/exe),
  // which fails under qemu-user without binfmt ("Exec format error"); the
  // x86 suite runs it.
  GTEST_SKIP() << "death tests re-execute the binary, which qemu-user cannot";
#endif
  if (runnable >= 2) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(ForceTargetHiddenFromHighway(hidden, hidden_bit), ::testing::ExitedWithCode(0),
                "attn: target " + hidden + " is not supported by this CPU");
  }
  ForceTarget("auto");  // only the parent gets here: attn and Highway agree again
  if (runnable < 2) GTEST_SKIP() << "this CPU runs a single compiled target: none to hide";
}

// ---- Valid edge cases: no error, and the right answer ----------------------

// Runs every kernel on the problem and compares with the reference.
void ExpectAcceptedAndCorrect(Buffers& b, const Problem& p) {
  const reference::Result ref = reference::Attention(p);
  for (KernelId kernel : AllKernels()) {
    SCOPED_TRACE(KernelName(kernel));
    std::fill(b.out.begin(), b.out.end(), kSentinel);
    std::fill(b.lse.begin(), b.lse.end(), kSentinel);
    Options o;
    o.kernel = kernel;
    ASSERT_NO_THROW(attention(p, o));
    const test::Errors e = test::MaxErrors(p, ref);
    EXPECT_LE(e.out, 1e-5);
    EXPECT_LE(e.lse, 1e-5);
  }
}

TEST(Errors, ScaleZeroIsValidAndAveragesTheValues) {
  Buffers b;
  Problem p = b.p;
  p.scale = 0.0f;
  ExpectAcceptedAndCorrect(b, p);
  // All scores 0: uniform weights, out = mean of V's rows, lse = log T_k.
  for (int64_t c = 0; c < Buffers::kDv; ++c) {
    double mean = 0.0;
    for (int64_t j = 0; j < Buffers::kTk; ++j) mean += b.v[j * Buffers::kDv + c];
    mean /= Buffers::kTk;
    EXPECT_NEAR(b.out[c], mean, 1e-6) << c;
  }
  EXPECT_NEAR(b.lse[0], std::log(double(Buffers::kTk)), 1e-6);
}

TEST(Errors, NegativeScaleIsValid) {
  Buffers b;
  Problem p = b.p;
  p.scale = -3.0f;
  ExpectAcceptedAndCorrect(b, p);
}

TEST(Errors, SingleQueryAndKeyIsValid) {
  Buffers b;
  Problem p = b.p;
  p.q_len = p.kv_len = 1;
  ExpectAcceptedAndCorrect(b, p);
  // One key: weight 1, out = its value row.
  for (int64_t c = 0; c < Buffers::kDv; ++c) EXPECT_FLOAT_EQ(b.out[c], b.v[c]);
  // A single row may have any row stride, even 0.
  p.q.row_stride = p.k.row_stride = p.v.row_stride = p.out.row_stride = 0;
  ExpectAcceptedAndCorrect(b, p);
}

TEST(Errors, HeadDimOneIsValid) {
  Buffers b;
  Problem p = b.p;
  p.head_dim = 1;
  p.value_dim = 1;  // reads the first column of the existing buffers
  ExpectAcceptedAndCorrect(b, p);
}

TEST(Errors, BroadcastInputStridesAreValid) {
  Buffers b;
  Problem p = b.p;
  // One Q head for every batch and head, one K/V head for every batch.
  p.q.batch_stride = p.q.head_stride = 0;
  p.k.batch_stride = p.k.head_stride = 0;
  p.v.batch_stride = p.v.head_stride = 0;
  ExpectAcceptedAndCorrect(b, p);
  // Every (batch, head) then has the same output.
  const int64_t per_head = Buffers::kTq * Buffers::kDv;
  for (int64_t h = 1; h < Buffers::kB * Buffers::kHq; ++h) {
    for (int64_t i = 0; i < per_head; ++i) EXPECT_EQ(b.out[h * per_head + i], b.out[i]) << h;
  }
  // The additive mask broadcasts too, including a stride-0 column.
  std::vector<float> mask(1, -0.5f);
  p.mask = AdditiveMask{mask.data(), 0, 0, 0, 0};
  ExpectAcceptedAndCorrect(b, p);
}

}  // namespace
}  // namespace attn
