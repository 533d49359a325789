// ChunkTree: its contract on constructed keys (a KeysCatalog computes store-chunk abstracts from
// keys the test sets and records every load_abstracts call), and its invariants under random
// grow/split/merge sequences over a real TieredKvCache whose chunks spill to disk: the f16 block
// boxes bound every key, rounded outward, and the tree's bytes stay within what its arrays need.
#include "sparse/chunk_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.h"
#include "keys_catalog.h"
#include "core/fp16.h"
#include "kv/tiered_kv_cache.h"
#include "kv/box_f16.h"

namespace leoam::sparse {
namespace {

using testing_util::KeysCatalog;
using testing_util::Load;
using Ranges = std::vector<TokenRange>;

Ranges leaves_of(const ChunkTree& tree) {
  Ranges r;
  for (int64_t i = 0; i < tree.n_leaves(); ++i) r.push_back(tree.leaf(i));
  return r;
}

// Block b's box, decoded to f32.
std::vector<float> box_at(const ChunkTree& tree, int64_t b) {
  std::vector<float> box(static_cast<size_t>(tree.layout().chunk_stride));
  decode_box(tree.block_box(b), tree.layout().chunk_stride, box.data());
  return box;
}

ChunkTreeOptions sizes(int min, int max, int initial, int block) {
  return {.min_tokens = min, .max_tokens = max, .initial_tokens = initial, .block_tokens = block};
}

ChunkTree make_tree(ChunkTreeOptions o, int store_chunk, int n_kv_heads, int head_dim) {
  auto t = ChunkTree::create(o, store_chunk, n_kv_heads, head_dim);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

constexpr int kTreeLayer = 1;

// Keys drawn from [-3, 3) for positions [0, n) of a catalog of 2 kv heads of 2 channels, which
// keeps the key sign sketch.
void set_random_keys(KeysCatalog& catalog, int64_t n, unsigned seed) {
  catalog.with_key_signs();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t p = 0; p < n; ++p) catalog.set_keys(p, p + 1, {u(rng), u(rng), u(rng), u(rng)});
}

TEST(ChunkTree, CreateRejectsBadSizes) {
  auto bad = [](int min, int initial, int max, int store_chunk = 8, int block = 0) {
    auto t = ChunkTree::create(sizes(min, max, initial, block > 0 ? block : initial), store_chunk, 1, 2);
    if (t.is_ok()) return false;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    return true;
  };
  EXPECT_FALSE(bad(8, 64, 512));
  EXPECT_FALSE(bad(16, 16, 16));
  EXPECT_FALSE(bad(24, 96, 384));     // powers of two times min, min a multiple of 8
  EXPECT_TRUE(bad(12, 48, 384));      // min not a multiple of the store chunk
  EXPECT_TRUE(bad(0, 64, 512));
  EXPECT_TRUE(bad(-8, 64, 512));
  EXPECT_TRUE(bad(16, 48, 128));      // initial not min * 2^k
  EXPECT_TRUE(bad(16, 32, 96));       // max not min * 2^k
  EXPECT_TRUE(bad(16, 256, 128));     // initial > max
  EXPECT_TRUE(bad(16, 8, 128));       // initial < min
  EXPECT_TRUE(bad(8, 64, 512, 0));    // no store chunk
  EXPECT_FALSE(bad(8, 8, 512, 8, 64));
  EXPECT_TRUE(bad(8, 8, 512, 8, 48));  // block not min * 2^k
  EXPECT_TRUE(bad(8, 8, 64, 8, 128));  // block > max
  EXPECT_TRUE(bad(8, 8, 64, 8, 4));    // block < min
  EXPECT_FALSE(ChunkTree::create({8, 512, 64}, 8, 0, 2).is_ok());
  EXPECT_FALSE(ChunkTree::create({8, 512, 64}, 8, 1, 0).is_ok());
}

// Store chunk 8, leaves 8..128, new leaves and blocks of 32: [0, 75) is [0, 32) [32, 64) [64, 75),
// the last cut by n; growing to 100 refreshes the block [64, 96) and adds [96, 100).
TEST(ChunkTree, GrowsAlignedLeavesAndRefreshesTheEdge) {
  KeysCatalog catalog(8, 2, 2);
  catalog.set_keys(0, 70, {1, -1});
  catalog.set_keys(70, 75, {2, 0});
  ChunkTree tree = make_tree(sizes(8, 128, 32, 32), 8, 2, 2);
  EXPECT_EQ(tree.n_tokens(), 0);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 75, AbstractSource::kLka).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 64}, {64, 75}}));
  EXPECT_EQ(tree.n_tokens(), 75);
  EXPECT_EQ(catalog.loads(), (std::vector<Load>{{kTreeLayer, 0, 10}}));
  EXPECT_EQ(tree.n_blocks(), 3);
  EXPECT_EQ(box_at(tree, 2), (std::vector<float>{1, -1, 1, -1, 2, 0, 2, 0}));
  EXPECT_FALSE(tree.can_split(2));  // cut by n
  EXPECT_TRUE(tree.can_split(1));

  tree.history(2).cold_steps = 3;
  catalog.set_keys(75, 100, {-3, 5});
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 100, AbstractSource::kKv).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 64}, {64, 96}, {96, 100}}));
  EXPECT_EQ(catalog.loads().back(), (Load{kTreeLayer, 8, 13}));  // from the edge block's first store chunk
  EXPECT_EQ(box_at(tree, 2), catalog.abstract_of(64, 96));
  EXPECT_EQ(box_at(tree, 2), (std::vector<float>{-3, -1, -3, -1, 2, 5, 2, 5}));
  EXPECT_EQ(box_at(tree, 3), catalog.abstract_of(96, 100));
  EXPECT_EQ(tree.history(2).cold_steps, 3);  // the edge leaf keeps its history
  EXPECT_EQ(tree.history(3).cold_steps, 0);
  EXPECT_TRUE(tree.can_split(2));

  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 100, AbstractSource::kLka).is_ok());  // nothing new: no read
  EXPECT_EQ(catalog.loads().size(), 2u);
  const Status shrink = tree.grow(catalog, kTreeLayer, 90, AbstractSource::kLka);
  EXPECT_EQ(shrink.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tree.n_tokens(), 100);

  tree.reset();
  EXPECT_EQ(tree.n_leaves(), 0);
  EXPECT_EQ(tree.n_tokens(), 0);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 40, AbstractSource::kLka).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 40}}));
}

