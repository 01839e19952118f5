// Operand layouts of the AMX attention kernel (kernels/amx/), compiled once
// per Highway target (per-target include guard below). Nothing here depends
// on the tile layer (kernels/common/amx-inl.h), so the hardware and the
// emulated kernels share it.
//
// The kernel computes, for a group of 32 query rows and a key tile,
//   S = Q · Kᵀ     C = S (row-major, 16 rows x 16 keys a tile),
//                  A = Q rows, B = Kᵀ in pair form;
//   O += P · V     C = O (row-major, 16 rows x 16 columns a tile),
//                  A = P rows (bf16 weights), B = V in pair form.
// tdpbf16ps wants B as pairs along the dot product's axis (u32 elements
// holding the even element in bits 0-15, the odd one in bits 16-31):
//   Kp tile (n, t)[r][c] = (K[16n + c][32t + 2r], K[16n + c][32t + 2r + 1]):
//                  a 16 x 16 transpose of K's rows read as u32 pairs, 1 KiB
//                  contiguous per tile (stride 64 bytes);
//   Vp[u][c]     = (V[2u][c], V[2u + 1][c]): two V rows interleaved, the
//                  layout of the AVX512-BF16 kernel (bf16dot/pack-inl.h
//                  PackValuePairs), rows dv_pad u32 apart.
// Every operand is zero-padded to whole tiles: d to a multiple of 32 (one
// tile row of bf16), keys to a multiple of 32 (two key tiles, or one tile
// row of P), d_v to a multiple of 32 (two column tiles), query rows to 32
// (two row tiles). Zero rows and columns add nothing to S or O, and the
// kernel never reads the scores of padding keys or writes padding rows, so
// one tile configuration (every tile 16 x 64 bytes) serves every shape.
#if defined(ATTN_KERNELS_AMX_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_KERNELS_AMX_PACK_INL_H_
#undef ATTN_KERNELS_AMX_PACK_INL_H_
#else
#define ATTN_KERNELS_AMX_PACK_INL_H_
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/common/mca_markers.h"       // ATTN_MCA_BEGIN
#include "kernels/common/narrow_state-inl.h"  // NarrowRowStats
#include "kernels/common/pairs-inl.h"         // LoadPair, PackValuePairsOf, TileRun
#include "kernels/common/scratch.h"           // GrowScratch

HWY_BEFORE_NAMESPACE();
namespace attn {
namespace HWY_NAMESPACE {

// Rows of one query group: two row tiles.
constexpr int64_t kAmxGroupRows = 32;
// Padding quantum of d, keys and d_v: one tile row of bf16, or two tiles of
// 16 float32 columns.
constexpr int64_t kAmxPad = 32;
// u32 elements of one 16 x 16 pair tile.
constexpr int64_t kAmxTileWords = 16 * 16;

HWY_INLINE int64_t AmxRoundUp(int64_t x) {
  return (std::max<int64_t>(x, 1) + kAmxPad - 1) / kAmxPad * kAmxPad;
}

// Buffers of one AMX worker, sized for (q_block, kv_block, d, d_v) rounded
// up to whole tiles.
class AmxScratch {
 public:
  void Reserve(int64_t q_block, int64_t kv_block, int64_t d, int64_t dv) {
    q_rows_ = AmxRoundUp(q_block);
    keys_ = AmxRoundUp(kv_block);
    d_pad_ = AmxRoundUp(d);
    dv_pad_ = AmxRoundUp(dv);
    internal::GrowScratch(q_, q_size_, size_t(q_rows_ * d_pad_));
    internal::GrowScratch(kp_, kp_size_, size_t(keys_ * d_pad_ / 2));
    internal::GrowScratch(vp_, vp_size_, size_t(keys_ / 2 * dv_pad_));
    // Rows 64 bytes longer than the keys: at a row stride of a power of
    // two, the 16 rows a tile store or load touches share few L1 sets.
    s_stride_ = keys_ + 16;
    p_stride_ = keys_ + 32;
    internal::GrowScratch(s_, s_size_, size_t(kAmxGroupRows * s_stride_));
    internal::GrowScratch(p_, p_size_, size_t(kAmxGroupRows * p_stride_));
    internal::GrowScratch(o_, o_size_, size_t(q_rows_ * dv_pad_));
    if (stats_.size() < size_t(q_rows_)) stats_.resize(size_t(q_rows_));
  }
  int64_t d_pad() const { return d_pad_; }
  int64_t dv_pad() const { return dv_pad_; }
  int64_t s_stride() const { return s_stride_; }  // floats
  int64_t p_stride() const { return p_stride_; }  // bf16 elements
  // Query row r of the block, bf16, d_pad wide.
  uint16_t* q(int64_t r) const { return q_.get() + r * d_pad_; }
  uint32_t* kp() const { return kp_.get(); }
  uint32_t* vp() const { return vp_.get(); }
  float* s(int64_t r) const { return s_.get() + r * s_stride_; }  // row r of the group
  uint16_t* p(int64_t r) const { return p_.get() + r * p_stride_; }
  float* o(int64_t r) const { return o_.get() + r * dv_pad_; }  // row r of the block
  NarrowRowStats* stats() { return stats_.data(); }
  std::vector<TileRun>* runs() { return &runs_; }

