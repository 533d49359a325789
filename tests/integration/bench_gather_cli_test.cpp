// `leoam bench-gather` as a user runs it, on a tiny configuration (2 MiB of KV): the JSON object's
// fields, the markdown table, and the usage and runtime errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::expect_one_line_error;

class BenchGatherCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_bench_gather_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    kv_dir_ = dir_ + "/kv";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  CliResult bench_gather(std::vector<std::string> args) {
    args.insert(args.begin(), "bench-gather");
    return leoam::testing_cli::run_leoam(dir_, args);
  }

  std::string dir_;
  std::string kv_dir_;
};

TEST_F(BenchGatherCliTest, JsonHasEveryFieldAndNoFilesAreLeft) {
  CliResult r = bench_gather({"--kv-dir", kv_dir_, "--file-mb", "2", "--chunk", "8", "--shape", "2x64", "-r", "1", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");  // progress is for terminals only
  const nlohmann::json doc = nlohmann::json::parse(r.out);  // throws (fails the test) on bad JSON
  EXPECT_EQ(doc.at("kv_dir"), kv_dir_);
  EXPECT_EQ(doc.at("file_bytes"), 2 << 20);
  EXPECT_DOUBLE_EQ(doc.at("select_fraction").get<double>(), 0.1);
  EXPECT_EQ(doc.at("queue_depth"), 32);
  EXPECT_EQ(doc.at("n_reps"), 1);
  const nlohmann::json& results = doc.at("results");
  ASSERT_EQ(results.size(), 1u);
  const nlohmann::json& row = results[0];
  EXPECT_EQ(row.at("n_kv_heads"), 2);
  EXPECT_EQ(row.at("head_dim"), 64);
  EXPECT_EQ(row.at("chunk_tokens"), 8);
  EXPECT_EQ(row.at("slot_bytes"), 4096);
  EXPECT_EQ(row.at("n_chunks_read"), 51);  // 10% of the 509 chunks on disk
  EXPECT_GT(row.at("gather_mb_per_s").get<double>(), 0);
  EXPECT_GT(row.at("raw_mb_per_s").get<double>(), 0);
  EXPECT_GT(row.at("fraction").get<double>(), 0);
  ASSERT_EQ(row.at("gather_samples_mb_per_s").size(), 1u);
  ASSERT_EQ(row.at("raw_samples_mb_per_s").size(), 1u);
  EXPECT_DOUBLE_EQ(row.at("gather_samples_mb_per_s")[0].get<double>(), row.at("gather_mb_per_s").get<double>());
  EXPECT_DOUBLE_EQ(row.at("raw_samples_mb_per_s")[0].get<double>(), row.at("raw_mb_per_s").get<double>());
  EXPECT_NE(row.at("io_mode").get<std::string>().find("io_uring"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(kv_dir_));
}

TEST_F(BenchGatherCliTest, TablePrintsTheHeaderARowPerConfigurationAndTheIoMode) {
  CliResult r = bench_gather({"--kv-dir", kv_dir_, "--file-mb", "2", "--chunk", "8,64", "--shape", "2x64", "-r", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| KV heads x dim | chunk tokens | slot KiB | chunks read | gather MB/s | raw MB/s | gather/raw |"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n| 2 x 64 | 8 | 4 | 51 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n| 2 x 64 | 64 | 32 | 6 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ndisk I/O: "), std::string::npos) << r.out;
}

TEST_F(BenchGatherCliTest, UsageErrorsExitWithStatus2) {
  expect_one_line_error(bench_gather({"--file-mb", "2"}), 2, "--kv-dir");
  expect_one_line_error(bench_gather({"--kv-dir", kv_dir_, "--shape", "2y64"}), 2, "2y64");
  expect_one_line_error(bench_gather({"--kv-dir", kv_dir_, "--chunk", "1"}), 2, "--chunk");
  expect_one_line_error(bench_gather({"--kv-dir", kv_dir_, "--fraction", "0"}), 2, "--fraction");
  EXPECT_FALSE(fs::exists(kv_dir_));
}

TEST_F(BenchGatherCliTest, RuntimeFailureExitsWithStatus1) {
  const std::string file = dir_ + "/a_file";
  std::ofstream(file) << "x";
  expect_one_line_error(bench_gather({"--kv-dir", file, "--file-mb", "2", "--chunk", "8", "--shape", "2x64", "-r", "1"}), 1,
                        file);
  // Too little KV to leave any chunk on disk: said before anything is written.
  expect_one_line_error(bench_gather({"--kv-dir", kv_dir_, "--file-mb", "2", "--chunk", "128", "--shape", "32x128"}), 1,
                        "at least 8 MiB");
}

}  // namespace
