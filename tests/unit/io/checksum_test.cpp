// checksum64 (XXH3-64) and AlignedBuffer.
#include "io/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "io/aligned_buffer.h"
#include "io_test_util.h"

namespace leoam {
namespace {

// Checksums are stored on disk, so the algorithm is part of the file format: pin it.
TEST(Checksum, IsXxh3) {
  EXPECT_EQ(checksum64(nullptr, 0), 0x2D06800538D394C2ull);  // XXH3-64 of no bytes, seed 0
  const char abc[] = {'a', 'b', 'c'};
  EXPECT_EQ(checksum64(abc, 3), checksum64_seeded(abc, 3, 0));
}

TEST(Checksum, EverySingleBitFlipOfA4KiBBlockChangesIt) {
  std::vector<uint8_t> block(4096);
  fill_pattern(block.data(), block.size(), 11);
  const uint64_t clean = checksum64(block.data(), block.size());
  std::unordered_set<uint64_t> seen{clean};
  for (size_t byte = 0; byte < block.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      block[byte] ^= static_cast<uint8_t>(1u << bit);
      // Distinct from the clean sum and from every other flip.
      ASSERT_TRUE(seen.insert(checksum64(block.data(), block.size())).second) << "byte " << byte << " bit " << bit;
      block[byte] ^= static_cast<uint8_t>(1u << bit);
    }
  }
  EXPECT_EQ(checksum64(block.data(), block.size()), clean);
}

TEST(Checksum, SeededChainsPieces) {
  std::vector<uint8_t> a(1000), b(3000);
  fill_pattern(a.data(), a.size(), 1);
  fill_pattern(b.data(), b.size(), 2);
  const uint64_t plain = checksum64(b.data(), b.size());
  const uint64_t chained = checksum64_seeded(b.data(), b.size(), checksum64(a.data(), a.size()));
  EXPECT_NE(chained, plain);
  EXPECT_NE(checksum64_seeded(b.data(), b.size(), 1), checksum64_seeded(b.data(), b.size(), 2));
  // A change in the first piece reaches the chained sum.
  a[500] ^= 0x10;
  EXPECT_NE(checksum64_seeded(b.data(), b.size(), checksum64(a.data(), a.size())), chained);
}

TEST(AlignedBuffer, RoundsUpAlignsAndZeroes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1} << 20, kHugePage + 1}) {
    Result<AlignedBuffer> buffer = AlignedBuffer::allocate(n);
    ASSERT_TRUE(buffer.is_ok()) << buffer.status().message();
    EXPECT_EQ(buffer->size(), align_up(n, kDirectIoAlignment)) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kDirectIoAlignment, 0u) << n;
    // A buffer that spans a huge page starts on one, so that it can be backed by huge pages.
    if (n >= kHugePage) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kHugePage, 0u) << n;
    }
    for (size_t i = 0; i < buffer->size(); ++i) ASSERT_EQ(buffer->data()[i], 0) << n << " at " << i;
  }
  Result<AlignedBuffer> empty = AlignedBuffer::allocate(0);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
}

TEST(AlignedBuffer, MovesOwnership) {
  Result<AlignedBuffer> a = AlignedBuffer::allocate(100);
  ASSERT_TRUE(a.is_ok());
  const uint8_t* p = a->data();
  AlignedBuffer b = std::move(a).value();
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), kDirectIoAlignment);
}

TEST(AlignedBuffer, ImpossibleSizeIsAnError) {
  const Result<AlignedBuffer> huge = AlignedBuffer::allocate(SIZE_MAX - 100);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kIoError);
  EXPECT_EQ(huge.status().message(), "out of memory allocating " + std::to_string(SIZE_MAX - 100) + " bytes");
}

}  // namespace
}  // namespace leoam