 private:
  std::vector<TileRun> runs_;  // the current key tile's runs
  hwy::AlignedFreeUniquePtr<uint16_t[]> q_, p_;
  hwy::AlignedFreeUniquePtr<uint32_t[]> kp_, vp_;
  hwy::AlignedFreeUniquePtr<float[]> s_, o_;
  size_t q_size_ = 0, kp_size_ = 0, vp_size_ = 0, s_size_ = 0, p_size_ = 0, o_size_ = 0;
  int64_t q_rows_ = 0, keys_ = 0, s_stride_ = 0, p_stride_ = 0, d_pad_ = 0, dv_pad_ = 0;
  std::vector<NarrowRowStats> stats_;
};

// Rows [0, rows) of q (bf16 bits) into dst rows of d_pad, zero-padded, and
// the rows up to rows_pad zero. Once per query block.
HWY_INLINE void PackAmxQueries(const uint16_t* HWY_RESTRICT q, int64_t q_stride, int64_t rows,
                               int64_t rows_pad, int64_t d, int64_t d_pad,
                               uint16_t* HWY_RESTRICT dst) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    uint16_t* HWY_RESTRICT row = dst + r * d_pad;
    int64_t c = 0;
    if (r < rows) {
      memcpy(row, q + r * q_stride, size_t(d) * sizeof(uint16_t));
      c = d;
    }
    std::fill(row + c, row + d_pad, uint16_t{0});
  }
}

// Kp for keys [0, keys) of a tile (K rows of bf16 bits), zero up to
// keys_pad keys and d_pad / 2 pairs (layout above). Once per query block
// and key tile: d/2 u32 moves a key, against 2·q_block·(d + d_v) FLOPs of
// tile products that use them.
// k_row(n) gives K row n of the tile, for n increasing (TileRowCursor).
// Defined below for the targets with a TransposeAmxKeyTile (per target).
#undef ATTN_AMX_TRANSPOSE_KEYS
#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86
// One Kp tile from 16 K rows of 32 bf16 (16 u32 pairs) each: a 16 x 16
// transpose of u32 in registers (unpack 32, unpack 64, two 128-bit block
// shuffles: 64 shuffles for 256 pairs, against a scalar load and store
// each). Rows need not be aligned.
HWY_INLINE void TransposeAmxKeyTile(const uint16_t* const* HWY_RESTRICT rows,
                                    uint32_t* HWY_RESTRICT tile) {
  ATTN_MCA_BEGIN("amx_k_transpose_16x16");
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows[i]);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4b + j] lane-block L now holds pairs 4L + j of rows 4b .. 4b + 3.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(tile + 16 * i, r[i]);
  ATTN_MCA_END();
}
#define ATTN_AMX_TRANSPOSE_KEYS 1
#elif HWY_TARGET == HWY_AVX2 && HWY_ARCH_X86
// The same as four 8 x 8 transposes of u32 (24 shuffles each).
HWY_INLINE void TransposeAmxKeyTile(const uint16_t* const* HWY_RESTRICT rows,
                                    uint32_t* HWY_RESTRICT tile) {
  for (int kb = 0; kb < 2; ++kb) {
    for (int pb = 0; pb < 2; ++pb) {
      __m256i r[8], t[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[8 * kb + i] + 16 * pb));
      }
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      for (int i = 0; i < 4; ++i) {
        uint32_t* lo = tile + (8 * pb + i) * 16 + 8 * kb;
        uint32_t* hi = tile + (8 * pb + i + 4) * 16 + 8 * kb;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm256_permute2x128_si256(r[i], r[i + 4], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), _mm256_permute2x128_si256(r[i], r[i + 4], 0x31));
      }
    }
  }
}
#define ATTN_AMX_TRANSPOSE_KEYS 1
#endif

