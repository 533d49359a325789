// TieredKvCache against an in-memory twin: the rows it serves while most KV is on disk (in order,
// unordered, as one view), write-through of sealed chunks, where a gather leaves what it read,
// budgets and homes under random use, truncation, and its files on disk.
#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::expect_same_rows;
using testing_util::kChunk;
using testing_util::kLayers;
using testing_util::read_rows;
using testing_util::recomputed_abstract;
using testing_util::small_options;
using testing_util::TempDir;
using testing_util::Twin;

TEST(TieredKvCache, ServesTheSameRowsAsTheMemoryCacheWhileMostKvIsOnDisk) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  const int64_t sizes[] = {1, 3, 8, 13, 40, 7, 64, 100};
  for (int64_t n : sizes) ASSERT_TRUE(twin.append(n).is_ok());
  const int64_t n = twin.tiered().n_tokens();
  ASSERT_EQ(n, 236);
  EXPECT_GT(twin.tiered().residency().n_chunks(Tier::kDisk), twin.tiered().residency().n_chunks() / 2);

  for (int il = 0; il < kLayers; ++il) {
    const TokenRange all{0, n};
    expect_same_rows(twin, il, {&all, 1});
    const TokenRange sparse[] = {{0, 4}, {17, 18}, {20, 45}, {46, 47}, {100, 180}, {228, 236}};
    expect_same_rows(twin, il, sparse);
  }
  const KvStats stats = twin.tiered().stats();
  EXPECT_GT(stats[Tier::kDisk].bytes_read, 0u);
  EXPECT_GT(stats[Tier::kDisk].hits, 0u);
  EXPECT_GT(stats[Tier::kDevice].evictions, 0u);
  EXPECT_LE(stats.resident_bytes[0] + stats.abstract_bytes[0], twin.tiered().residency().options().device_budget_bytes);
  EXPECT_LE(stats.resident_bytes[1] + stats.abstract_bytes[1], twin.tiered().residency().options().host_budget_bytes);
}

// for_each_view_unordered hands over each position once, with the memory cache's rows; a gather
// batch with disk reads and chunks in memory visits the latter while its reads are in flight, a
// view of them first and a view of the chunks read after, so positions come out of order.
TEST(TieredKvCache, UnorderedViewsVisitTheChunksInMemoryWhileTheReadsAreInFlight) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(236).is_ok());
  TieredKvCache& kv = twin.tiered();
  const TokenRange sparse[] = {{0, 4}, {17, 18}, {20, 45}, {46, 47}, {100, 180}, {228, 236}};
  for (int il = 0; il < kLayers; ++il) {
    const auto want = read_rows(twin.memory(), il, sparse);
    ASSERT_TRUE(want.is_ok());
    auto got = read_rows(kv, il, sparse, /*unordered=*/true);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(*got, *want) << "layer " << il;
  }
  // Each view: its chunks' tiers as it is visited (a batch promotes what it read after its views).
  int n_in_memory = 0, n_read = 0;
  bool read_after_memory = false, out_of_order = false;
  int64_t last = -1;
  const uint64_t read0 = kv.stats()[Tier::kDisk].bytes_read;
  ASSERT_TRUE(kv.for_each_view_unordered(1, sparse, [&](const KvView& view) {
                  int on_disk = 0;
                  for (const KvSegment& seg : view.segments()) {
                    on_disk += kv.chunk_tier(1, seg.pos0 / kChunk) == Tier::kDisk ? 1 : 0;
                    out_of_order |= seg.pos0 < last;
                    last = seg.pos0;
                  }
                  EXPECT_TRUE(on_disk == 0 || on_disk == static_cast<int>(view.segments().size()))
                      << "a view is of chunks in memory or of chunks read, not both";
                  read_after_memory |= on_disk > 0 && n_in_memory > 0;
                  (on_disk > 0 ? n_read : n_in_memory) += 1;
                  return Status::ok();
                }).is_ok());
  EXPECT_GT(kv.stats()[Tier::kDisk].bytes_read, read0);
  EXPECT_GT(n_read, 0);
  EXPECT_TRUE(read_after_memory);
  EXPECT_TRUE(out_of_order);
}

