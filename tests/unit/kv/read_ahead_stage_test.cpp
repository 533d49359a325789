// ReadAheadStage on a real disk tier: a layer's chunks read ahead and handed to its gather with
// the bytes written, counted used or missed; a lossy chunk handed only as read compressed; jobs
// forgotten by drop_all; and a stage without staging that does nothing.
#include "kv/read_ahead_stage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::TempDir;

constexpr int kStageLayers = 2;
constexpr int64_t kStageChunks = 6;

// A disk tier whose chunk i of layer l is filled with the byte 16 * l + i (with an int4 copy:
// its copy with 128 + that byte).
std::unique_ptr<DiskTier> staged_tier(const std::string& dir, KvCodec transfer_codec = KvCodec::kNone) {
  DiskTierOptions d;
  d.dir = dir;
  d.session = "stage";
  d.n_layer = kStageLayers;
  d.geometry = ChunkGeometry{2, 8, 8, KvDtype::kF16};
  d.transfer_codec = transfer_codec;
  auto tier = DiskTier::create(d).value();
  const ChunkGeometry& g = tier->geometry();
  std::vector<float> abstract(static_cast<size_t>(g.abstract_floats()));
  reset_abstract(g, abstract.data());
  AlignedBuffer stored = AlignedBuffer::allocate(tier->slot_bytes()).value();
  AlignedBuffer compressed =
      AlignedBuffer::allocate(transfer_codec != KvCodec::kNone ? tier->compressed_slot_bytes() : kDirectIoAlignment).value();
  for (int il = 0; il < kStageLayers; ++il) {
    for (int64_t i = 0; i < kStageChunks; ++i) {
      std::memset(stored.data(), 16 * il + static_cast<int>(i), stored.size());
      std::memset(compressed.data(), 128 + 16 * il + static_cast<int>(i), compressed.size());
      const DiskChunkWrite w{i, stored.data(), g.chunk_tokens, abstract.data(),
                             transfer_codec != KvCodec::kNone ? compressed.data() : nullptr};
      EXPECT_TRUE(tier->write_chunk(il, w).is_ok());
    }
  }
  return tier;
}

std::vector<DiskChunkRead> chunks_to_read(std::initializer_list<int64_t> indices, bool compressed = false) {
  std::vector<DiskChunkRead> out;
  for (const int64_t i : indices) out.push_back({i, nullptr, compressed});
  return out;
}

TEST(ReadAheadStage, HandsALayersGatherTheChunksReadForItAndCountsThem) {
  TempDir dir;
  auto disk = staged_tier(dir.path());
  KvStats stats;
  // Two chunks a buffer.
  auto stage = ReadAheadStage::create(*disk, 4 * disk->slot_bytes(), stats, nullptr);
  ASSERT_TRUE(stage.is_ok()) << stage.status().message();
  EXPECT_TRUE(stage->enabled());
  EXPECT_EQ(stage->buffer_bytes(), 4 * disk->slot_bytes());
  stage->start(0, chunks_to_read({3, 1, 5}));  // the staging holds the first two
  stage->settle(0);
  EXPECT_EQ(stats.read_ahead.jobs, 1u);
  EXPECT_EQ(stats.read_ahead.chunks_staged, 2u);
  EXPECT_EQ(stats[Tier::kDisk].bytes_read, 2 * disk->slot_bytes());

  for (const int64_t i : {1, 3}) {
    const DiskChunkRead* read = stage->take(0, i, false);
    ASSERT_NE(read, nullptr) << "chunk " << i;
    EXPECT_EQ(read->index, i);
    EXPECT_FALSE(read->compressed);
    EXPECT_EQ(read->dst[0], i);
    EXPECT_EQ(read->dst[disk->slot_bytes() - 1], i);
  }
  EXPECT_EQ(stats.read_ahead.chunks_used, 2u);
  EXPECT_EQ(stage->take(0, 5, false), nullptr) << "the staging could not hold it";
  EXPECT_EQ(stats.read_ahead.chunks_missed, 1u);
  EXPECT_EQ(stage->take(1, 1, false), nullptr);
  EXPECT_EQ(stats.read_ahead.chunks_missed, 1u) << "layer 1 was not read ahead: nothing missed";

  stage->start(1, chunks_to_read({0}));
  stage->settle(1);
  const DiskChunkRead* read = stage->take(1, 0, false);
  ASSERT_NE(read, nullptr);
  EXPECT_EQ(read->dst[0], 16);
  EXPECT_NE(stage->take(0, 1, false), nullptr) << "each layer's job has a buffer of its own";
  EXPECT_EQ(stats.read_ahead.chunks_used, 4u);
}

