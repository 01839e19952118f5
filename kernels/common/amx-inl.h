// AMX tiles, the instructions the AMX attention kernel (kernels/amx/) is
// written against, in two implementations with the same interface,
// compiled once per Highway target (per-target include guard below):
//
//   Configure(config)    ldtilecfg: the shape of each of the 8 tiles
//   Release()            tilerelease: back to the init state
//   Zero<T>()            tilezero
//   Load<T>(p, stride)   tileloadd: rows[T] rows of colsb[T] bytes at p,
//                        p + stride, ... (stride in bytes)
//   Store<T>(p, stride)  tilestored: the same, from the tile
//   DotBf16<C, A, B>()   tdpbf16ps: C[m][n] += Σ_k A[m].pair k · B[k][n],
//                        where A's 32-bit elements are bf16 pairs along K and
//                        B's rows are K-pairs of C's N columns ("VNNI" form:
//                        B[k][n] = (b[2k][n], b[2k+1][n]) in one u32).
//   StoreWeightsBf16(w, p)  one vector of softmax weights (finite, >= 0)
//                        rounded to bf16, to nearest even, into p: the A
//                        operand of P·V. vcvtneps2bf16 on the hardware
//                        (every AMX-BF16 CPU has AVX512-BF16; dispatch
//                        checks both), integer rounding in the emulation.
//                        The instruction flushes subnormal weights to 0,
//                        the emulation keeps them; tdpbf16ps treats
//                        subnormal bf16 inputs as 0 (below), so P·V is the
//                        same either way.
//
// Tiles are named by compile-time indices because the instructions encode
// them as immediates.
//
// - EmulatedAmx: portable scalar code with Intel's documented semantics of
//   TDPBF16PS (SDM vol. 2, and the pseudo-code of the intrinsics guide):
//   for each k, the even element's product is added first, then the odd
//   one's, each step rounded to nearest even; bf16 inputs that are
//   subnormal count as zero and subnormal results are flushed (DAZ/FTZ,
//   MXCSR ignored). A product of two bf16 values is exact in float32 unless
//   it overflows or is subnormal, so contraction into FMA by the compiler
//   changes nothing on the values attention produces. The hardware's
//   internal summation order has not been checked on a CPU here: the
//   hardware-versus-emulation tests (tests/amx_layer_test.cc) compare the
//   two within a stated bound, not bit for bit. The emulation also checks
//   what the hardware would fault on (#UD): a DotBf16 or Load before
//   Configure, or operand shapes that do not match (A rows != C rows,
//   A columns != 4·B rows, B columns != C columns), and aborts with the
//   reason, so a tile-shape bug in the kernel fails every emulated test.
//   Its state is per thread, as the hardware's is.
// - HardwareAmx (AVX3 target only): the _tile_* intrinsics, in functions
//   compiled with the amx-tile and amx-bf16 target attributes, defined
//   inside the attribute region that kernels/amx/amx.cc opens for its
//   hardware kernels, which dispatch (dispatch/dot_path.cc) enters only on
//   a CPU with AMX-BF16 whose OS granted the tile state to the process.
//
// The kernels use nothing else of either layer: packing, tile loops, edges
// and the softmax between the products are the same code over both.
#if defined(ATTN_KERNELS_COMMON_AMX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_AMX_INL_H_
#undef ATTN_KERNELS_COMMON_AMX_INL_H_
#else
#define ATTN_KERNELS_COMMON_AMX_INL_H_
#endif

#include <stdint.h>
#include <string.h>

#include <cmath>

#include "hwy/base.h"
#include "hwy/highway.h"

#ifndef ATTN_KERNELS_COMMON_AMX_CONFIG_
#define ATTN_KERNELS_COMMON_AMX_CONFIG_
namespace attn::internal {

// The 64-byte operand of ldtilecfg (palette 1: 8 tiles of at most 16 rows
// of 64 bytes).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 0;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile i
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64, "ldtilecfg reads 64 bytes");

constexpr int kAmxTiles = 8;
constexpr int kAmxMaxRows = 16;
constexpr int kAmxMaxRowBytes = 64;

