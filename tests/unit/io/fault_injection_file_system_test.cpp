// FaultInjectionFileSystem: each fault fires on the right operation, as often as asked, with
// messages like the real ones; kFlipBit corrupts exactly one bit.
#include "io/fault_injection_file_system.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io_test_util.h"

namespace leoam {
namespace {

constexpr size_t kAlignedBlock = kDirectIoAlignment;

Fault make_fault(FaultKind kind, const std::string& path_suffix = "", int skip = 0, bool sticky = false) {
  Fault f;
  f.kind = kind;
  f.path_suffix = path_suffix;
  f.skip = skip;
  f.sticky = sticky;
  return f;
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs_.create_dirs(dir_.file("kv")).is_ok());
    a_ = open("kv/layer-000.kv");
    b_ = open("kv/layer-001.kv");
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    data_.resize(4 * kAlignedBlock);
    fill_pattern(data_.data(), data_.size(), 17);
    ASSERT_TRUE(a_->write(0, data_.data(), data_.size()).is_ok());
    ASSERT_TRUE(b_->write(0, data_.data(), data_.size()).is_ok());
  }

  std::unique_ptr<RandomAccessFile> open(const std::string& name) {
    FileOpenOptions options;
    options.create = true;
    options.direct = false;  // the tests use unaligned vectors
    Result<std::unique_ptr<RandomAccessFile>> file = fs_.open(dir_.file(name), options);
    EXPECT_TRUE(file.is_ok()) << file.status().message();
    return file.is_ok() ? std::move(file).value() : nullptr;
  }

  // Reads block `block` of `file` into out_ (one request).
  Status read_block(RandomAccessFile& file, size_t block) {
    out_.assign(kAlignedBlock, 0);
    const ReadRequest r{block * kAlignedBlock, kAlignedBlock, out_.data()};
    return file.read({&r, 1});
  }

  Status write_block(RandomAccessFile& file, size_t block) {
    return file.write(block * kAlignedBlock, data_.data() + block * kAlignedBlock, kAlignedBlock);
  }

  TempDir dir_;
  FaultInjectionFileSystem fs_{posix_file_system()};
  std::unique_ptr<RandomAccessFile> a_, b_;
  std::vector<uint8_t> data_, out_;
};

TEST_F(FaultInjectionTest, ReadEioFiresOnTheNthReadOfTheMatchingFileOnce) {
  fs_.arm(make_fault(FaultKind::kReadEio, "layer-000.kv", /*skip=*/2));
  EXPECT_TRUE(read_block(*a_, 0).is_ok());
  EXPECT_TRUE(read_block(*b_, 0).is_ok());  // another file: not counted
  EXPECT_TRUE(write_block(*a_, 0).is_ok());  // a write: not counted
  EXPECT_TRUE(read_block(*a_, 1).is_ok());
  EXPECT_EQ(fs_.n_fired(), 0);
  const Status s = read_block(*a_, 2);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), dir_.file("kv/layer-000.kv") + ": read of 4096 bytes at offset 8192 failed: Input/output error (injected)");
  EXPECT_EQ(fs_.n_fired(), 1);
  EXPECT_TRUE(read_block(*a_, 3).is_ok());  // fired once, then disarmed
  EXPECT_EQ(std::memcmp(out_.data(), data_.data() + 3 * kAlignedBlock, kAlignedBlock), 0);
  EXPECT_EQ(fs_.n_fired(), 1);
}

TEST_F(FaultInjectionTest, StickyFaultKeepsFiring) {
  fs_.arm(make_fault(FaultKind::kReadEio, "", /*skip=*/1, /*sticky=*/true));
  EXPECT_TRUE(read_block(*a_, 0).is_ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(read_block(*a_, 0).is_ok());
    EXPECT_FALSE(read_block(*b_, 0).is_ok());  // "" matches every file
  }
  EXPECT_EQ(fs_.n_fired(), 6);
  fs_.disarm_all();
  EXPECT_TRUE(read_block(*a_, 0).is_ok());
  EXPECT_EQ(fs_.n_fired(), 6);
}

TEST_F(FaultInjectionTest, ShortReadNamesPathAndOffset) {
  fs_.arm(make_fault(FaultKind::kShortRead, "001.kv"));
  EXPECT_TRUE(read_block(*a_, 1).is_ok());
  const Status s = read_block(*b_, 1);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), dir_.file("kv/layer-001.kv") + ": read of 4096 bytes at offset 4096 failed: short read (injected)");
  EXPECT_TRUE(read_block(*b_, 1).is_ok());
}

