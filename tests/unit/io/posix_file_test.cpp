// The POSIX file layer (file.h): round trips through io_uring and pread, direct and buffered,
// batched writes, the short-read and alignment errors, modes of created files, and the
// documented fallbacks.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "io/aligned_buffer.h"
#include "io/file.h"
#include "io_test_util.h"

namespace leoam {
namespace {

constexpr size_t kBlock = kDirectIoAlignment;

FileSystem& fs() { return posix_file_system(); }

AlignedBuffer must_allocate(size_t n_bytes) {
  Result<AlignedBuffer> buffer = AlignedBuffer::allocate(n_bytes);
  EXPECT_TRUE(buffer.is_ok()) << buffer.status().message();
  return std::move(buffer).value();
}

std::unique_ptr<RandomAccessFile> must_open(const std::string& path, const FileOpenOptions& options) {
  Result<std::unique_ptr<RandomAccessFile>> file = fs().open(path, options);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  return file.is_ok() ? std::move(file).value() : nullptr;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Writes `n_bytes` of fill_pattern(seed) through a buffered file, so that any size works.
void write_buffered(const std::string& path, size_t n_bytes, uint64_t seed) {
  std::vector<uint8_t> data(n_bytes);
  fill_pattern(data.data(), n_bytes, seed);
  FileOpenOptions options;
  options.create = true;
  options.truncate = true;
  options.direct = false;
  options.uring = false;
  auto file = must_open(path, options);
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->write(0, data.data(), n_bytes).is_ok());
}

struct Mode {
  bool direct;
  bool uring;
};

class PosixFileModeTest : public ::testing::TestWithParam<Mode> {
 protected:
  FileOpenOptions options(int queue_depth = 8) const {
    FileOpenOptions o;
    o.create = true;
    o.direct = GetParam().direct;
    o.uring = GetParam().uring;
    o.queue_depth = queue_depth;
    return o;
  }

  // What was asked for is in effect, or the note says why not.
  static void expect_mode(const RandomAccessFile& file, const Mode& mode) {
    const FileIoInfo info = file.io_info();
    EXPECT_EQ(info.direct && !mode.direct, false);
    EXPECT_EQ(info.uring && !mode.uring, false);
    if (mode.direct && !info.direct) {
      EXPECT_TRUE(contains(info.fallback_note, "O_DIRECT refused")) << info.fallback_note;
    }
    if (mode.uring && !info.uring) {
      EXPECT_TRUE(contains(info.fallback_note, "io_uring")) << info.fallback_note;
    }
    if (info.direct == mode.direct && info.uring == mode.uring) {
      EXPECT_EQ(info.fallback_note, "");
    }
  }

  TempDir dir_;
};

TEST_P(PosixFileModeTest, RoundTripOfManyRequestsInOneBatch) {
  constexpr size_t kFileBlocks = 256;
  constexpr int kQueueDepth = 8;
  AlignedBuffer src = must_allocate(kFileBlocks * kBlock);
  fill_pattern(src.data(), src.size(), 42);
  auto file = must_open(dir_.file("layer-000.kv"), options(kQueueDepth));
  ASSERT_NE(file, nullptr);
  expect_mode(*file, GetParam());

  // Writes of 1..7 blocks, back to back.
  for (size_t block = 0, i = 0; block < kFileBlocks; ++i) {
    const size_t n_blocks = std::min<size_t>(1 + i % 7, kFileBlocks - block);
    ASSERT_TRUE(file->write(block * kBlock, src.data() + block * kBlock, n_blocks * kBlock).is_ok());
    block += n_blocks;
  }
  ASSERT_TRUE(file->sync().is_ok());
  Result<uint64_t> size = file->size();
  ASSERT_TRUE(size.is_ok());
  EXPECT_EQ(*size, kFileBlocks * kBlock);

  // 100 reads (12x the queue depth) of 1..6 blocks at scattered, overlapping offsets, and one
  // empty request, each into its own part of one buffer.
  std::vector<ReadRequest> requests;
  std::vector<size_t> dst_offsets;
  size_t n_dst = 0;
  for (size_t i = 0; i < 100; ++i) {
    const size_t block = (i * 37) % 250;
    const size_t n_bytes = (1 + i % 6) * kBlock;
    requests.push_back({block * kBlock, n_bytes, nullptr});
    dst_offsets.push_back(n_dst);
    n_dst += n_bytes;
  }
  requests.push_back({kBlock, 0, nullptr});
  dst_offsets.push_back(0);
  AlignedBuffer dst = must_allocate(n_dst);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].dst = dst.data() + dst_offsets[i];
  ASSERT_TRUE(file->read(requests).is_ok());
  for (size_t i = 0; i + 1 < requests.size(); ++i) {
    ASSERT_EQ(std::memcmp(dst.data() + dst_offsets[i], src.data() + requests[i].offset, requests[i].n_bytes), 0)
        << "request " << i << " at offset " << requests[i].offset;
  }

