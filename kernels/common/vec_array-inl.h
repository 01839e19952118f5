// Register tiles as arrays of vectors on every target, SVE included (per-
// target include guard below).
//
// The micro-kernels keep a tile of accumulators in registers, written as an
// array of vectors (`VF acc[R * NV]`) whose indices are all compile-time
// constants once the compiler has unrolled the loops over them. SVE's
// vectors (svfloat32_t, Highway's Vec on its SVE targets) are sizeless
// types, which C++ allows as locals, parameters and references but not as
// array elements ("array elements cannot have SVE type"). So a kernel
// declares its tile with ATTN_VEC_ARRAY(V, name, N) and reads and writes
// element i as ATTN_AT(name, i):
//   - on every target but SVE these are the plain array `V name[N]` and
//     `name[i]`: the x86 and NEON code is the code of the arrays (x86: the
//     .text of the kernel objects, bf16dot, streaming, parallel and
//     blocked, byte for byte that of the arrays written out, g++ 12);
//   - on SVE, 32 named locals and an array of their addresses (a pointer to
//     a sizeless type is an ordinary, sized pointer), `*name[i]`: with i a
//     constant after unrolling, each access folds to its local (g++ 12:
//     the SVE2 ScoreTile / MixTile of blocked.cc.o keep every accumulator
//     in a z register, no SVE load or store on the stack).
// A tile of rows and columns is ATTN_VEC_ARRAY2(V, name, ROWS, COLS) and
// ATTN_AT2(name, r, c): `V name[ROWS][COLS]` elsewhere (flattened to one
// index, GCC allocated the x86 registers differently), row major over the
// 32 locals on SVE. A helper that takes a tile declares the parameter with
// ATTN_VEC_ARRAY_PARAM(V, name) and reads it with ATTN_AT.
//
// Why not a pack of locals handed to lambdas (one formulation for every
// target): GCC inlines such lambdas only when forced to, and forcing it
// multiplied the compile time and memory of kernels/bf16dot/bf16dot.cc,
// while left unforced the x86 kernels kept their accumulators in memory
// and ran far slower (docs/arm.md; docs/performance.md, "Compile time").
#if defined(ATTN_KERNELS_COMMON_VEC_ARRAY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_COMMON_VEC_ARRAY_INL_H_
#undef ATTN_KERNELS_COMMON_VEC_ARRAY_INL_H_
#else
#define ATTN_KERNELS_COMMON_VEC_ARRAY_INL_H_
#endif

#include <stdint.h>

#include <type_traits>

#include "hwy/highway.h"

#undef ATTN_VEC_ARRAY
#undef ATTN_VEC_ARRAY2
#undef ATTN_VEC_ARRAY_PARAM
#undef ATTN_AT
#undef ATTN_AT2
#if HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#define ATTN_VEC_ARRAY(V, name, N)                                       \
  static_assert((N) >= 1 && (N) <= 32, "a register tile of 1-32 vectors"); \
  V   name##_0, name##_1, name##_2, name##_3, name##_4, name##_5, name##_6, \
  name##_7, name##_8, name##_9, name##_10, name##_11, name##_12, name##_13, \
  name##_14, name##_15, name##_16, name##_17, name##_18, name##_19, \
  name##_20, name##_21, name##_22, name##_23, name##_24, name##_25, \
  name##_26, name##_27, name##_28, name##_29, name##_30, name##_31;     \
  V* const name[32] = {                                                 \
      &name##_0, &name##_1, &name##_2, &name##_3, &name##_4, &name##_5, \
      &name##_6, &name##_7, &name##_8, &name##_9, &name##_10, &name##_11, \
      &name##_12, &name##_13, &name##_14, &name##_15, &name##_16, &name##_17, \
      &name##_18, &name##_19, &name##_20, &name##_21, &name##_22, &name##_23, \
      &name##_24, &name##_25, &name##_26, &name##_27, &name##_28, &name##_29, \
      &name##_30, &name##_31}
#define ATTN_VEC_ARRAY2(V, name, ROWS, COLS) \
  ATTN_VEC_ARRAY(V, name, (ROWS) * (COLS));  \
  constexpr int name##_cols = (COLS)
#define ATTN_VEC_ARRAY_PARAM(V, name) V* const* HWY_RESTRICT name
#define ATTN_AT(name, i) (*(name)[i])
#define ATTN_AT2(name, r, c) (*(name)[(r) * name##_cols + (c)])
#else
#define ATTN_VEC_ARRAY(V, name, N) V name[N]
#define ATTN_VEC_ARRAY2(V, name, ROWS, COLS) V name[ROWS][COLS]
#define ATTN_VEC_ARRAY_PARAM(V, name) V* HWY_RESTRICT name
#define ATTN_AT(name, i) ((name)[i])
#define ATTN_AT2(name, r, c) ((name)[r][c])
#endif


#ifndef ATTN_INLINE_LAMBDA
#define ATTN_INLINE_LAMBDA __attribute__((always_inline))
// f(std::integral_constant<int, n>()) for a run-time n in [1, Max]: a tile
// whose size is known only at run time (a ragged last block of rows,
// columns or vectors) gets the compile-time size its array needs, from
// the sizes 1 to Max, each instantiated once. f is a lambda declared
// ATTN_INLINE_LAMBDA, which forwards to the tile's function: left to
// itself GCC kept such lambdas out of line, a call per tile. A lambda
// with more instructions than WithTileSize cannot be inlined into it, so
// each instruction layer (kernels/bf16dot/bf16dot.cc) defines its own copy
// with ATTN_DEFINE_WITH_TILE_SIZE.
#define ATTN_DEFINE_WITH_TILE_SIZE                                \
  template <int Max, class F>                                     \
  HWY_INLINE void WithTileSize(int64_t n, const F& f) {           \
    if constexpr (Max > 0) {                                      \
      if (n == Max) return f(std::integral_constant<int, Max>()); \
      WithTileSize<Max - 1>(n, f);                                \
    }                                                             \
  }
#endif

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {
ATTN_DEFINE_WITH_TILE_SIZE
}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
