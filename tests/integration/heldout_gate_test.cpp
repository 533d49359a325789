// The regression gate of every policy change (docs/evaluation.md#held-out-sets): on 36 samples of
// the held-out tasks, which no policy was tuned on, leoam at 10% with the KV mostly on disk
// answers within one of the exact-mass oracle at the same budget (what a selection can lose) and
// falls no further short of full attention than kGap answers. The oracle itself falls 4 short of
// full here: that part of the gap is the budget's, and kGap cannot go below the oracle's.
// And `eval --explain` says, per step and layer, where the answer's tokens ranked under both.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::read_file;

const std::string kGateModel = std::string(LEOAM_SOURCE_DIR) + "/models/leoam-byte-4l/leoam-byte-4l.gguf";
constexpr double kGap = 4;            // answers leoam@0.1 may fall short of full by (issue 49's target: 1)
constexpr double kSelectionLoss = 1;  // answers leoam@0.1 may fall short of the oracle@0.1 by

class HeldoutGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_heldout_gate_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // `leoam eval` of `task` at `ctx` tokens with tiers of 1 + 1 MiB (most of the KV on disk): its
  // JSON lines.
  std::vector<nlohmann::json> eval(const std::string& task, const std::string& ctx, const std::string& depths,
                                   const std::string& seeds, std::vector<std::string> extra) {
    const std::string out = dir_ + "/" + task + ".jsonl";
    std::vector<std::string> args = {"eval", "-m", kGateModel, "--task", task, "--ctx", ctx, "--depth", depths,
                                     "--seeds", seeds, "--out", out, "--kv-dir", dir_ + "/kv",
                                     "--kv-device-mb", "1", "--kv-host-mb", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = leoam::testing_cli::run_leoam(dir_, args);
    EXPECT_EQ(r.status, 0) << r.err;
    stdout_ = r.out;
    std::vector<nlohmann::json> lines;
    for (const std::string& line : CliResult::lines(read_file(out))) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  std::string dir_;
  std::string stdout_;  // the last eval's
};

TEST_F(HeldoutGateTest, LeoamAtTenPercentAnswersAsTheOracleAndNearFullAttention) {
  std::map<std::string, double> answered;
  std::string misses;
  for (const std::string task : {"ledger", "dialogue", "logbook"}) {
    const std::vector<nlohmann::json> lines =
        eval(task, "4096", "0.1,0.4,0.7,0.95", "3", {"--policy", "full,leoam,oracle", "--budget", "0.1"});
    EXPECT_EQ(lines.size(), 36u) << task;
    for (const nlohmann::json& j : lines) {
      const double score = j.at("score").get<double>();
      const std::string policy = j.at("policy").get<std::string>();
      answered[policy] += score;
      EXPECT_GT(j.at("bytes_read").at("disk").get<double>(), 0) << j.dump();  // the KV really was on disk
      if (policy != "full") {
        EXPECT_LE(j.at("tokens_attended_pct").get<double>(), 15.0) << j.dump();
      }
      if (score < 1 && policy == "leoam") misses += j.dump() + "\n";
    }
  }
  const double full = answered["full"], leoam = answered["leoam"], oracle = answered["oracle"];
  const std::string counts = "full " + std::to_string(full) + ", oracle@0.1 " + std::to_string(oracle) +
                             ", leoam@0.1 " + std::to_string(leoam) + "; leoam's misses:\n" + misses;
  EXPECT_GE(full, 27) << "full attention answers most of the 36 samples: " << counts;
  EXPECT_GE(leoam, oracle - kSelectionLoss) << counts;
  EXPECT_GE(leoam, full - kGap) << counts;
}

TEST_F(HeldoutGateTest, ExplainSaysWhereTheAnswerRanked) {
  const std::vector<nlohmann::json> lines =
      eval("ledger", "2048", "0.5", "1", {"--policy", "leoam", "--budget", "0.1", "--explain", "--show"});
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json& explain = lines[0].at("explain");
  // " 64019": 6 steps of the byte-level model, each with its 4 layers.
  ASSERT_EQ(explain.size(), 24u) << explain.dump();
  std::set<std::pair<int64_t, int>> seen;
  double best_mass = 0;
  for (const nlohmann::json& e : explain) {
    seen.insert({e.at("step").get<int64_t>(), e.at("layer").get<int>()});
    EXPECT_DOUBLE_EQ(e.at("far_share").get<double>(), 1.0) << "the needle sits mid-context, far from both ends";
    EXPECT_GE(e.at("policy").at("rank").get<int64_t>(), 1);
    EXPECT_GE(e.at("oracle").at("rank").get<int64_t>(), 1);
    const double picked = e.at("policy").at("picked").get<double>();
    EXPECT_GE(picked, 0.0);
    EXPECT_LE(picked, 1.0);
    // A miss (1% of the layer's attention or more, not picked whole) has a cause; the rest none.
    const std::string cause = e.at("cause").get<std::string>();
    const bool miss = picked < 1.0 && e.at("mass").get<double>() >= 0.01;
    EXPECT_TRUE(miss ? (cause == "budget" || cause == "coarse" || cause == "bound" || cause == "desert")
                     : cause.empty())
        << e.dump();
    EXPECT_GE(e.at("policy_lost").get<double>(), 0.0);
    EXPECT_LE(e.at("oracle_lost").get<double>(), 1.0);
    best_mass = std::max(best_mass, e.at("mass").get<double>());
  }
  EXPECT_EQ(seen.size(), 24u);
  // The retrieval (induction) head of layer 1 puts nearly all its mass on the needle, and its KV
  // head's other query head little: a mean near 0.5 over the pair.
  EXPECT_GT(best_mass, 0.3);

  // How sure the model was of each of " 64019"'s tokens, to the first one written wrong: the
  // tokens written before it are the expected ones, and a written token is the greedy choice, so
  // never less likely than the expected one.
  const nlohmann::json& probs = lines[0].at("answer_probs");
  const std::string output = lines[0].at("output").get<std::string>();
  const std::vector<std::string> expected = {" ", "6", "4", "0", "1", "9"};
  ASSERT_GE(probs.size(), 1u);
  ASSERT_LE(probs.size(), expected.size());
  std::string written;
  std::string shown = "answer's tokens, each one's probability, to the first wrong:";  // --show's line
  char buf[64];
  for (size_t i = 0; i < probs.size(); ++i) {
    const nlohmann::json& a = probs[i];
    std::snprintf(buf, sizeof(buf), " %s %.3f", a.at("expected").dump().c_str(), a.at("p_expected").get<double>());
    shown += buf;
    if (a.at("written") != a.at("expected")) {
      std::snprintf(buf, sizeof(buf), " (wrote %s %.3f)", a.at("written").dump().c_str(), a.at("p_written").get<double>());
      shown += buf;
    }
    EXPECT_EQ(a.at("expected"), expected[i]) << a.dump();
    const double p_expected = a.at("p_expected").get<double>(), p_written = a.at("p_written").get<double>();
    EXPECT_GT(p_expected, 0.0);
    EXPECT_LE(p_expected, p_written) << a.dump();
    EXPECT_LE(p_written, 1.0);
    if (i + 1 < probs.size()) {
      EXPECT_EQ(a.at("written"), a.at("expected")) << "only the last may be wrong";
    }
    written += a.at("written").get<std::string>();
  }
  EXPECT_TRUE(output.starts_with(written)) << output;
  EXPECT_EQ(probs.size() == expected.size() && probs.back().at("written") == expected.back(),
            output.starts_with(" 64019"))
      << "every token listed and the last right exactly when the answer was written";
  EXPECT_NE(stdout_.find(shown + "\n"), std::string::npos) << shown << "\nnot in:\n" << stdout_;
}

}  // namespace
