// Widening bf16 / f16 inputs to float32 on the way into the float32
// micro-kernels, per Highway target (per-target include guard below).
//
// Every kernel computes in float32 whatever the element types (the
// precision contract in docs/precision.md): a 16-bit element is widened exactly
// (bf16 by a shift, f16 by F16C's vcvtph2ps on AVX2/AVX3 and Highway's
// bit arithmetic elsewhere), so the only rounding a 16-bit type adds is
// that of its own values, which the float64 reference reads too, and of a
// 16-bit output (once, to nearest even, convert.h).
//
// Two ways in: the narrow (decode) path loads vectors straight from the
// 16-bit rows (LoadWide: half the bytes from memory, which is what bounds
// decode); the panel kernels broadcast K and V scalars, so they widen each
// key tile once per (query block, tile) into a float32 copy (WidenRows), at
// one load, one conversion and one store per vector, against 2·q_block
// FMAs per element of the tile.
//
// ggml's q8_0 blocks (attn.h DType::kQ8_0) come in the same two ways:
// LoadQ8_0Ints and Q8_0ScaleVec give a vector of a block's int8 values as
// float32 and its binary16 scale broadcast, and q · scale is exact in
// float32 (8 x 11 significant bits), so a q8_0 element, too, enters the
// float32 arithmetic as exactly the value the reference decodes; WidenRows
// dequantises a tile (34 bytes read per 32 elements). ggml's q4_0 blocks
// (DType::kQ4_0, 18 bytes per 32) the same way, their nibbles less 8 as the
// integers (Q4_0Format).
#if defined(ATTN_KERNELS_COMMON_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_WIDEN_INL_H_
#undef ATTN_KERNELS_COMMON_WIDEN_INL_H_
#else
#define ATTN_KERNELS_COMMON_WIDEN_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "attn/attn.h"  // DType
#include "hwy/highway.h"
#include "kernels/common/convert.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f(T()) with T the storage type of `type` as Highway's vectors see
// it (float, hwy::bfloat16_t, hwy::float16_t): one switch per call, then
// code templated on the type. For the element types: block types are never
// passed here (Q and O cannot be q8_0 or q4_0; such a K or V goes through
// WidenRows or the decode path's kernels/decode/quant_passes-inl.h).
template <class F>
HWY_INLINE void WithStorageType(DType type, const F& f) {
  switch (type) {
    case DType::kBF16: return f(hwy::bfloat16_t());
    case DType::kF16: return f(hwy::float16_t());
    case DType::kF32:
    case DType::kQ8_0:
    case DType::kQ4_0: break;
  }
  f(float());
}

// f16 -> float32 from the bit patterns. Highway 1.0.3's PromoteTo from f16
// without F16C (SSE4, SSSE3, EMU128) treats exponent 31 as a normal
// exponent: inf became 65536 and NaN a finite number (the fuzzer found a
// -inf in V read as -65536). Here exponent 31 maps to 255 (inf stays inf,
// NaN stays NaN), subnormals are mantissa · 2^-24, everything else is the
// rebiased exponent with the mantissa shifted into place.
template <class D>
HWY_INLINE hn::Vec<D> WidenF16Bits(D d, hn::Vec<hn::RebindToUnsigned<D>> h) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto exponent = hn::And(h, hn::Set(du, 0x7c00u));
  const auto magnitude = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7fffu)));
  const auto normal = hn::Add(magnitude, hn::Set(du, uint32_t(127 - 15) << 23));
  const auto special = hn::Add(magnitude, hn::Set(du, uint32_t(255 - 31) << 23));
  const auto mantissa = hn::BitCast(di, hn::And(h, hn::Set(du, 0x3ffu)));
  const auto subnormal =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(d, mantissa), hn::Set(d, 1.0f / 16777216.0f)));
  const auto bits =
      hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal,
                     hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 0x7c00u)), special, normal));
  return hn::BitCast(d, hn::Or(bits, hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)))));
}

// A q8_0 block as the vector loops see it (ggml's block_q8_0): pointers to
// it step whole blocks.
struct Q8_0Block {
  uint8_t bytes[internal::kQ8_0BlockBytes];  // binary16 scale, then 32 int8
};
static_assert(sizeof(Q8_0Block) == internal::kQ8_0BlockBytes, "ggml's 34-byte block");

