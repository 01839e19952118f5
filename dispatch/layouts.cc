// Small value helpers of the public API: layouts, element types, names, the
// default scale.
#include <cmath>
#include <string>

#include "attn/attn.h"
#include "dispatch/validate.h"
#include "kernels/common/convert.h"

namespace attn {

ConstTensor DenseBHTD(const void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols) {
  return ConstTensor{data, heads * rows * cols, rows * cols, cols, dtype};
}
Tensor DenseBHTD(void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols) {
  return Tensor{data, heads * rows * cols, rows * cols, cols, dtype};
}
ConstTensor DenseBTHD(const void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols) {
  return ConstTensor{data, rows * heads * cols, cols, heads * cols, dtype};
}
Tensor DenseBTHD(void* data, DType dtype, int64_t heads, int64_t rows, int64_t cols) {
  return Tensor{data, rows * heads * cols, cols, heads * cols, dtype};
}
ConstTensor DenseBHTD(const float* data, int64_t heads, int64_t rows, int64_t cols) {
  return DenseBHTD(static_cast<const void*>(data), DType::kF32, heads, rows, cols);
}
Tensor DenseBHTD(float* data, int64_t heads, int64_t rows, int64_t cols) {
  return DenseBHTD(static_cast<void*>(data), DType::kF32, heads, rows, cols);
}
ConstTensor DenseBTHD(const float* data, int64_t heads, int64_t rows, int64_t cols) {
  return DenseBTHD(static_cast<const void*>(data), DType::kF32, heads, rows, cols);
}
Tensor DenseBTHD(float* data, int64_t heads, int64_t rows, int64_t cols) {
  return DenseBTHD(static_cast<void*>(data), DType::kF32, heads, rows, cols);
}

const char* DTypeName(DType type) {
  switch (type) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

DType ParseDType(const std::string& name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16") return DType::kF16;
  internal::Fail("dtype", "\"" + name + "\"", "must be one of f32, bf16, f16");
}

int DTypeSize(DType type) {
  switch (type) {
    case DType::kF32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
  }
  return 0;
}

uint16_t BFloat16Bits(float value) { return internal::BF16FromFloat(value); }
uint16_t Float16Bits(float value) { return internal::F16FromFloat(value); }
float FromBFloat16Bits(uint16_t bits) { return internal::FloatFromBF16(bits); }
float FromFloat16Bits(uint16_t bits) { return internal::FloatFromF16(bits); }

float Problem::Scale() const {
  return scale ? *scale : float(1.0 / std::sqrt(double(head_dim)));
}

}  // namespace attn
