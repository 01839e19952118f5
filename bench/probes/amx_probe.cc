// What bounds the AMX kernel's tile stages and whether they overlap the
// vector work between them, measured outside attn: a standalone program,
// not part of the build (it needs a CPU with AMX-BF16 and Linux's
// permission for the tile state).
//
//   g++ -O2 -mamx-tile -mamx-bf16 -mavx512f -mavx512bw -mavx512bf16 bench/probes/amx_probe.cc -o /tmp/amx_probe && /tmp/amx_probe
//
// Rows (one thread, best of 3 runs each):
//   dots            2 x 2 tdpbf16ps blocks on tiles already loaded
//   dots+loads      the same with its four operand tiles loaded from L1
//                   each block (the kernel's pattern)
//   qk keys=N       the kernel's S = Q·Kᵀ step (d = 128: 4 chunks of 4
//                   loads and 4 dots, then 4 tile stores of S) over N keys,
//                   with and without the stores
//   pv keys=N       the kernel's O += P·V chunk loop (dv = 128) over N keys
//   overlap         4 dots, then a vector pass over 256 floats (exp-like
//                   FMAs, a bf16 store), alternated: "both" against the
//                   sum of the two alone (equal: no overlap)
// docs/performance.md quotes the figures (bench/results/<kind>/amx-probe.txt).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int kD = 128;  // d and d_v of the qk and pv rows
constexpr double kDotFlops = 2.0 * 16 * 16 * 32;

// Seconds of the best of three runs of f.
double Best(const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

alignas(64) uint16_t g_a[2][512], g_b[2][512];

void Dots(int64_t n, bool loads) {
  for (int64_t i = 0; i < n; ++i) {
    if (loads) {
      _tile_loadd(4, g_a[0], 64);
      _tile_loadd(5, g_a[1], 64);
      _tile_loadd(6, g_b[0], 64);
      _tile_loadd(7, g_b[1], 64);
    }
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

void Scores(const uint16_t* q, const uint32_t* kp, float* s, int keys, bool store) {
  for (int n = 0; n < keys / 16; n += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int t = 0; t < kD / 32; ++t) {
      _tile_loadd(4, q + t * 32, kD * 2);
      _tile_loadd(5, q + 16 * kD + t * 32, kD * 2);
      _tile_loadd(6, kp + (n * 4 + t) * 256, 64);
      _tile_loadd(7, kp + ((n + 1) * 4 + t) * 256, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if (store) {
      _tile_stored(0, s + n * 16, keys * 4);
      _tile_stored(1, s + (n + 1) * 16, keys * 4);
      _tile_stored(2, s + 16 * keys + n * 16, keys * 4);
      _tile_stored(3, s + 16 * keys + (n + 1) * 16, keys * 4);
    }
  }
}

void Mix(const uint16_t* p, const uint32_t* vp, float* o, int keys) {
  for (int c = 0; c < kD; c += 32) {
    _tile_loadd(0, o + c, kD * 4);
    _tile_loadd(1, o + c + 16, kD * 4);
    _tile_loadd(2, o + 16 * kD + c, kD * 4);
    _tile_loadd(3, o + 16 * kD + c + 16, kD * 4);
    for (int u = 0; u < keys; u += 32) {
      _tile_loadd(4, p + u, keys * 2);
      _tile_loadd(5, p + 16 * keys + u, keys * 2);
      _tile_loadd(6, vp + (u / 2) * kD + c, kD * 4);
      _tile_loadd(7, vp + (u / 2) * kD + c + 16, kD * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, o + c, kD * 4);
    _tile_stored(1, o + c + 16, kD * 4);
    _tile_stored(2, o + 16 * kD + c, kD * 4);
    _tile_stored(3, o + 16 * kD + c + 16, kD * 4);
  }
}

alignas(64) float g_s[256];
alignas(64) uint16_t g_p[256];

__attribute__((noinline)) float VectorPass() {
  __m512 acc = _mm512_setzero_ps();
  const __m512 c = _mm512_set1_ps(0.5f);
  for (int j = 0; j < 256; j += 16) {
    __m512 x = _mm512_load_ps(g_s + j);
    for (int k = 0; k < 6; ++k) x = _mm512_fmadd_ps(x, c, c);
    acc = _mm512_add_ps(acc, x);
    const __m256bh b = _mm512_cvtneps_pbh(x);
    memcpy(g_p + j, &b, sizeof(b));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  float sum = 0.0f;
  for (const float x : lanes) sum += x;
  return sum;
}

}  // namespace

int main() {
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
    std::printf("amx_probe: Linux refused the AMX tile state\n");
    return 1;
  }
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
  const int64_t blocks = 200000;
  for (const bool loads : {false, true}) {
    const double s = Best([&] { Dots(blocks, loads); });
    std::printf("%-18s %7.0f GFLOP/s  %.2f ns a tdpbf16ps\n", loads ? "dots+loads" : "dots",
                4 * blocks * kDotFlops / s * 1e-9, s * 1e9 / (4 * blocks));
  }
  for (const int keys : {128, 512}) {
    auto* q = static_cast<uint16_t*>(aligned_alloc(64, 32 * kD * 2));
    auto* kp = static_cast<uint32_t*>(aligned_alloc(64, size_t(keys) * kD * 2));
    auto* s = static_cast<float*>(aligned_alloc(64, size_t(32) * keys * 4));
    auto* p = static_cast<uint16_t*>(aligned_alloc(64, size_t(32) * keys * 2));
    auto* vp = static_cast<uint32_t*>(aligned_alloc(64, size_t(keys) / 2 * kD * 4));
    auto* o = static_cast<float*>(aligned_alloc(64, 32 * kD * 4));
    memset(q, 0, 32 * kD * 2);
    memset(kp, 0, size_t(keys) * kD * 2);
    memset(s, 0, size_t(32) * keys * 4);
    memset(p, 0, size_t(32) * keys * 2);
    memset(vp, 0, size_t(keys) / 2 * kD * 4);
    memset(o, 0, 32 * kD * 4);
    const int reps = 2000000 / keys;
    const double scores = 32.0 * keys * reps;
    for (const bool store : {true, false}) {
      const double t = Best([&] {
        for (int r = 0; r < reps; ++r) Scores(q, kp, s, keys, store);
      });
      std::printf("qk keys=%-4d %s %7.0f GFLOP/s  %.3f ns a score\n", keys,
                  store ? "stores  " : "no store", scores * 2 * kD / t * 1e-9, t * 1e9 / scores);
    }
    const double t = Best([&] {
      for (int r = 0; r < reps; ++r) Mix(p, vp, o, keys);
    });
    std::printf("pv keys=%-4d          %7.0f GFLOP/s  %.3f ns a score\n", keys,
                scores * 2 * kD / t * 1e-9, t * 1e9 / scores);
    free(q), free(kp), free(s), free(p), free(vp), free(o);
  }
  float sink = 0.0f;
  const int64_t n = 100000;
  const double tiles = Best([&] { Dots(n, true); });
  const double vectors = Best([&] {
    for (int64_t i = 0; i < n; ++i) sink += VectorPass();
  });
  const double both = Best([&] {
    for (int64_t i = 0; i < n; ++i) {
      Dots(1, true);
      sink += VectorPass();
    }
  });
  std::printf("overlap: tiles %.1f ns, vectors %.1f ns, both %.1f ns a round (sum %.1f)%s\n",
              tiles * 1e9 / n, vectors * 1e9 / n, both * 1e9 / n, (tiles + vectors) * 1e9 / n,
              sink == 12345.0f ? " " : "");
  _tile_release();
  return 0;
}