TEST(ChunkTree, GrowFailureLeavesTheTreeUnchanged) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 64, {1, 1});
  ChunkTree tree = make_tree(sizes(8, 128, 32, 32), 8, 1, 2);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 40, AbstractSource::kLka).is_ok());
  const auto before = box_at(tree, 1);
  catalog.fail_loads_with(io_error("layer 1 abstracts: short read"));
  const Status st = tree.grow(catalog, kTreeLayer, 64, AbstractSource::kLka);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 40}}));
  EXPECT_EQ(tree.n_tokens(), 40);
  EXPECT_EQ(box_at(tree, 1), before);
}

// Leaves begin at multiples of min_tokens, kept as 32-bit counts of them: a context past 2^32
// leaves of min_tokens is refused before anything is read or grown.
TEST(ChunkTree, GrowRefusesMoreLeafBeginsThanItCanHold) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 64, {1, 1});
  ChunkTree tree = make_tree(sizes(8, 128, 32, 32), 8, 1, 2);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 40, AbstractSource::kLka).is_ok());
  const size_t n_loads = catalog.loads().size();
  const Status st = tree.grow(catalog, kTreeLayer, (int64_t{1} << 32) * 8 + 8, AbstractSource::kLka);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("2^32 leaves"), std::string::npos) << st.message();
  EXPECT_EQ(catalog.loads().size(), n_loads);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 40}}));
}

// A leaf's history counts its streak of selected or unselected steps, up to 255, and a step of
// the other kind ends the streak.
TEST(LeafHistory, CountsStreaksAndSaturates) {
  LeafHistory h;
  for (int i = 0; i < 300; ++i) h.note(true);
  EXPECT_EQ(h.hot_steps, 255);
  EXPECT_EQ(h.cold_steps, 0);
  h.note(false);
  EXPECT_EQ(h.hot_steps, 0);
  EXPECT_EQ(h.cold_steps, 1);
  h.note(false);
  EXPECT_EQ(h.cold_steps, 2);
  h.note(true);
  EXPECT_EQ(h.hot_steps, 1);
  EXPECT_EQ(h.cold_steps, 0);
}

