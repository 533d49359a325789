// TieredKvCache with compressed KV: a host codec's rows and abstracts, and compressed transfers
// from the disk (int4, int8, auto), served as the codec's round trip and counted.
#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kv/kv_codec.h"
#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::check_bounds;
using testing_util::disk_chunks_of;
using testing_util::kHeadDim;
using testing_util::kHeads;
using testing_util::read_rows;
using testing_util::served_abstracts;
using testing_util::small_options;
using testing_util::TempDir;
using testing_util::Twin;

TEST(TieredKvCache, CompressedHostServesCloseRowsAndBoundingAbstracts) {
  for (KvCodec codec : {KvCodec::kInt8, KvCodec::kInt4}) {
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path(), codec);
    Twin twin(o);
    ASSERT_TRUE(twin.append(120).is_ok());
    const TokenRange all{0, 120};
    auto got = read_rows(twin.tiered(), 0, {&all, 1});
    auto want = read_rows(twin.memory(), 0, {&all, 1});
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    // Inputs are in [-2, 2): a group's step is at most 4/255 (int8) or 4/15 (int4).
    const float tol = codec == KvCodec::kInt8 ? 4.0f / 255 : 4.0f / 15;
    float max_err = 0.0f;
    for (const auto& [pos, row] : *want) {
      const auto* a = reinterpret_cast<const uint16_t*>(row.first.data());
      const auto* b = reinterpret_cast<const uint16_t*>(got->at(pos).first.data());
      for (int e = 0; e < kHeads * kHeadDim; ++e) max_err = std::max(max_err, std::abs(f16_to_f32(a[e]) - f16_to_f32(b[e])));
    }
    EXPECT_GT(max_err, 0.0f) << kv_codec_name(codec) << ": nothing was compressed";
    // Half a step, or a whole one for a key kept on its side of 0 (kv_codec.h).
    EXPECT_LE(max_err, tol + 1e-2f) << kv_codec_name(codec);
    const auto abstracts = served_abstracts(twin.tiered(), 0);
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(check_bounds(twin.tiered(), {0, i}, abstracts[i].data()), "") << kv_codec_name(codec) << " chunk " << i;
    }
  }
}

// The chunk of `key` as the in-memory twin holds it (the appended keys and values, exact).
std::vector<uint8_t> original_chunk(Twin& twin, const ChunkGeometry& g, ChunkKey key) {
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, p0 + g.chunk_tokens};
  auto rows = read_rows(twin.memory(), key.layer, {&r, 1});
  EXPECT_TRUE(rows.is_ok());
  std::vector<uint8_t> chunk(g.chunk_bytes(), 0);
  for (const auto& [pos, row] : *rows) {
    std::memcpy(chunk.data() + (pos - p0) * g.row_bytes(), row.first.data(), g.row_bytes());
    std::memcpy(chunk.data() + g.k_bytes() + (pos - p0) * g.row_bytes(), row.second.data(), g.row_bytes());
  }
  return chunk;
}

