// MappedFile: releasing pages of the mapping keeps what it reads.
#include "io/mapped_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <vector>

#include "io_test_util.h"

namespace leoam {
namespace {

// Released pages (whole ones inside the range, in the middle of the file, and a range outside
// the mapping, which is ignored) read back the file's bytes.
TEST(MappedFileTest, ReleasedPagesReadTheFileAgain) {
  TempDir dir;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> bytes(10 * page + 123);
  fill_pattern(bytes.data(), bytes.size(), 7);
  const std::string path = dir.path() + "/f.bin";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const MappedFile& f = **m;
  ASSERT_EQ(f.size(), bytes.size());
  ASSERT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
  f.release(f.data() + page / 2, 5 * page);  // whole pages 1..4 of the file
  f.release(f.data() + 9 * page, 2 * page);  // past the end: ignored
  const uint8_t outside = 0;
  f.release(&outside, 1);                    // not in the mapping: ignored
  EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
}

}  // namespace
}  // namespace leoam