// [0, 72) with leaves 8..64, new ones 32, blocks of 64: [0, 32) [32, 64) [64, 72). Splits and
// merges change the leaves only: they read nothing and leave the blocks' boxes as they were.
TEST(ChunkTree, SplitAndMergeFollowTheBuddyRules) {
  KeysCatalog catalog(8, 1, 2);
  for (int64_t p = 0; p < 72; ++p) catalog.set_keys(p, p + 1, {static_cast<float>(p), static_cast<float>(-p)});
  ChunkTree tree = make_tree(sizes(8, 64, 32, 64), 8, 1, 2);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 72, AbstractSource::kLka).is_ok());
  const size_t n_loads = catalog.loads().size();
  ASSERT_EQ(tree.n_blocks(), 2);
  const std::vector<float> block0 = box_at(tree, 0);
  EXPECT_EQ(block0, catalog.abstract_of(0, 64));
  EXPECT_FALSE(tree.can_split(2));   // cut by n
  EXPECT_FALSE(tree.can_split(3));   // no such leaf
  EXPECT_FALSE(tree.can_split(-1));
  tree.history(0).hot_steps = 3;
  tree.history(1).cold_steps = 2;

  ASSERT_TRUE(tree.split(0).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 16}, {16, 32}, {32, 64}, {64, 72}}));
  EXPECT_EQ(tree.history(0).hot_steps, 0);  // fresh halves
  EXPECT_EQ(tree.history(1).hot_steps, 0);
  EXPECT_EQ(tree.history(2).cold_steps, 2);  // [32, 64) keeps its own

  ASSERT_TRUE(tree.split(0).is_ok());
  ASSERT_TRUE(tree.split(2).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 8}, {8, 16}, {16, 24}, {24, 32}, {32, 64}, {64, 72}}));
  EXPECT_FALSE(tree.can_split(0));  // min size
  EXPECT_EQ(tree.split(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tree.n_leaves(), 6);

  EXPECT_TRUE(tree.can_merge(0));
  EXPECT_FALSE(tree.can_merge(1));  // [8, 16) [16, 24): not aligned to 16
  EXPECT_TRUE(tree.can_merge(2));
  EXPECT_FALSE(tree.can_merge(3));  // [24, 32) [32, 64): sizes differ
  EXPECT_FALSE(tree.can_merge(4));  // [32, 64) [64, 72): the second is cut by n
  EXPECT_FALSE(tree.can_merge(5));  // no right neighbour
  EXPECT_FALSE(tree.can_merge(-1));
  tree.history(2).cold_steps = 9;
  tree.merge(2);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 8}, {8, 16}, {16, 32}, {32, 64}, {64, 72}}));
  EXPECT_EQ(tree.history(2).cold_steps, 0);
  EXPECT_FALSE(tree.can_merge(1));  // [8, 16) [16, 32)
  tree.merge(0);
  tree.merge(0);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 64}, {64, 72}}));
  EXPECT_TRUE(tree.can_merge(0));  // 64 <= max
  tree.merge(0);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 64}, {64, 72}}));
  EXPECT_FALSE(tree.can_merge(0));
  EXPECT_EQ(catalog.loads().size(), n_loads);
  EXPECT_EQ(box_at(tree, 0), block0);

  // Grown past the cut leaf, [64, 128) is full: merging it with [0, 64) would pass max.
  catalog.set_keys(72, 128, {0, 0});
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 128, AbstractSource::kLka).is_ok());
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 64}, {64, 96}, {96, 128}}));
  EXPECT_FALSE(tree.can_merge(0));
  EXPECT_TRUE(tree.can_merge(1));
  tree.merge(1);
  EXPECT_FALSE(tree.can_merge(0));  // 128 > max 64
  EXPECT_TRUE(tree.can_split(1));
}

