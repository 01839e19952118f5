#include "dispatch/tiles.h"

#include <omp.h>

#include <algorithm>

#include "dispatch/dot_path.h"  // AmxDeclines, IsAmxPath
#include "kernels/kernel.h"

namespace attn::internal {

namespace {
// Query rows a block of the AMX kernel at most (ChooseTiles).
constexpr int64_t kAmxBlockRows = 1024;
}  // namespace

int ResolveThreads(int requested) {
  return requested > 0 ? requested : omp_in_parallel() ? 1 : omp_get_max_threads();
}

TileInputs TileInputsFor(const Problem& p, int threads, DotPath path) {
  TileInputs in;
  in.q_len = p.q_len;
  in.kv_len = p.kv_len;
  in.head_dim = p.head_dim;
  in.value_dim = p.ValueDim();
  // Independent work items: grouped-query decode runs one view per kv head.
  in.heads = WorkItems(p);
  in.panel_width = PanelWidth();
  in.threads = threads;
  // Views of a few rows (decode) leave the AMX kernel for the narrow path
  // (kernels/amx/amx.cc), whose tiles are the default rule's.
  in.packs_kv_per_block =
      IsAmxPath(path) && p.q_len > in.panel_width / 2 && AmxDeclines(p, path).empty();
  return in;
}

Tiles ChooseTiles(const TileInputs& in) {
  Tiles t;
  const int64_t P = std::max(1, in.panel_width);
  // Every constant here was chosen and measured on AMD EPYC Zen 3 (AVX2,
  // 16-row panels, 32 KiB L1D, 512 KiB L2 per core), the only CPU measured
  // so far; the panel width is the target's (8, 16 or 32 rows), the byte
  // limits are not scaled to other caches (Zen 4: 1 MiB L2; Intel Xeon:
  // 48 KiB L1D, 2 MiB L2). Where they are wrong for a CPU, attn-tune's
  // q_block / kv_block / kv_splits candidates measure the alternatives there.
  //
  // A query block shares each key tile across its panels while the tile is
  // hot in L1/L2; 4 panels keep the accumulators (q_block x dv floats) in L1
  // for dv <= 64 and in L2 beyond (sizes as on Zen 3 AVX2: 4 x 16 rows x 64
  // floats = 16 KiB). Short queries get one (partial) panel.
  //
  // Long keys: once one head's K and V exceed kLongKvBytes they no longer
  // stay in this core's cache between query blocks, and the first panel of
  // every block waits on each key tile coming from L3/DRAM. A block of up to
  // 16 panels amortises that over 4x more rows, as long as its Qt and Ot
  // (q_block x (d + dv) floats) fit kBlockBytes, half of Zen 3's 512 KiB L2.
  // Measured on Zen 3 (streaming, 1 thread, T = 8192, d = 128): 256-row
  // blocks 67-68 GFLOP/s against 54-56 for 64; neutral at 4 MiB.
  constexpr int64_t kLongKvBytes = int64_t(4) << 20;
  constexpr int64_t kBlockBytes = int64_t(256) << 10;
  const int64_t kv_bytes = in.kv_len * (in.head_dim + in.value_dim) * int64_t(sizeof(float));
  int64_t max_panels = 4;
  if (kv_bytes >= kLongKvBytes) {
    const int64_t panel_bytes = P * (in.head_dim + in.value_dim) * int64_t(sizeof(float));
    max_panels = std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(1, panel_bytes), 4, 16);
  }
  // Key tiles: 128 keys keep the score tile (128 x P floats: 8 KiB at P = 16)
  // in Zen 3's L1 and the K/V tiles (128 x d floats each) in its L2 up to
  // d = 128; halve beyond. (At P = 32 on AVX-512 the score tile is 16 KiB.)
  t.kv_block = in.head_dim > 128 || in.value_dim > 128 ? 64 : 128;
  // The AMX kernel transposes K and interleaves V into bf16 pair tiles once
  // per query block and key tile, and its tile products are ~10x the FMAs'
  // rate, so that packing, not the products, sets its speed unless a block
  // shares it among many rows. Measured on Intel Xeon (family 6 model 167,
  // AMX, 2-core VM), all-bf16 streaming on one thread, GFLOP/s with q_block /
  // kv_block 128 / 128, 256 / 256, 512 / 512 and 1024 / 512: T = 2048
  // d = 128 349, 453, 536, 564 (PyTorch's SDPA 597 on the same core);
  // causal 319, 398, 438, 481; T = 8192 346, 463, 501, 554; d = 64 206,
  // 256, 289, 303. Blocks of up to 1024 rows and tiles of 512 keys (256
  // beyond d = 128, keeping the packed K and V tiles at 256 KiB; not
  // measured): scratch of ~1 MiB a thread at d = 128 (Q and the packed
  // tiles in bf16, O in float32). attn-tune's AMX candidates reach these
  // sizes (tools/tune/shape_tuner.cc).
  // On more threads, blocks that few leave threads idle (a causal block's
  // work grows with its rows): at least 2 (head, block) items a thread,
  // blocks no smaller than 4 panels. Same VM, parallel, 2 threads, one
  // head, GFLOP/s with blocks of 128 / 256 / 512 / 1024 rows (512-key
  // tiles, no split): T = 512 d = 128 590 / 668 / 380 / 381, causal 380 /
  // 392 / 255 / 253; T = 2048 d = 128 719 / 873 / 979 / 996, causal 590 /
  // 679 / 694 / 634; d = 64 440 / 527 / 590 / 623, causal 391 / 428 / 421
  // / 380. The rule takes 128 rows at T = 512 and 512 at T = 2048.
  if (in.packs_kv_per_block) {
    max_panels = std::max<int64_t>(1, kAmxBlockRows / P);
    t.kv_block = in.head_dim > 128 || in.value_dim > 128 ? 256 : 512;
    if (in.threads > 1) {
      const int64_t heads = std::max<int64_t>(1, in.heads);
      const int64_t blocks_per_head = (2 * int64_t(in.threads) + heads - 1) / heads;
      const int64_t rows = (in.q_len + blocks_per_head - 1) / blocks_per_head;
      max_panels = std::clamp<int64_t>((rows + P - 1) / P, std::min<int64_t>(4, max_panels),
                                       max_panels);
    }
  }
  const int64_t panels_needed = (in.q_len + P - 1) / P;
  int64_t panels = std::min<int64_t>(max_panels, panels_needed);
  t.q_block = int(panels * P);
  // Split-KV only when the (head, query block) items cannot feed every
  // thread: aim at ~2 units per thread, each with at least 256 keys (chosen
  // on the 2-core Zen 3 VM; not measured on more cores).
  const int64_t q_blocks = (in.q_len + t.q_block - 1) / t.q_block;
  const int64_t items = in.heads * q_blocks;
  int64_t splits = 1;
  if (in.threads > 1 && items < in.threads) {
    splits = (2 * int64_t(in.threads) + items - 1) / items;
    splits = std::min<int64_t>(splits, std::max<int64_t>(1, in.kv_len / 256));
  }
  splits = std::max<int64_t>(1, splits);
  // Still fewer units than threads (keys too short to split): smaller query
  // blocks, down to one panel, before any thread idles. A T = 128 head is
  // one 128-row block on AVX-512 (32-row panels) and 128 keys cannot be
  // split, which left the second of two threads idle: the Intel Xeon
  // measurement of issue 16, auto on two threads at 115 GFLOP/s against 129
  // on one (T = 128, d = 64).
  // Equal blocks: each head's rows in ceil(threads / (heads x splits)) of them.
  const int64_t per_head_units = std::max<int64_t>(1, in.heads) * splits;
  if (in.threads > 1 && q_blocks * per_head_units < int64_t(in.threads)) {
    const int64_t blocks = (int64_t(in.threads) + per_head_units - 1) / per_head_units;
    panels = std::max<int64_t>(1, (panels_needed + blocks - 1) / blocks);
  }
  t.q_block = int(panels * P);
  t.kv_splits = int(splits);
  return t;
}

Tiles ResolveTiles(const Tiles& requested, const TileInputs& in) {
  const Tiles d = ChooseTiles(in);
  Tiles t = requested;
  if (t.q_block == 0) t.q_block = d.q_block;
  if (t.kv_block == 0) t.kv_block = d.kv_block;
  if (t.kv_splits == 0) t.kv_splits = d.kv_splits;
  return t;
}

Tiles ClampTiles(const Tiles& tiles, const TileInputs& in) {
  const int64_t P = std::max(1, in.panel_width);
  const int64_t rows = (std::max<int64_t>(1, in.q_len) + P - 1) / P * P;
  const int64_t keys = std::max<int64_t>(1, in.kv_len);
  Tiles t = tiles;
  t.q_block = int(std::min<int64_t>(t.q_block, rows));
  t.kv_block = int(std::min<int64_t>(t.kv_block, keys));
  t.kv_splits = int(std::min<int64_t>(t.kv_splits, std::min<int64_t>(keys, kMaxKvSplits)));
  return t;
}

}  // namespace attn::internal
