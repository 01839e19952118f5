// Small value helpers of the public API: layouts, element types, names, the
// q8_0 quantiser, the default scale.
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
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
  }
  return "?";
}

DType ParseDType(const std::string& name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  internal::Fail("dtype", "\"" + name + "\"", "must be one of f32, bf16, f16, q8_0, q4_0");
}

int DTypeSize(DType type) {
  switch (type) {
    case DType::kF32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kQ8_0:
    case DType::kQ4_0: return 0;  // blocks: DTypeBlockBytes
  }
  return 0;
}

int DTypeBlockElements(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return 1;
    case DType::kQ8_0: return int(internal::kQ8_0BlockElements);
    case DType::kQ4_0: return int(internal::kQ4_0BlockElements);
  }
  return 0;
}

int DTypeBlockBytes(DType type) {
  switch (type) {
    case DType::kF32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kQ8_0: return int(internal::kQ8_0BlockBytes);
    case DType::kQ4_0: return int(internal::kQ4_0BlockBytes);
  }
  return 0;
}

int64_t DTypeBytes(DType type, int64_t elements) {
  const int block = DTypeBlockElements(type);
  return block == 0 ? 0 : elements / block * DTypeBlockBytes(type);
}

namespace {
// n of the quantisers and dequantisers: >= 0 and whole blocks.
void RequireWholeBlocks(int64_t n, const char* type) {
  if (n < 0 || n % 32 != 0) {
    internal::Fail("n", internal::Str(n),
                   std::string("must be a multiple of 32 (") + type + " blocks of 32 elements)");
  }
}

// QuantizeQ8_0 and QuantizeQ4_0: every block checked before the first is
// written.
void QuantizeBlocks(const float* x, int64_t n, void* out, DType type, const char* scale_rule) {
  const char* name = DTypeName(type);
  RequireWholeBlocks(n, name);
  if (n > 0 && x == nullptr) internal::Fail("x", "null", "must not be null");
  if (n > 0 && out == nullptr) internal::Fail("out", "null", "must not be null");
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t bad = internal::BlockUnfitOf(type, x + i);
    if (bad >= 0) {
      internal::Fail("x[" + internal::Str(i + bad) + "]", internal::Str(x[i + bad]),
                     std::string("must be finite, with ") + internal::BlockScaleBound(type) +
                         " (the block's binary16 scale " + scale_rule + " must be finite)");
    }
  }
  unsigned char* blocks = static_cast<unsigned char*>(out);
  for (int64_t i = 0; i < n; i += 32) {
    internal::QuantizeBlockOf(type, x + i, blocks + i / 32 * DTypeBlockBytes(type));
  }
}

void DequantizeBlocks(const void* blocks, int64_t n, float* out, const char* type,
                      float (*load)(const void*, int64_t)) {
  RequireWholeBlocks(n, type);
  if (n > 0 && blocks == nullptr) internal::Fail("blocks", "null", "must not be null");
  if (n > 0 && out == nullptr) internal::Fail("out", "null", "must not be null");
  for (int64_t i = 0; i < n; ++i) out[i] = load(blocks, i);
}
}  // namespace

void QuantizeQ8_0(const float* x, int64_t n, void* out) {
  QuantizeBlocks(x, n, out, DType::kQ8_0, "amax / 127");
}

void DequantizeQ8_0(const void* blocks, int64_t n, float* out) {
  DequantizeBlocks(blocks, n, out, "q8_0", internal::LoadQ8_0Element);
}

void QuantizeQ4_0(const float* x, int64_t n, void* out) {
  QuantizeBlocks(x, n, out, DType::kQ4_0, "|max| / 8");
}

void DequantizeQ4_0(const void* blocks, int64_t n, float* out) {
  DequantizeBlocks(blocks, n, out, "q4_0", internal::LoadQ4_0Element);
}

uint16_t BFloat16Bits(float value) { return internal::BF16FromFloat(value); }
uint16_t Float16Bits(float value) { return internal::F16FromFloat(value); }
float FromBFloat16Bits(uint16_t bits) { return internal::FloatFromBF16(bits); }
float FromFloat16Bits(uint16_t bits) { return internal::FloatFromF16(bits); }

float Problem::Scale() const {
  return scale ? *scale : float(1.0 / std::sqrt(double(head_dim)));
}

}  // namespace attn