// One edit of splits and merges in both directions: the leaves and histories of the same changes
// made one at a time, from the last leaf back, and no read.
TEST(ChunkTree, EditMakesManyChangesAsOneAtATimeWould) {
  KeysCatalog catalog(8, 1, 2);
  for (int64_t p = 0; p < 200; ++p) catalog.set_keys(p, p + 1, {static_cast<float>(p % 37), static_cast<float>(-p)});
  ChunkTree batch = make_tree(sizes(8, 64, 16, 16), 8, 1, 2);
  ChunkTree single = make_tree(sizes(8, 64, 16, 16), 8, 1, 2);
  for (ChunkTree* t : {&batch, &single}) {
    ASSERT_TRUE(t->grow(catalog, kTreeLayer, 200, AbstractSource::kLka).is_ok());
    // [0,16) [16,32) ... [176,192) [192,200): 13 leaves.
    for (int64_t i = 0; i < t->n_leaves(); ++i) t->history(i).cold_steps = static_cast<int>(i) + 1;
  }
  const std::vector<int64_t> splits = {1, 5, 10};
  const std::vector<int64_t> merges = {2, 6, 8};  // [32,48)+[48,64), [96,112)+[112,128), [128,144)+[144,160)
  catalog.clear_loads();
  ASSERT_TRUE(batch.edit(splits, merges).is_ok());
  EXPECT_TRUE(catalog.loads().empty());
  ASSERT_TRUE(single.split(10).is_ok());
  single.merge(8);
  single.merge(6);
  ASSERT_TRUE(single.split(5).is_ok());
  single.merge(2);
  ASSERT_TRUE(single.split(1).is_ok());

  EXPECT_EQ(leaves_of(batch), leaves_of(single));
  EXPECT_EQ(leaves_of(batch), (Ranges{{0, 16},
                                      {16, 24},
                                      {24, 32},
                                      {32, 64},
                                      {64, 80},
                                      {80, 88},
                                      {88, 96},
                                      {96, 128},
                                      {128, 160},
                                      {160, 168},
                                      {168, 176},
                                      {176, 192},
                                      {192, 200}}));
  for (int64_t i = 0; i < batch.n_leaves(); ++i) {
    EXPECT_EQ(batch.history(i).cold_steps, single.history(i).cold_steps) << "leaf " << i;
  }
  EXPECT_EQ(batch.history(0).cold_steps, 1);   // kept
  EXPECT_EQ(batch.history(1).cold_steps, 0);   // a half
  EXPECT_EQ(batch.history(3).cold_steps, 0);   // a parent
  EXPECT_EQ(batch.history(4).cold_steps, 5);   // [64, 80) was leaf 4
  EXPECT_EQ(batch.history(12).cold_steps, 13); // [192, 200) was leaf 12
}

TEST(ChunkTree, EditRejectsABadChangeAndLeavesTheTreeUnchanged) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 128, {1, 2});
  ChunkTree tree = make_tree(sizes(8, 64, 16, 16), 8, 1, 2);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 128, AbstractSource::kLka).is_ok());
  const Ranges before = leaves_of(tree);
  const std::vector<int64_t> none;
  const std::vector<int64_t> twice = {2, 2};
  const std::vector<int64_t> two = {2};
  const std::vector<int64_t> bad_merge = {1};  // [16, 32) [32, 48): not aligned to 32
  const std::vector<int64_t> out_of_range = {8};
  EXPECT_EQ(tree.edit(twice, none).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tree.edit(two, two).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tree.edit(none, bad_merge).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tree.edit(out_of_range, none).code(), StatusCode::kInvalidArgument);
  // A bad merge after good splits: the splits are not made either.
  const std::vector<int64_t> splits = {0, 4};
  EXPECT_EQ(tree.edit(splits, bad_merge).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(leaves_of(tree), before);
}

// --- invariants under random operations, over a real store -------------------------------------

struct StoreCase {
  int store_chunk = 8;
  ChunkTreeOptions tree;
};

class ChunkTreeProperty : public ::testing::TestWithParam<StoreCase> {};

constexpr int kHeads = 2;
constexpr int kHeadDim = 4;
constexpr int kRow = kHeads * kHeadDim;

