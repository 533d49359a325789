#include "kv/transfer_compression.h"

#include <gtest/gtest.h>

namespace leoam {
namespace {

TEST(TransferCompression, NamesRoundTripAndAutoMeansInt4) {
  for (KvCompress m : {KvCompress::kOff, KvCompress::kInt8, KvCompress::kInt4, KvCompress::kAuto}) {
    EXPECT_EQ(parse_kv_compress(kv_compress_name(m)), m);
  }
  EXPECT_FALSE(parse_kv_compress("int2").has_value());
  EXPECT_EQ(transfer_codec_of(KvCompress::kOff), KvCodec::kNone);
  EXPECT_EQ(transfer_codec_of(KvCompress::kInt8), KvCodec::kInt8);
  EXPECT_EQ(transfer_codec_of(KvCompress::kAuto), KvCodec::kInt4);
}

TEST(TransferCostModel, TriesEachFormFirstAsItIsThenCompressed) {
  TransferCostModel m;
  EXPECT_FALSE(m.choose_compressed());
  m.record_read(false, 10, 1e-3);
  EXPECT_TRUE(m.choose_compressed());
  EXPECT_DOUBLE_EQ(m.as_is_seconds(), 1e-4);
  EXPECT_EQ(m.compressed_seconds(), 0.0);
}

// Counts the compressed choices over kExploreEvery batches.
int compressed_choices(TransferCostModel& m) {
  int n = 0;
  for (int i = 0; i < TransferCostModel::kExploreEvery; ++i) n += m.choose_compressed();
  return n;
}

TEST(TransferCostModel, ChoosesTheFasterFormAndExploresTheOtherOnceAWhile) {
  TransferCostModel m;
  m.record_decode(1000, 20e-3);    // 20 us a chunk
  m.record_read(false, 100, 9e-3);  // a bandwidth-bound disk: 90 us as it is,
  m.record_read(true, 100, 3e-3);   // 30 + 20 us compressed
  EXPECT_EQ(compressed_choices(m), TransferCostModel::kExploreEvery - 1);
  TransferCostModel latency;
  latency.record_decode(1000, 20e-3);
  latency.record_read(false, 100, 5e-3);  // a disk that charges a request, not its bytes: 50 us
  latency.record_read(true, 100, 4.5e-3);  // either way, and the decode on top
  EXPECT_EQ(compressed_choices(latency), 1);
}

TEST(TransferCostModel, FollowsADiskThatSlowsDown) {
  TransferCostModel m;
  m.record_decode(1000, 20e-3);
  m.record_read(false, 100, 2e-3);  // 20 us as it is: faster than 10 + 20
  m.record_read(true, 100, 1e-3);
  EXPECT_FALSE(m.choose_compressed());
  for (int i = 0; i < 60; ++i) m.record_read(false, 100, 20e-3);  // then 200 us
  EXPECT_TRUE(m.choose_compressed());
}

}  // namespace
}  // namespace leoam
