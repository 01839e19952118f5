// The AMX tile layer's two implementations (kernels/common/amx-inl.h) and
// the AMX kernel's operand packings (kernels/amx/pack-inl.h), on every
// Highway target this CPU supports (one test case per target):
// - EmulatedAmx::DotBf16 against a scalar model of TDPBF16PS written here
//   from Intel's documented semantics (per k, the even pair element's
//   product added first, then the odd one's, each step rounded to nearest
//   even; subnormal inputs read as zero, subnormal results flushed);
// - tile loads and stores with row strides and partial shapes, and the
//   emulation's faults on what the hardware would fault on;
// - on AVX3, where this CPU and its OS run AMX, the tiles themselves
//   against the emulation: loads and stores bit for bit, tdpbf16ps within
//   the error bound of summing the same 65 terms in another order (the
//   hardware's internal order is not documented);
// - the packings against scalar expectations at ragged d, keys and d_v.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/amx_layer_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/amx/pack-inl.h"
#include "kernels/common/amx-inl.h"

#include <stdint.h>
#include <string.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dispatch/dot_path.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"

#ifndef ATTN_TESTS_AMX_LAYER_TEST_HELPERS_
#define ATTN_TESTS_AMX_LAYER_TEST_HELPERS_
namespace attn::amx_layer_test {

float Bf(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint16_t BfBits(float f) {  // f must be a bf16 value
  uint32_t u;
  memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
float Ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
bool SameBits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

// A random normal bf16 of magnitude 2^-4 .. 2^4, either sign.
uint16_t RandomBf16(std::mt19937& rng) {
  const uint32_t sign = rng() & 1, exponent = 123 + rng() % 9, mantissa = rng() & 0x7F;
  return uint16_t(sign << 15 | exponent << 7 | mantissa);
}

// Tiles as the kernel configures them: A 16 rows x 32 bf16, B 16 rows x 16
// pairs, C 16 x 16 floats, row-major, 64 bytes a row.
struct TileInputs {
  std::vector<uint16_t> a, b;  // 16 x 32 each
  std::vector<float> c;        // 16 x 16
};
TileInputs RandomTiles(uint32_t seed) {
  std::mt19937 rng(seed);
  TileInputs t{std::vector<uint16_t>(512), std::vector<uint16_t>(512), std::vector<float>(256)};
  for (uint16_t& x : t.a) x = RandomBf16(rng);
  for (uint16_t& x : t.b) x = RandomBf16(rng);
  for (float& x : t.c) x = Bf(RandomBf16(rng)) * 3.0f;
  return t;
}

// TDPBF16PS from its definition, per (m, n): for k = 0..15,
// acc += A[m][2k]·B[k][2n], then acc += A[m][2k+1]·B[k][2n+1].
// volatile keeps the compiler from contracting into an FMA.
std::vector<float> ModelDot(const TileInputs& t) {
  std::vector<float> c = t.c;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      volatile float acc = Ftz(c[size_t(m * 16 + n)]);
      for (int k = 0; k < 16; ++k) {
        const float a0 = Ftz(Bf(t.a[size_t(m * 32 + 2 * k)]));
        const float a1 = Ftz(Bf(t.a[size_t(m * 32 + 2 * k + 1)]));
        const float b0 = Ftz(Bf(t.b[size_t(k * 32 + 2 * n)]));
        const float b1 = Ftz(Bf(t.b[size_t(k * 32 + 2 * n + 1)]));
        volatile float p0 = Ftz(a0 * b0);
        acc = Ftz(acc + p0);
        volatile float p1 = Ftz(a1 * b1);
        acc = Ftz(acc + p1);
      }
      c[size_t(m * 16 + n)] = acc;
    }
  return c;
}

// The error bound of any order of summing acc and the 32 exact products of
// one element: 32 roundings of partial sums at most |acc| + Σ|p|.
double SumOrderBound(const TileInputs& t, int m, int n) {
  double total = std::fabs(double(t.c[size_t(m * 16 + n)]));
  for (int k = 0; k < 32; ++k) {
    total += std::fabs(double(Bf(t.a[size_t(m * 32 + k)])) *
                       double(Bf(t.b[size_t((k / 2) * 32 + 2 * n + k % 2)])));
  }
  return 2 * 32 * std::ldexp(total, -24);
}

}  // namespace attn::amx_layer_test
#endif  // ATTN_TESTS_AMX_LAYER_TEST_HELPERS_

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace at = attn::amx_layer_test;

template <class Amx>
std::vector<float> RunDot(const at::TileInputs& t) {
  std::vector<float> c(256);
  Amx::Configure(internal::FullAmxTiles());
  Amx::template Load<0>(t.c.data(), 64);
  Amx::template Load<4>(t.a.data(), 64);
  Amx::template Load<6>(t.b.data(), 64);
  Amx::template DotBf16<0, 4, 6>();
  Amx::template Store<0>(c.data(), 64);
  Amx::Release();
  return c;
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#ifdef ATTN_HAVE_AMX_TILES
ATTN_BEGIN_AMX
namespace attn {
namespace HWY_NAMESPACE {
// RunDot and a strided load/store over the tiles themselves; defined in the
// AMX region (code outside it cannot inline the intrinsics).
std::vector<float> RunHardwareDot(const at::TileInputs& t) {
  std::vector<float> c(256);
  HardwareAmx::Configure(internal::FullAmxTiles());
  HardwareAmx::Load<0>(t.c.data(), 64);
  HardwareAmx::Load<4>(t.a.data(), 64);
  HardwareAmx::Load<6>(t.b.data(), 64);
  HardwareAmx::DotBf16<0, 4, 6>();
  HardwareAmx::Store<0>(c.data(), 64);
  HardwareAmx::Release();
  return c;
}
void HardwareLoadStore(const internal::AmxTileConfig& config, const uint8_t* src,
                       int64_t src_stride, uint8_t* dst, int64_t dst_stride) {
  HardwareAmx::Configure(config);
  HardwareAmx::Load<3>(src, src_stride);
  HardwareAmx::Store<3>(dst, dst_stride);
  HardwareAmx::Release();
}
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_POP_ATTRIBUTES
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace at = attn::amx_layer_test;

void TestEmulationMatchesTheModel() {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const at::TileInputs t = at::RandomTiles(seed);
    const std::vector<float> got = RunDot<EmulatedAmx>(t), want = at::ModelDot(t);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(at::SameBits(got[i], want[i]))
          << hwy::TargetName(HWY_TARGET) << " seed " << seed << " element " << i << ": "
          << got[i] << " vs " << want[i];
    }
  }
  // The order is the documented one: even element first. acc = 1 with
  // products -1 (even) and 2^-30 (odd): (1 - 1) + 2^-30 = 2^-30, where odd
  // first would give (1 + 2^-30 -> 1) - 1 = 0.
  at::TileInputs t{std::vector<uint16_t>(512), std::vector<uint16_t>(512),
                   std::vector<float>(256)};
  t.c[0] = 1.0f;
  t.a[0] = at::BfBits(-1.0f);
  t.b[0] = at::BfBits(1.0f);
  t.a[1] = at::BfBits(std::ldexp(1.0f, -15));
  t.b[1] = at::BfBits(std::ldexp(1.0f, -15));
  EXPECT_EQ(RunDot<EmulatedAmx>(t)[0], std::ldexp(1.0f, -30));
  // Subnormal inputs read as zero: 2^-130 x 2^100 would be 2^-30.
  t.c[0] = 0.0f;
  t.a[0] = 0x0008u;  // bf16 2^-130 (subnormal)
  t.b[0] = at::BfBits(std::ldexp(1.0f, 100));
  t.a[1] = t.b[1] = 0;
  EXPECT_EQ(RunDot<EmulatedAmx>(t)[0], 0.0f);
}

void TestLoadsAndStores() {
  // A partial shape (5 rows of 12 bytes) from a strided buffer: only those
  // bytes move, and a load zeroes the rest of the tile.
  internal::AmxTileConfig config = internal::FullAmxTiles();
  config.rows[3] = 5;
  config.colsb[3] = 12;
  std::vector<uint8_t> src(16 * 100), dst(16 * 72, 0xEE);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 1);
  EmulatedAmx::Configure(config);
  EmulatedAmx::Load<3>(src.data(), 100);
  EmulatedAmx::Store<3>(dst.data(), 72);
  for (int r = 0; r < 16; ++r)
    for (int b = 0; b < 72; ++b) {
      const uint8_t want = r < 5 && b < 12 ? src[size_t(r * 100 + b)] : uint8_t{0xEE};
      ASSERT_EQ(dst[size_t(r * 72 + b)], want) << "row " << r << " byte " << b;
    }
  const uint8_t* tile = EmulatedAmx::state().tile[3];
  EXPECT_EQ(tile[12], 0);            // past colsb in a loaded row
  EXPECT_EQ(tile[5 * 64], 0);        // past the configured rows
  EmulatedAmx::Release();

#ifdef ATTN_HAVE_AMX_TILES
  if (internal::AmxUnavailable().empty()) {
    std::vector<uint8_t> hw(16 * 72, 0xEE);
    HardwareLoadStore(config, src.data(), 100, hw.data(), 72);
    EXPECT_EQ(hw, dst) << "tileloadd / tilestored differ from the emulation";
  }
#endif
}

// What the hardware faults on, the emulation aborts on, naming it.
void DotWithoutConfiguration() {
  EmulatedAmx::Release();
  EmulatedAmx::DotBf16<0, 4, 6>();
}
void DotWithMismatchedShapes() {
  internal::AmxTileConfig config = internal::FullAmxTiles();
  config.rows[4] = 8;  // A has 8 rows, C 16
  EmulatedAmx::Configure(config);
  EmulatedAmx::DotBf16<0, 4, 6>();
}
void ConfigureOverlongRows() {
  internal::AmxTileConfig config = internal::FullAmxTiles();
  config.colsb[2] = 68;  // over 64 bytes a row
  EmulatedAmx::Configure(config);
}
// GoogleTest's "fast" death tests (fork, no re-exec): the threadsafe style
// re-executes the binary, which qemu-user cannot do (.ci/arm.sh).
void TestEmulationFaultsOnMisuse() {
  EXPECT_DEATH(DotWithoutConfiguration(), "before ldtilecfg");
  EXPECT_DEATH(DotWithMismatchedShapes(), "tdpbf16ps shapes");
  EXPECT_DEATH(ConfigureOverlongRows(), "configured");
}

void TestHardwareMatchesTheEmulation() {
#ifdef ATTN_HAVE_AMX_TILES
  const std::string& why = internal::AmxUnavailable();
  if (!why.empty()) GTEST_SKIP() << "AMX cannot run here: " << why;
  double worst = 0;
  for (uint32_t seed = 100; seed < 140; ++seed) {
    const at::TileInputs t = at::RandomTiles(seed);
    const std::vector<float> hw = RunHardwareDot(t), emu = RunDot<EmulatedAmx>(t);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        const size_t i = size_t(m * 16 + n);
        const double diff = std::fabs(double(hw[i]) - double(emu[i]));
        worst = std::max(worst, diff);
        ASSERT_LE(diff, at::SumOrderBound(t, m, n)) << "seed " << seed << " m " << m << " n " << n;
      }
  }
  ::testing::Test::RecordProperty("max_abs_difference", std::to_string(worst));
#else
  GTEST_SKIP() << "the AMX layer is compiled for the AVX3 target only (this is "
               << hwy::TargetName(HWY_TARGET) << ")";
#endif
}