// Checks coverage, sizes, alignment and every block's box against `keys` ([n][kRow], as stored:
// the store is F32, so exactly the keys appended, most of them not f16 values): each minimum the
// largest f16 at or below the keys' and each maximum the smallest at or above, so the box holds
// every key; with key signs, every position's sign bits too. And the tree's bytes: at most a
// 32nd over its signs, boxes and the most leaves it had (max_leaves), 16 bytes a leaf.
void expect_invariants(const ChunkTree& tree, const std::vector<float>& keys, int64_t n, int64_t max_leaves,
                       const std::string& where) {
  const ChunkTreeOptions& o = tree.options();
  ASSERT_EQ(tree.n_tokens(), n) << where;
  int64_t p = 0;
  for (int64_t i = 0; i < tree.n_leaves(); ++i) {
    const TokenRange r = tree.leaf(i);
    ASSERT_EQ(r.begin, p) << where << ": leaf " << i;
    ASSERT_GT(r.end, r.begin) << where << ": leaf " << i;
    p = r.end;
    // The leaf's size in the tree: its own, or for a leaf cut by n the least min * 2^k above it.
    int64_t size = o.min_tokens;
    while (size < r.size()) size *= 2;
    if (i + 1 < tree.n_leaves()) {
      ASSERT_EQ(size, r.size()) << where << ": leaf " << i << " is not min * 2^k";
    }
    ASSERT_LE(size, o.max_tokens) << where << ": leaf " << i;
    ASSERT_EQ(r.begin % size, 0) << where << ": leaf " << i << " [" << r.begin << ", " << r.end << ") unaligned";
  }
  ASSERT_EQ(p, n) << where;
  ASSERT_EQ(tree.n_blocks(), (n + o.block_tokens - 1) / o.block_tokens) << where;
  for (int64_t b = 0; b < tree.n_blocks(); ++b) {
    const uint16_t* box = tree.block_box(b);
    for (int e = 0; e < kRow; ++e) {
      float lo = std::numeric_limits<float>::infinity();
      float hi = -lo;
      for (int64_t t = b * o.block_tokens; t < std::min(n, (b + 1) * o.block_tokens); ++t) {
        lo = std::min(lo, keys[t * kRow + e]);
        hi = std::max(hi, keys[t * kRow + e]);
      }
      ASSERT_LE(f16_to_f32(box[e]), lo) << where << ": block " << b << " min of element " << e;
      ASSERT_GE(f16_to_f32(box[kRow + e]), hi) << where << ": block " << b << " max of element " << e;
      ASSERT_EQ(box[e], f16_round_down(lo)) << where << ": block " << b << " min of element " << e;
      ASSERT_EQ(box[kRow + e], f16_round_up(hi)) << where << ": block " << b << " max of element " << e;
    }
  }
  // Whole store chunks' rows, sliced 64 rows a word per channel.
  const uint64_t sign_bytes =
      o.key_signs ? sign_slice_words((n + 15) / 16 * 16, kHeads, kHeadDim) * sizeof(uint64_t) : 0;
  const uint64_t box_bytes = static_cast<uint64_t>(tree.n_blocks()) * 2 * kRow * sizeof(uint16_t);
  const uint64_t leaf_bytes = static_cast<uint64_t>(max_leaves) * (sizeof(int64_t) + sizeof(LeafHistory));
  ASSERT_LE(tree.memory_bytes(), (sign_bytes + box_bytes + leaf_bytes) * 33 / 32 + 64) << where;
  if (!o.key_signs) return;
  const SignSlices s = tree.key_signs();
  ASSERT_NE(s.words, nullptr) << where;
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      for (int c = 0; c < kHeadDim; ++c) {
        ASSERT_EQ(s.bit(t, h, c), std::signbit(keys[t * kRow + h * kHeadDim + c]))
            << where << ": position " << t << " head " << h << " channel " << c;
      }
    }
  }
}