  // The file keeps its contents when opened again.
  file.reset();
  auto again = must_open(dir_.file("layer-000.kv"), options(kQueueDepth));
  ASSERT_NE(again, nullptr);
  AlignedBuffer whole = must_allocate(kFileBlocks * kBlock);
  const ReadRequest all{0, whole.size(), whole.data()};
  ASSERT_TRUE(again->read({&all, 1}).is_ok());
  EXPECT_EQ(std::memcmp(whole.data(), src.data(), src.size()), 0);
}

// write_batch: 40 writes (5x the queue depth) of 1..5 blocks at scattered offsets, out of
// order, some extending the file, from parts of one buffer; what a read gets back is each write's
// bytes, and the gaps between them are zero.
TEST_P(PosixFileModeTest, WriteBatchWritesEveryRequest) {
  constexpr int kQueueDepth = 8;
  constexpr size_t kFileBlocks = 400;
  AlignedBuffer src = must_allocate(200 * kBlock);
  fill_pattern(src.data(), src.size(), 9);
  std::vector<uint8_t> expected(kFileBlocks * kBlock, 0);
  std::vector<WriteRequest> requests;
  for (size_t i = 0, src_block = 0; i < 40; ++i) {
    const size_t n_blocks = 1 + i % 5;
    const size_t block = (i * 53) % (kFileBlocks - 5) / 10 * 10;  // multiples of 10: no overlaps
    requests.push_back({block * kBlock, n_blocks * kBlock, src.data() + src_block * kBlock});
    src_block += n_blocks;
  }
  std::sort(requests.begin(), requests.end(), [](const WriteRequest& a, const WriteRequest& b) { return a.offset < b.offset; });
  requests.erase(std::unique(requests.begin(), requests.end(),
                             [](const WriteRequest& a, const WriteRequest& b) { return a.offset == b.offset; }),
                 requests.end());
  std::reverse(requests.begin(), requests.end());  // the last first: the first write extends the file most
  for (const WriteRequest& w : requests) std::memcpy(expected.data() + w.offset, w.src, w.n_bytes);
  requests.push_back({0, 0, src.data()});  // an empty request is nothing to write

  auto file = must_open(dir_.file("layer-000.kv"), options(kQueueDepth));
  ASSERT_NE(file, nullptr);
  expect_mode(*file, GetParam());
  ASSERT_TRUE(file->write_batch(requests).is_ok());
  Result<uint64_t> size = file->size();
  ASSERT_TRUE(size.is_ok());
  const uint64_t end = requests[0].offset + requests[0].n_bytes;
  EXPECT_EQ(*size, end);
  AlignedBuffer back = must_allocate(end);
  const ReadRequest all{0, end, back.data()};
  ASSERT_TRUE(file->read({&all, 1}).is_ok());
  EXPECT_EQ(std::memcmp(back.data(), expected.data(), end), 0);

  // Opened read-only, the file takes no batch.
  file.reset();
  FileOpenOptions read_only = options(kQueueDepth);
  read_only.create = false;
  read_only.read_only = true;
  auto ro = must_open(dir_.file("layer-000.kv"), read_only);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->write_batch({requests.data(), 1}).code(), StatusCode::kInvalidArgument);
}