void TestPackings() {
  std::mt19937 rng(5);
  // K: 21 keys of d = 37 (odd: the last pair's high half is +0), row
  // stride 41, padded to 32 keys and d_pad = 64 (two tiles along d).
  const int64_t keys = 21, d = 37, stride = 41, keys_pad = 32, d_pad = 64;
  std::vector<uint16_t> k(size_t(keys * stride));
  for (uint16_t& x : k) x = at::RandomBf16(rng);
  std::vector<uint32_t> kp(size_t(keys_pad * d_pad / 2), 0xDEADBEEFu);
  PackAmxKeys(k.data(), stride, keys, keys_pad, d, d_pad, kp.data());
  for (int64_t n = 0; n < keys_pad; ++n)
    for (int64_t t = 0; t < d_pad / 2; ++t) {
      uint32_t want = 0;
      if (n < keys && 2 * t < d) {
        want = k[size_t(n * stride + 2 * t)];
        if (2 * t + 1 < d) want |= uint32_t(k[size_t(n * stride + 2 * t + 1)]) << 16;
      }
      // Tile (n / 16, t / 16) of 16 x 16 u32, row t % 16, column n % 16.
      const size_t at_index = size_t(((n / 16) * (d_pad / 32) + t / 16) * 256 + (t % 16) * 16 + n % 16);
      ASSERT_EQ(kp[at_index], want) << "key " << n << " pair " << t;
    }
  // V: 21 keys of d_v = 19, padded to 16 pair rows of 32 columns.
  const int64_t dv = 19, dv_pad = 32, v_stride = 23;
  std::vector<uint16_t> v(size_t(keys * v_stride));
  for (uint16_t& x : v) x = at::RandomBf16(rng);
  std::vector<uint32_t> vp(size_t(keys_pad / 2 * dv_pad), 0xDEADBEEFu);
  EXPECT_FALSE(PackAmxValues(v.data(), v_stride, keys, keys_pad, dv, dv_pad, vp.data()));
  for (int64_t u = 0; u < keys_pad / 2; ++u)
    for (int64_t c = 0; c < dv_pad; ++c) {
      uint32_t want = 0;
      if (c < dv && 2 * u < keys) {
        want = v[size_t(2 * u * v_stride + c)];
        if (2 * u + 1 < keys) want |= uint32_t(v[size_t((2 * u + 1) * v_stride + c)]) << 16;
      }
      ASSERT_EQ(vp[size_t(u * dv_pad + c)], want) << "pair row " << u << " column " << c;
    }
  v[size_t(20 * v_stride + 18)] = 0x7F80u;  // +inf in the odd last key's last column
  EXPECT_TRUE(PackAmxValues(v.data(), v_stride, keys, keys_pad, dv, dv_pad, vp.data()));
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {
HWY_BEFORE_TEST(AmxLayer);
HWY_EXPORT_AND_TEST_P(AmxLayer, TestEmulationMatchesTheModel);
HWY_EXPORT_AND_TEST_P(AmxLayer, TestLoadsAndStores);
HWY_EXPORT_AND_TEST_P(AmxLayer, TestEmulationFaultsOnMisuse);
HWY_EXPORT_AND_TEST_P(AmxLayer, TestHardwareMatchesTheEmulation);
HWY_EXPORT_AND_TEST_P(AmxLayer, TestPackings);
}  // namespace attn
#endif