// Kp for keys [0, keys) of a tile (K rows of bf16 bits), zero up to
// keys_pad keys and d_pad / 2 pairs (layout above). Once per query block
// and key tile, against 2·q_block·(d + d_v) FLOPs of tile products a key.
// On AVX3 and AVX2, whole 16-key x 32-column blocks by TransposeAmxKeyTile;
// the rest (and every block elsewhere) element by element.
// k_row(n) gives K row n of the tile, for n increasing (TileRowCursor).
template <class KRow>
HWY_INLINE void PackAmxKeys(KRow&& k_row, int64_t keys, int64_t keys_pad, int64_t d,
                            int64_t d_pad, uint32_t* HWY_RESTRICT kp) {
  const int64_t chunks = d_pad / kAmxPad;  // tiles along d
  const int64_t pairs = (d + 1) / 2, pairs_pad = d_pad / 2;
  int64_t n0 = 0;
#ifdef ATTN_AMX_TRANSPOSE_KEYS
  const int64_t whole_chunks = d / kAmxPad;
  if (whole_chunks > 0) {
    const uint16_t* start[16];
    const uint16_t* rows[16];
    for (; n0 + 16 <= keys; n0 += 16) {
      for (int i = 0; i < 16; ++i) start[i] = rows[i] = k_row(n0 + i);
      uint32_t* HWY_RESTRICT base = kp + (n0 / 16) * chunks * kAmxTileWords;
      for (int64_t t = 0; t < whole_chunks; ++t) {
        TransposeAmxKeyTile(rows, base + t * kAmxTileWords);
        for (int i = 0; i < 16; ++i) rows[i] += kAmxPad;
      }
      for (int i = 0; i < 16; ++i) {
        for (int64_t t = whole_chunks * 16; t < pairs_pad; ++t) {
          const uint32_t pair = t < pairs ? LoadPair(start[i], t, d) : 0u;
          base[(t / 16) * kAmxTileWords + (t % 16) * 16 + i] = pair;
        }
      }
    }
  }
#endif
  for (int64_t n = n0; n < keys_pad; ++n) {
    uint32_t* HWY_RESTRICT base = kp + (n / 16) * chunks * kAmxTileWords + n % 16;
    const uint16_t* HWY_RESTRICT row = n < keys ? k_row(n) : nullptr;
    for (int64_t t = 0; t < pairs_pad; ++t) {
      const uint32_t pair = n < keys && t < pairs ? LoadPair(row, t, d) : 0u;
      base[(t / 16) * kAmxTileWords + (t % 16) * 16] = pair;
    }
  }
}
// The same for rows at a fixed stride from k.
HWY_INLINE void PackAmxKeys(const uint16_t* HWY_RESTRICT k, int64_t k_stride, int64_t keys,
                            int64_t keys_pad, int64_t d, int64_t d_pad,
                            uint32_t* HWY_RESTRICT kp) {
  PackAmxKeys([&](int64_t n) { return k + n * k_stride; }, keys, keys_pad, d, d_pad, kp);
}

// Vp for keys [0, keys) of a tile, zero up to keys_pad / 2 pair rows and
// dv_pad columns; returns whether any value is NaN or ±Inf.
// v_row(j) gives V row j of the tile, for j increasing (TileRowCursor).
template <class VRow>
HWY_INLINE bool PackAmxValues(VRow&& v_row, int64_t keys, int64_t keys_pad, int64_t dv,
                              int64_t dv_pad, uint32_t* HWY_RESTRICT vp) {
  const bool bad = PackValuePairsOf(v_row, keys, dv, vp, dv_pad);
  const int64_t pair_rows = (keys + 1) / 2;
  for (int64_t u = 0; u < pair_rows; ++u) std::fill(vp + u * dv_pad + dv, vp + (u + 1) * dv_pad, 0u);
  std::fill(vp + pair_rows * dv_pad, vp + keys_pad / 2 * dv_pad, 0u);
  return bad;
}
// The same for rows at a fixed stride from v.
HWY_INLINE bool PackAmxValues(const uint16_t* HWY_RESTRICT v, int64_t v_stride, int64_t keys,
                              int64_t keys_pad, int64_t dv, int64_t dv_pad,
                              uint32_t* HWY_RESTRICT vp) {
  return PackAmxValues([&](int64_t j) { return v + j * v_stride; }, keys, keys_pad, dv, dv_pad,
                       vp);
}

}  // namespace HWY_NAMESPACE
}  // namespace attn
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
