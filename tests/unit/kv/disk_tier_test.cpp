// DiskTier's abstract file: records packed, read by whole blocks with O_DIRECT, so that an
// abstract read is a disk read and never a page-cache hit.
#include "kv/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "io/aligned_buffer.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::TempDir;

constexpr int kLayers = 2;
constexpr int64_t kChunks = 61;

DiskTierOptions tier_options(const std::string& dir, KvStats* stats) {
  DiskTierOptions d;
  d.dir = dir;
  d.session = "t";
  d.n_layer = kLayers;
  d.geometry = ChunkGeometry{2, 8, 8, KvDtype::kF16};  // records of 40 + 4 * (32 + 2) bytes: not block-aligned
  d.visible_files = true;
  d.stats = stats;
  return d;
}

// Chunk i's abstract: every float distinct, so a record read from the wrong place shows.
std::vector<float> abstract_of(const ChunkGeometry& g, int layer, int64_t i) {
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()));
  std::iota(a.begin(), a.end(), static_cast<float>((layer * 1000 + i) * 100));
  return a;
}

// Writes chunks [0, kChunks) of every layer in batches of 1 to 7, in shuffled order.
void write_all(DiskTier& tier, std::mt19937& rng) {
  const ChunkGeometry& g = tier.geometry();
  auto slot = AlignedBuffer::allocate(tier.slot_bytes()).value();
  for (int il = 0; il < kLayers; ++il) {
    std::vector<int64_t> order(kChunks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<float>> abstracts;
    for (size_t b = 0; b < order.size();) {
      const size_t n = std::min<size_t>(order.size() - b, 1 + rng() % 7);
      std::vector<DiskChunkWrite> batch;
      abstracts.clear();
      for (size_t j = 0; j < n; ++j) abstracts.push_back(abstract_of(g, il, order[b + j]));
      for (size_t j = 0; j < n; ++j) batch.push_back({order[b + j], slot.data(), g.chunk_tokens, abstracts[j].data()});
      ASSERT_TRUE(tier.write_chunks(il, batch).is_ok());
      const uint64_t lka_bytes = std::filesystem::file_size(tier.abstract_path(il));
      EXPECT_EQ(lka_bytes % kDirectIoAlignment, 0u) << "the abstract file must end on a block";
      b += n;
    }
  }
}

TEST(DiskTierAbstracts, EveryRangeReadsItsRecordsByWholeBlocks) {
  TempDir dir;
  KvStats stats;
  auto tier = DiskTier::create(tier_options(dir.path(), &stats));
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  std::mt19937 rng(5);
  write_all(**tier, rng);
  const ChunkGeometry& g = (*tier)->geometry();
  const uint64_t rb = (*tier)->record_bytes();
  ASSERT_NE(rb % kDirectIoAlignment, 0u);
  for (int il = 0; il < kLayers; ++il) {
    for (int64_t i0 = 0; i0 < kChunks; i0 += 3) {
      for (int64_t i1 : {i0 + 1, std::min<int64_t>(kChunks, i0 + 2), std::min<int64_t>(kChunks, i0 + 29), kChunks}) {
        std::vector<float> got(static_cast<size_t>((i1 - i0) * g.abstract_floats()));
        const uint64_t before = stats[Tier::kDisk].bytes_read;
        ASSERT_TRUE((*tier)->read_abstracts(il, i0, i1, got.data()).is_ok()) << il << " [" << i0 << ", " << i1 << ")";
        for (int64_t i = i0; i < i1; ++i) {
          const std::vector<float> want = abstract_of(g, il, i);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + (i - i0) * g.abstract_floats()))
              << "layer " << il << " chunk " << i << " of [" << i0 << ", " << i1 << ")";
        }
        const uint64_t block0 = i0 * rb / kDirectIoAlignment * kDirectIoAlignment;
        const uint64_t block1 = align_up(i1 * rb, kDirectIoAlignment);
        EXPECT_EQ(stats[Tier::kDisk].bytes_read - before, block1 - block0) << "the disk bytes are the blocks read";
      }
    }
  }
}

// Several runs in one batch: each run's records land in turn, each read by its own whole blocks,
// and the batch is one latency sample.
TEST(DiskTierAbstracts, SeveralRunsAreReadInOneBatch) {
  TempDir dir;
  KvStats stats;
  auto tier = DiskTier::create(tier_options(dir.path(), &stats));
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  std::mt19937 rng(6);
  write_all(**tier, rng);
  const ChunkGeometry& g = (*tier)->geometry();
  const uint64_t rb = (*tier)->record_bytes();
  const std::vector<ChunkRun> runs = {{3, 5}, {5, 6}, {0, 1}, {7, 7}, {9, kChunks}};
  std::vector<float> got(static_cast<size_t>((2 + 1 + 1 + (kChunks - 9)) * g.abstract_floats()));
  const uint64_t samples = stats.disk_read_latency.count();
  const uint64_t before = stats[Tier::kDisk].bytes_read;
  const uint64_t abstracts_before = stats.disk_abstract_bytes_read;
  ASSERT_TRUE((*tier)->read_abstracts(1, runs, got.data()).is_ok());
  EXPECT_EQ(stats.disk_read_latency.count(), samples + 1);
  uint64_t blocks = 0;
  const float* at = got.data();
  for (const ChunkRun& r : runs) {
    for (int64_t i = r.begin; i < r.end; ++i, at += g.abstract_floats()) {
      const std::vector<float> want = abstract_of(g, 1, i);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), at)) << "chunk " << i;
    }
    if (r.end > r.begin) {
      blocks += align_up(r.end * rb, kDirectIoAlignment) - r.begin * rb / kDirectIoAlignment * kDirectIoAlignment;
    }
  }
  EXPECT_EQ(stats[Tier::kDisk].bytes_read - before, blocks);
  EXPECT_EQ(stats.disk_abstract_bytes_read - abstracts_before, blocks) << "counted apart as abstract bytes too";
}

// Whether the pages of `path` are in the page cache (mincore over a mapping of the file).
int64_t cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const size_t n = std::filesystem::file_size(path);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return -1;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((n + page - 1) / page);
  const int rc = ::mincore(p, n, in_core.data());
  ::munmap(p, n);
  if (rc != 0) return -1;
  return std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; });
}

// Flushes `path` and drops its pages from the page cache.
bool drop_cached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

TEST(DiskTierAbstracts, ReadsBypassThePageCache) {
  TempDir dir;
  KvStats stats;
  auto tier = DiskTier::create(tier_options(dir.path(), &stats));
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  if ((*tier)->io_mode().rfind("O_DIRECT", 0) != 0) {
    GTEST_SKIP() << "the file system under " << dir.path() << " refuses O_DIRECT: " << (*tier)->io_mode();
  }
  EXPECT_NE((*tier)->io_mode().find("chunks and abstracts"), std::string::npos) << (*tier)->io_mode();
  std::mt19937 rng(9);
  write_all(**tier, rng);
  const std::string lka = (*tier)->abstract_path(1);
  ASSERT_TRUE(drop_cached(lka));
  if (cached_pages(lka) != 0) GTEST_SKIP() << "the kernel kept " << lka << "'s pages after POSIX_FADV_DONTNEED";
  std::vector<float> got(static_cast<size_t>(kChunks * (*tier)->geometry().abstract_floats()));
  ASSERT_TRUE((*tier)->read_abstracts(1, 0, kChunks, got.data()).is_ok());
  EXPECT_EQ(cached_pages(lka), 0) << "a buffered read would have left the records' pages in the page cache";
}

}  // namespace
}  // namespace leoam
