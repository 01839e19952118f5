// The tile defaults are a pure function of the shape, the panel width and
// the thread count; these tests pin the rules stated in dispatch/tiles.cc,
// at the panel widths of every target (8, 16 and 32 rows) on every CPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "dispatch/tiles.h"

namespace attn::internal {
namespace {

// A shape on AVX2's 16-row panels; OnPanels moves it to another width.
TileInputs Inputs(int64_t tq, int64_t tk, int64_t d, int threads = 1, int64_t heads = 1) {
  TileInputs in;
  in.q_len = tq;
  in.kv_len = tk;
  in.head_dim = in.value_dim = d;
  in.heads = heads;
  in.panel_width = 16;
  in.threads = threads;
  return in;
}

// The panel widths of the other targets (2 vectors of float lanes): 8 rows
// on EMU128/SSSE3/SSE4, 32 on AVX3. ChooseTiles is a pure function of its
// inputs, so every width is tested on every CPU.
TileInputs OnPanels(int panel_width, TileInputs in) {
  in.panel_width = panel_width;
  return in;
}

TEST(ChooseTiles, QueryBlockIsWholePanelsCappedAtFour) {
  EXPECT_EQ(ChooseTiles(Inputs(1, 100, 64)).q_block, 16);
  EXPECT_EQ(ChooseTiles(Inputs(17, 100, 64)).q_block, 32);
  EXPECT_EQ(ChooseTiles(Inputs(2048, 2048, 64)).q_block, 64);
}

TEST(ChooseTiles, LongKeysGetLargerQueryBlocksWithinHalfOfL2) {
  // K + V of one head below 4 MiB: 4 panels.
  EXPECT_EQ(ChooseTiles(Inputs(8192, 4095, 128)).q_block, 64);
  // From 4 MiB: Qt + Ot of the block up to 256 KiB, 16 panels at most.
  EXPECT_EQ(ChooseTiles(Inputs(8192, 4096, 128)).q_block, 256);  // 16 x 16 KiB
  EXPECT_EQ(ChooseTiles(Inputs(8192, 8192, 64)).q_block, 256);   // capped at 16
  EXPECT_EQ(ChooseTiles(Inputs(8192, 4096, 256)).q_block, 128);  // 8 x 32 KiB
  // Never below 4 panels, never more rows than needed.
  EXPECT_EQ(ChooseTiles(Inputs(8192, 1024, 2048)).q_block, 64);
  EXPECT_EQ(ChooseTiles(Inputs(40, 8192, 128)).q_block, 48);
}

// The same rules in 8- and 32-row panels. Long keys: K + V of one head at
// least 4 MiB (kv_len x (d + dv) x 4 bytes); then max_panels =
// clamp(256 KiB / (P x (d + dv) x 4 bytes), 4, 16), else 4; q_block =
// min(max_panels, ceil(T_q / P)) x P.
TEST(ChooseTiles, QueryBlockFollowsThePanelWidth) {
  // 32-row panels (AVX3).
  // Short queries: one partial panel, then two.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(1, 100, 64))).q_block, 32);
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(33, 100, 64))).q_block, 64);
  // 2048 x 128 x 4 = 1 MiB of K + V: 4 panels of 32.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(2048, 2048, 64))).q_block, 128);
  // d 128: 4095 x 256 x 4 = 4 MiB - 1 KiB, still 4 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(8192, 4095, 128))).q_block, 128);
  // d 128, 4096 keys = 4 MiB: 256 KiB / (32 x 256 x 4 = 32 KiB) = 8 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(8192, 4096, 128))).q_block, 256);
  // d 64, 8192 keys = 4 MiB: 256 KiB / (32 x 128 x 4 = 16 KiB) = 16 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(8192, 8192, 64))).q_block, 512);
  // d 256, 4096 keys = 8 MiB: 256 KiB / 64 KiB = 4 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(8192, 4096, 256))).q_block, 128);
  // d 512, 2048 keys = 8 MiB: 256 KiB / 128 KiB = 2, raised to 4 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(8192, 2048, 512))).q_block, 128);
  // Long keys, 40 queries: 8 panels allowed, ceil(40 / 32) = 2 needed.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(40, 8192, 128))).q_block, 64);

  // 8-row panels (EMU128/SSSE3/SSE4).
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(1, 100, 64))).q_block, 8);
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(9, 100, 64))).q_block, 16);
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(2048, 2048, 64))).q_block, 32);  // 4 x 8
  // d 128, 4096 keys: 256 KiB / (8 x 256 x 4 = 8 KiB) = 32, capped at 16.
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(8192, 4096, 128))).q_block, 128);
  // d 512, 2048 keys: 256 KiB / (8 x 1024 x 4 = 32 KiB) = 8 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(8192, 2048, 512))).q_block, 64);
  // d 2048, 1024 keys = 16 MiB: 256 KiB / 128 KiB = 2, raised to 4 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(8192, 1024, 2048))).q_block, 32);
}