// Whether this target's PromoteTo from f16 is F16C's exact vcvtph2ps (AVX2,
// AVX-512; also any non-x86 target) rather than Highway's emulation above.
constexpr bool kF16PromoteIsExact = !(HWY_ARCH_X86 && HWY_TARGET >= HWY_SSE4);

// Lanes(d) elements at p (any alignment), widened to float32.
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (hwy::IsSame<T, float>()) {
    return hn::LoadU(d, p);
  } else if constexpr (hwy::IsSame<T, hwy::float16_t>() && !kF16PromoteIsExact) {
    const hn::Rebind<uint16_t, D> du16;
    const hn::RebindToUnsigned<D> du;
    return WidenF16Bits(d, hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p))));
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

// The 16 bits of a bf16 / f16 element. Highway 1.0.3's bfloat16_t is
// always struct { uint16_t bits; }, but its float16_t is that struct only
// where the compiler has no half type: on aarch64 (GCC) it is the native
// __fp16, which has no .bits, so a native type's two bytes are copied. The
// struct form keeps reading .bits: the same load, and x86's object code
// stays byte for byte what it was (a memcpy there shifted register
// allocation in the kernels around it).
template <typename T>
HWY_INLINE uint16_t Bits16(const T* HWY_RESTRICT p) {
  static_assert(sizeof(T) == 2, "a 16-bit element type");
  if constexpr (std::is_class<T>::value) {
    return p->bits;
  } else {
    uint16_t bits;
    hwy::CopySameSize(p, &bits);
    return bits;
  }
}

// One element, widened (the scalar edges of the vector loops). A native
// half type (hwy::float16_t as __fp16 on aarch64) converts in hardware
// (fcvt: exact, inf and NaN kept, subnormals exact), as its vector PromoteTo
// does; the struct form is decoded from its bits (convert.h).
template <typename T>
HWY_INLINE float WidenScalar(const T* HWY_RESTRICT p) {
  if constexpr (hwy::IsSame<T, float>()) {
    return *p;
  } else if constexpr (hwy::IsSame<T, hwy::bfloat16_t>()) {
    return internal::FloatFromBF16(Bits16(p));
  } else if constexpr (!std::is_class<T>::value) {  // native __fp16
    return static_cast<float>(*p);
  } else {
    return internal::FloatFromF16(Bits16(p));
  }
}

// Lanes(d) int8 values of a q8_0 block at p (any alignment), as float32.
template <class D>
HWY_INLINE hn::Vec<D> LoadQ8_0Ints(D d, const uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<int8_t, D> di8;
  const hn::RebindToSigned<D> di32;
  return hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p))));
}

// The binary16 scale of a q8_0 block, widened exactly, in every lane. F16C
// (AVX2, AVX-512) converts the broadcast bits; other targets decode them
// with WidenF16Bits (x86 without F16C) or in scalar code (where the half
// type is native, so no vector of f16 bits is needed).
template <class D>
HWY_INLINE hn::Vec<D> Q8_0ScaleVec(D d, const Q8_0Block* HWY_RESTRICT block) {
  uint16_t bits;
  hwy::CopyBytes<2>(block->bytes, &bits);
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET <= HWY_AVX3)
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<hwy::float16_t, D> df16;
  return hn::PromoteTo(d, hn::BitCast(df16, hn::Set(du16, bits)));
#elif HWY_ARCH_X86
  const hn::RebindToUnsigned<D> du;
  return WidenF16Bits(d, hn::Set(du, uint32_t(bits)));
#else
  return hn::Set(d, internal::FloatFromF16(bits));
#endif
}

// Whether the q8_0 vector loops apply: whole vectors tile a block (every
// fixed-width target; a scalable vector of, say, 12 lanes takes the scalar
// code instead).
template <class D>
HWY_INLINE bool Q8_0VectorsTileBlocks(D d) {
  const size_t N = hn::Lanes(d);
  return N <= size_t(internal::kQ8_0BlockElements) && size_t(internal::kQ8_0BlockElements) % N == 0;
}

