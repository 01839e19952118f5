// Whether the narrow path may take its pipelined walk (narrow-inl.h
// NarrowPipelines). On by default; tests turn it off to run the tiled walk on
// the same views and compare the two bit for bit. Not part of the public API.
#pragma once

#include <atomic>

namespace attn::internal {

inline std::atomic<bool>& NarrowPipelineAllowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

}  // namespace attn::internal