// As read(), and as start_reads() then finish_reads() (the first queue-depth requests out before
// finish_reads() is called): a failed request fails the batch, every request of it is reaped
// before the call returns, and the next batch reads what it asks.
TEST_P(PosixFileModeTest, FailedRequestInABatchLeavesTheFileUsable) {
  constexpr size_t kFileBlocks = 16;
  write_buffered(dir_.file("f.kv"), kFileBlocks * kBlock, 7);
  std::vector<uint8_t> expected(kFileBlocks * kBlock);
  fill_pattern(expected.data(), expected.size(), 7);
  auto file = must_open(dir_.file("f.kv"), options(/*queue_depth=*/4));
  ASSERT_NE(file, nullptr);

  for (const bool started : {false, true}) {
    SCOPED_TRACE(started ? "start_reads, finish_reads" : "read");
    const auto read = [&](std::span<const ReadRequest> requests) {
      if (!started) return file->read(requests);
      const Status st = file->start_reads(requests);
      return st.is_ok() ? file->finish_reads() : st;
    };
    AlignedBuffer dst = must_allocate(40 * kBlock);
    std::vector<ReadRequest> requests;
    for (size_t i = 0; i < 40; ++i) requests.push_back({(i % kFileBlocks) * kBlock, kBlock, dst.data() + i * kBlock});
    requests[started ? 2 : 17].offset = 256 * kBlock;  // past the end (with start_reads, among the first out)
    const Status failed = read(requests);
    EXPECT_EQ(failed.code(), StatusCode::kIoError);
    EXPECT_TRUE(contains(failed.message(), dir_.file("f.kv") + ": read of 4096 bytes at offset 1048576 failed: short read"))
        << failed.message();

    // Every read of the failed batch was reaped: the next batch sees only its own completions.
    requests[started ? 2 : 17].offset = 3 * kBlock;
    ASSERT_TRUE(read(requests).is_ok());
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(std::memcmp(dst.data() + i * kBlock, expected.data() + requests[i].offset, kBlock), 0) << i;
    }
  }
}

TEST_P(PosixFileModeTest, ReadPastTheEndIsAShortRead) {
  // 10000 bytes: the last block is partial, as after a crash mid-write.
  write_buffered(dir_.file("short.kv"), 10000, 3);
  auto file = must_open(dir_.file("short.kv"), options());
  ASSERT_NE(file, nullptr);
  AlignedBuffer dst = must_allocate(2 * kBlock);

  // Starts inside the file: the OS answers 1808 bytes, the rest is missing.
  const ReadRequest straddling{2 * kBlock, 2 * kBlock, dst.data()};
  const Status s = file->read({&straddling, 1});
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(s.message(), "read of 8192 bytes at offset 8192 failed: short read, got 1808 bytes (the file has 10000)"))
      << s.message();

  // Starts at or beyond the end: nothing at all.
  for (uint64_t offset : {uint64_t{3 * kBlock}, uint64_t{1} << 30}) {
    const ReadRequest beyond{offset, kBlock, dst.data()};
    const Status t = file->read({&beyond, 1});
    EXPECT_EQ(t.code(), StatusCode::kIoError);
    EXPECT_TRUE(contains(t.message(), "at offset " + std::to_string(offset) + " failed: short read, got 0 bytes"))
        << t.message();
  }
}