// The split count follows the query blocks, which follow the panel width:
// T_q 300, 4096 keys at d 64 (2 MiB: 4 panels), 16 threads; splits =
// ceil(2 x 16 / blocks), at most 4096 / 256 = 16.
TEST(ChooseTiles, SplitsFollowThePanelWidth) {
  // P 8: blocks of 32 rows, ceil(300 / 32) = 10 blocks: ceil(32 / 10) = 4.
  EXPECT_EQ(ChooseTiles(OnPanels(8, Inputs(300, 4096, 64, 16))).kv_splits, 4);
  // P 16: blocks of 64, 5 blocks: ceil(32 / 5) = 7.
  EXPECT_EQ(ChooseTiles(Inputs(300, 4096, 64, 16)).kv_splits, 7);
  // P 32: blocks of 128, 3 blocks: ceil(32 / 3) = 11.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(300, 4096, 64, 16))).kv_splits, 11);
}

TEST(ChooseTiles, KeyBlockHalvesForWideHeads) {
  EXPECT_EQ(ChooseTiles(Inputs(512, 512, 128)).kv_block, 128);
  EXPECT_EQ(ChooseTiles(Inputs(512, 512, 256)).kv_block, 64);
}

TEST(ChooseTiles, SplitsKeysOnlyWhenItemsCannotFeedThreads) {
  // One thread: never split.
  EXPECT_EQ(ChooseTiles(Inputs(1, 32768, 128, 1)).kv_splits, 1);
  // Decode, one head, 16 threads: ~2 units per thread.
  EXPECT_EQ(ChooseTiles(Inputs(1, 32768, 128, 16)).kv_splits, 32);
  // Enough heads to feed every thread: no split.
  EXPECT_EQ(ChooseTiles(Inputs(1, 32768, 128, 16, 32)).kv_splits, 1);
  // Short keys: at least 256 keys per split.
  EXPECT_EQ(ChooseTiles(Inputs(1, 600, 128, 16)).kv_splits, 2);
  // Prefill with many query blocks: no split.
  EXPECT_EQ(ChooseTiles(Inputs(2048, 2048, 128, 2)).kv_splits, 1);
}

// Keys too short to split (< 2 x 256) and fewer (head, query block) items
// than threads: the query blocks shrink, in equal parts down to one panel,
// until every thread has one (issue 16: T = 128 on AVX-512 was one block
// for two threads).
TEST(ChooseTiles, ShortKeysCutQueriesBeforeAThreadIdles) {
  // 32-row panels, T 128, one head: 4 panels -> two blocks of 2 panels.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(128, 128, 64, 2))).q_block, 64);
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(128, 128, 64, 2))).kv_splits, 1);
  // One thread, or enough heads: the 4-panel block stays.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(128, 128, 64, 1))).q_block, 128);
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(128, 128, 64, 2, 2))).q_block, 128);
  // 16-row panels: T 128 is already two 64-row blocks for two threads; four
  // threads get four blocks of 32 rows, sixteen threads one panel each.
  EXPECT_EQ(ChooseTiles(Inputs(128, 128, 64, 2)).q_block, 64);
  EXPECT_EQ(ChooseTiles(Inputs(128, 128, 64, 4)).q_block, 32);
  EXPECT_EQ(ChooseTiles(Inputs(128, 128, 64, 16)).q_block, 16);
  // 3 threads, 8 panels: ceil(8 / 3) = 3 panels a block (3 blocks).
  EXPECT_EQ(ChooseTiles(Inputs(128, 128, 64, 3)).q_block, 48);
  // Keys long enough to split: splits feed the threads, the block stays.
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(128, 4096, 64, 2))).q_block, 128);
  EXPECT_GE(ChooseTiles(OnPanels(32, Inputs(128, 4096, 64, 2))).kv_splits, 2);
}

// The AMX kernel packs K and V once per query block and key tile: blocks
// of up to 1024 rows and tiles of 512 keys (256 beyond d = 128), measured in
// dispatch/tiles.cc; the thread rule still cuts blocks before a thread idles.
TileInputs PackingPerBlock(TileInputs in) {
  in.packs_kv_per_block = true;
  return in;
}

