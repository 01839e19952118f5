// Growth of the kernels' per-thread scratch buffers (target-independent).
#pragma once

#include <cstddef>
#include <new>
#include <utility>

#include "hwy/aligned_allocator.h"

namespace attn::internal {

// Makes `buffer` hold at least `need` elements (`size` is its current
// capacity). Allocates first and replaces after, so a failed growth throws
// std::bad_alloc (reported as attn::Error "memory") and leaves the old,
// smaller but valid buffer and size for the next call on this thread.
template <typename T>
inline void GrowScratch(hwy::AlignedFreeUniquePtr<T[]>& buffer, size_t& size, size_t need) {
  if (need <= size) return;
  hwy::AlignedFreeUniquePtr<T[]> grown = hwy::AllocateAligned<T>(need);
  if (!grown) throw std::bad_alloc();
  buffer = std::move(grown);
  size = need;
}

}  // namespace attn::internal
