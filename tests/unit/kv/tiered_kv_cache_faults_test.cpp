// TieredKvCache under injected faults (FaultInjectionFileSystem): flipped bits in chunks, compressed
// chunks and abstracts are named and never served, a failed read-ahead leaves the error to the
// gather, and read errors and a full disk leave the store usable.
#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "io/fault_injection_file_system.h"
#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::expect_same_rows;
using testing_util::kHeadDim;
using testing_util::kHeads;
using testing_util::kLayers;
using testing_util::random_rows;
using testing_util::read_rows;
using testing_util::small_options;
using testing_util::TempDir;
using testing_util::Twin;

class TieredKvCacheFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    TieredKvCacheOptions o = small_options(dir_.path());
    o.file_system = &fs_;
    twin_ = std::make_unique<Twin>(o);
    ASSERT_TRUE(twin_->append(120).is_ok());
    ASSERT_EQ(kv().residency().find({1, 2})->tier, Tier::kDisk);
  }
  TieredKvCache& kv() { return twin_->tiered(); }
  Status read_all(int layer, bool unordered = false) {
    const TokenRange all{0, kv().n_tokens()};
    return read_rows(kv(), layer, {&all, 1}, unordered).status();
  }

  TempDir dir_;
  FaultInjectionFileSystem fs_{posix_file_system()};
  std::unique_ptr<Twin> twin_;
};

// In order, and unordered (the chunks in memory visited while the reads are in flight).
TEST_F(TieredKvCacheFaults, FlippedBitInAChunkIsNamedAndNeverServed) {
  for (const bool unordered : {false, true}) {
    SCOPED_TRACE(unordered ? "unordered" : "in order");
    Fault f;
    f.kind = FaultKind::kFlipBit;
    f.path_suffix = "test-L001.kv";
    f.byte_offset = 2 * kv().disk().slot_bytes() + 37;
    f.bit = 3;
    f.sticky = true;
    fs_.arm(f);
    ASSERT_EQ(kv().residency().find({1, 2})->tier, Tier::kDisk);
    const Status st = read_all(1, unordered);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("KV session 'test' layer 1 chunk 2"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
    fs_.disarm_all();
  }
  EXPECT_TRUE(read_all(1).is_ok());  // the file itself was never damaged
}

TEST(TieredKvCacheFaultsCompressed, FlippedBitInACompressedChunkIsNamedAndNeverServed) {
  TempDir dir;
  FaultInjectionFileSystem fs{posix_file_system()};
  TieredKvCacheOptions o = small_options(dir.path());
  o.file_system = &fs;
  o.compress = KvCompress::kInt4;
  Twin twin(o);
  ASSERT_TRUE(twin.append(120).is_ok());
  ASSERT_EQ(twin.tiered().residency().find({1, 2})->tier, Tier::kDisk);
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "test-L001.kvc";
  f.byte_offset = 2 * twin.tiered().disk().compressed_slot_bytes() + 9;
  f.bit = 1;
  f.sticky = true;
  fs.arm(f);
  const TokenRange all{0, 120};
  const Status st = read_rows(twin.tiered(), 1, {&all, 1}).status();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("layer 1 chunk 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("test-L001.kvc"), std::string::npos) << st.message();
  fs.disarm_all();
  EXPECT_TRUE(read_rows(twin.tiered(), 1, {&all, 1}).is_ok());
}

// A read-ahead whose read fails stages nothing: the gather reads the chunk itself and reports
// the corruption, naming the chunk, as without the pipeline.
TEST_F(TieredKvCacheFaults, AFailedReadAheadLeavesTheErrorToTheGather) {
  TieredKvCacheOptions o = small_options(dir_.path() + "/ahead");
  o.file_system = &fs_;
  o.session = "ahead";
  o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;
  Twin twin(o);
  ASSERT_TRUE(twin.append(120).is_ok());
  TieredKvCache& kv = twin.tiered();
  ASSERT_EQ(kv.residency().find({1, 2})->tier, Tier::kDisk);
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "ahead-L001.kv";
  f.byte_offset = 2 * kv.disk().slot_bytes() + 37;
  f.bit = 3;
  f.sticky = true;
  fs_.arm(f);
  const TokenRange r{16, 24};
  ASSERT_TRUE(kv.read_ahead(1, {&r, 1}).is_ok());
  const Status st = read_rows(kv, 1, {&r, 1}).status();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("KV session 'ahead' layer 1 chunk 2"), std::string::npos) << st.message();
  EXPECT_EQ(kv.stats().read_ahead.failed_jobs, 1u);
  EXPECT_EQ(kv.stats().read_ahead.chunks_used, 0u);
  fs_.disarm_all();
  expect_same_rows(twin, 1, {&r, 1});
}

TEST_F(TieredKvCacheFaults, FlippedBitInAnAbstractIsNamed) {
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "test-L001.lka";
  f.byte_offset = 2 * kv().disk().record_bytes(0) + 50;
  for (int64_t i = 1; i < 4; ++i) ASSERT_EQ(kv().residency().find({1, i})->tier, Tier::kDisk);
  std::vector<float> abstracts(3 * static_cast<size_t>(kv().geometry().abstract_floats()));
  ASSERT_TRUE(kv().read_disk_abstracts(1, 1, 4, abstracts.data()).is_ok());  // not yet armed
  fs_.arm(f);
  const Status st = kv().read_disk_abstracts(1, 1, 4, abstracts.data());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("layer 1 chunk 2"), std::string::npos) << st.message();
}

TEST_F(TieredKvCacheFaults, ReadErrorsAreReportedAndTheSessionStaysUsable) {
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    for (const bool unordered : {false, true}) {
      Fault f;
      f.kind = kind;
      f.path_suffix = ".kv";
      fs_.arm(f);
      const Status st = read_all(0, unordered);
      ASSERT_FALSE(st.is_ok());
      EXPECT_EQ(st.code(), StatusCode::kIoError);
      EXPECT_NE(st.message().find("KV session 'test' layer 0"), std::string::npos) << st.message();
      fs_.disarm_all();
      const TokenRange all{0, kv().n_tokens()};
      expect_same_rows(*twin_, 0, {&all, 1});
    }
  }
}

TEST_F(TieredKvCacheFaults, FullDiskFailsTheAppendCleanlyAndLaterAppendsWork) {
  Fault f;
  f.kind = FaultKind::kNoSpace;
  f.path_suffix = ".kv";
  f.sticky = true;
  fs_.arm(f);
  const int64_t before = kv().n_tokens();
  const auto k = random_rows(twin_->rng(), 64, kHeads * kHeadDim);
  const Status st = kv().append(0, before, 64, k.data(), k.data());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("No space left on device"), std::string::npos) << st.message();
  EXPECT_EQ(kv().n_tokens(0), before);
  EXPECT_LE(kv().residency().used_bytes(Tier::kDevice), kv().residency().options().device_budget_bytes);
  fs_.disarm_all();
  ASSERT_TRUE(twin_->append(64).is_ok());
  const TokenRange all{0, kv().n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(*twin_, il, {&all, 1});
}

}  // namespace
}  // namespace leoam