// Write-through: every chunk an append seals is written to disk by the end of the append, where
// it lives, in one batch a layer (of consecutive chunks: one write); demoting it later writes
// nothing. The chunks an append creates are not its first victims: the older ones, already on
// disk, go first. Here the device holds one append's chunks besides the pinned ones.
TEST(TieredKvCache, SealedChunksAreWrittenThroughAndDemotedWithoutAWrite) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 2 * 8 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  o.host_budget_bytes = 0;  // device -> disk: a demotion would be the only other writer
  Twin twin(o);
  const uint64_t per_chunk = twin.tiered().disk().slot_bytes() + twin.tiered().disk().record_bytes(0);
  const auto sealed_on_disk = [&](int64_t n_sealed) {
    for (int il = 0; il < kLayers; ++il) {
      for (int64_t i = 0; i < n_sealed; ++i) {
        const ChunkResidency* r = twin.tiered().residency().find({il, i});
        ASSERT_NE(r, nullptr);
        EXPECT_TRUE(r->on_disk) << "layer " << il << " chunk " << i;
        EXPECT_TRUE(twin.tiered().disk().has_chunk(il, i)) << "layer " << il << " chunk " << i;
      }
    }
  };
  ASSERT_TRUE(twin.append(64).is_ok());  // 8 chunks a layer, all sealed
  sealed_on_disk(8);
  KvStats stats = twin.tiered().stats();
  EXPECT_EQ(stats[Tier::kDisk].bytes_written, 2 * 8 * per_chunk);
  EXPECT_EQ(stats.disk_write_latency.count(), 2u);
  ASSERT_TRUE(twin.append(64).is_ok());  // demotes chunks of the first append
  sealed_on_disk(16);
  stats = twin.tiered().stats();
  EXPECT_GT(stats[Tier::kDevice].evictions, 4u);
  EXPECT_EQ(stats[Tier::kDisk].bytes_written, 2 * 16 * per_chunk);  // each sealed chunk once
  EXPECT_EQ(stats.disk_write_latency.count(), 4u);
  const TokenRange all{0, twin.tiered().n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
}

// A gather serves a host chunk in place when it is stored as-is (no codec): both tiers are RAM, so
// moving it to the device would only copy it and push another down. A disk chunk it reads is
// promoted, as before.
TEST(TieredKvCache, AsIsHostChunksAreReadInPlaceAndDiskChunksPromoted) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(256).is_ok());
  TieredKvCache& kv = twin.tiered();
  int64_t on_host = -1, on_disk = -1;
  for (int64_t i = 1; i < 28 && (on_host < 0 || on_disk < 0); ++i) {
    const Tier t = kv.residency().find({1, i})->tier;
    if (t == Tier::kHost && on_host < 0) on_host = i;
    if (t == Tier::kDisk && on_disk < 0) on_disk = i;
  }
  ASSERT_GE(on_host, 0);
  ASSERT_GE(on_disk, 0);
  for (int64_t i : {on_host, on_disk}) kv.raise_importance({1, i}, 5.0f);  // worth promoting
  const uint64_t device_written = kv.stats()[Tier::kDevice].bytes_written;
  const TokenRange host_rows{on_host * kChunk, (on_host + 1) * kChunk};
  expect_same_rows(twin, 1, {&host_rows, 1});
  EXPECT_EQ(kv.residency().find({1, on_host})->tier, Tier::kHost);
  EXPECT_EQ(kv.stats()[Tier::kDevice].bytes_written, device_written);
  const TokenRange disk_rows{on_disk * kChunk, (on_disk + 1) * kChunk};
  expect_same_rows(twin, 1, {&disk_rows, 1});
  EXPECT_NE(kv.residency().find({1, on_disk})->tier, Tier::kDisk);
}

TEST(TieredKvCache, ViewGathersEveryPositionIntoOneSegment) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(77).is_ok());
  auto got = twin.tiered().view(1, 70);
  auto want = twin.memory().view(1, 70);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  ASSERT_EQ(got->segments().size(), 1u);
  const size_t n = 70 * twin.tiered().geometry().row_bytes();
  EXPECT_EQ(std::memcmp(got->segments()[0].k, want->segments()[0].k, n), 0);
  EXPECT_EQ(std::memcmp(got->segments()[0].v, want->segments()[0].v, n), 0);
}

