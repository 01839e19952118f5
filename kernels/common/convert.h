// Scalar conversions between float and the 16-bit element types (bfloat16,
// IEEE binary16), ggml's q8_0 blocks (decoding, and its reference
// quantiser), and element access through a (pointer, DType) pair. Plain
// C++ (no Highway): the kernels' scalar edges (packing Q, writing O, the
// naive kernel, merging) and the public BFloat16Bits & co. use them; the
// SIMD paths widen whole vectors with Highway's PromoteTo, which gives the
// same exact values (tests/dtype_test.cc checks both against each other).
//
// Widening is exact (every bf16 and f16 value is a float). Narrowing rounds
// to nearest, ties to even, as the hardware converters do (vcvtps2ph with
// round-to-nearest, vcvtneps2bf16): ±0, ±inf kept, NaN stays a quiet NaN,
// f16 overflows to ±inf from 65520 up, and f16 subnormals are produced.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attn/attn.h"

namespace attn::internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float FloatFromBF16(uint16_t bits) { return BitsFloat(uint32_t(bits) << 16); }

inline uint16_t BF16FromFloat(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds the dropped 16 bits to
  // nearest, ties to even; a carry into the exponent is the correct
  // rounding up (FLT_MAX's neighbourhood becomes inf).
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float FloatFromF16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    const float magnitude = float(mantissa) * BitsFloat(0x33800000u);  // 2^-24
    return (h & 0x8000u) ? -magnitude : magnitude;
  }
  if (exponent == 31) {  // inf, or NaN with its payload (made quiet)
    return BitsFloat(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0u));
  }
  return BitsFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

inline uint16_t F16FromFloat(float f) {
  uint32_t x = FloatBits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // quiet NaN
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (and inf): inf
  if (x < 0x38800000u) {
    // Below 2^-14: an f16 subnormal (or zero), mantissa = round(|f| · 2^24).
    // 0.5f has an ulp of 2^-24, so |f| + 0.5f is rounded by the FPU to
    // nearest even at exactly the f16 subnormal spacing, and the low bits of
    // the sum are the mantissa (a carry into bit 10 is the smallest normal).
    const uint32_t magic = uint32_t((127 - 15) + (23 - 10) + 1) << 23;  // 0.5f
    const float sum = BitsFloat(x) + BitsFloat(magic);
    return uint16_t(sign | (FloatBits(sum) - magic));
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
  const uint32_t odd = (x >> 13) & 1u;
  x += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
  return uint16_t(sign | (x >> 13));
}

// ggml's q8_0 blocks (attn.h DType::kQ8_0): 32 elements in 34 bytes, the
// binary16 scale first.
inline constexpr int64_t kQ8_0BlockElements = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;

// The scale of the q8_0 block at `block`, widened (exactly).
inline float Q8_0Scale(const void* block) {
  uint16_t bits;
  std::memcpy(&bits, block, sizeof bits);
  return FloatFromF16(bits);
}
// Element i of the q8_0 row at base: q[i % 32] · scale of block i / 32.
inline float LoadQ8_0Element(const void* base, int64_t i) {
  const unsigned char* block =
      static_cast<const unsigned char*>(base) + (i / kQ8_0BlockElements) * kQ8_0BlockBytes;
  const int8_t q = static_cast<int8_t>(block[2 + i % kQ8_0BlockElements]);
  return float(q) * Q8_0Scale(block);
}

// One block of ggml's quantize_row_q8_0_ref (attn.h QuantizeQ8_0): x[0..31]
// into the 34 bytes at out. The caller has checked that x is finite and the
// scale within binary16's range (Q8_0BlockScaleFits).
inline void QuantizeQ8_0Block(const float* x, void* out) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQ8_0BlockElements; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  unsigned char* block = static_cast<unsigned char*>(out);
  const uint16_t bits = F16FromFloat(d);
  std::memcpy(block, &bits, sizeof bits);
  for (int64_t j = 0; j < kQ8_0BlockElements; ++j) {
    block[2 + j] = static_cast<unsigned char>(static_cast<int8_t>(std::roundf(x[j] * id)));
  }
}
// Whether a block quantiser with scale amax / divisor may take x[0..31]:
// every value finite and the scale finite once rounded to binary16 (below
// 65520). Returns the index of the first value that breaks it, or -1.
inline int64_t BlockUnfit(const float* x, float divisor) {
  float amax = 0.0f;
  int64_t at = -1;
  for (int64_t j = 0; j < 32; ++j) {
    if (!std::isfinite(x[j])) return j;
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      at = j;
    }
  }
  return (F16FromFloat(amax / divisor) & 0x7fffu) == 0x7c00u ? at : -1;
}
// QuantizeQ8_0Block's scale is amax / 127.
inline int64_t Q8_0BlockUnfit(const float* x) { return BlockUnfit(x, 127.0f); }

// ggml's q4_0 blocks (attn.h DType::kQ4_0): 32 elements in 18 bytes, the
// binary16 scale d first, then 16 bytes whose low nibbles are elements
// 0-15 and high nibbles elements 16-31, each n - 8 (n in 0..15) times d.
inline constexpr int64_t kQ4_0BlockElements = 32;
inline constexpr int64_t kQ4_0BlockBytes = 18;