TEST_P(PosixFileModeTest, ReadOfWholeBlocksStoppingAtTheEndIsAShortRead) {
  write_buffered(dir_.file("blocks.kv"), 3 * kBlock, 5);
  auto file = must_open(dir_.file("blocks.kv"), options());
  ASSERT_NE(file, nullptr);
  AlignedBuffer dst = must_allocate(2 * kBlock);
  // The OS answers one whole block; asking for the rest gets 0 bytes.
  const ReadRequest r{2 * kBlock, 2 * kBlock, dst.data()};
  const Status s = file->read({&r, 1});
  EXPECT_TRUE(contains(s.message(), "short read, got 4096 bytes (the file has 12288)")) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Modes, PosixFileModeTest,
                         ::testing::Values(Mode{true, true}, Mode{true, false}, Mode{false, true}, Mode{false, false}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.direct ? "Direct" : "Buffered") +
                                  (info.param.uring ? "Uring" : "Pread");
                         });

class PosixFileTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(PosixFileTest, BufferedModeAcceptsAnyAlignment) {
  for (bool uring : {true, false}) {
    FileOpenOptions options;
    options.create = true;
    options.direct = false;
    options.uring = uring;
    auto file = must_open(dir_.file("odd.kv"), options);
    ASSERT_NE(file, nullptr);
    std::vector<uint8_t> src(5001);
    fill_pattern(src.data(), src.size(), uring);
    ASSERT_TRUE(file->write(3, src.data() + 1, 5000).is_ok());
    std::vector<uint8_t> dst(5008);
    const ReadRequest requests[] = {{3, 1000, dst.data() + 1}, {1003, 4000, dst.data() + 1001}, {500, 7, dst.data() + 5001}};
    ASSERT_TRUE(file->read(requests).is_ok());
    EXPECT_EQ(std::memcmp(dst.data() + 1, src.data() + 1, 5000), 0);
    EXPECT_EQ(std::memcmp(dst.data() + 5001, src.data() + 1 + 497, 7), 0);
  }
}

TEST_F(PosixFileTest, MisalignedDirectIoIsRejected) {
  FileOpenOptions options;
  options.create = true;
  auto file = must_open(dir_.file("direct.kv"), options);
  ASSERT_NE(file, nullptr);
  if (!file->io_info().direct) GTEST_SKIP() << "no O_DIRECT here: " << file->io_info().fallback_note;
  AlignedBuffer buffer = must_allocate(2 * kBlock);

  const Status offset = file->write(100, buffer.data(), kBlock);
  EXPECT_EQ(offset.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(offset.message(), dir_.file("direct.kv") +
                                             ": write of 4096 bytes at offset 100 is misaligned for O_DIRECT (offset): "
                                             "offsets, lengths and buffer addresses must be multiples of 4096"))
      << offset.message();
  const Status length = file->write(0, buffer.data(), 100);
  EXPECT_TRUE(contains(length.message(), "misaligned for O_DIRECT (length)")) << length.message();
  const Status pointer = file->write(0, buffer.data() + 8, kBlock);
  EXPECT_TRUE(contains(pointer.message(), "misaligned for O_DIRECT (buffer-address)")) << pointer.message();
  const ReadRequest bad_read{kBlock, 512, buffer.data()};
  const Status read = file->read({&bad_read, 1});
  EXPECT_EQ(read.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(read.message(), "read of 512 bytes at offset 4096 is misaligned for O_DIRECT (length)"))
      << read.message();
  // A batch with one misaligned write writes none of it.
  const WriteRequest batch[] = {{0, kBlock, buffer.data()}, {kBlock, kBlock, buffer.data() + 8}};
  const Status write_batch = file->write_batch(batch);
  EXPECT_EQ(write_batch.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(write_batch.message(), "misaligned for O_DIRECT (buffer-address)")) << write_batch.message();
  // Rejected before any I/O.
  EXPECT_EQ(*file->size(), 0u);
}

