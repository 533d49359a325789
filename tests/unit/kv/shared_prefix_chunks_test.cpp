// SharedPrefixChunks on real disk tiers: how many whole chunks of a kept session's tier a store's
// tier can read in place (and the stores that can read none), the sharing itself, and the count
// of shared chunks on the disk that the store's moves keep and its stats report apart.
#include "kv/shared_prefix_chunks.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::TempDir;

constexpr int kKeptLayers = 2;
const ChunkGeometry kKeptGeometry{2, 8, 8, KvDtype::kF16};

DiskTierOptions kept_options(const std::string& dir, const std::string& session) {
  DiskTierOptions d;
  d.dir = dir;
  d.session = session;
  d.n_layer = kKeptLayers;
  d.geometry = kKeptGeometry;
  return d;
}

// A kept session's tier, opened again: layer 0 holds 4 whole chunks; layer 1 holds 2 whole ones,
// then one of 3 rows.
std::shared_ptr<DiskTier> kept_tier(const std::string& dir) {
  DiskTierOptions d = kept_options(dir, "kept");
  d.keep_files = true;
  {
    auto tier = DiskTier::create(d).value();
    AlignedBuffer stored = AlignedBuffer::allocate(tier->slot_bytes()).value();
    std::vector<float> abstract(static_cast<size_t>(kKeptGeometry.abstract_floats()));
    reset_abstract(kKeptGeometry, abstract.data());
    const std::vector<std::vector<int64_t>> rows{{8, 8, 8, 8}, {8, 8, 3}};
    for (int il = 0; il < kKeptLayers; ++il) {
      for (size_t i = 0; i < rows[il].size(); ++i) {
        EXPECT_TRUE(tier->write_chunk(il, {static_cast<int64_t>(i), stored.data(), rows[il][i], abstract.data()}).is_ok());
      }
    }
    EXPECT_TRUE(tier->sync().is_ok());
  }
  const std::vector<int64_t> n_chunks{4, 3};
  return DiskTier::open_existing(d, n_chunks).value();
}

TEST(SharedPrefixChunks, SharesTheWholeChunksEveryLayerHolds) {
  TempDir kept_dir, dir;
  const std::shared_ptr<DiskTier> base = kept_tier(kept_dir.path());
  auto disk = DiskTier::create(kept_options(dir.path(), "store")).value();
  SharedPrefixChunks shared(disk.get());
  EXPECT_EQ(shared.shareable_chunks(*base, kKeptLayers, 1000), 2) << "layer 1's third chunk is not whole";
  EXPECT_EQ(shared.shareable_chunks(*base, kKeptLayers, 15), 1) << "whole chunks of the positions asked";
  EXPECT_EQ(shared.shareable_chunks(*base, kKeptLayers, 7), 0);
  EXPECT_EQ(shared.shareable_chunks(*base, 1, 1000), 4) << "layer 0 alone";

  ASSERT_TRUE(shared.share(base, kKeptLayers, 2).is_ok());
  EXPECT_EQ(disk->shared_chunks(0), 2);
  EXPECT_EQ(disk->shared_chunks(1), 2);
  EXPECT_TRUE(shared.is_shared({0, 1}));
  EXPECT_TRUE(shared.is_shared({1, 0}));
  EXPECT_FALSE(shared.is_shared({0, 2}));
}

TEST(SharedPrefixChunks, StoresThatCannotReadTheChunksInPlaceShareNone) {
  TempDir kept_dir;
  const std::shared_ptr<DiskTier> base = kept_tier(kept_dir.path());
  EXPECT_EQ(SharedPrefixChunks().shareable_chunks(*base, kKeptLayers, 1000), 0) << "no disk tier";
  EXPECT_FALSE(SharedPrefixChunks().share(base, kKeptLayers, 1).is_ok());
  const std::vector<std::function<void(DiskTierOptions&)>> changes{
      [](DiskTierOptions& d) { d.geometry.chunk_tokens = 16; },
      [](DiskTierOptions& d) { d.geometry.head_dim = 16; },
      [](DiskTierOptions& d) { d.codec = KvCodec::kInt8; },
      [](DiskTierOptions& d) { d.transfer_codec = KvCodec::kInt4; }};
  for (size_t c = 0; c < changes.size(); ++c) {
    TempDir dir;
    DiskTierOptions d = kept_options(dir.path(), "store");
    changes[c](d);
    auto disk = DiskTier::create(d).value();
    EXPECT_EQ(SharedPrefixChunks(disk.get()).shareable_chunks(*base, kKeptLayers, 1000), 0) << "change " << c;
  }
}

TEST(SharedPrefixChunks, CountsTheSharedChunksOnTheDiskAndReportsThemApart) {
  TempDir kept_dir, dir;
  const std::shared_ptr<DiskTier> base = kept_tier(kept_dir.path());
  auto disk = DiskTier::create(kept_options(dir.path(), "store")).value();
  SharedPrefixChunks shared(disk.get());
  ASSERT_TRUE(shared.share(base, kKeptLayers, 2).is_ok());
  for (int il = 0; il < kKeptLayers; ++il) {
    for (int64_t i = 0; i < 2; ++i) shared.count_move({{il, i}, std::nullopt, Tier::kDisk});
  }
  EXPECT_EQ(shared.n_on_disk(), 4);
  shared.count_move({{0, 0}, Tier::kDisk, Tier::kDevice});  // a sink read up
  shared.count_move({{0, 5}, std::nullopt, Tier::kDevice});
  shared.count_move({{0, 5}, Tier::kDevice, Tier::kDisk, true});  // the store's own chunk
  shared.count_move({{1, 1}, Tier::kDisk, Tier::kHost});
  EXPECT_EQ(shared.n_on_disk(), 2);
  shared.count_move({{1, 1}, Tier::kHost, Tier::kDisk});
  shared.count_forgotten({0, 0}, Tier::kDevice);
  shared.count_forgotten({0, 5}, Tier::kDisk);
  EXPECT_EQ(shared.n_on_disk(), 3);
  shared.count_forgotten({1, 1}, Tier::kDisk);
  EXPECT_EQ(shared.n_on_disk(), 2);

  // Four disk chunks in all, two of them shared.
  KvStats stats;
  const auto d = static_cast<int>(Tier::kDisk);
  const uint64_t chunk_bytes = disk->slot_bytes() + 100;
  stats.resident_chunks[d] = 4;
  stats.resident_bytes[d] = 4 * chunk_bytes;
  shared.report(stats, chunk_bytes);
  EXPECT_EQ(stats.resident_chunks[d], 2);
  EXPECT_EQ(stats.resident_bytes[d], 2 * chunk_bytes);
  EXPECT_EQ(stats.shared_disk_chunks, 2);
  EXPECT_EQ(stats.shared_disk_bytes, 2 * disk->slot_bytes());
  shared.clear();
  EXPECT_EQ(shared.n_on_disk(), 0);
}

}  // namespace
}  // namespace leoam
