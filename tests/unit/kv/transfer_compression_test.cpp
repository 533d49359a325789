#include "kv/transfer_compression.h"

#include <gtest/gtest.h>

namespace leoam {
namespace {

// A 7B-shaped 8-token chunk: 128 KiB as it is, 40 KiB in int4.
constexpr TransferCostModel::Sizes kSizes{131072, 40960, 131072};

TEST(TransferCompression, NamesRoundTripAndAutoMeansInt4) {
  for (KvCompress m : {KvCompress::kOff, KvCompress::kInt8, KvCompress::kInt4, KvCompress::kAuto}) {
    EXPECT_EQ(parse_kv_compress(kv_compress_name(m)), m);
  }
  EXPECT_FALSE(parse_kv_compress("int2").has_value());
  EXPECT_EQ(transfer_codec_of(KvCompress::kOff), KvCodec::kNone);
  EXPECT_EQ(transfer_codec_of(KvCompress::kInt8), KvCodec::kInt8);
  EXPECT_EQ(transfer_codec_of(KvCompress::kAuto), KvCodec::kInt4);
}

TEST(TransferCostModel, ReadsCompressedUntilTheDiskRateIsKnown) {
  TransferCostModel m(kSizes);
  EXPECT_TRUE(m.prefers_compressed());
  EXPECT_EQ(m.disk_rate(), 0.0);
}

TEST(TransferCostModel, ComparesReadPlusDecodeWithTheReadAlone) {
  TransferCostModel m(kSizes);
  m.record_decode(6'000'000'000, 1.0);     // decode at 6 GB/s
  m.record_disk_read(1'500'000'000, 1.0);  // a 1.5 GB/s disk: 87 us as it is, 27 + 22 us compressed
  EXPECT_TRUE(m.prefers_compressed());
  TransferCostModel fast(kSizes);
  fast.record_decode(6'000'000'000, 1.0);
  fast.record_disk_read(12'000'000'000, 1.0);  // 12 GB/s: 11 us as it is, 3.4 + 22 us compressed
  EXPECT_FALSE(fast.prefers_compressed());
  EXPECT_DOUBLE_EQ(fast.disk_rate(), 12e9);
}

TEST(TransferCostModel, FollowsADiskThatSlowsDown) {
  TransferCostModel m(kSizes);
  m.record_decode(6'000'000'000, 1.0);
  for (int i = 0; i < 5; ++i) m.record_disk_read(1'200'000'000, 0.1);  // 12 GB/s
  EXPECT_FALSE(m.prefers_compressed());
  for (int i = 0; i < 60; ++i) m.record_disk_read(150'000'000, 0.1);  // then 1.5 GB/s
  EXPECT_TRUE(m.prefers_compressed());
  EXPECT_LT(m.disk_rate(), 2e9);
}

}  // namespace
}  // namespace leoam
