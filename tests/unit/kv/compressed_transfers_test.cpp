// CompressedTransfers on a disk tier that keeps a compressed copy: the copies it encodes are the
// codec's, and read back through the tier they decode to the chunk's round trip; the boxes it
// widens bound the keys as a compressed read serves them; the form it chooses by mode, and the
// samples and counts it takes.
#include "kv/compressed_transfers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "io/aligned_buffer.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::random_rows;
using testing_util::TempDir;

const ChunkGeometry kTransferGeometry{2, 8, 8, KvDtype::kF16};

std::unique_ptr<DiskTier> transfer_tier(const std::string& dir, KvCompress mode) {
  DiskTierOptions d;
  d.dir = dir;
  d.session = "transfers";
  d.n_layer = 1;
  d.geometry = kTransferGeometry;
  d.transfer_codec = transfer_codec_of(mode);
  return DiskTier::create(d).value();
}

// A compute-ready chunk of random rows in [-2, 2), in an aligned buffer of one disk slot.
AlignedBuffer random_chunk(std::mt19937& rng, size_t slot_bytes) {
  const ChunkGeometry& g = kTransferGeometry;
  AlignedBuffer chunk = AlignedBuffer::allocate(slot_bytes).value();
  std::memset(chunk.data(), 0, slot_bytes);
  const auto k = random_rows(rng, g.chunk_tokens, g.row_elements());
  const auto v = random_rows(rng, g.chunk_tokens, g.row_elements());
  store_kv_values(g.dtype, k.data(), g.chunk_tokens * g.row_elements(), chunk.data());
  store_kv_values(g.dtype, v.data(), g.chunk_tokens * g.row_elements(), chunk.data() + g.k_bytes());
  return chunk;
}

// "" when every key of `keys` [chunk_tokens][row] is inside `box`; else the first one outside.
std::string outside_box(const uint8_t* keys, const float* box) {
  const ChunkGeometry& g = kTransferGeometry;
  const int64_t n = g.row_elements();
  const auto* k = reinterpret_cast<const uint16_t*>(keys);
  for (int64_t t = 0; t < g.chunk_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = f16_to_f32(k[t * n + i]);
      if (x < box[i] || x > box[n + i]) {
        return "row " + std::to_string(t) + " channel " + std::to_string(i) + ": " + std::to_string(x) + " outside [" +
               std::to_string(box[i]) + ", " + std::to_string(box[n + i]) + "]";
      }
    }
  }
  return "";
}

TEST(CompressedTransfers, CopiesWrittenAndReadBackDecodeToTheRoundTrip) {
  for (const KvCompress mode : {KvCompress::kInt4, KvCompress::kInt8}) {
    SCOPED_TRACE(kv_compress_name(mode));
    TempDir dir;
    auto disk = transfer_tier(dir.path(), mode);
    auto transfers = CompressedTransfers::create(*disk, mode, 2);
    ASSERT_TRUE(transfers.is_ok()) << transfers.status().message();
    CompressedTransfers& t = **transfers;
    EXPECT_EQ(t.codec(), disk->transfer_codec());
    EXPECT_EQ(t.slot_bytes(), disk->compressed_slot_bytes());
    const ChunkGeometry& g = kTransferGeometry;
    std::mt19937 rng(7);
    std::vector<AlignedBuffer> chunks;
    std::vector<std::vector<float>> abstracts(2, std::vector<float>(static_cast<size_t>(g.abstract_floats())));
    std::vector<uint8_t> keys_scratch(g.k_bytes());
    std::vector<DiskChunkWrite> writes;
    for (size_t slot = 0; slot < 2; ++slot) {
      chunks.push_back(random_chunk(rng, disk->slot_bytes()));
      const uint8_t* copy = t.encode_for_write(chunks[slot].data(), slot);
      // The codec's form, zero-padded to its slot.
      std::vector<uint8_t> want(t.slot_bytes(), 0);
      encode_chunk(g, t.codec(), chunks[slot].data(), want.data());
      EXPECT_EQ(std::vector<uint8_t>(copy, copy + t.slot_bytes()), want) << "slot " << slot;
      float* a = abstracts[slot].data();
      reset_abstract(g, a);
      update_abstract(g, chunks[slot].data(), 0, g.chunk_tokens, a);
      t.cover_compressed(copy, g.chunk_tokens, a, keys_scratch.data());
      writes.push_back({static_cast<int64_t>(slot), chunks[slot].data(), g.chunk_tokens, a, copy});
    }
    EXPECT_NE(writes[0].compressed, writes[1].compressed) << "each write slot has a copy of its own";
    ASSERT_TRUE(disk->write_chunks(0, writes).is_ok());

    AlignedBuffer read = AlignedBuffer::allocate(2 * t.slot_bytes()).value();
    const std::vector<DiskChunkRead> reads{{0, read.data(), true}, {1, read.data() + t.slot_bytes(), true}};
    ASSERT_TRUE(disk->read_chunks(0, reads).is_ok());
    KvStats stats;
    for (size_t i = 0; i < 2; ++i) {
      std::vector<uint8_t> got(g.chunk_bytes()), want(g.chunk_bytes());
      t.decode(reads[i].dst, got.data());
      std::vector<uint8_t> encoded(encoded_chunk_bytes(g, t.codec()));
      encode_chunk(g, t.codec(), chunks[i].data(), encoded.data());
      decode_chunk(g, t.codec(), encoded.data(), want.data());
      EXPECT_EQ(got, want) << "chunk " << i;
      EXPECT_NE(got, std::vector<uint8_t>(chunks[i].data(), chunks[i].data() + g.chunk_bytes())) << "nothing was lost";
      // The box written with the chunk bounds its keys in both forms.
      EXPECT_EQ(outside_box(got.data(), abstracts[i].data()), "") << "chunk " << i << " as read compressed";
      EXPECT_EQ(outside_box(chunks[i].data(), abstracts[i].data()), "") << "chunk " << i << " as appended";
    }
    t.record_decode(2, 0.004, stats);
    t.record_decode(1, 0.001, stats);
    EXPECT_DOUBLE_EQ(stats.transfer.decode_ms, 5.0);
  }
}

