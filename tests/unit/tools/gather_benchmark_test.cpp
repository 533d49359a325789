#include "gather_benchmark.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/file.h"
#include "../kv/kv_test_util.h"

namespace leoam {
namespace {

using testing_util::TempDir;

bool directory_empty(const std::string& dir) { return std::filesystem::is_empty(dir); }

GatherBenchOptions tiny_options(const std::string& dir) {
  GatherBenchOptions o;
  o.dir = dir;
  o.file_bytes = uint64_t{2} << 20;
  o.chunk_tokens = {8, 64};
  o.shapes = {{2, 64}};
  o.n_reps = 2;
  o.gather_batch_bytes = 16 * kDirectIoAlignment;  // 16 chunks of 8 tokens a batch: several batches
  return o;
}

TEST(GatherBenchmarkTest, TinyRunMeasuresEveryConfigurationAndLeavesNoFiles) {
  TempDir dir;
  GatherBenchOptions o = tiny_options(dir.path());
  std::vector<std::string> messages;
  o.progress = [&](const std::string& m) { messages.push_back(m); };

  Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(o);
  ASSERT_TRUE(rows.is_ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  const size_t row_bytes = 2 * 64 * 2;  // 2 heads x 64 dims, f16
  for (size_t i = 0; i < rows->size(); ++i) {
    const GatherBenchRow& r = (*rows)[i];
    const int c = o.chunk_tokens[i];
    EXPECT_EQ(r.n_kv_heads, 2);
    EXPECT_EQ(r.head_dim, 64);
    EXPECT_EQ(r.chunk_tokens, c);
    EXPECT_EQ(r.slot_bytes, align_up(2 * static_cast<uint64_t>(c) * row_bytes, kDirectIoAlignment));
    // 10% of the chunks the file holds (all but the device's three are on disk).
    const double n_chunks = static_cast<double>(o.file_bytes / r.slot_bytes);
    EXPECT_NEAR(static_cast<double>(r.n_chunks_read), 0.1 * n_chunks, 1.0) << "chunk " << c;
    EXPECT_GT(r.gather_mb_per_s, 0.0);
    EXPECT_GT(r.raw_mb_per_s, 0.0);
    // Two reps: each median is the mean of the two samples; the fraction, of the two pairs' ratios.
    ASSERT_EQ(r.gather_samples_mb_per_s.size(), 2u);
    ASSERT_EQ(r.raw_samples_mb_per_s.size(), 2u);
    EXPECT_DOUBLE_EQ(r.gather_mb_per_s, 0.5 * (r.gather_samples_mb_per_s[0] + r.gather_samples_mb_per_s[1]));
    EXPECT_DOUBLE_EQ(r.raw_mb_per_s, 0.5 * (r.raw_samples_mb_per_s[0] + r.raw_samples_mb_per_s[1]));
    EXPECT_DOUBLE_EQ(r.fraction, 0.5 * (r.gather_samples_mb_per_s[0] / r.raw_samples_mb_per_s[0] +
                                        r.gather_samples_mb_per_s[1] / r.raw_samples_mb_per_s[1]));
    EXPECT_NE(r.io_mode.find("io_uring"), std::string::npos) << r.io_mode;
  }
  EXPECT_EQ((*rows)[0].slot_bytes, 4096u);   // 8 tokens x 2 (K, V) x 256 bytes
  EXPECT_EQ((*rows)[1].slot_bytes, 32768u);  // 64 tokens
  EXPECT_EQ((*rows)[0].n_chunks_read, 51);   // round(0.1 x (512 - 3 on the device))
  EXPECT_EQ((*rows)[1].n_chunks_read, 6);    // round(0.1 x (64 - 3))
  EXPECT_TRUE(directory_empty(dir.path()));

  bool saw_write = false, saw_last_rep = false;
  for (const std::string& m : messages) {
    saw_write = saw_write || m.find("2x64, 8-token chunks: writing") == 0;
    saw_last_rep = saw_last_rep || m == "2x64, 64-token chunks: rep 2/2";
  }
  EXPECT_TRUE(saw_write);
  EXPECT_TRUE(saw_last_rep);
}

TEST(GatherBenchmarkTest, FileTooSmallToReachTheDiskFailsBeforeWritingAnything) {
  TempDir dir;
  GatherBenchOptions o = tiny_options(dir.path());
  o.shapes = {{2, 64}, {32, 128}};
  o.chunk_tokens = {128};  // 32x128: 2 MiB slots, one chunk per 2 MiB, which the device holds
  Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(o);
  ASSERT_FALSE(rows.is_ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rows.status().message().find("32x128, 128-token chunks"), std::string::npos) << rows.status().message();
  EXPECT_NE(rows.status().message().find("at least 8 MiB"), std::string::npos) << rows.status().message();
  EXPECT_TRUE(directory_empty(dir.path()));
}

TEST(GatherBenchmarkTest, BadOptionsAreInvalidArguments) {
  TempDir dir;
  std::vector<GatherBenchOptions> bad(5, tiny_options(dir.path()));
  bad[0].dir = "";
  bad[1].select_fraction = 0.0;
  bad[2].chunk_tokens = {1};
  bad[3].shapes = {{0, 64}};
  bad[4].n_reps = 0;
  for (size_t i = 0; i < bad.size(); ++i) {
    Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(bad[i]);
    ASSERT_FALSE(rows.is_ok()) << i;
    EXPECT_EQ(rows.status().code(), StatusCode::kInvalidArgument) << i;
  }
  EXPECT_TRUE(directory_empty(dir.path()));
}

}  // namespace
}  // namespace leoam