// Under random appends, budgets and reads: every chunk has one home, budgets hold, and every
// abstract (in memory or on disk) equals the min/max recomputed from the served keys.
TEST(TieredKvCache, PropertyBudgetsResidencyAndAbstractsHold) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path());
    std::mt19937 pick(seed);
    o.host_budget_bytes = std::uniform_int_distribution<uint64_t>(0, 6)(pick) * TieredKvCache::chunk_budget_bytes(o, Tier::kHost);
    o.device_budget_bytes +=
        std::uniform_int_distribution<uint64_t>(0, 4)(pick) * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
    Twin twin(o, seed);
    TieredKvCache& kv = twin.tiered();
    for (int step = 0; step < 25; ++step) {
      ASSERT_TRUE(twin.append(std::uniform_int_distribution<int64_t>(1, 30)(pick)).is_ok());
      const int64_t n = kv.n_tokens();
      const int64_t b = std::uniform_int_distribution<int64_t>(0, n - 1)(pick);
      const TokenRange r{b, std::min(n, b + std::uniform_int_distribution<int64_t>(1, 60)(pick))};
      expect_same_rows(twin, step % kLayers, {&r, 1});
      if (step % 5 == 0) kv.raise_importance({0, std::uniform_int_distribution<int64_t>(0, n / kChunk)(pick)}, 1.0f);

      const Residency& res = kv.residency();
      ASSERT_LE(res.used_bytes(Tier::kDevice), o.device_budget_bytes);
      ASSERT_LE(res.used_bytes(Tier::kHost), o.host_budget_bytes);
      for (int il = 0; il < kLayers; ++il) {
        const int64_t n_chunks = (kv.n_tokens(il) + kChunk - 1) / kChunk;
        for (int64_t i = 0; i < n_chunks; ++i) {
          const ChunkResidency* c = res.find({il, i});
          ASSERT_NE(c, nullptr) << "chunk " << i << " has no home";
          const std::vector<float> want = recomputed_abstract(kv, {il, i});
          std::vector<float> got(want.size());
          if (c->tier == Tier::kDisk) {  // its record
            ASSERT_TRUE(kv.read_disk_abstracts(il, i, i + 1, got.data()).is_ok());
          } else {  // computed from the resident keys (no codec: nothing kept)
            const ChunkGeometry& g = kv.geometry();
            std::vector<uint32_t> signs(static_cast<size_t>(g.sign_words()));
            ASSERT_TRUE(kv.load_abstracts(il, i, i + 1, got.data(), AbstractSource::kLka, signs.data()).is_ok());
            std::memcpy(got.data() + g.box_floats(), signs.data(), signs.size() * sizeof(uint32_t));
          }
          ASSERT_TRUE(abstracts_equal(kv.geometry(), got.data(), want.data()))
              << "seed " << seed << " layer " << il << " chunk " << i << " in " << tier_name(c->tier);
        }
        ASSERT_EQ(res.n_chunks(), [&] {
          int64_t total = 0;
          for (int l = 0; l < kLayers; ++l) total += (kv.n_tokens(l) + kChunk - 1) / kChunk;
          return total;
        }());
      }
    }
  }
}

TEST(TieredKvCache, TruncateThenAppendMatchesTheMemoryCache) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(150).is_ok());
  for (int64_t cut : {141, 96, 37}) {
    ASSERT_TRUE(twin.tiered().truncate(cut).is_ok());
    ASSERT_TRUE(twin.memory().truncate(cut).is_ok());
    ASSERT_EQ(twin.tiered().n_tokens(), cut);
    ASSERT_TRUE(twin.append(23).is_ok());
    const TokenRange all{0, twin.tiered().n_tokens()};
    for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
  }
  twin.tiered().clear();
  EXPECT_EQ(twin.tiered().n_tokens(), 0);
  EXPECT_EQ(twin.tiered().residency().n_chunks(), 0);
}

TEST(TieredKvCache, RejectsADeviceBudgetBelowThePinnedChunks) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCacheOptions{}.device_budget_bytes + 1024;
  auto kv = TieredKvCache::create(o);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_EQ(kv.status().setting(), Setting::kKvDeviceBudget) << kv.status().message();
  o.dir.clear();
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o);
  EXPECT_EQ(TieredKvCache::create(o).status().setting(), Setting::kKvDir);
}

// By default the disk files are unlinked as soon as they are open: nothing is left behind however
// the process ends, and the store works on through its open files.
TEST(TieredKvCache, DiskFilesAreUnlinkedAtOnceAndTheStoreStillWorks) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(100).is_ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_GT(twin.tiered().residency().n_chunks(Tier::kDisk), 0);
  const TokenRange all{0, 100};
  expect_same_rows(twin, 1, {&all, 1});
}

TEST(TieredKvCache, VisibleFilesArePrivateAndRemovedAtTheEnd) {
  TempDir dir;
  {
    TieredKvCacheOptions o = small_options(dir.path());
    o.visible_files = true;
    Twin twin(o);
    ASSERT_TRUE(twin.append(100).is_ok());
    int n_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      struct stat st;
      ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
      ++n_files;
    }
    EXPECT_EQ(n_files, 2 * kLayers);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace leoam