// With compressed transfers a disk chunk is read in the codec's form and served decoded: every
// row the store serves is either the appended one (a chunk that never left memory) or exactly
// its codec round trip, and the chunks read that way stay decoded once promoted. Read-ahead
// stages the compressed form too.
TEST(TieredKvCache, CompressedTransfersServeTheCodecRoundTripAndCountIt) {
  for (const KvCompress mode : {KvCompress::kInt4, KvCompress::kInt8}) {
    SCOPED_TRACE(kv_compress_name(mode));
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path());
    o.compress = mode;
    o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;
    Twin twin(o);
    ASSERT_TRUE(twin.append(256).is_ok());
    TieredKvCache& kv = twin.tiered();
    const ChunkGeometry& g = kv.geometry();
    const KvCodec codec = transfer_codec_of(mode);
    ASSERT_EQ(kv.disk().transfer_codec(), codec);
    const std::vector<TokenRange> ahead = {{40, 56}};
    const std::vector<int64_t> staged = disk_chunks_of(kv, 1, ahead);
    ASSERT_EQ(staged.size(), 2u);
    const std::vector<int64_t> on_disk = disk_chunks_of(kv, 1, {{{0, 256}}});
    ASSERT_GT(on_disk.size(), 10u);
    const KvStats before = kv.stats();
    ASSERT_TRUE(kv.read_ahead(1, ahead).is_ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second pass finds some chunks promoted, decoded
      const TokenRange all{0, 256};
      auto got = read_rows(kv, 1, {&all, 1});
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      int64_t n_round_trips = 0;
      for (int64_t i = 0; i < 32; ++i) {
        const std::vector<uint8_t> original = original_chunk(twin, g, {1, i});
        std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec)), round_trip(g.chunk_bytes());
        encode_chunk(g, codec, original.data(), encoded.data());
        ref::decode_chunk(g, codec, encoded.data(), round_trip.data());
        // A chunk on the disk at the start is read compressed; one that was on the device then
        // may have been pushed down by the promotions and read compressed too.
        const auto same = [&](const std::vector<uint8_t>& want) {
          for (int64_t t = 0; t < g.chunk_tokens; ++t) {
            const auto& row = got->at(i * g.chunk_tokens + t);
            if (std::memcmp(row.first.data(), want.data() + t * g.row_bytes(), g.row_bytes()) != 0 ||
                std::memcmp(row.second.data(), want.data() + g.k_bytes() + t * g.row_bytes(), g.row_bytes()) != 0) {
              return false;
            }
          }
          return true;
        };
        const bool was_on_disk = std::ranges::count(on_disk, i) > 0;
        if (same(round_trip)) {
          ++n_round_trips;
        } else {
          EXPECT_FALSE(was_on_disk) << "chunk " << i << " was on the disk and is not served as its round trip";
          EXPECT_TRUE(same(original)) << "chunk " << i << " is served as neither form";
        }
      }
      EXPECT_GE(n_round_trips, static_cast<int64_t>(on_disk.size()));
    }
    const KvStats after = kv.stats();
    EXPECT_EQ(after.transfer.mode, kv_compress_name(mode));
    EXPECT_GE(after.read_ahead.chunks_used, 2u);
    EXPECT_GE(after.transfer.chunks_compressed, on_disk.size());
    EXPECT_EQ(after.transfer.chunks_as_is, 0u);
    EXPECT_GT(after.transfer.decode_ms, 0.0);
    // Every disk read of this layer was of compressed slots.
    EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read,
              after.transfer.bytes_compressed - before.transfer.bytes_compressed);
    EXPECT_NE(after.to_text().find("compressed transfers (" + std::string(kv_compress_name(mode)) + ")"), std::string::npos);
    EXPECT_NE(after.to_json().find("\"transfer\""), std::string::npos);
  }
}

TEST(TieredKvCache, CompressedTransfersNeedTheHostCodecNone) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path(), KvCodec::kInt4);
  o.compress = KvCompress::kAuto;
  const auto kv = TieredKvCache::create(o);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.status().message().find("compressed disk reads (auto) need the host tier's chunks as they are"),
            std::string::npos)
      << kv.status().message();
  EXPECT_EQ(kv.status().setting(), Setting::kKvCompress);
}

// auto: the cost model has a decode time from the start (a calibration), tries each form, and
// reports its times.
TEST(TieredKvCache, AutoTransfersReportTheirRatesAndChoices) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.compress = KvCompress::kAuto;
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());
  const TokenRange all{0, 256};
  ASSERT_TRUE(read_rows(twin.tiered(), 0, {&all, 1}).is_ok());
  const KvStats s = twin.tiered().stats();
  EXPECT_EQ(s.transfer.mode, "auto (int4)");
  EXPECT_GT(s.transfer.chunks_compressed, 0u);
  EXPECT_GT(s.transfer.chunks_as_is, 0u);
  EXPECT_GT(s.transfer.decode_us_per_chunk, 0.0);
  EXPECT_GT(s.transfer.as_is_us_per_chunk, 0.0);
  EXPECT_GT(s.transfer.compressed_us_per_chunk, 0.0);
}

}  // namespace
}  // namespace leoam
