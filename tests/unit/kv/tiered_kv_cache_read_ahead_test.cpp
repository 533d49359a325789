// TieredKvCache's reads ahead of need: prefetch (chunks brought up as a read would leave them) and
// read_ahead (disk chunks staged on the I/O thread for the layer's next gather).
#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::disk_chunks_of;
using testing_util::expect_same_rows;
using testing_util::kLayers;
using testing_util::small_options;
using testing_util::TempDir;
using testing_util::Twin;

// prefetch: the host and disk chunks of the ranges come up as a read would leave them (more
// important than the residents, as a policy's hint makes them), their disk bytes counted as
// prefetched; device chunks are not touched (no hit counted), the rows served stay the same, and
// a range past the layer's end is refused.
TEST(TieredKvCache, PrefetchBringsChunksUpAsAReadWouldAndCountsItsDiskBytes) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 4 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());  // 32 chunks a layer; most of them on disk
  TieredKvCache& kv = twin.tiered();
  const std::vector<TokenRange> ranges = {{20, 36}, {80, 84}};  // chunks 2, 3, 4 and 10
  const std::vector<int64_t> chunks = {2, 3, 4, 10};
  uint64_t want_disk = 0;
  int64_t on_device = 0;
  for (int64_t i : chunks) {
    const Tier t = kv.residency().find({1, i})->tier;
    want_disk += t == Tier::kDisk ? kv.disk().slot_bytes() : 0;
    on_device += t == Tier::kDevice;
  }
  ASSERT_GT(want_disk, 0u);
  ASSERT_EQ(on_device, 0);
  for (int64_t i : chunks) kv.raise_importance({1, i}, 1.0f);
  const KvStats before = kv.stats();
  ASSERT_TRUE(kv.prefetch(1, ranges).is_ok());
  const KvStats after = kv.stats();
  EXPECT_EQ(after.disk_bytes_prefetched, want_disk);
  EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read, want_disk);
  for (int64_t i : chunks) {
    EXPECT_EQ(kv.residency().find({1, i})->tier, Tier::kDevice) << "chunk " << i;
  }
  // Once they are on the device, a second prefetch reads and counts nothing.
  const KvStats again_before = kv.stats();
  ASSERT_TRUE(kv.prefetch(1, ranges).is_ok());
  const KvStats again = kv.stats();
  EXPECT_EQ(again.disk_bytes_prefetched, want_disk);
  EXPECT_EQ(again[Tier::kDevice].hits, again_before[Tier::kDevice].hits);
  EXPECT_EQ(again[Tier::kDevice].bytes_read, again_before[Tier::kDevice].bytes_read);
  const TokenRange all{0, kv.n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});

  const TokenRange past{250, 257};
  EXPECT_EQ(kv.prefetch(1, {&past, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.prefetch(kLayers, ranges).code(), StatusCode::kInvalidArgument);
}

// read_ahead: the disk chunks of the ranges are read on the I/O thread, and the layer's next
// gather takes them from the staging (used), reads the rest itself (missed), and serves the same
// rows; the job's disk bytes count once. A bad range is refused, and a truncate with a job in
// flight leaves the store right.
TEST(TieredKvCache, ReadAheadStagesDiskChunksForTheLayersNextGather) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;  // 16 chunks a job
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());
  TieredKvCache& kv = twin.tiered();
  const std::vector<TokenRange> ahead = {{20, 36}, {80, 84}};
  const std::vector<int64_t> staged = disk_chunks_of(kv, 1, ahead);
  ASSERT_EQ(staged.size(), 4u);
  const KvStats before = kv.stats();
  ASSERT_TRUE(kv.read_ahead(1, ahead).is_ok());
  expect_same_rows(twin, 1, ahead);
  KvStats after = kv.stats();
  EXPECT_EQ(after.read_ahead.jobs, 1u);
  EXPECT_EQ(after.read_ahead.chunks_staged, 4u);
  EXPECT_EQ(after.read_ahead.chunks_used, 4u);
  EXPECT_EQ(after.read_ahead.chunks_missed, 0u);
  EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read, 4 * kv.disk().slot_bytes());
  EXPECT_GE(after.buffer_bytes, o.read_ahead_bytes);  // the staging counts as the store's buffers

  // A gather of other ranges than were read ahead: what it finds staged it uses, the rest it reads.
  const std::vector<TokenRange> guess = {{100, 116}};
  const std::vector<TokenRange> asked = {{108, 140}};
  const std::vector<int64_t> guessed = disk_chunks_of(kv, 1, guess);
  const std::vector<int64_t> needed = disk_chunks_of(kv, 1, asked);
  const auto n_hit = static_cast<uint64_t>(
      std::count_if(needed.begin(), needed.end(), [&](int64_t i) { return std::ranges::count(guessed, i) > 0; }));
  ASSERT_GT(n_hit, 0u);
  ASSERT_LT(n_hit, needed.size());
  ASSERT_TRUE(kv.read_ahead(1, guess).is_ok());
  expect_same_rows(twin, 1, asked);
  after = kv.stats();
  EXPECT_EQ(after.read_ahead.chunks_staged, 4 + guessed.size());
  EXPECT_EQ(after.read_ahead.chunks_used, 4 + n_hit);
  EXPECT_EQ(after.read_ahead.chunks_missed, needed.size() - n_hit);
  const std::string text = after.to_text();
  EXPECT_NE(text.find("read-ahead: 2 layers, " + std::to_string(4 + guessed.size()) + " chunks read ahead, " +
                      std::to_string(4 + n_hit) + " of them used; " + std::to_string(needed.size() - n_hit) +
                      " chunks missed"),
            std::string::npos)
      << text;

  const TokenRange past{250, 257};
  EXPECT_EQ(kv.read_ahead(1, {&past, 1}).code(), StatusCode::kInvalidArgument);
  const std::vector<TokenRange> late = {{160, 200}};
  ASSERT_TRUE(kv.read_ahead(0, late).is_ok());
  ASSERT_TRUE(kv.truncate(150).is_ok());
  ASSERT_TRUE(twin.memory().truncate(150).is_ok());
  const TokenRange all{0, 150};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
}

}  // namespace
}  // namespace leoam