// The block types as the vector loops see them: kType's blocks of 32
// elements in kBytes bytes, a binary16 scale first (Q8_0ScaleVec reads
// both); Ints(d, block, c) is elements c .. c + Lanes(d) - 1 of the block
// as float32 integers (c a multiple of Lanes(d)), where VectorsTile(d)
// (else the loops take Element, scalar).
struct Q8_0Format {
  static constexpr DType kType = DType::kQ8_0;
  static constexpr int64_t kBytes = internal::kQ8_0BlockBytes;
  template <class D>
  static HWY_INLINE hn::Vec<D> Ints(D d, const uint8_t* HWY_RESTRICT block, int64_t c) {
    return LoadQ8_0Ints(d, block + 2 + c);
  }
  template <class D>
  static HWY_INLINE bool VectorsTile(D d) {
    return Q8_0VectorsTileBlocks(d);
  }
  static float Element(const void* row, int64_t i) { return internal::LoadQ8_0Element(row, i); }
};
// q4_0: a vector's elements are the low (c < 16) or high nibbles of Lanes(d)
// consecutive bytes, so a vector must lie within one half of the block.
struct Q4_0Format {
  static constexpr DType kType = DType::kQ4_0;
  static constexpr int64_t kBytes = internal::kQ4_0BlockBytes;
  template <class D>
  static HWY_INLINE hn::Vec<D> Ints(D d, const uint8_t* HWY_RESTRICT block, int64_t c) {
    const hn::Rebind<uint8_t, D> du8;
    const hn::RebindToSigned<D> di32;
    // The low nibbles for elements 0-15, the high ones for 16-31: a shift by
    // 0 or 4, without a branch in the loops that call this per vector.
    const auto bytes = hn::PromoteTo(di32, hn::LoadU(du8, block + 2 + c % 16));
    const auto nibbles = hn::And(hn::ShiftRightSame(bytes, c < 16 ? 0 : 4), hn::Set(di32, 15));
    return hn::ConvertTo(d, hn::Sub(nibbles, hn::Set(di32, 8)));
  }
  template <class D>
  static HWY_INLINE bool VectorsTile(D d) {
    const size_t N = hn::Lanes(d);
    return N <= 16 && 16 % N == 0;
  }
  static float Element(const void* row, int64_t i) { return internal::LoadQ4_0Element(row, i); }
};

// Calls f(Format()) for a block type (q8_0 or q4_0).
template <class F>
HWY_INLINE void WithBlockFormat(DType type, const F& f) {
  if (type == DType::kQ4_0) return f(Q4_0Format());
  f(Q8_0Format());
}

// The element type of a block row for LoadRowVector (ggml's blocks of 32
// and a binary16 scale, in format F).
template <class F>
struct BlockRow {
  using Format = F;
};
using Q8_0Row = BlockRow<Q8_0Format>;
using Q4_0Row = BlockRow<Q4_0Format>;
template <typename T>
inline constexpr bool kIsBlockRow = false;
template <class F>
inline constexpr bool kIsBlockRow<BlockRow<F>> = true;

// Vector n of a row (elements n·N .. n·N + N - 1) as float32: widened
// exactly (LoadWide), or a block row's integers times their block's scale
// (exact in float32; the values kernels/decode/quant_passes-inl.h's passes
// compute). The decode path's row walks (kernels/decode/row-inl.h) read K
// and V rows with it, and attn-bench's widen rows (bench/widen_probe.cc)
// time it.
template <typename T>
HWY_INLINE hn::Vec<hn::ScalableTag<float>> LoadRowVector(const char* HWY_RESTRICT row, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  if constexpr (kIsBlockRow<T>) {
    using F = typename T::Format;
    constexpr int64_t kBlock = 32;
    const int64_t col = n * N;
    const uint8_t* HWY_RESTRICT block =
        reinterpret_cast<const uint8_t*>(row) + col / kBlock * F::kBytes;
    return hn::Mul(F::Ints(df, block, col % kBlock),
                   Q8_0ScaleVec(df, reinterpret_cast<const Q8_0Block*>(block)));
  } else {
    return LoadWide(df, reinterpret_cast<const T*>(row) + n * N);
  }
}