TEST_F(PosixFileTest, DirectFallsBackOnTmpfs) {
  if (!fs().exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  TempDir shm("/dev/shm");
  FileOpenOptions options;
  options.create = true;
  auto file = must_open(shm.file("tmpfs.kv"), options);
  ASSERT_NE(file, nullptr);
  const FileIoInfo info = file->io_info();
  if (info.direct) GTEST_SKIP() << "this kernel's tmpfs accepts O_DIRECT (Linux >= 6.6)";
  EXPECT_TRUE(contains(info.fallback_note,
                       "O_DIRECT refused by the file system (Invalid argument): buffered I/O with "
                       "posix_fadvise(DONTNEED) after each write"))
      << info.fallback_note;
  AlignedBuffer src = must_allocate(kBlock);
  fill_pattern(src.data(), src.size(), 9);
  ASSERT_TRUE(file->write(0, src.data(), src.size()).is_ok());
  AlignedBuffer dst = must_allocate(kBlock);
  const ReadRequest r{0, kBlock, dst.data()};
  ASSERT_TRUE(file->read({&r, 1}).is_ok());
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), kBlock), 0);
}

// procfs has refused O_DIRECT on every kernel, so the fallback can be seen even where tmpfs
// takes O_DIRECT.
TEST_F(PosixFileTest, DirectFallsBackOnProcfs) {
  if (!fs().exists("/proc/self/status")) GTEST_SKIP() << "no /proc";
  FileOpenOptions options;
  options.read_only = true;
  auto file = must_open("/proc/self/status", options);
  ASSERT_NE(file, nullptr);
  EXPECT_FALSE(file->io_info().direct);
  EXPECT_EQ(file->io_info().fallback_note,
            "O_DIRECT refused by the file system (Invalid argument): buffered I/O with posix_fadvise(DONTNEED) after "
            "each write");
  char name[5];
  const ReadRequest r{0, sizeof(name), name};
  ASSERT_TRUE(file->read({&r, 1}).is_ok());
  EXPECT_EQ(std::string(name, sizeof(name)), "Name:");
}

// Reads 20 blocks with `file` and checks them against fill_pattern(seed).
void expect_reads_back(RandomAccessFile& file, uint64_t seed) {
  AlignedBuffer expected = must_allocate(20 * kBlock);
  fill_pattern(expected.data(), expected.size(), seed);
  ASSERT_TRUE(file.write(0, expected.data(), expected.size()).is_ok());
  AlignedBuffer dst = must_allocate(20 * kBlock);
  std::vector<ReadRequest> requests;
  for (size_t i = 0; i < 20; ++i) requests.push_back({(19 - i) * kBlock, kBlock, dst.data() + i * kBlock});
  ASSERT_TRUE(file.read(requests).is_ok());
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(std::memcmp(dst.data() + i * kBlock, expected.data() + (19 - i) * kBlock, kBlock), 0) << i;
  }
}

TEST_F(PosixFileTest, EnvironmentForcesPread) {
  FileOpenOptions options;
  options.create = true;
  {
    ScopedEnv env("LEOAM_NO_IO_URING", "1");
    auto file = must_open(dir_.file("env.kv"), options);
    ASSERT_NE(file, nullptr);
    EXPECT_FALSE(file->io_info().uring);
    EXPECT_TRUE(contains(file->io_info().fallback_note, "io_uring disabled by LEOAM_NO_IO_URING=1: pread"))
        << file->io_info().fallback_note;
    expect_reads_back(*file, 1);
  }
  ScopedEnv env("LEOAM_NO_IO_URING", std::nullopt);
  auto file = must_open(dir_.file("env.kv"), options);
  ASSERT_NE(file, nullptr);
  EXPECT_FALSE(contains(file->io_info().fallback_note, "LEOAM_NO_IO_URING"));
}

TEST_F(PosixFileTest, RingSetupFailureFallsBackToPread) {
  FileOpenOptions options;
  options.create = true;
  options.queue_depth = 1 << 20;  // above io_uring's limit of 32768 entries
  auto file = must_open(dir_.file("deep.kv"), options);
  ASSERT_NE(file, nullptr);
  EXPECT_FALSE(file->io_info().uring);
  EXPECT_TRUE(contains(file->io_info().fallback_note, "io_uring unavailable (")) << file->io_info().fallback_note;
  EXPECT_TRUE(contains(file->io_info().fallback_note, "): pread")) << file->io_info().fallback_note;
  expect_reads_back(*file, 2);
}

