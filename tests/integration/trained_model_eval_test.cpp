// The project's own long-context model (models/leoam-byte-4l) retrieves: `leoam eval` passkey at
// a moderate context with full attention, and with leoam at a 10% budget, the KV mostly on disk.
// The model is in the repository, so this runs without ../shared. (Every policy's scores on it:
// docs/evaluation.md.)
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

  // Passkey at 2048 tokens (the KV is 8 MiB: device and host tiers of 1 MiB each leave most of it
  // on disk), needles at 5 depths, 2 seeds, under `policy`: the mean score, after checking that
  // every run read KV from disk and attended at most max_attended_pct percent of the tokens.
  double passkey_accuracy(const std::vector<std::string>& policy, double max_attended_pct) {
    const std::string out = dir_ + "/passkey.jsonl";
    std::vector<std::string> args = {"eval", "-m", kModel, "--task", "passkey", "--ctx", "2048", "--depth",
                                     "0.1,0.3,0.5,0.7,0.9", "--seeds", "2", "--out", out, "--kv-dir", dir_ + "/kv",
                                     "--kv-device-mb", "1", "--kv-host-mb", "1"};
    args.insert(args.end(), policy.begin(), policy.end());
    CliResult r = leoam::testing_cli::run_leoam(dir_, args);
    EXPECT_EQ(r.status, 0) << r.err;
    const std::vector<std::string> lines = CliResult::lines(read_file(out));
    EXPECT_EQ(lines.size(), 10u) << read_file(out);
    double sum = 0;
    for (const std::string& line : lines) {
      const nlohmann::json j = nlohmann::json::parse(line);
      sum += j.at("score").get<double>();
      EXPECT_GT(j.at("bytes_read").at("disk").get<double>(), 0) << line;  // the KV really was on disk
      EXPECT_LE(j.at("tokens_attended_pct").get<double>(), max_attended_pct) << line;
    }
    return lines.empty() ? 0.0 : sum / static_cast<double>(lines.size());
  }
};

TEST_F(TrainedModelEvalTest, FullAttentionFindsThePasskeyAtModerateContext) {
  const double accuracy = passkey_accuracy({"--policy", "full"}, 100.0);
  EXPECT_GE(accuracy, 0.9) << read_file(dir_ + "/passkey.jsonl");
}

// The retrieval head's keys are dense (MODEL_CARD.md): min/max boxes alone cannot find the
// needle's chunk, the key sign sketch can.
TEST_F(TrainedModelEvalTest, LeoamAtTenPercentFindsThePasskey) {
  const double accuracy = passkey_accuracy({"--policy", "leoam", "--budget", "0.1"}, 20.0);
  EXPECT_GE(accuracy, 0.9) << read_file(dir_ + "/passkey.jsonl");
}

}  // namespace
