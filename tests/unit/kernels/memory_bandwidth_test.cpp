#include "kernels/cpu/memory_bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace leoam {
namespace {

// 64 MiB: beyond this machine's 32 MiB L3, small enough to take well under a second.
constexpr size_t kTestBufferBytes = size_t{64} << 20;

void expect_plausible(const MemoryBandwidth& bw, int n_passes) {
  // No floor: a loaded machine under ASan streams well under 1 GB/s, and speed is for benchmarks.
  // 2000 GB/s: faster than any CPU's memory or L3, so a unit slip shows.
  EXPECT_GT(bw.gb_per_s(), 0);
  EXPECT_LT(bw.gb_per_s(), 2000.0);
  ASSERT_EQ(bw.pass_bytes_per_s.size(), static_cast<size_t>(n_passes));
  EXPECT_LE(bw.min_bytes_per_s, bw.bytes_per_s);
  EXPECT_GE(bw.max_bytes_per_s, bw.bytes_per_s);
  EXPECT_EQ(bw.min_bytes_per_s, *std::min_element(bw.pass_bytes_per_s.begin(), bw.pass_bytes_per_s.end()));
  EXPECT_EQ(bw.max_bytes_per_s, *std::max_element(bw.pass_bytes_per_s.begin(), bw.pass_bytes_per_s.end()));
}

TEST(MemoryBandwidth, SmallBufferGivesAPlausibleRate) {
  MemoryBandwidthOptions o;
  o.buffer_bytes = kTestBufferBytes;
  o.n_threads = 1;
  o.n_passes = 3;
  Result<MemoryBandwidth> bw = measure_memory_bandwidth(o);
  ASSERT_TRUE(bw.is_ok()) << bw.status().message();
  expect_plausible(*bw, 3);
  EXPECT_EQ(bw->n_threads, 1);
  EXPECT_EQ(bw->buffer_bytes, kTestBufferBytes);
  EXPECT_EQ(bw->pass_bytes_per_s.size(), 3u);
  EXPECT_EQ(bw->bytes_per_s, [&] {  // the median of three
    auto v = bw->pass_bytes_per_s;
    std::sort(v.begin(), v.end());
    return v[1];
  }());
}

TEST(MemoryBandwidth, ScalarLoopAndManyThreads) {
  MemoryBandwidthOptions o;
  o.buffer_bytes = kTestBufferBytes + 1000;  // not a whole number of steps: rounded down
  o.n_threads = 2;
  o.n_passes = 2;
  o.allow_simd = false;
  Result<MemoryBandwidth> bw = measure_memory_bandwidth(o);
  ASSERT_TRUE(bw.is_ok()) << bw.status().message();
  expect_plausible(*bw, 2);
  EXPECT_STREQ(bw->method, "scalar");
  EXPECT_EQ(bw->n_threads, 2);
  EXPECT_EQ(bw->buffer_bytes, kTestBufferBytes + 768);  // 1000 rounded down to 256-byte steps
}

TEST(MemoryBandwidth, RejectsATinyBufferOrNoPasses) {
  MemoryBandwidthOptions o;
  o.buffer_bytes = 4096;
  Result<MemoryBandwidth> small = measure_memory_bandwidth(o);
  ASSERT_FALSE(small.is_ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("at least 1 MiB"), std::string::npos) << small.status().message();

  o.buffer_bytes = kTestBufferBytes;
  o.n_passes = 0;
  Result<MemoryBandwidth> none = measure_memory_bandwidth(o);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leoam