// dst[r][c] = element c of row r of blocks of format F, r < rows, c < cols
// (cols a multiple of 32; src rows src_stride elements apart, dst rows
// dst_stride floats).
template <class F>
HWY_INLINE void DequantizeRows(const uint8_t* HWY_RESTRICT src, int64_t src_stride, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT dst, int64_t dst_stride) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int64_t kBlock = 32;
  const bool vectors = F::VectorsTile(df);
  for (int64_t r = 0; r < rows; ++r) {
    // Strides and columns in elements, whole blocks (validation).
    const uint8_t* HWY_RESTRICT row = src + r * src_stride / kBlock * F::kBytes;
    float* HWY_RESTRICT o = dst + r * dst_stride;
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const uint8_t* HWY_RESTRICT block = row + c0 / kBlock * F::kBytes;
      if (vectors) {
        const auto scale = Q8_0ScaleVec(df, reinterpret_cast<const Q8_0Block*>(block));
        for (int64_t c = 0; c < kBlock; c += N) {
          hn::StoreU(hn::Mul(F::Ints(df, block, c), scale), df, o + c0 + c);
        }
      } else {
        for (int64_t c = 0; c < kBlock; ++c) o[c0 + c] = F::Element(block, c);
      }
    }
  }
}

// dst[r][c] = src[r][c] widened, r < rows, c < cols (src row stride in its
// elements, dst rows dst_stride floats apart).
template <typename T>
HWY_INLINE void WidenRowsOf(const T* HWY_RESTRICT src, int64_t src_stride, int64_t rows,
                            int64_t cols, float* HWY_RESTRICT dst, int64_t dst_stride) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const T* HWY_RESTRICT s = src + r * src_stride;
    float* HWY_RESTRICT o = dst + r * dst_stride;
    int64_t c = 0;
    for (; c + N <= cols; c += N) hn::StoreU(LoadWide(df, s + c), df, o + c);
    for (; c < cols; ++c) o[c] = WidenScalar(s + c);
  }
}

// A tile of rows as float32: where the micro-kernels read it from.
struct FloatRows {
  const float* data;
  int64_t stride;
};

// The rows [0, rows) x [0, cols) of a tensor of element type `type`: in
// place when it is float32, else widened (q8_0, q4_0: dequantised) into
// `scratch` (rows x cols floats, stride cols).
HWY_INLINE FloatRows WidenRows(const void* src, DType type, int64_t src_stride, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT scratch) {
  if (type == DType::kF32) return {static_cast<const float*>(src), src_stride};
  if (internal::IsBlockType(type)) {
    WithBlockFormat(type, [&](auto format) {
      DequantizeRows<decltype(format)>(static_cast<const uint8_t*>(src), src_stride, rows, cols,
                                       scratch, cols);
    });
    return {scratch, cols};
  }
  WithStorageType(type, [&](auto tag) {
    using T = decltype(tag);
    WidenRowsOf(static_cast<const T*>(src), src_stride, rows, cols, scratch, cols);
  });
  return {scratch, cols};
}

// dst[c] = src[c] rounded to `type` (bf16 / f16, to nearest even; as
// convert.h, element for element), c < n. bf16 by integer rounding of the
// float bits; f16 by F16C's vcvtps2ph on AVX2/AVX-512 (round to nearest
// even, overflow to inf, subnormals, quiet NaN); other targets and the
// ragged end element by element.
HWY_INLINE void StoreNarrowed(const float* HWY_RESTRICT src, int64_t n, void* HWY_RESTRICT dst,
                              DType type) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t N = int64_t(hn::Lanes(df));
  uint16_t* HWY_RESTRICT out = static_cast<uint16_t*>(dst);
  int64_t c = 0;
  if (type == DType::kBF16) {
    for (; c + N <= n; c += N) {
      const auto x = hn::LoadU(df, src + c);
      const auto u = hn::BitCast(du, x);
      const auto high = hn::ShiftRight<16>(u);
      const auto rounded =
          hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(high, hn::Set(du, 1u)))));
      const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(x)),
                                       hn::Or(high, hn::Set(du, 0x40u)), rounded);
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, out + c);
    }
  }
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET <= HWY_AVX3)
  if (type == DType::kF16) {
    const hn::Rebind<hwy::float16_t, decltype(df)> df16;
    for (; c + N <= n; c += N) {
      hn::StoreU(hn::DemoteTo(df16, hn::LoadU(df, src + c)), df16,
                 reinterpret_cast<hwy::float16_t*>(out + c));
    }
  }
#endif
  for (; c < n; ++c) internal::StoreElement(dst, type, c, src[c]);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