TEST_F(FaultInjectionTest, WriteFaultsFireOnWritesOnly) {
  fs_.arm(make_fault(FaultKind::kNoSpace, "", /*skip=*/1));
  fs_.arm(make_fault(FaultKind::kWriteEio, "000.kv", /*skip=*/1));
  EXPECT_TRUE(read_block(*a_, 0).is_ok());  // reads: not counted
  EXPECT_TRUE(write_block(*b_, 0).is_ok());
  const Status no_space = write_block(*a_, 3);
  EXPECT_EQ(no_space.code(), StatusCode::kIoError);
  EXPECT_EQ(no_space.message(),
            dir_.file("kv/layer-000.kv") + ": write of 4096 bytes at offset 12288 failed: No space left on device (injected)");
  const Status eio = write_block(*a_, 1);
  EXPECT_EQ(eio.message(), dir_.file("kv/layer-000.kv") + ": write of 4096 bytes at offset 4096 failed: Input/output error (injected)");
  EXPECT_TRUE(write_block(*a_, 1).is_ok());
  EXPECT_EQ(fs_.n_fired(), 2);
}

TEST_F(FaultInjectionTest, FailedWriteWritesNothing) {
  fs_.arm(make_fault(FaultKind::kNoSpace));
  std::vector<uint8_t> zeros(kAlignedBlock, 0);
  EXPECT_FALSE(a_->write(0, zeros.data(), zeros.size()).is_ok());
  ASSERT_TRUE(read_block(*a_, 0).is_ok());
  EXPECT_EQ(std::memcmp(out_.data(), data_.data(), kAlignedBlock), 0);
}

TEST_F(FaultInjectionTest, FlipBitCorruptsExactlyThatBitOfTheCoveringRequest) {
  constexpr uint64_t kByte = 5000;  // in block 1
  Fault flip = make_fault(FaultKind::kFlipBit, "000.kv");
  flip.byte_offset = kByte;
  flip.bit = 3;
  fs_.arm(flip);
  EXPECT_TRUE(read_block(*a_, 0).is_ok());  // does not cover the byte: not counted
  EXPECT_EQ(std::memcmp(out_.data(), data_.data(), kAlignedBlock), 0);
  EXPECT_EQ(fs_.n_fired(), 0);

  // Two requests cover the byte; only the first is corrupted.
  std::vector<uint8_t> all(3 * kAlignedBlock);
  const ReadRequest requests[] = {
      {0, kAlignedBlock, all.data()}, {kAlignedBlock, kAlignedBlock, all.data() + kAlignedBlock}, {kByte, 100, all.data() + 2 * kAlignedBlock}};
  ASSERT_TRUE(a_->read(requests).is_ok());
  EXPECT_EQ(fs_.n_fired(), 1);
  for (size_t i = 0; i < 2 * kAlignedBlock; ++i) {
    const uint8_t want = data_[i] ^ (i == kByte ? 0x08 : 0x00);
    ASSERT_EQ(all[i], want) << "byte " << i;
  }
  EXPECT_EQ(std::memcmp(all.data() + 2 * kAlignedBlock, data_.data() + kByte, 100), 0);

  ASSERT_TRUE(read_block(*a_, 1).is_ok());  // once
  EXPECT_EQ(std::memcmp(out_.data(), data_.data() + kAlignedBlock, kAlignedBlock), 0);
}

TEST_F(FaultInjectionTest, FaultsArmedTogetherFireInTurn) {
  fs_.arm(make_fault(FaultKind::kShortRead));
  fs_.arm(make_fault(FaultKind::kReadEio));
  EXPECT_TRUE(read_block(*a_, 0).message().find("short read") != std::string::npos);
  EXPECT_TRUE(read_block(*a_, 0).message().find("Input/output error") != std::string::npos);
  EXPECT_TRUE(read_block(*a_, 0).is_ok());
  EXPECT_EQ(fs_.n_fired(), 2);
}

TEST_F(FaultInjectionTest, PassesThroughEverythingElse) {
  FileOpenOptions buffered;
  buffered.direct = false;
  Result<std::unique_ptr<RandomAccessFile>> plain = posix_file_system().open(a_->path(), buffered);
  ASSERT_TRUE(plain.is_ok());
  const FileIoInfo base = (*plain)->io_info();
  EXPECT_EQ(a_->io_info().direct, base.direct);
  EXPECT_EQ(a_->io_info().uring, base.uring);
  EXPECT_EQ(a_->io_info().fallback_note, base.fallback_note);
  EXPECT_EQ(a_->path(), dir_.file("kv/layer-000.kv"));
  EXPECT_EQ(*a_->size(), 4 * kAlignedBlock);
  EXPECT_TRUE(a_->sync().is_ok());
  EXPECT_TRUE(fs_.exists(a_->path()));
  EXPECT_TRUE(fs_.remove(b_->path()).is_ok());
  EXPECT_FALSE(fs_.exists(b_->path()));
  EXPECT_EQ(fs_.open(dir_.file("missing.kv"), FileOpenOptions{}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace leoam
