// `leoam bench` as a user runs it: the JSON document's shape, the markdown table, and the usage
// errors. The machine bounds are measured for real (about a second with the 1 GiB buffer).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;

using leoam::testing_cli::kStoriesModel;

using leoam::testing_cli::CliResult;
using leoam::testing_cli::shell_quote;

class BenchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_bench_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `leoam bench args...` with TMPDIR in this test's folder (where --synthetic writes).
  CliResult bench(std::vector<std::string> args) {
    args.insert(args.begin(), "bench");
    return leoam::testing_cli::run_leoam(dir_, args, "TMPDIR=" + shell_quote(dir_));
  }

  static void expect_usage_error(const CliResult& r, const std::string& mentions) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("leoam: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
  }

  // Files left in the temporary folder besides our stderr capture.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != "stderr.txt") v.push_back(e.path().filename().string());
    }
    return v;
  }

  std::string dir_;
};

TEST_F(BenchCliTest, JsonHasEveryFieldAndTheSyntheticModelIsDeleted) {
  CliResult r = bench({"--synthetic", "tiny", "-p", "16", "-n", "4", "-r", "2", "-t", "1", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");  // progress is for terminals only
  nlohmann::json doc = nlohmann::json::parse(r.out);  // throws (fails the test) on bad JSON

  const nlohmann::json& model = doc.at("model");
  EXPECT_EQ(model.at("synthetic"), "tiny");
  EXPECT_EQ(model.at("type"), "F32");
  EXPECT_GT(model.at("size_bytes").get<double>(), 0);
  EXPECT_GT(model.at("n_params").get<double>(), 0);
  EXPECT_GT(model.at("weight_bytes_per_token").get<double>(), 0);
  EXPECT_GT(model.at("kv_bytes_per_position").get<double>(), 0);
  EXPECT_TRUE(doc.at("cpu_path").is_string());
  EXPECT_TRUE(doc.at("blas_core").is_string());

  const nlohmann::json& machine = doc.at("machine");
  ASSERT_EQ(machine.size(), 1u);
  EXPECT_EQ(machine[0].at("n_threads"), 1);
  EXPECT_GT(machine[0].at("dram_read_gb_per_s").get<double>(), 0);
  EXPECT_LT(machine[0].at("dram_read_gb_per_s").get<double>(), 2000);
  if (machine[0].at("peaks_available").get<bool>()) {
    EXPECT_GT(machine[0].at("f32_fma_gflops").get<double>(), 0);
    EXPECT_GT(machine[0].at("int8_madd_gmacs").get<double>(), 0);
  }
  EXPECT_GT(machine[0].at("openblas_sgemm_gflops").get<double>(), 0);

  const nlohmann::json& results = doc.at("results");
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].at("test"), "pp16");
  EXPECT_EQ(results[0].at("kind"), "pp");
  EXPECT_EQ(results[0].at("n_tokens"), 16);
  EXPECT_GT(results[0].at("achieved_gflops").get<double>(), 0);
  EXPECT_GT(results[0].at("fraction_of_sgemm").get<double>(), 0);
  EXPECT_EQ(results[1].at("test"), "tg4");
  EXPECT_EQ(results[1].at("kind"), "tg");
  EXPECT_GT(results[1].at("achieved_gb_per_s").get<double>(), 0);
  for (const nlohmann::json& row : results) {
    EXPECT_EQ(row.at("n_threads"), 1);
    EXPECT_EQ(row.at("n_depth"), 0);
    EXPECT_EQ(row.at("n_reps"), 2);
    EXPECT_EQ(row.at("samples_tokens_per_s").size(), 2u);
    EXPECT_GT(row.at("tokens_per_s").get<double>(), 0);
    EXPECT_LE(row.at("tokens_per_s_min").get<double>(), row.at("tokens_per_s").get<double>());
    EXPECT_GE(row.at("tokens_per_s_max").get<double>(), row.at("tokens_per_s").get<double>());
    EXPECT_GE(row.at("tokens_per_s_stdev").get<double>(), 0);
    EXPECT_GT(row.at("ms_per_token").get<double>(), 0);
    const nlohmann::json& bound = row.at("bound");
    EXPECT_GT(bound.at("tokens_per_s").get<double>(), 0);
    EXPECT_GT(bound.at("fraction").get<double>(), 0);
    const std::string binding = bound.at("binding");
    EXPECT_TRUE(binding == "memory" || binding == "compute") << binding;
    EXPECT_GT(bound.at("memory_s").get<double>(), 0);
  }
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(BenchCliTest, MarkdownTableWithDepthsAndThreadLists) {
  CliResult r = bench({"--synthetic", "tiny", "-p", "8", "-n", "2", "-r", "1", "-t", "1,2", "-d", "0,4", "--no-bound"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| model | size | params | threads | test | t/s | ms/tok | achieved |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bound by"), std::string::npos) << r.out;
  std::vector<std::string> rows;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| synthetic-tiny F32 |", 0) == 0) rows.push_back(line);
  }
  ASSERT_EQ(rows.size(), 8u) << r.out;
  EXPECT_NE(rows[0].find("| 1 | pp8 |"), std::string::npos) << rows[0];
  EXPECT_NE(rows[3].find("| 1 | tg2 @ d4 |"), std::string::npos) << rows[3];
  EXPECT_NE(rows[7].find("| 2 | tg2 @ d4 |"), std::string::npos) << rows[7];
  EXPECT_NE(rows[1].find(" GB/s |"), std::string::npos) << rows[1];
  EXPECT_NE(rows[0].find(" GFLOP/s |"), std::string::npos) << rows[0];
}

TEST_F(BenchCliTest, Stories260KReportsMillisecondsPerToken) {
  if (!fs::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  CliResult r = bench({"-m", kStoriesModel, "-p", "16", "-n", "8", "-r", "2", "-t", "1", "--no-bound"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ms/tok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1 | tg8 |"), std::string::npos) << r.out;
}

TEST_F(BenchCliTest, UsageErrorsExitWithStatus2) {
  expect_usage_error(bench({"--synthetic", "tiny", "--bogus-flag"}), "--bogus-flag");
  expect_usage_error(bench({"-p", "8"}), "--synthetic");  // no model at all
  const std::string missing = dir_ + "/no_such_model.gguf";
  expect_usage_error(bench({"-m", missing}), missing);
  expect_usage_error(bench({"--synthetic", "llama-9z"}), "llama-9z");
  expect_usage_error(bench({"--synthetic", "tiny:q5_1"}), "q5_1");
  const std::string present = dir_ + "/present.gguf";
  std::ofstream(present, std::ios::binary) << "x";
  expect_usage_error(bench({"--synthetic", "tiny", "-m", present}), "excludes");
  expect_usage_error(bench({"--synthetic", "tiny", "-r", "0"}), "-r");
  expect_usage_error(bench({"--synthetic", "tiny", "-t", "1,x"}), "x");
}

TEST_F(BenchCliTest, RuntimeFailureExitsWithStatus1) {
  const std::string junk = dir_ + "/junk.gguf";
  std::ofstream(junk, std::ios::binary) << "not a gguf file";
  CliResult r = bench({"-m", junk, "--no-bound"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err.rfind("leoam: error: ", 0), 0u) << r.err;
}

}  // namespace