// Sets the umask to 0 for one scope, so that modes are exactly what the code asked for.
class ScopedUmask {
 public:
  ScopedUmask() : old_(::umask(0)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(PosixFileTest, CreatesPrivateFilesAndDirectories) {
  ScopedUmask umask;
  const std::string deep = dir_.file("a/b/c");
  ASSERT_TRUE(fs().create_dirs(deep).is_ok());
  EXPECT_EQ(mode_of(dir_.file("a")), 0700u);
  EXPECT_EQ(mode_of(dir_.file("a/b")), 0700u);
  EXPECT_EQ(mode_of(deep), 0700u);
  EXPECT_TRUE(fs().create_dirs(deep).is_ok());  // already there
  EXPECT_TRUE(fs().create_dirs(deep + "/").is_ok());

  FileOpenOptions options;
  options.create = true;
  ASSERT_NE(must_open(deep + "/layer-001.kv", options), nullptr);
  EXPECT_EQ(mode_of(deep + "/layer-001.kv"), 0600u);
}

TEST_F(PosixFileTest, CreateDirsThroughAFileFails) {
  write_buffered(dir_.file("plain"), 10, 0);
  const Status same = fs().create_dirs(dir_.file("plain"));
  EXPECT_EQ(same.code(), StatusCode::kIoError);
  EXPECT_EQ(same.message(), dir_.file("plain") + ": cannot create directory: a file of that name exists");
  const Status below = fs().create_dirs(dir_.file("plain/sub"));
  EXPECT_EQ(below.message(), dir_.file("plain/sub") + ": cannot create directory: Not a directory");
  EXPECT_EQ(fs().create_dirs("").code(), StatusCode::kInvalidArgument);
}

TEST_F(PosixFileTest, OpenExistsRemove) {
  const std::string path = dir_.file("x.kv");
  FileOpenOptions options;
  Result<std::unique_ptr<RandomAccessFile>> missing = fs().open(path, options);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), path + ": cannot open: No such file or directory (open with create to make it)");
  EXPECT_FALSE(fs().exists(path));

  write_buffered(path, 100, 1);
  EXPECT_TRUE(fs().exists(path));
  ASSERT_TRUE(fs().remove(path).is_ok());
  EXPECT_FALSE(fs().exists(path));
  EXPECT_TRUE(fs().remove(path).is_ok());  // missing is fine
  const Status dir = fs().remove(dir_.path());
  EXPECT_EQ(dir.code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(dir.message(), dir_.path() + ": cannot remove: ")) << dir.message();
}

TEST_F(PosixFileTest, TruncateAndReadOnly) {
  const std::string path = dir_.file("t.kv");
  write_buffered(path, 3 * kBlock, 1);
  FileOpenOptions read_only;
  read_only.read_only = true;
  auto reader = must_open(path, read_only);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(*reader->size(), 3 * kBlock);
  AlignedBuffer buffer = must_allocate(kBlock);
  const Status write = reader->write(0, buffer.data(), kBlock);
  EXPECT_EQ(write.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write.message(), path + ": write to a file opened read-only");

  read_only.truncate = true;
  EXPECT_EQ(fs().open(path, read_only).status().code(), StatusCode::kInvalidArgument);

  FileOpenOptions truncate;
  truncate.truncate = true;
  auto emptied = must_open(path, truncate);
  ASSERT_NE(emptied, nullptr);
  EXPECT_EQ(*emptied->size(), 0u);
}

TEST_F(PosixFileTest, QueueDepthMustBePositive) {
  FileOpenOptions options;
  options.create = true;
  options.queue_depth = 0;
  const Result<std::unique_ptr<RandomAccessFile>> file = fs().open(dir_.file("q.kv"), options);
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(file.status().message(), "queue depth must be at least 1, not 0")) << file.status().message();
  EXPECT_FALSE(fs().exists(dir_.file("q.kv")));
}

}  // namespace
}  // namespace leoam