TEST(ChooseTiles, AmxBlocksShareEachPackingAmongUpTo1024Rows) {
  const Tiles t = ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(2048, 2048, 128))));
  EXPECT_EQ(t.q_block, 1024);
  EXPECT_EQ(t.kv_block, 512);
  EXPECT_EQ(ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(8192, 8192, 64)))).q_block, 1024);
  // Fewer rows: one block of whole panels.
  EXPECT_EQ(ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(100, 2048, 128)))).q_block, 128);
  // Wide heads: half the key tile.
  EXPECT_EQ(ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(2048, 2048, 256)))).kv_block, 256);
  // Two threads, one head: at least 2 blocks a thread, of at least 4
  // panels, and no split-KV while the blocks feed the threads.
  EXPECT_EQ(ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(2048, 2048, 128, 2)))).q_block,
            512);
  const Tiles t512 = ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(512, 512, 128, 2))));
  EXPECT_EQ(t512.q_block, 128);
  EXPECT_EQ(t512.kv_splits, 1);
  EXPECT_EQ(ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(256, 256, 128, 2)))).q_block, 128);
  // Enough heads to feed the threads: the whole 1024-row block.
  EXPECT_EQ(
      ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(2048, 2048, 128, 2, 16)))).q_block, 1024);
  // 8 threads, 2 heads: 8 blocks a head, 256 rows each.
  EXPECT_EQ(
      ChooseTiles(PackingPerBlock(OnPanels(32, Inputs(2048, 2048, 128, 8, 2)))).q_block, 256);
  // Without the packing the rule is the widened kernels' (4 panels here).
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(2048, 2048, 128))).q_block, 128);
  EXPECT_EQ(ChooseTiles(OnPanels(32, Inputs(2048, 2048, 128))).kv_block, 128);
}

TEST(TileInputsFor, OnlyAllBf16ProblemsOnTheAmxPathPackPerBlock) {
  Problem p;
  p.q_len = p.kv_len = 256;
  p.head_dim = 64;
  p.q.dtype = p.k.dtype = p.v.dtype = p.out.dtype = DType::kBF16;
  // The emulated AMX path runs on every CPU and target.
  EXPECT_TRUE(TileInputsFor(p, 1, DotPath::kAmxEmulated).packs_kv_per_block);
  EXPECT_FALSE(TileInputsFor(p, 1, DotPath::kWiden).packs_kv_per_block);
  EXPECT_FALSE(TileInputsFor(p, 1, DotPath::kAvx512Bf16Emulated).packs_kv_per_block);
  // A decode step leaves the AMX kernel for the narrow path.
  Problem decode = p;
  decode.q_len = 1;
  EXPECT_FALSE(TileInputsFor(decode, 1, DotPath::kAmxEmulated).packs_kv_per_block);
  // float32 K: no dot path at all.
  Problem mixed = p;
  mixed.k.dtype = DType::kF32;
  EXPECT_FALSE(TileInputsFor(mixed, 1, DotPath::kAmxEmulated).packs_kv_per_block);
}

TEST(ResolveTiles, FillsOnlyZeroFields) {
  Tiles requested;
  requested.kv_block = 7;
  const Tiles t = ResolveTiles(requested, Inputs(100, 100, 64));
  EXPECT_EQ(t.kv_block, 7);
  EXPECT_EQ(t.q_block, 64);
  EXPECT_EQ(t.kv_splits, 1);
}

TEST(ClampTiles, LimitsEveryFieldToTheProblem) {
  Tiles huge;
  huge.q_block = INT32_MAX;
  huge.kv_block = INT32_MAX;
  huge.kv_splits = INT32_MAX;
  const Tiles t = ClampTiles(huge, Inputs(2, 3, 8));
  EXPECT_EQ(t.q_block, 16);  // T_q = 2 rounded up to one panel
  EXPECT_EQ(t.kv_block, 3);
  EXPECT_EQ(t.kv_splits, 3);
  EXPECT_EQ(ClampTiles(huge, Inputs(5, 100000, 8)).kv_splits, kMaxKvSplits);
  // Tiles within the problem are left alone.
  const Tiles d = ChooseTiles(Inputs(2048, 2048, 64));
  const Tiles same = ClampTiles(d, Inputs(2048, 2048, 64));
  EXPECT_EQ(same.q_block, d.q_block);
  EXPECT_EQ(same.kv_block, d.kv_block);
  EXPECT_EQ(same.kv_splits, d.kv_splits);
}

TEST(ClampTiles, RoundsQueryRowsUpToThePanelWidth) {
  Tiles huge;
  huge.q_block = INT32_MAX;
  huge.kv_block = huge.kv_splits = 1;
  EXPECT_EQ(ClampTiles(huge, OnPanels(32, Inputs(2, 3, 8))).q_block, 32);
  EXPECT_EQ(ClampTiles(huge, OnPanels(32, Inputs(33, 3, 8))).q_block, 64);
  EXPECT_EQ(ClampTiles(huge, OnPanels(8, Inputs(2, 3, 8))).q_block, 8);
  EXPECT_EQ(ClampTiles(huge, OnPanels(8, Inputs(9, 3, 8))).q_block, 16);
  // A q_block within the rounded rows is left alone.
  Tiles small = huge;
  small.q_block = 40;
  EXPECT_EQ(ClampTiles(small, OnPanels(32, Inputs(100, 3, 8))).q_block, 40);  // 128 rows
}

}  // namespace
}  // namespace attn::internal
