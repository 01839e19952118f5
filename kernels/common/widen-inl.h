// Widening bf16 / f16 inputs to float32 on the way into the float32
// micro-kernels, per Highway target (per-target include guard below).
//
// Every kernel computes in float32 whatever the element types (the
// precision contract in the README): a 16-bit element is widened exactly
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
#if defined(ATTN_KERNELS_COMMON_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_WIDEN_INL_H_
#undef ATTN_KERNELS_COMMON_WIDEN_INL_H_
#else
#define ATTN_KERNELS_COMMON_WIDEN_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"  // DType
#include "hwy/highway.h"
#include "kernels/common/convert.h"

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f(T()) with T the storage type of `type` as Highway's vectors see
// it (float, hwy::bfloat16_t, hwy::float16_t): one switch per call, then
// code templated on the type.
template <class F>
HWY_INLINE void WithStorageType(DType type, const F& f) {
  switch (type) {
    case DType::kBF16: return f(hwy::bfloat16_t());
    case DType::kF16: return f(hwy::float16_t());
    case DType::kF32: break;
  }
  f(float());
}

// Lanes(d) elements at p (any alignment), widened to float32.
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (hwy::IsSame<T, float>()) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

// One element, widened (the scalar edges of the vector loops).
template <typename T>
HWY_INLINE float WidenScalar(const T* HWY_RESTRICT p) {
  if constexpr (hwy::IsSame<T, float>()) {
    return *p;
  } else if constexpr (hwy::IsSame<T, hwy::bfloat16_t>()) {
    return internal::FloatFromBF16(p->bits);
  } else {
    return internal::FloatFromF16(p->bits);
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
// place when it is float32, else widened into `scratch` (rows x cols floats,
// stride cols).
HWY_INLINE FloatRows WidenRows(const void* src, DType type, int64_t src_stride, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT scratch) {
  if (type == DType::kF32) return {static_cast<const float*>(src), src_stride};
  WithStorageType(type, [&](auto tag) {
    using T = decltype(tag);
    WidenRowsOf(static_cast<const T*>(src), src_stride, rows, cols, scratch, cols);
  });
  return {scratch, cols};
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
