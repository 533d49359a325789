// TieredKvCache with a sliding-window layer (TieredKvCacheOptions::layer_windows): what falls behind
// the window is dropped and never written to disk while the budgets hold the window, the window is
// served as appended, reads and rewinds behind it fail and say why, and under pressure the window
// spills to disk and reads back.
#include <gtest/gtest.h>

#include <string>

#include "../temp_dir.h"
#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::expect_same_rows;
using testing_util::kChunk;
using testing_util::small_options;
using testing_util::Twin;

constexpr int64_t kWindow = 20;  // layer 0 slides; layer 1 keeps every position
constexpr int64_t kPrompt = 40;
constexpr int64_t kSteps = 100;

TieredKvCacheOptions window_options(const std::string& dir, int64_t device_spare_chunks) {
  TieredKvCacheOptions o = small_options(dir);
  o.layer_windows = {kWindow, 0};
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) +
                          device_spare_chunks * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  return o;
}

// A prompt, then one token at a time, each step releasing what the next step's window passes.
void decode(Twin& twin) {
  ASSERT_TRUE(twin.append(kPrompt).is_ok());
  for (int64_t i = 0; i < kSteps; ++i) {
    const int64_t pos = twin.tiered().n_tokens();
    ASSERT_TRUE(twin.append(1).is_ok());
    twin.tiered().release_before(0, pos - kWindow + 1);
    twin.tiered().release_before(1, pos - kWindow + 1);  // a layer without a window keeps all
  }
}

TEST(TieredKvCacheWindow, ItsPastIsDroppedAndNeverWrittenWhileTheWindowIsServedAsAppended) {
  testing_util::TempDir dir;
  Twin twin(window_options(dir.path(), 8));
  decode(twin);
  TieredKvCache& kv = twin.tiered();
  const int64_t n = kv.n_tokens();
  const int64_t last_release = n - 1 - kWindow + 1;
  for (int64_t i = 0; i < kv.n_chunks(0); ++i) EXPECT_FALSE(kv.disk().has_chunk(0, i)) << "chunk " << i;
  EXPECT_TRUE(kv.disk().has_chunk(1, 0)) << "the other layer's sealed chunks are written through";
  EXPECT_EQ(kv.stats().window_dropped_chunks, static_cast<uint64_t>(last_release / kChunk));
  // The sliding layer's chunks in memory: its window and the open chunk, no more.
  int64_t in_memory = 0;
  for (int64_t i = 0; i < kv.n_chunks(0); ++i) {
    const ChunkResidency* r = kv.residency().find({0, i});
    if (r != nullptr && r->tier != Tier::kDisk) ++in_memory;
  }
  EXPECT_LE(in_memory, (kWindow + kChunk - 1) / kChunk + 1);
  const TokenRange window{last_release, n};
  expect_same_rows(twin, 0, {&window, 1});
  const TokenRange all{0, n};
  expect_same_rows(twin, 1, {&all, 1});
}

TEST(TieredKvCacheWindow, AReadBehindTheWindowFailsAndSaysWhy) {
  testing_util::TempDir dir;
  TieredKvCacheOptions o = window_options(dir.path(), 8);
  o.read_ahead_bytes = 1 << 20;
  Twin twin(o);
  decode(twin);
  TieredKvCache& kv = twin.tiered();
  const TokenRange behind{0, 10};
  const Status read = kv.for_each_view(0, {&behind, 1}, [](const KvView&) { return Status::ok(); });
  ASSERT_FALSE(read.is_ok());
  EXPECT_NE(read.message().find("sliding window of 20"), std::string::npos) << read.message();
  EXPECT_EQ(read.setting(), Setting::kKvSwaFull);
  EXPECT_FALSE(kv.prefetch(0, {&behind, 1}).is_ok());
  EXPECT_FALSE(kv.read_ahead(0, {&behind, 1}).is_ok());
  EXPECT_FALSE(kv.view(0, kv.n_tokens()).is_ok());
  const TokenRange empty{3, 3};
  EXPECT_TRUE(kv.for_each_view(0, {&empty, 1}, [](const KvView&) { return Status::ok(); }).is_ok());
  EXPECT_TRUE(kv.view(1, kv.n_tokens()).is_ok()) << "the other layer keeps every position";
}

TEST(TieredKvCacheWindow, ARewindBehindWhatWasDroppedFailsChangingNothing) {
  testing_util::TempDir dir;
  Twin twin(window_options(dir.path(), 8));
  decode(twin);
  TieredKvCache& kv = twin.tiered();
  const int64_t n = kv.n_tokens();  // the last release was before n - kWindow, a chunk boundary here
  ASSERT_EQ((n - kWindow) % kChunk, 0);
  const Status far = kv.truncate(n - 2);
  ASSERT_FALSE(far.is_ok());
  EXPECT_NE(far.message().find("sliding window"), std::string::npos) << far.message();
  EXPECT_EQ(kv.n_tokens(0), n);
  EXPECT_EQ(kv.n_tokens(1), n);
  // One step back still works: its query reads from n - kWindow on.
  ASSERT_TRUE(kv.truncate(n - 1).is_ok());
  ASSERT_TRUE(twin.memory().truncate(n - 1).is_ok());
  ASSERT_TRUE(twin.append(3).is_ok());
  const TokenRange window{n - kWindow, n + 2};
  expect_same_rows(twin, 0, {&window, 1});
}

TEST(TieredKvCacheWindow, UnderPressureTheWindowSpillsToDiskAndReadsBack) {
  testing_util::TempDir dir;
  TieredKvCacheOptions o = window_options(dir.path(), 0);
  o.host_budget_bytes = 0;
  Twin twin(o);
  ASSERT_TRUE(twin.append(200).is_ok());  // one batch: its rows attend back past the budgets
  TieredKvCache& kv = twin.tiered();
  EXPECT_TRUE(kv.disk().has_chunk(0, 0)) << "the device could not hold the batch: its chunks were written when demoted";
  const TokenRange all{0, 200};
  expect_same_rows(twin, 0, {&all, 1});
  kv.release_before(0, 200 - kWindow);
  EXPECT_EQ(kv.stats().window_dropped_chunks, static_cast<uint64_t>((200 - kWindow) / kChunk));
  const TokenRange window{200 - kWindow, 200};
  expect_same_rows(twin, 0, {&window, 1});
}

TEST(TieredKvCacheWindow, ItsChunksLeaveMemoryAfterEveryOtherLayers) {
  testing_util::TempDir dir;
  TieredKvCacheOptions o = window_options(dir.path(), 4);
  o.host_budget_bytes = 0;
  Twin twin(o);
  decode(twin);
  TieredKvCache& kv = twin.tiered();
  for (int64_t i = kv.n_tokens() / kChunk - 2; i < kv.n_chunks(0); ++i) {
    EXPECT_EQ(kv.chunk_tier(0, i), Tier::kDevice) << "the window's chunk " << i;
  }
  EXPECT_EQ(kv.chunk_tier(1, 2), Tier::kDisk) << "the other layer's far chunks made the room";
  EXPECT_FALSE(kv.disk().has_chunk(0, kv.n_tokens() / kChunk - 2));
}

}  // namespace
}  // namespace leoam