TEST(CompressedTransfers, WidensAResidentChunksBoxToItsKeysRoundTrip) {
  TempDir dir;
  auto disk = transfer_tier(dir.path(), KvCompress::kInt4);
  auto t = CompressedTransfers::create(*disk, KvCompress::kInt4, 1).value();
  const ChunkGeometry& g = kTransferGeometry;
  EXPECT_EQ(t->buffer_bytes(), t->slot_bytes()) << "the write slot only, before any box is widened";
  std::mt19937 rng(11);
  const AlignedBuffer chunk = random_chunk(rng, disk->slot_bytes());
  std::vector<float> box(static_cast<size_t>(g.box_floats()));
  chunk_key_box(g, chunk.data(), g.chunk_tokens, box.data());
  const std::vector<float> keys_box = box;
  t->cover_round_trip(chunk.data(), g.chunk_tokens, box.data());
  std::vector<uint8_t> round_trip(g.k_bytes());
  round_trip_keys(g, KvCodec::kInt4, chunk.data(), round_trip.data());
  EXPECT_EQ(outside_box(round_trip.data(), box.data()), "");
  EXPECT_EQ(outside_box(chunk.data(), box.data()), "");
  for (size_t e = 0; e < box.size() / 2; ++e) EXPECT_LE(box[e], keys_box[e]) << "a box only widens";
  EXPECT_EQ(t->buffer_bytes(), t->slot_bytes() + g.k_bytes()) << "the round trip's keys are counted once held";
}

TEST(CompressedTransfers, FixedModesReadCompressedAlwaysAndAutoChoosesByItsSamples) {
  for (const KvCompress mode : {KvCompress::kInt4, KvCompress::kInt8}) {
    TempDir dir;
    auto disk = transfer_tier(dir.path(), mode);
    auto t = CompressedTransfers::create(*disk, mode, 1).value();
    EXPECT_FALSE(t->times_reads());
    for (int i = 0; i < 40; ++i) EXPECT_TRUE(t->choose_compressed_read()) << kv_compress_name(mode);
    KvStats stats;
    t->report(stats);
    EXPECT_EQ(stats.transfer.mode, kv_compress_name(mode));
    EXPECT_EQ(stats.transfer.decode_us_per_chunk, 0.0);
  }

  TempDir dir;
  auto disk = transfer_tier(dir.path(), KvCompress::kAuto);
  auto t = CompressedTransfers::create(*disk, KvCompress::kAuto, 1).value();
  EXPECT_TRUE(t->times_reads());
  KvStats before;
  t->report(before);
  EXPECT_EQ(before.transfer.mode, "auto (int4)");
  EXPECT_GT(before.transfer.decode_us_per_chunk, 0.0) << "calibrated when created";
  EXPECT_EQ(before.transfer.as_is_us_per_chunk, 0.0);
  EXPECT_FALSE(t->choose_compressed_read()) << "as it is first";

  uint8_t* nowhere = nullptr;
  const std::vector<DiskChunkRead> as_is{{0, nowhere, false}, {1, nowhere, false}};
  const std::vector<DiskChunkRead> mixed{{0, nowhere, false}, {1, nowhere, true}};
  const std::vector<DiskChunkRead> compressed{{0, nowhere, true}, {1, nowhere, true}};
  t->record_reads(mixed, 1.0);  // two forms: no sample of either
  KvStats stats;
  t->report(stats);
  EXPECT_EQ(stats.transfer.as_is_us_per_chunk, 0.0);
  EXPECT_EQ(stats.transfer.compressed_us_per_chunk, 0.0);
  t->record_reads(as_is, 2e-3);
  EXPECT_TRUE(t->choose_compressed_read()) << "then compressed";
  t->record_reads(compressed, 2e-6);
  t->report(stats);
  EXPECT_DOUBLE_EQ(stats.transfer.as_is_us_per_chunk, 1000.0);
  EXPECT_DOUBLE_EQ(stats.transfer.compressed_us_per_chunk, 1.0);
  // Compressed reads plus their decoding beat 1 ms a chunk as it is.
  EXPECT_TRUE(t->choose_compressed_read());
}

TEST(CompressedTransfers, NeedTheDisksCopyInTheirCodec) {
  TempDir dir;
  auto plain = transfer_tier(dir.path(), KvCompress::kOff);
  EXPECT_FALSE(CompressedTransfers::create(*plain, KvCompress::kInt4, 1).is_ok());
  EXPECT_FALSE(CompressedTransfers::create(*plain, KvCompress::kOff, 1).is_ok());
  TempDir other;
  auto int8 = transfer_tier(other.path(), KvCompress::kInt8);
  EXPECT_FALSE(CompressedTransfers::create(*int8, KvCompress::kInt4, 1).is_ok());
}

}  // namespace
}  // namespace leoam