TEST_P(ChunkTreeProperty, InvariantsHoldUnderRandomGrowSplitMerge) {
  const StoreCase c = GetParam();
  constexpr int kStoreLayers = 2;
  constexpr int64_t kCtx = 1024;
  int n_disk_chunks_seen = 0;
  int64_t n_splits = 0;
  int64_t n_merges = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    testing_util::TempDir dir;
    TieredKvCacheOptions so;
    so.shape = {kStoreLayers, kHeads, kHeadDim, kCtx};
    so.dtype = KvDtype::kF32;
    so.chunk_tokens = c.store_chunk;
    so.dir = dir.path();
    so.session = "tree";
    so.n_sink_tokens = 4;
    so.n_recent_tokens = 8;
    so.device_budget_bytes = TieredKvCache::min_device_budget_bytes(so) + TieredKvCache::chunk_budget_bytes(so, Tier::kDevice);
    so.host_budget_bytes = 2 * TieredKvCache::chunk_budget_bytes(so, Tier::kHost);
    auto store = TieredKvCache::create(so);
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    TieredKvCache& kv = **store;
    ChunkTreeOptions to = c.tree;
    to.key_signs = seed % 2 == 0;  // the store has them: half the runs keep them
    ChunkTree tree = make_tree(to, c.store_chunk, kHeads, kHeadDim);

    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    std::vector<float> keys;  // layer kTreeLayer's keys, [n][kRow]
    int64_t n = 0;
    int64_t max_leaves = 0;
    for (int op = 0; op < 120; ++op) {
      const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op);
      const uint32_t kind = rng() % 10;
      if (kind < 3 || tree.n_leaves() == 0) {  // append 1 .. 3 store chunks' worth, then grow
        const int64_t m = std::min<int64_t>(1 + rng() % (3 * c.store_chunk), kCtx - n);
        for (int layer = 0; layer < kStoreLayers; ++layer) {
          std::vector<float> k(static_cast<size_t>(m * kRow));
          std::vector<float> v(k.size());
          for (float& x : k) x = value(rng);
          for (float& x : v) x = value(rng);
          ASSERT_TRUE(kv.append(layer, n, m, k.data(), v.data()).is_ok()) << where;
          if (layer == kTreeLayer) keys.insert(keys.end(), k.begin(), k.end());
        }
        n += m;
        for (int64_t i = 0; i < kv.n_chunks(kTreeLayer); ++i) n_disk_chunks_seen += kv.chunk_tier(kTreeLayer, i) == Tier::kDisk;
        const AbstractSource source = rng() % 2 ? AbstractSource::kLka : AbstractSource::kKv;
        ASSERT_TRUE(tree.grow(kv, kTreeLayer, n, source).is_ok()) << where;
      } else if (kind < 7) {  // split the first leaf that can, from a random one on
        const int64_t i0 = rng() % tree.n_leaves();
        for (int64_t j = 0; j < tree.n_leaves(); ++j) {
          const int64_t i = (i0 + j) % tree.n_leaves();
          if (!tree.can_split(i)) continue;
          ASSERT_TRUE(tree.split(i).is_ok()) << where;
          ++n_splits;
          break;
        }
      } else if (kind < 8) {  // one edit: random leaves split and random buddies merge
        std::vector<int64_t> splits;
        std::vector<int64_t> merges;
        for (int64_t i = 0; i < tree.n_leaves(); ++i) {
          if (tree.can_split(i) && rng() % 3 == 0) {
            splits.push_back(i);
          } else if (tree.can_merge(i) && rng() % 2 == 0) {
            merges.push_back(i++);
          }
        }
        std::shuffle(splits.begin(), splits.end(), rng);
        ASSERT_TRUE(tree.edit(splits, merges).is_ok()) << where;
        n_splits += static_cast<int64_t>(splits.size());
        n_merges += static_cast<int64_t>(merges.size());
      } else {  // merge the first buddies that can, from a random leaf on
        const int64_t i0 = rng() % tree.n_leaves();
        for (int64_t j = 0; j < tree.n_leaves(); ++j) {
          const int64_t i = (i0 + j) % tree.n_leaves();
          if (!tree.can_merge(i)) continue;
          tree.merge(i);
          ++n_merges;
          break;
        }
      }
      max_leaves = std::max(max_leaves, tree.n_leaves());
      expect_invariants(tree, keys, n, max_leaves, where);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  // The runs did what they are for: disk chunks' abstracts read, splits and merges exercised.
  EXPECT_GT(n_disk_chunks_seen, 0);
  EXPECT_GT(n_splits, 100);
  EXPECT_GT(n_merges, 100);
}

INSTANTIATE_TEST_SUITE_P(StoreChunks, ChunkTreeProperty,
                         ::testing::Values(StoreCase{8, sizes(8, 64, 32, 32)}, StoreCase{8, sizes(8, 512, 8, 64)},
                                           StoreCase{16, sizes(16, 128, 16, 64)},
                                           StoreCase{16, sizes(32, 256, 64, 128)}),
                         [](const ::testing::TestParamInfo<StoreCase>& info) {
                           return "chunk" + std::to_string(info.param.store_chunk) + "_min" +
                                  std::to_string(info.param.tree.min_tokens) + "_init" +
                                  std::to_string(info.param.tree.initial_tokens) + "_max" +
                                  std::to_string(info.param.tree.max_tokens) + "_block" +
                                  std::to_string(info.param.tree.block_tokens);
                         });

}  // namespace
}  // namespace leoam::sparse

