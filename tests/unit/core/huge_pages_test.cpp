// allocate_huge_aware and HugePageAllocator: alignment, the huge-page threshold, and that a
// large block really faults in huge pages where the kernel offers them.
#include "core/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace leoam {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

TEST(HugePages, SmallBlocksKeepTheirAlignmentLargeOnesStartOnAHugePage) {
  for (size_t n : {size_t{64}, size_t{4096}, kHugePageBytes / 2 - 64}) {
    void* p = allocate_huge_aware(n, 4096);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % 4096, 0u) << n;
    std::memset(p, 1, n);
    std::free(p);
  }
  for (size_t n : {kHugePageBytes / 2, kHugePageBytes, 3 * kHugePageBytes + 1}) {
    void* p = allocate_huge_aware(n, 64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % kHugePageBytes, 0u) << n;
    std::memset(p, 1, n);
    std::free(p);
  }
}

TEST(HugePages, AllocatorServesVectors) {
  std::vector<float, HugePageAllocator<float>> v;
  for (int i = 0; i < 1 << 20; ++i) v.push_back(static_cast<float>(i));  // grows past 1 MiB
  EXPECT_EQ(address(v.data()) % kHugePageBytes, 0u);
  for (int i = 0; i < 1 << 20; i += 4097) ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>(i));
  std::vector<float, HugePageAllocator<float>> w(v);
  EXPECT_EQ(v, w);
  EXPECT_THROW((void)HugePageAllocator<double>().allocate(size_t{1} << 62), std::bad_array_new_length);
}

// Where transparent huge pages are on ("always" or "madvise"), touching 8 MiB faults a handful
// of times, not once per 4 KiB page (2048). Not under ASan, whose allocator serves the block.
TEST(HugePages, LargeBlocksFaultInHugePages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer its allocator and shadow memory fault in 4 KiB pages of their own";
#endif
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(mode, line) || line.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here: '" << line << "'";
  }
  constexpr size_t kBytes = 4 * kHugePageBytes;
  void* p = allocate_huge_aware(kBytes, 64);
  ASSERT_NE(p, nullptr);
  const long before = minor_faults();
  std::memset(p, 1, kBytes);
  const long faults = minor_faults() - before;
  std::free(p);
  EXPECT_LT(faults, 512) << "8 MiB faulted in " << faults << " times: no huge pages";
}

}  // namespace
}  // namespace leoam
