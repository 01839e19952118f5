// Small value helpers of the public API: layouts, names, the default scale.
#include <cmath>
#include <string>

#include "attn/attn.h"

namespace attn {

ConstTensor DenseBHTD(const float* data, int64_t heads, int64_t rows, int64_t cols) {
  return ConstTensor{data, heads * rows * cols, rows * cols, cols};
}
Tensor DenseBHTD(float* data, int64_t heads, int64_t rows, int64_t cols) {
  return Tensor{data, heads * rows * cols, rows * cols, cols};
}
ConstTensor DenseBTHD(const float* data, int64_t heads, int64_t rows, int64_t cols) {
  return ConstTensor{data, rows * heads * cols, cols, heads * cols};
}
Tensor DenseBTHD(float* data, int64_t heads, int64_t rows, int64_t cols) {
  return Tensor{data, rows * heads * cols, cols, heads * cols};
}

float Problem::Scale() const {
  return scale ? *scale : float(1.0 / std::sqrt(double(head_dim)));
}

}  // namespace attn