// Element c (0..31) of the q4_0 block at `block`, as n - 8.
inline int Q4_0Int(const unsigned char* block, int64_t c) {
  const unsigned char byte = block[2 + c % 16];
  return (c < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
}
// Element i of the q4_0 row at base: (n - 8) · d of block i / 32 (exact:
// 4 x 11 significant bits).
inline float LoadQ4_0Element(const void* base, int64_t i) {
  const unsigned char* block =
      static_cast<const unsigned char*>(base) + (i / kQ4_0BlockElements) * kQ4_0BlockBytes;
  return float(Q4_0Int(block, i % kQ4_0BlockElements)) * Q8_0Scale(block);
}

// ggml's MIN(15, (int8_t)t) for t = x · id + 8.5: t is in [0, 16.5] for
// finite blocks (|x · id| <= 8 up to rounding), truncated, at most 15. Only
// where 1 / d overflows (every |x| below 2^-125) is t infinite or NaN, a
// conversion C leaves undefined; x86's truncation (as ggml runs there)
// gives 0 for it, and so does this.
inline int Q4_0Nibble(float t) { return std::isfinite(t) ? std::min(15, int(t)) : 0; }

// One block of ggml's quantize_row_q4_0_ref (attn.h QuantizeQ4_0): x[0..31]
// into the 18 bytes at out. The caller has checked that x is finite and the
// scale within binary16's range (Q4_0BlockUnfit).
inline void QuantizeQ4_0Block(const float* x, void* out) {
  float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, the first of ties
  for (int64_t j = 0; j < kQ4_0BlockElements; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  unsigned char* block = static_cast<unsigned char*>(out);
  const uint16_t bits = F16FromFloat(d);
  std::memcpy(block, &bits, sizeof bits);
  for (int64_t j = 0; j < 16; ++j) {
    block[2 + j] = static_cast<unsigned char>(Q4_0Nibble(x[j] * id + 8.5f) |
                                              (Q4_0Nibble(x[16 + j] * id + 8.5f) << 4));
  }
}
// QuantizeQ4_0Block's scale is |max| / 8 = amax / 8.
inline int64_t Q4_0BlockUnfit(const float* x) { return BlockUnfit(x, 8.0f); }

// Whether t comes in blocks of 32 with a binary16 scale (q8_0, q4_0): K and
// V only, rows and offsets in whole blocks.
inline bool IsBlockType(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

// A block type's quantiser (t q8_0 or q4_0): whether it may take x[0..31]
// (the first offender, or -1), one block into `out`, and the bound on |x|
// that its binary16 scale puts, in words.
inline int64_t BlockUnfitOf(DType t, const float* x) {
  return t == DType::kQ4_0 ? Q4_0BlockUnfit(x) : Q8_0BlockUnfit(x);
}
inline void QuantizeBlockOf(DType t, const float* x, void* out) {
  if (t == DType::kQ4_0) return QuantizeQ4_0Block(x, out);
  QuantizeQ8_0Block(x, out);
}
inline const char* BlockScaleBound(DType t) {
  return t == DType::kQ4_0 ? "|x| < 65520 * 8" : "|x| < 65520 * 127";
}

// Element i of a tensor of type t at base (i in elements; for a block type,
// the row's blocks start at base).
inline float LoadElement(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return FloatFromBF16(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16: return FloatFromF16(static_cast<const uint16_t*>(base)[i]);
    case DType::kQ8_0: return LoadQ8_0Element(base, i);
    case DType::kQ4_0: return LoadQ4_0Element(base, i);
    case DType::kF32: break;
  }
  return static_cast<const float*>(base)[i];
}

// Element i of an output of type t (float32, bf16, f16). A block type is
// never an output (validation rejects it): its blocks are written whole, by
// QuantizeQ8_0Block / QuantizeQ4_0Block.
inline void StoreElement(void* base, DType t, int64_t i, float value) {
  switch (t) {
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = BF16FromFloat(value); return;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = F16FromFloat(value); return;
    case DType::kQ8_0:
    case DType::kQ4_0: return;
    case DType::kF32: break;
  }
  static_cast<float*>(base)[i] = value;
}

// Bytes of `elements` consecutive elements of type t (attn::DTypeBytes,
// inline): 4 or 2 an element, or elements / 32 · 34 for q8_0 and · 18 for
// q4_0 (elements a multiple of 32, as validation guarantees for every row
// offset).
inline int64_t BytesOf(DType t, int64_t elements) {
  switch (t) {
    case DType::kF32: return elements * 4;
    case DType::kQ8_0: return elements / kQ8_0BlockElements * kQ8_0BlockBytes;
    case DType::kQ4_0: return elements / kQ4_0BlockElements * kQ4_0BlockBytes;
    case DType::kBF16:
    case DType::kF16: break;
  }
  return elements * 2;
}

// base advanced by `elements` elements of type t.
inline const void* ElementOffset(const void* base, DType t, int64_t elements) {
  return static_cast<const char*>(base) + BytesOf(t, elements);
}
inline void* ElementOffset(void* base, DType t, int64_t elements) {
  return static_cast<char*>(base) + BytesOf(t, elements);
}

}  // namespace attn::internal
