// The project's own long-context model (models/leoam-byte-4l) retrieves: `leoam eval` passkey at
// a moderate context with full attention, the KV mostly on disk. The model is in the repository,
// so this runs without ../shared. (The sparse policies' scores on it are in bench/RESULTS.md.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::read_file;

const std::string kModel = std::string(LEOAM_SOURCE_DIR) + "/models/leoam-byte-4l/leoam-byte-4l.gguf";

class TrainedModelEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_trained_eval_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

// 2048 tokens (the KV is 8 MiB: device and host tiers of 1 MiB each leave most of it on disk),
// needles at 5 depths, 2 seeds: full attention must find at least 90% of the pass keys.
TEST_F(TrainedModelEvalTest, FullAttentionFindsThePasskeyAtModerateContext) {
  const std::string out = dir_ + "/passkey.jsonl";
  CliResult r = leoam::testing_cli::run_leoam(
      dir_, {"eval", "-m", kModel, "--task", "passkey", "--ctx", "2048", "--depth", "0.1,0.3,0.5,0.7,0.9",
             "--seeds", "2", "--policy", "full", "--out", out, "--kv-dir", dir_ + "/kv",
             "--kv-device-mb", "1", "--kv-host-mb", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = CliResult::lines(read_file(out));
  ASSERT_EQ(lines.size(), 10u) << read_file(out);
  double sum = 0;
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    sum += j.at("score").get<double>();
    // The KV really was on disk.
    EXPECT_GT(j.at("bytes_read").at("disk").get<double>(), 0) << line;
  }
  EXPECT_GE(sum / 10, 0.9) << "passkey accuracy " << sum / 10 << "\n" << read_file(out);
}

}  // namespace
