// DiskTier's abstract file: records packed, read by whole blocks with O_DIRECT, so that an
// abstract read is a disk read and never a page-cache hit.
#include "kv/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "io/aligned_buffer.h"
#include "kv/box_f16.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::TempDir;

constexpr int kTierLayers = 2;
constexpr int64_t kChunks = 61;

DiskTierOptions tier_options(const std::string& dir, KvStats* stats) {
  DiskTierOptions d;
  d.dir = dir;
  d.session = "t";
  d.n_layer = kTierLayers;
  d.geometry = ChunkGeometry{2, 8, 8, KvDtype::kF16};  // records of 32 + 10 + 2 * 32 + 4 * 16 bytes: not block-aligned
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

// What a read gives back of abstract_of(g, layer, i): its record's box is f16, each minimum
// rounded down and each maximum up (the floats above are not all f16 values); the signs as they were.
std::vector<float> read_back(const ChunkGeometry& g, int layer, int64_t i) {
  std::vector<float> a = abstract_of(g, layer, i);
  const int64_t n = g.box_floats();
  for (int64_t e = 0; e < n; ++e) a[e] = f16_to_f32(e < n / 2 ? f16_round_down(a[e]) : f16_round_up(a[e]));
  return a;
}

// Writes chunks [0, kChunks) of every layer in batches of 1 to 7, in shuffled order.
void write_all(DiskTier& tier, std::mt19937& rng) {
  const ChunkGeometry& g = tier.geometry();
  auto slot = AlignedBuffer::allocate(tier.slot_bytes()).value();
  for (int il = 0; il < kTierLayers; ++il) {
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
  const uint64_t rb = (*tier)->record_bytes(0);
  ASSERT_NE(rb % kDirectIoAlignment, 0u);
  for (int il = 0; il < kTierLayers; ++il) {
    for (int64_t i0 = 0; i0 < kChunks; i0 += 3) {
      for (int64_t i1 : {i0 + 1, std::min<int64_t>(kChunks, i0 + 2), std::min<int64_t>(kChunks, i0 + 29), kChunks}) {
        std::vector<float> got(static_cast<size_t>((i1 - i0) * g.abstract_floats()));
        const uint64_t before = stats[Tier::kDisk].bytes_read;
        ASSERT_TRUE((*tier)->read_abstracts(il, i0, i1, got.data()).is_ok()) << il << " [" << i0 << ", " << i1 << ")";
        for (int64_t i = i0; i < i1; ++i) {
          const std::vector<float> want = read_back(g, il, i);
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

// A record keeps the box in f16, rounded outward: half an f32 box's bytes, and every minimum read
// back is at most the one written, every maximum at least.
TEST(DiskTierAbstracts, RecordsKeepTheBoxInF16RoundedOutward) {
  TempDir dir;
  KvStats stats;
  auto tier = DiskTier::create(tier_options(dir.path(), &stats));
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  const ChunkGeometry& g = (*tier)->geometry();
  EXPECT_EQ((*tier)->record_bytes(0), 32 + 10 + 2 * g.box_floats() + 4 * g.sign_words());
  auto slot = AlignedBuffer::allocate((*tier)->slot_bytes()).value();
  std::vector<float> written(static_cast<size_t>(g.abstract_floats()));
  std::mt19937 rng(9);
  std::normal_distribution<float> value(0.0f, 3.0f);
  for (int64_t e = 0; e < g.box_floats() / 2; ++e) {
    const float a = value(rng), b = value(rng);
    written[e] = std::min(a, b);
    written[e + g.box_floats() / 2] = std::max(a, b);
  }
  for (int64_t e = g.box_floats(); e < g.abstract_floats(); ++e) {
    const uint32_t word = static_cast<uint32_t>(rng());
    std::memcpy(&written[e], &word, sizeof(word));
  }
  ASSERT_TRUE((*tier)->write_chunk(0, {0, slot.data(), g.chunk_tokens, written.data()}).is_ok());
  std::vector<float> got(written.size());
  ASSERT_TRUE((*tier)->read_abstracts(0, 0, 1, got.data()).is_ok());
  int n_rounded = 0;
  for (int64_t e = 0; e < g.box_floats(); ++e) {
    const bool is_min = e < g.box_floats() / 2;
    EXPECT_TRUE(is_min ? got[e] <= written[e] : got[e] >= written[e]) << e;
    EXPECT_EQ(f16_to_f32(f32_to_f16(got[e])), got[e]) << "an f16 value";
    EXPECT_LE(std::abs(got[e] - written[e]), std::abs(written[e]) / 1024 + 1e-7f) << "one f16 step at most";
    n_rounded += got[e] != written[e];
  }
  EXPECT_GT(n_rounded, 0) << "normal floats are rarely f16 values: some must have been rounded";
  EXPECT_EQ(std::memcmp(got.data() + g.box_floats(), written.data() + g.box_floats(),
                        static_cast<size_t>(g.sign_words()) * sizeof(uint32_t)),
            0);
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
  const uint64_t rb = (*tier)->record_bytes(1);
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
      const std::vector<float> want = read_back(g, 1, i);
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

// What a read gives back of chunk i in groups of G (kChunks written): the f16 union of the boxes
// of its group's written chunks [first, end), its own signs.
std::vector<float> group_read_back(const ChunkGeometry& g, int layer, int64_t i, int64_t first, int64_t end) {
  std::vector<float> a = read_back(g, layer, i);
  const int64_t half = g.box_floats() / 2;
  for (int64_t j = first; j < end; ++j) {
    const std::vector<float> b = read_back(g, layer, j);
    for (int64_t e = 0; e < half; ++e) {
      a[e] = std::min(a[e], b[e]);
      a[half + e] = std::max(a[half + e], b[half + e]);
    }
  }
  return a;
}

// Groups of 4 and 3 chunks (layers 0 and 1), written in shuffled batches, so that most records
// are written again after another group's: a chunk reads its group's box and its own signs, and
// a range reads the whole blocks of its groups' records.
TEST(DiskTierGroups, AChunkReadsItsGroupsBoxAndItsOwnSigns) {
  TempDir dir;
  KvStats stats;
  DiskTierOptions o = tier_options(dir.path(), &stats);
  o.abstract_group_chunks = {4, 3};
  auto tier = DiskTier::create(o);
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  std::mt19937 rng(11);
  write_all(**tier, rng);
  const ChunkGeometry& g = (*tier)->geometry();
  for (int il = 0; il < kTierLayers; ++il) {
    const int64_t G = (*tier)->group_chunks(il);
    const uint64_t rb = (*tier)->record_bytes(il);
    EXPECT_EQ(rb, 32 + 10 * G + 2 * g.box_floats() + 4 * G * g.sign_words());
    EXPECT_EQ(std::filesystem::file_size((*tier)->abstract_path(il)), align_up((kChunks + G - 1) / G * rb, kDirectIoAlignment))
        << "one record a group";
    for (int64_t i0 = 0; i0 < kChunks; i0 += 5) {
      for (int64_t i1 : {i0 + 1, std::min<int64_t>(kChunks, i0 + 6), kChunks}) {
        std::vector<float> got(static_cast<size_t>((i1 - i0) * g.abstract_floats()));
        const uint64_t before = stats[Tier::kDisk].bytes_read;
        ASSERT_TRUE((*tier)->read_abstracts(il, i0, i1, got.data()).is_ok()) << il << " [" << i0 << ", " << i1 << ")";
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t first = i / G * G;
          const std::vector<float> want = group_read_back(g, il, i, first, std::min(kChunks, first + G));
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + (i - i0) * g.abstract_floats()))
              << "layer " << il << " chunk " << i << " of [" << i0 << ", " << i1 << ")";
        }
        const uint64_t block0 = i0 / G * rb / kDirectIoAlignment * kDirectIoAlignment;
        const uint64_t block1 = align_up(((i1 - 1) / G + 1) * rb, kDirectIoAlignment);
        EXPECT_EQ(stats[Tier::kDisk].bytes_read - before, block1 - block0) << "the blocks of the groups' records";
      }
    }
  }
}

// forget_from inside a group writes its record again from the kept chunks' abstracts: their box
// no longer holds the forgotten chunks' keys, as if these had never been written.
TEST(DiskTierGroups, ForgettingIntoAGroupRewritesItsRecordFromTheKeptChunks) {
  TempDir dir;
  KvStats stats;
  DiskTierOptions o = tier_options(dir.path(), &stats);
  o.abstract_group_chunks = {4, 4};
  auto tier = DiskTier::create(o);
  ASSERT_TRUE(tier.is_ok()) << tier.status().message();
  std::mt19937 rng(12);
  write_all(**tier, rng);
  const ChunkGeometry& g = (*tier)->geometry();
  EXPECT_EQ((*tier)->forget_from(0, 6).code(), StatusCode::kInternal) << "a cut group needs its kept abstracts";

  std::vector<float> kept;
  for (int64_t i : {4, 5}) {
    const std::vector<float> a = abstract_of(g, 0, i);
    kept.insert(kept.end(), a.begin(), a.end());
  }
  ASSERT_TRUE((*tier)->forget_from(0, 6, kept).is_ok());
  EXPECT_TRUE((*tier)->has_chunk(0, 5));
  EXPECT_FALSE((*tier)->has_chunk(0, 6));
  std::vector<float> got(static_cast<size_t>(6 * g.abstract_floats()));
  ASSERT_TRUE((*tier)->read_abstracts(0, 0, 6, got.data()).is_ok());
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t first = i / 4 * 4;
    const std::vector<float> want = group_read_back(g, 0, i, first, std::min<int64_t>(6, first + 4));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * g.abstract_floats())) << "chunk " << i;
  }
  // Written again, chunk 6 joins the kept ones.
  auto slot = AlignedBuffer::allocate((*tier)->slot_bytes()).value();
  const std::vector<float> a6 = abstract_of(g, 0, 6);
  ASSERT_TRUE((*tier)->write_chunk(0, {6, slot.data(), g.chunk_tokens, a6.data()}).is_ok());
  got.resize(static_cast<size_t>(g.abstract_floats()));
  ASSERT_TRUE((*tier)->read_abstracts(0, 4, 5, got.data()).is_ok());
  const std::vector<float> want = group_read_back(g, 0, 4, 4, 7);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()));
  // At a group's edge nothing is rewritten, and the layer's other records stay.
  ASSERT_TRUE((*tier)->forget_from(1, 8).is_ok());
  got.resize(static_cast<size_t>(8 * g.abstract_floats()));
  ASSERT_TRUE((*tier)->read_abstracts(1, 0, 8, got.data()).is_ok());
  EXPECT_FALSE((*tier)->has_chunk(1, 8));
}