namespace leoam::sparse {
namespace {

// The bits of position p, kv head h, of a tree's key sign sketch, bit c for channel c.
uint32_t sign_word(const ChunkTree& tree, int64_t p, int h) {
  const SignSlices s = tree.key_signs();
  uint32_t w = 0;
  for (int c = 0; c < s.head_dim; ++c) w |= (s.bit(p, h, c) ? 1u : 0u) << c;
  return w;
}

// With key signs: every position's sign bits, and the blocks' boxes, which a merge leaves as they
// were and the edge refreshes.
TEST(ChunkTree, KeepsKeySignsAndBlockBoxes) {
  KeysCatalog catalog(8, 2, 2);
  catalog.with_key_signs();
  catalog.set_keys(0, 40, {1, -1});
  catalog.set_keys(40, 50, {-2, 3});
  ChunkTreeOptions o = sizes(8, 64, 16, 16);
  o.key_signs = true;
  ChunkTree tree = make_tree(o, 8, 2, 2);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 50, AbstractSource::kLka).is_ok());
  ASSERT_NE(tree.key_signs().words, nullptr);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(sign_word(tree, 0, h), 0b10u);   // (1, -1): channel 1 <= 0
    EXPECT_EQ(sign_word(tree, 39, h), 0b10u);
    EXPECT_EQ(sign_word(tree, 40, h), 0b01u);  // (-2, 3)
    EXPECT_EQ(sign_word(tree, 49, h), 0b01u);
  }
  const auto box = [&](int64_t b) { return box_at(tree, b); };
  EXPECT_EQ(box(1), catalog.abstract_of(16, 32));
  EXPECT_EQ(box(2), catalog.abstract_of(32, 48));
  EXPECT_EQ(box(3), catalog.abstract_of(48, 50));
  // Merging [0, 16) and [16, 32) widens the leaf, not the blocks.
  ASSERT_TRUE(tree.can_merge(0));
  tree.merge(0);
  EXPECT_EQ(leaves_of(tree), (Ranges{{0, 32}, {32, 48}, {48, 50}}));
  EXPECT_EQ(box(0), catalog.abstract_of(0, 16));
  // The edge grows: block 3 and the signs of [50, 60) are read.
  catalog.set_keys(50, 60, {5, 5});
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 60, AbstractSource::kLka).is_ok());
  EXPECT_EQ(box(3), catalog.abstract_of(48, 60));
  EXPECT_EQ(sign_word(tree, 59, 1), 0u);
  EXPECT_EQ(sign_word(tree, 49, 1), 0b01u);
  // Without key signs the tree keeps none.
  ChunkTree plain = make_tree(sizes(8, 64, 16, 16), 8, 2, 2);
  ASSERT_TRUE(plain.grow(catalog, kTreeLayer, 60, AbstractSource::kLka).is_ok());
  EXPECT_EQ(plain.key_signs().words, nullptr);
}

// After reserve_ahead(n), growing n more positions moves no array (a prompt's end: its first
// decode steps copy nothing), and a coarsening keeps the room; the leaves and boxes are those of a
// tree grown without it.
TEST(ChunkTree, RoomReservedAheadTakesTheNextPositionsWithoutAMove) {
  KeysCatalog catalog(8, 2, 4);
  set_random_keys(catalog, 400, 6);
  ChunkTreeOptions o = sizes(8, 128, 8, 8);
  o.key_signs = true;
  ChunkTree tree = make_tree(o, 8, 2, 4);
  ChunkTree plain = make_tree(o, 8, 2, 4);
  ASSERT_TRUE(tree.grow(catalog, kTreeLayer, 256, AbstractSource::kLka).is_ok());
  tree.reserve_ahead(64);
  ASSERT_TRUE(tree.coarsen(16, 32).is_ok());
  const uint64_t* signs = tree.key_signs().words;
  const uint16_t* boxes = tree.block_box(0);
  for (int64_t n = 257; n <= 320; ++n) {
    ASSERT_TRUE(tree.grow(catalog, kTreeLayer, n, AbstractSource::kLka).is_ok());
    ASSERT_EQ(tree.key_signs().words, signs) << n;
    ASSERT_EQ(tree.block_box(0), boxes) << n;
  }
  ASSERT_TRUE(plain.grow(catalog, kTreeLayer, 256, AbstractSource::kLka).is_ok());
  ASSERT_TRUE(plain.coarsen(16, 32).is_ok());
  ASSERT_TRUE(plain.grow(catalog, kTreeLayer, 320, AbstractSource::kLka).is_ok());
  EXPECT_EQ(leaves_of(tree), leaves_of(plain));
  for (int64_t b = 0; b < plain.n_blocks(); ++b) EXPECT_EQ(box_at(tree, b), box_at(plain, b)) << "block " << b;
  for (int64_t p = 0; p < 320; ++p) EXPECT_EQ(sign_word(tree, p, 1), sign_word(plain, p, 1)) << p;
}

