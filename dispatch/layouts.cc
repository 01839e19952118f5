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

const char* KernelName(KernelId id) {
  switch (id) {
    case KernelId::kAuto: return "auto";
    case KernelId::kNaive: return "naive";
    case KernelId::kBlocked: return "blocked";
    case KernelId::kStreaming: return "streaming";
    case KernelId::kParallel: return "parallel";
  }
  return "unknown";
}

KernelId ParseKernel(const std::string& name) {
  for (KernelId id : {KernelId::kAuto, KernelId::kNaive, KernelId::kBlocked,
                      KernelId::kStreaming, KernelId::kParallel}) {
    if (name == KernelName(id)) return id;
  }
  throw Error("kernel", name,
              "attn: kernel must be one of auto, naive, blocked, streaming, parallel, got " + name);
}

}  // namespace attn
