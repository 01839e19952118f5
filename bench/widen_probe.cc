// Widening probe (see widen_probe.h), compiled once per Highway target.
//
// What a decode step's arithmetic costs per element of each K/V type, with
// memory out of the picture: rows of an L1-resident buffer, each element
// loaded and widened by the decode row walks' own LoadRowVector
// (widen-inl.h: float32, bf16 and f16 through LoadWide; a q8_0 block's
// int8 values converted and multiplied by its scale), then multiplied into
// float32 accumulators:
// - one query row (multi-head decode, kernels/decode/row-inl.h's NarrowRowKeys):
//   q's 8 vectors in registers, one FMA per widened vector;
// - four query rows (a GQA group of 4, NarrowRowGroupKeys' scores): each
//   widened vector shared by four FMAs, q loaded from L1 as there.
// Several keys' accumulators are in flight (independent chains), so the
// loop is bound by throughput, not FMA latency. The sums are returned so
// that the work is observable.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/widen_probe.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"  // DType
#include "hwy/highway.h"
#include "kernels/common/vec_array-inl.h"   // ATTN_VEC_ARRAY, ATTN_AT
#include "kernels/common/widen-inl.h"       // LoadRowVector, Q8_0Row, Q4_0Row, Q8_0VectorsTileBlocks

HWY_BEFORE_NAMESPACE();
namespace attn_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Vectors of a probe row (d = 8 vectors: 128 elements on AVX-512, 64 on AVX2).
constexpr int kRowVectors = 8;

// One query row: `keys` rows of row_bytes bytes, `passes` times, KB keys'
// dot products in flight (32 vector registers on AVX-512 hold q, 8
// accumulators and the loads; 16 elsewhere, 4 accumulators).
template <typename T>
HWY_INLINE float OneRow(const char* HWY_RESTRICT rows, int64_t row_bytes, int64_t keys,
                        const float* HWY_RESTRICT q, int64_t passes) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
#if HWY_TARGET <= HWY_AVX3
  constexpr int KB = 8;
#else
  constexpr int KB = 4;
#endif
  ATTN_VEC_ARRAY(VF, qv, kRowVectors);
  ATTN_VEC_ARRAY(VF, acc, KB);
  for (int n = 0; n < kRowVectors; ++n) ATTN_AT(qv, n) = hn::Load(df, q + n * N);
  for (int b = 0; b < KB; ++b) ATTN_AT(acc, b) = hn::Zero(df);
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t j = 0; j + KB <= keys; j += KB) {
      // Each key's vectors in order, as the row walk reads a row (the
      // keys' chains are independent, so the core overlaps them).
      for (int b = 0; b < KB; ++b) {
        for (int n = 0; n < kRowVectors; ++n) {
          const VF k = attn::HWY_NAMESPACE::LoadRowVector<T>(rows + (j + b) * row_bytes, n);
          ATTN_AT(acc, b) = hn::MulAdd(ATTN_AT(qv, n), k, ATTN_AT(acc, b));
        }
      }
    }
  }
  VF sum = ATTN_AT(acc, 0);
  for (int b = 1; b < KB; ++b) sum = hn::Add(sum, ATTN_AT(acc, b));
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

// Four query rows: each widened vector into 4 rows' accumulators, 2 keys'
// at a time, q vectors from L1 (4 rows x 8 vectors).
template <typename T>
HWY_INLINE float FourRows(const char* HWY_RESTRICT rows, int64_t row_bytes, int64_t keys,
                          const float* HWY_RESTRICT q, int64_t passes) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int KB = 2, R = 4;
  ATTN_VEC_ARRAY(VF, acc, KB * R);
  for (int i = 0; i < KB * R; ++i) ATTN_AT(acc, i) = hn::Zero(df);
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t j = 0; j + KB <= keys; j += KB) {
      // Each key's vectors in order, as the group walk reads a K row.
      for (int b = 0; b < KB; ++b) {
        for (int n = 0; n < kRowVectors; ++n) {
          const VF k = attn::HWY_NAMESPACE::LoadRowVector<T>(rows + (j + b) * row_bytes, n);
          for (int r = 0; r < R; ++r) {
            ATTN_AT(acc, b * R + r) =
                hn::MulAdd(hn::Load(df, q + (r * kRowVectors + n) * N), k, ATTN_AT(acc, b * R + r));
          }
        }
      }
    }
  }
  VF sum = ATTN_AT(acc, 0);
  for (int i = 1; i < KB * R; ++i) sum = hn::Add(sum, ATTN_AT(acc, i));
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

int64_t RowElementsImpl() { return kRowVectors * int64_t(hn::Lanes(DF())); }

float WidenDotImpl(attn::DType type, int query_rows, const void* rows, int64_t row_bytes,
                   int64_t keys, const float* q, int64_t passes) {
  const char* HWY_RESTRICT bytes = static_cast<const char*>(rows);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    return query_rows == 4 ? FourRows<T>(bytes, row_bytes, keys, q, passes)
                           : OneRow<T>(bytes, row_bytes, keys, q, passes);
  };
  switch (type) {
    case attn::DType::kBF16: return run(hwy::bfloat16_t());
    case attn::DType::kF16: return run(hwy::float16_t());
    case attn::DType::kQ8_0:
      // Whole vectors tile a 32-element block on every fixed-width target;
      // a scalable vector that does not (say 12 lanes) has no q8_0 row.
      if (!attn::HWY_NAMESPACE::Q8_0VectorsTileBlocks(DF())) return -1.0f;
      return run(attn::HWY_NAMESPACE::Q8_0Row());
    case attn::DType::kQ4_0:
      // A vector must lie within one half of a block's nibbles.
      if (!attn::HWY_NAMESPACE::Q4_0Format::VectorsTile(DF())) return -1.0f;
      return run(attn::HWY_NAMESPACE::Q4_0Row());
    case attn::DType::kF32: break;
  }
  return run(float());
}

}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "bench/widen_probe.h"

namespace attn_bench {
HWY_EXPORT(RowElementsImpl);
HWY_EXPORT(WidenDotImpl);

int64_t WidenProbeRowElements() { return HWY_DYNAMIC_DISPATCH(RowElementsImpl)(); }

float WidenDot(attn::DType type, int query_rows, const void* rows, int64_t row_bytes, int64_t keys,
               const float* q, int64_t passes) {
  return HWY_DYNAMIC_DISPATCH(WidenDotImpl)(type, query_rows, rows, row_bytes, keys, q, passes);
}

}  // namespace attn_bench
#endif  // HWY_ONCE