// Every tile 16 rows of 64 bytes: the one configuration the kernel uses
// (ragged edges are zero padding in its packed operands, never a narrower
// tile, so no configuration changes inside a kernel call).
inline AmxTileConfig FullAmxTiles() {
  AmxTileConfig c;
  c.palette = 1;
  for (int t = 0; t < kAmxTiles; ++t) {
    c.rows[t] = kAmxMaxRows;
    c.colsb[t] = kAmxMaxRowBytes;
  }
  return c;
}

}  // namespace attn::internal
#endif  // ATTN_KERNELS_COMMON_AMX_CONFIG_

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct EmulatedAmx {
  static constexpr bool kHardware = false;

  struct State {
    internal::AmxTileConfig config;
    bool configured = false;
    alignas(64) uint8_t tile[internal::kAmxTiles][internal::kAmxMaxRows *
                                                  internal::kAmxMaxRowBytes];
  };
  static State& state() {
    thread_local State s;
    return s;
  }

  static void Configure(const internal::AmxTileConfig& config) {
    State& s = state();
    if (config.palette != 1) HWY_ABORT("attn AMX emulation: palette %d", int(config.palette));
    for (int t = 0; t < internal::kAmxTiles; ++t) {
      if (config.rows[t] > internal::kAmxMaxRows ||
          config.colsb[t] > internal::kAmxMaxRowBytes || config.colsb[t] % 4 != 0) {
        HWY_ABORT("attn AMX emulation: tile %d configured %d x %d bytes", t, int(config.rows[t]),
                  int(config.colsb[t]));
      }
    }
    s.config = config;
    s.configured = true;
    memset(s.tile, 0, sizeof(s.tile));  // ldtilecfg zeroes the tiles
  }
  static void Release() {
    State& s = state();
    s.configured = false;
    memset(s.tile, 0, sizeof(s.tile));
  }

  template <int T>
  static void Zero() {
    Check<T>("tilezero");
    memset(state().tile[T], 0, sizeof(state().tile[T]));
  }

  template <int T>
  static void Load(const void* base, int64_t stride) {
    Check<T>("tileloadd");
    State& s = state();
    memset(s.tile[T], 0, sizeof(s.tile[T]));  // rows and bytes past the shape are zero
    const auto* src = static_cast<const uint8_t*>(base);
    for (int r = 0; r < s.config.rows[T]; ++r) {
      memcpy(s.tile[T] + r * internal::kAmxMaxRowBytes, src + r * stride, s.config.colsb[T]);
    }
  }

  template <int T>
  static void Store(void* base, int64_t stride) {
    Check<T>("tilestored");
    const State& s = state();
    auto* dst = static_cast<uint8_t*>(base);
    for (int r = 0; r < s.config.rows[T]; ++r) {
      memcpy(dst + r * stride, s.tile[T] + r * internal::kAmxMaxRowBytes, s.config.colsb[T]);
    }
  }

  // x, or a zero of x's sign where x is subnormal.
  static float Ftz(float x) {
    return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
  }
  static float Bf16At(const uint8_t* row, int index) {
    uint16_t bits;
    memcpy(&bits, row + 2 * index, 2);
    const uint32_t wide = uint32_t(bits) << 16;
    float f;
    memcpy(&f, &wide, 4);
    return Ftz(f);
  }

  static HWY_INLINE void StoreWeightsBf16(hn::Vec<hn::ScalableTag<float>> w,
                                          uint16_t* HWY_RESTRICT p) {
    const hn::ScalableTag<float> df;
    const hn::RebindToUnsigned<decltype(df)> du;
    const hn::Rebind<uint16_t, decltype(df)> du16;
    const auto bits = hn::BitCast(du, w);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
    hn::StoreU(hn::TruncateTo(du16, rounded), du16, p);
  }

  // Two vectors: w0 into p, w1 after it.
  static HWY_INLINE void StoreWeightsBf16x2(hn::Vec<hn::ScalableTag<float>> w0,
                                            hn::Vec<hn::ScalableTag<float>> w1,
                                            uint16_t* HWY_RESTRICT p) {
    StoreWeightsBf16(w0, p);
    StoreWeightsBf16(w1, p + hn::Lanes(hn::ScalableTag<float>()));
  }

  template <int C, int A, int B>
  static void DotBf16() {
    static_assert(C != A && C != B && A != B, "tdpbf16ps needs three distinct tiles");
    Check<C>("tdpbf16ps");
    State& s = state();
    const int m_rows = s.config.rows[C], n_cols = s.config.colsb[C] / 4;
    const int k_pairs = s.config.colsb[A] / 4;
    if (s.config.rows[A] != m_rows || s.config.rows[B] != k_pairs ||
        s.config.colsb[B] != s.config.colsb[C]) {
      HWY_ABORT("attn AMX emulation: tdpbf16ps shapes C %dx%d, A %dx%d, B %dx%d (bytes)", m_rows,
                int(s.config.colsb[C]), int(s.config.rows[A]), int(s.config.colsb[A]),
                int(s.config.rows[B]), int(s.config.colsb[B]));
    }
    uint8_t* c = s.tile[C];
    const uint8_t* a = s.tile[A];
    const uint8_t* b = s.tile[B];
    for (int m = 0; m < m_rows; ++m) {
      float acc[internal::kAmxMaxRowBytes / 4];
      memcpy(acc, c + m * internal::kAmxMaxRowBytes, sizeof(acc));
      const uint8_t* a_row = a + m * internal::kAmxMaxRowBytes;
      for (int k = 0; k < k_pairs; ++k) {
        const float a_even = Bf16At(a_row, 2 * k), a_odd = Bf16At(a_row, 2 * k + 1);
        const uint8_t* b_row = b + k * internal::kAmxMaxRowBytes;
        for (int n = 0; n < n_cols; ++n) {
          const float even = Ftz(a_even * Bf16At(b_row, 2 * n));
          const float odd = Ftz(a_odd * Bf16At(b_row, 2 * n + 1));
          acc[n] = Ftz(Ftz(Ftz(acc[n]) + even) + odd);
        }
      }
      memcpy(c + m * internal::kAmxMaxRowBytes, acc, sizeof(acc));
    }
  }

 private:
  template <int T>
  static void Check(const char* op) {
    static_assert(T >= 0 && T < internal::kAmxTiles, "AMX has tiles 0-7");
    if (!state().configured) HWY_ABORT("attn AMX emulation: %s before ldtilecfg", op);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86_64
// The one piece of this file no CPU without AMX may run, in a region of its
// own with the AVX3 target's attributes plus amx-tile and amx-bf16 (as the
// avx512bf16 region of bf16dot-inl.h, and for the same reasons). Callers
// must be defined in such a region too (ATTN_BEGIN_AMX ...
// HWY_POP_ATTRIBUTES).
#include <immintrin.h>
#define ATTN_HAVE_AMX_TILES 1
#define ATTN_BEGIN_AMX HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",amx-tile,amx-bf16,avx512bf16")
ATTN_BEGIN_AMX
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// GCC's _tile_* macros paste the tile number into their inline assembly,
// so it must be a literal: one branch per tile, resolved at compile time.
#define ATTN_AMX_FOR_TILE(T, CALL)                                                        \
  static_assert(T >= 0 && T <= 7, "AMX has tiles 0-7");                                    \
  if constexpr (T == 0) { CALL(0); } else if constexpr (T == 1) { CALL(1); }               \
  else if constexpr (T == 2) { CALL(2); } else if constexpr (T == 3) { CALL(3); }          \
  else if constexpr (T == 4) { CALL(4); } else if constexpr (T == 5) { CALL(5); }          \
  else if constexpr (T == 6) { CALL(6); } else { CALL(7); }
struct HardwareAmx {
  static constexpr bool kHardware = true;
  static HWY_INLINE void Configure(const internal::AmxTileConfig& config) {
    _tile_loadconfig(&config);
  }
  static HWY_INLINE void Release() { _tile_release(); }
  template <int T>
  static HWY_INLINE void Zero() {
#define ATTN_AMX_ZERO(t) _tile_zero(t)
    ATTN_AMX_FOR_TILE(T, ATTN_AMX_ZERO)
#undef ATTN_AMX_ZERO
  }
  template <int T>
  static HWY_INLINE void Load(const void* base, int64_t stride) {
#define ATTN_AMX_LOAD(t) _tile_loadd(t, base, stride)
    ATTN_AMX_FOR_TILE(T, ATTN_AMX_LOAD)
#undef ATTN_AMX_LOAD
  }
  template <int T>
  static HWY_INLINE void Store(void* base, int64_t stride) {
#define ATTN_AMX_STORE(t) _tile_stored(t, base, stride)
    ATTN_AMX_FOR_TILE(T, ATTN_AMX_STORE)
#undef ATTN_AMX_STORE
  }
  static HWY_INLINE void StoreWeightsBf16(hn::Vec<hn::ScalableTag<float>> w,
                                          uint16_t* HWY_RESTRICT p) {
    const __m256bh bf16 = _mm512_cvtneps_pbh(w.raw);
    memcpy(p, &bf16, sizeof(bf16));
  }
  // vcvtne2ps2bf16: 32 weights an instruction (its first operand's go high).
  static HWY_INLINE void StoreWeightsBf16x2(hn::Vec<hn::ScalableTag<float>> w0,
                                            hn::Vec<hn::ScalableTag<float>> w1,
                                            uint16_t* HWY_RESTRICT p) {
    const __m512bh bf16 = _mm512_cvtne2ps_pbh(w1.raw, w0.raw);
    memcpy(p, &bf16, sizeof(bf16));
  }
  // The kernel's 2 x 2 blocking uses accumulators 0-3, A tiles 4-5 and B
  // tiles 6-7: C = A·B for those four combinations.
  template <int C, int A, int B>
  static HWY_INLINE void DotBf16() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else {
      static_assert(C == 3 && A == 5 && B == 7, "add the tile combination here");
      _tile_dpbf16ps(3, 5, 7);
    }
  }
};
#undef ATTN_AMX_FOR_TILE
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_POP_ATTRIBUTES
#else
#undef ATTN_HAVE_AMX_TILES
#endif

#endif  // per-target include guard
