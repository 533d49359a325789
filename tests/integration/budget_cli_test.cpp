// --budget and --layer-budget as `leoam run` applies them: every sparse policy runs under the same
// per-layer schedule (sparse/budget_schedule.h), a budget counts far tokens, and a budget that is
// not a positive finite fraction or whole count fails with an error naming its flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;

class BudgetCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/leoam_budget_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // 16 layers: round(16 / 16) = 1 dense layer, layer 0.
    CliResult r = leoam::testing_cli::run_leoam(
        dir_, {"gguf", "synth", "--preset", "tiny", "--n-layer", "16", "-o", dir_ + "/m16.gguf"});
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_NE(r.err.find("16 layers"), std::string::npos) << r.err;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A prompt of about 190 tokens, decoded for 8 tokens with the sink 4 and the recent window 8.
  static CliResult run(std::vector<std::string> args) {
    std::string prompt;
    for (int i = 0; i < 30; ++i) prompt += "the cat sat ";
    args.insert(args.begin(), {"run", "-m", dir_ + "/m16.gguf", "-c", "256", "-t", "1", "-p", prompt, "-n", "8",
                               "--temp", "0", "--kv-sink", "4", "--kv-recent", "8", "--kv-chunk", "8"});
    return leoam::testing_cli::run_leoam(dir_, args);
  }
  // "attention: layer  3: attended  18.4%, ..." -> 18.4 per layer, from --kv-stats.
  static std::vector<double> layer_shares(const std::string& err) {
    std::vector<double> out;
    for (const std::string& line : CliResult::lines(err)) {
      int layer = 0;
      double pct = 0;
      if (std::sscanf(line.c_str(), "attention: layer %d: attended %lf%%", &layer, &pct) == 2) out.push_back(pct);
    }
    return out;
  }
  static std::string dir_;
};
std::string BudgetCliTest::dir_;

TEST_F(BudgetCliTest, EveryPolicyKeepsHalfInTheFirstLayersOfAFractionalBudget) {
  for (const std::string policy : {"streaming", "h2o", "h2o-chunked", "quest", "infinigen", "leoam", "oracle"}) {
    SCOPED_TRACE(policy);
    CliResult r = run({"--policy", policy, "--budget", "0.1", "--kv-stats"});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<double> shares = layer_shares(r.err);
    ASSERT_EQ(shares.size(), 16u) << r.err;
    // Layer 0 keeps half of the far tokens: about (12 + 0.5 * 180) / 195 of the visible ones
    // (h2o more: its first step attends everything).
    EXPECT_GE(shares[0], 48.0) << r.err;
    EXPECT_LE(shares[0], 66.0) << r.err;
    // The others keep 10% (h2o attends everything in its first step, once).
    for (size_t il = 1; il < shares.size(); ++il) EXPECT_LE(shares[il], shares[0] - 20.0) << "layer " << il;
    EXPECT_NE(r.err.find("attention: budget rule: every sparse policy attends the sink (4 tokens), the recent window "
                         "(8) and, of the far tokens between them, the budget B, a fraction of them (B <= 1) or a "
                         "whole count (B > 1); a fraction B is max(B, 0.5) in the first round(n_layer/16) layers "
                         "(layer 0 of 16 here)\n"),
              std::string::npos)
        << r.err;
  }
  // --layer-budget replaces the schedule, for every policy alike.
  CliResult r = run({"--policy", "quest", "--budget", "0.1", "--layer-budget", "3=1", "--kv-stats"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<double> shares = layer_shares(r.err);
  ASSERT_EQ(shares.size(), 16u) << r.err;
  EXPECT_LE(shares[0], 20.0) << r.err;
  EXPECT_EQ(shares[3], 100.0) << r.err;
  EXPECT_NE(r.err.find("; --layer-budget 3=1 in every policy\n"), std::string::npos) << r.err;
}

// A budget above 1 counts far tokens: 20 of them beside the sink (4) and the recent window (8).
TEST_F(BudgetCliTest, ACountIsOfFarTokens) {
  CliResult r = run({"--policy", "streaming", "--budget", "20", "--kv-stats"});
  ASSERT_EQ(r.status, 0) << r.err;
  long long n_attended = 0, n_steps = 0;
  for (const std::string& line : CliResult::lines(r.err)) {
    std::sscanf(line.c_str(), "attention: policy streaming: attended %lld tokens, %*f%% of the visible ones, over %lld",
                &n_attended, &n_steps);
  }
  ASSERT_GT(n_steps, 0) << r.err;
  EXPECT_EQ(n_attended, 32 * n_steps) << r.err;
}

TEST_F(BudgetCliTest, BadBudgetsFailNamingTheirFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layer-budget", "0=inf"}, "--layer-budget: '0=inf': the budget must be a positive finite number"},
      {{"--layer-budget", "0=nan"}, "--layer-budget: '0=nan': the budget must be a positive finite number"},
      {{"--layer-budget", "1=-0.5"}, "--layer-budget: '1=-0.5': the budget must be a positive finite number"},
      {{"--layer-budget", "0=2.5"}, "--layer-budget: '0=2.5': the budget is above 1, a count of far tokens: it must be whole"},
      {{"--layer-budget", "16=0.5"}, "--layer-budget: '16=0.5': the model has layers 0 to 15"},
      {{"--layer-budget", "-1=0.5"}, "--layer-budget: '-1=0.5': the model has layers 0 to 15"},
      {{"--layer-budget", "0:0.5"}, "--layer-budget: '0:0.5' is not LAYER=BUDGET"},
      {{"--budget", "100.5"}, "--budget 100.5: is above 1, a count of far tokens: it must be whole"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    std::vector<std::string> args = {"--policy", "streaming"};
    args.insert(args.end(), flags.begin(), flags.end());
    CliResult r = run(args);
    EXPECT_NE(r.status, 0);
    ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_TRUE(r.err.starts_with("leoam: error: ")) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing generated: " << r.out;
  }
}

TEST_F(BudgetCliTest, HelpSaysTheBudgetIsOfTheFarTokens) {
  CliResult r = leoam::testing_cli::run_leoam(dir_, {"run", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  r.out = leoam::testing_cli::unwrapped(r.out);  // descriptions wrap at 100 columns
  EXPECT_NE(r.out.find("far tokens attended per layer and step: the budget B, a fraction of them (B <= 1) or a whole"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("max(B, 0.5) in the first round(n_layer/16) layers"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sink and recent window included"), std::string::npos) << r.out;
}

}  // namespace
