// The tile defaults are a pure function of the shape, the panel width and
// the thread count; these tests pin the rules stated in dispatch/tiles.cc.
#include <gtest/gtest.h>

#include <cstdint>

#include "dispatch/tiles.h"

namespace attn::internal {
namespace {

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

}  // namespace
}  // namespace attn::internal