TEST(ReadAheadStage, HandsALossyChunkOnlyAsReadCompressed) {
  TempDir dir;
  auto disk = staged_tier(dir.path(), KvCodec::kInt4);
  KvStats stats;
  auto stage = ReadAheadStage::create(*disk, 4 * disk->slot_bytes(), stats, nullptr).value();
  std::vector<DiskChunkRead> chunks = chunks_to_read({1});
  chunks.push_back({2, nullptr, true});
  stage.start(0, chunks);
  stage.settle(0);
  EXPECT_EQ(stage.take(0, 1, true), nullptr) << "read as it is: not the form a lossy chunk serves";
  EXPECT_EQ(stats.read_ahead.chunks_missed, 1u);
  const DiskChunkRead* compressed = stage.take(0, 2, true);
  ASSERT_NE(compressed, nullptr);
  EXPECT_TRUE(compressed->compressed);
  EXPECT_EQ(compressed->dst[0], 128 + 2);
  ASSERT_NE(stage.take(0, 1, false), nullptr);
  ASSERT_NE(stage.take(0, 2, false), nullptr) << "a chunk that is not lossy takes either form";
  EXPECT_EQ(stats.read_ahead.chunks_used, 3u);
}

TEST(ReadAheadStage, DropAllForgetsEveryJob) {
  TempDir dir;
  auto disk = staged_tier(dir.path());
  KvStats stats;
  auto stage = ReadAheadStage::create(*disk, 4 * disk->slot_bytes(), stats, nullptr).value();
  stage.start(0, chunks_to_read({0}));
  stage.start(1, chunks_to_read({4}));
  stage.drop_all();
  EXPECT_EQ(stats.read_ahead.jobs, 2u) << "each dropped job is waited for and counted";
  EXPECT_EQ(stage.take(0, 0, false), nullptr);
  EXPECT_EQ(stage.take(1, 4, false), nullptr);
  EXPECT_EQ(stats.read_ahead.chunks_used, 0u);
  EXPECT_EQ(stats.read_ahead.chunks_missed, 0u) << "no layer is read ahead any more";
}

TEST(ReadAheadStage, WithoutStagingDoesNothing) {
  TempDir dir;
  auto disk = staged_tier(dir.path());
  KvStats stats;
  const auto expect_nothing = [&](ReadAheadStage& stage) {
    EXPECT_FALSE(stage.enabled());
    stage.start(0, chunks_to_read({0, 1}));
    stage.settle(0);
    EXPECT_EQ(stage.take(0, 0, false), nullptr);
    stage.drop_all();
    EXPECT_EQ(stage.buffer_bytes(), 0u);
  };
  auto none = ReadAheadStage::create(*disk, 0, stats, nullptr);
  ASSERT_TRUE(none.is_ok());
  expect_nothing(*none);
  ReadAheadStage off;
  expect_nothing(off);
  EXPECT_EQ(stats.read_ahead.jobs, 0u);
  EXPECT_EQ(stats[Tier::kDisk].bytes_read, 0u);
  EXPECT_FALSE(ReadAheadStage::create(*disk, disk->slot_bytes(), stats, nullptr).is_ok())
      << "staging that holds no chunk in each buffer";
}

}  // namespace
}  // namespace leoam