// A kept session's grouped records open again (open_existing learns every chunk's fill and
// checksum from them); a record with a flipped byte, or opened with another group size, is
// refused as corrupt.
TEST(DiskTierGroups, KeptRecordsOpenAgainAndAreChecked) {
  TempDir dir;
  DiskTierOptions o = tier_options(dir.path(), nullptr);
  o.abstract_group_chunks = {4, 2};
  o.keep_files = true;
  std::mt19937 rng(13);
  {
    auto tier = DiskTier::create(o);
    ASSERT_TRUE(tier.is_ok()) << tier.status().message();
    write_all(**tier, rng);
    ASSERT_TRUE((*tier)->sync().is_ok());
  }
  const std::vector<int64_t> counts(kTierLayers, kChunks);
  {
    auto tier = DiskTier::open_existing(o, counts);
    ASSERT_TRUE(tier.is_ok()) << tier.status().message();
    const ChunkGeometry& g = (*tier)->geometry();
    std::vector<float> got(static_cast<size_t>(kChunks * g.abstract_floats()));
    ASSERT_TRUE((*tier)->read_abstracts(1, 0, kChunks, got.data()).is_ok());
    for (int64_t i = 0; i < kChunks; ++i) {
      const std::vector<float> want = group_read_back(g, 1, i, i / 2 * 2, std::min<int64_t>(kChunks, i / 2 * 2 + 2));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + i * g.abstract_floats())) << "chunk " << i;
      EXPECT_EQ((*tier)->n_tokens_of(1, i), g.chunk_tokens);
    }
  }
  DiskTierOptions other = o;
  other.abstract_group_chunks = {4, 4};
  auto wrong = DiskTier::open_existing(other, counts);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorrupt) << wrong.status().message();

  const std::string lka = dir.path() + "/t-L000.lka";
  {
    std::fstream f(lka, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);  // in the first record's box
    const char flipped = 0x5a;
    f.write(&flipped, 1);
  }
  auto corrupt = DiskTier::open_existing(o, counts);
  ASSERT_FALSE(corrupt.is_ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kCorrupt) << corrupt.status().message();
  EXPECT_NE(corrupt.status().message().find("abstract record"), std::string::npos) << corrupt.status().message();
}

}  // namespace
}  // namespace leoam