// A tree grown batch by batch with small leaves and blocks and then coarsened is the tree grown
// with the larger ones from the start: leaves, block boxes and signs alike. After a split or a
// merge, or to a size not allowed, coarsening fails and changes nothing.
TEST(ChunkTree, CoarsenedIsTheTreeGrownWithTheLargerLeaves) {
  KeysCatalog catalog(8, 2, 4);
  set_random_keys(catalog, 203, 4);
  ChunkTreeOptions fine = sizes(8, 128, 8, 8);
  fine.key_signs = true;
  ChunkTreeOptions coarse = sizes(8, 128, 32, 64);
  coarse.key_signs = true;
  ChunkTree grown = make_tree(fine, 8, 2, 4);
  for (const int64_t n : {37, 64, 100, 150, 203}) ASSERT_TRUE(grown.grow(catalog, kTreeLayer, n, AbstractSource::kLka).is_ok());
  ASSERT_TRUE(grown.coarsen(16, 16).is_ok());  // in two steps, as a prompt's budget grows
  ASSERT_TRUE(grown.coarsen(32, 64).is_ok());
  ChunkTree want = make_tree(coarse, 8, 2, 4);
  ASSERT_TRUE(want.grow(catalog, kTreeLayer, 203, AbstractSource::kLka).is_ok());
  ASSERT_EQ(leaves_of(grown), leaves_of(want));
  ASSERT_EQ(grown.n_blocks(), 4);
  ASSERT_EQ(want.n_blocks(), 4);
  for (int64_t b = 0; b < want.n_blocks(); ++b) EXPECT_EQ(box_at(grown, b), box_at(want, b)) << "block " << b;
  for (int64_t p = 0; p < 203; ++p) EXPECT_EQ(sign_word(grown, p, 1), sign_word(want, p, 1)) << p;
  EXPECT_EQ(grown.options().initial_tokens, 32);
  EXPECT_EQ(grown.options().block_tokens, 64);
  // And it grows on as the other does.
  catalog.set_keys(203, 230, {1, -1, 2, -2});
  ASSERT_TRUE(grown.grow(catalog, kTreeLayer, 230, AbstractSource::kLka).is_ok());
  ASSERT_TRUE(want.grow(catalog, kTreeLayer, 230, AbstractSource::kLka).is_ok());
  ASSERT_EQ(leaves_of(grown), leaves_of(want));
  EXPECT_EQ(box_at(grown, 3), box_at(want, 3));

  EXPECT_FALSE(grown.coarsen(16, 64).is_ok()) << "smaller leaves";
  EXPECT_FALSE(grown.coarsen(32, 32).is_ok()) << "smaller blocks";
  EXPECT_FALSE(grown.coarsen(48, 64).is_ok()) << "not min * 2^k";
  EXPECT_FALSE(grown.coarsen(256, 64).is_ok()) << "past max";
  EXPECT_FALSE(grown.coarsen(32, 256).is_ok()) << "blocks past max";
  ASSERT_TRUE(grown.can_merge(0));
  grown.merge(0);
  EXPECT_TRUE(grown.edited());
  const Ranges before = leaves_of(grown);
  EXPECT_FALSE(grown.coarsen(64, 64).is_ok());
  EXPECT_EQ(leaves_of(grown), before);
}

}  // namespace
}  // namespace leoam::sparse
