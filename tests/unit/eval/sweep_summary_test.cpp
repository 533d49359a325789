// The tables' figures from result lines (eval/sweep_summary.h): rows by policy@budget in the order
// they first appear, pooled perplexity against full's, the cost columns, and the budgets whose
// policies attended unmatched shares.
#include "eval/sweep_summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace leoam::eval {
namespace {

using Json = nlohmann::ordered_json;

Json line(const std::string& task, const std::string& policy, double budget, double attended_pct) {
  return Json{{"task", task}, {"ctx", 256}, {"depth", 0.5}, {"seed", 0}, {"policy", policy}, {"budget", budget},
              {"tokens_attended_pct", attended_pct}};
}

Json scored(const std::string& policy, double budget, double score, double attended_pct) {
  Json j = line("passkey", policy, budget, attended_pct);
  j["score"] = score;
  j["kv_bytes_per_token"] = {{"device", 1000.0}, {"host", 10.0}, {"disk", 0.4}};
  return j;
}

Json window(const std::string& policy, double budget, double depth, double nll_sum, double n_tokens, double n_bytes) {
  Json j = line("ppl", policy, budget, 50.0);
  j["depth"] = depth;
  j["nll_sum"] = nll_sum;
  j["n_tokens"] = n_tokens;
  j["n_bytes"] = n_bytes;
  return j;
}

TEST(SweepSummaryTest, ScoreRowsGroupByLabelInFirstOrderAtTheTaskAndStraddle) {
  std::vector<Json> lines = {scored("leoam", 0.1, 1.0, 20.0), scored("full", 1.0, 1.0, 100.0),
                             scored("leoam", 0.1, 0.0, 30.0), scored("leoam", 0.3, 1.0, 40.0),
                             line("ledger", "full", 1.0, 100.0)};
  Json straddled = scored("full", 1.0, 0.0, 100.0);
  straddled["straddle_chunk"] = 8;
  lines.push_back(straddled);
  Json old = line("passkey", "leoam", 0.3, 50.0);  // written before kv_bytes_per_token existed
  old["score"] = 0.0;
  lines.push_back(old);

  const std::vector<ScoreRow> rows = score_rows(lines, "passkey", 0);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "leoam@0.1");
  EXPECT_EQ(rows[1].label, "full");
  EXPECT_EQ(rows[2].label, "leoam@0.3");
  EXPECT_EQ(rows[0].n, 2);
  EXPECT_EQ(rows[0].score_pct(), 50.0);
  EXPECT_EQ(rows[0].cost.attended_pct(), 25.0);
  EXPECT_EQ(rows[0].cost.bytes_per_token(Tier::kDevice), 1000u);
  EXPECT_EQ(rows[0].cost.bytes_per_token(Tier::kDisk), 0u) << "rounded to the byte";
  EXPECT_EQ(rows[1].n, 1) << "the straddled line has its own table";
  EXPECT_EQ(rows[2].n, 2);
  EXPECT_EQ(rows[2].cost.attended_pct(), 45.0);
  EXPECT_EQ(rows[2].cost.bytes_per_token(Tier::kHost), 10u) << "the mean over the lines that have bytes";

  const std::vector<ScoreRow> only_old = score_rows({old}, "passkey", 0);
  ASSERT_EQ(only_old.size(), 1u);
  EXPECT_FALSE(only_old[0].cost.bytes_per_token(Tier::kDevice).has_value());
  EXPECT_EQ(score_rows(lines, "passkey", 8).size(), 1u);
}

TEST(SweepSummaryTest, PplRowsPoolEachDepthsWindowsAndCompareWithFull) {
  const std::vector<Json> lines = {window("full", 1.0, 0.0, 100.0, 50.0, 200.0),
                                   window("leoam", 0.1, 0.0, 120.0, 50.0, 200.0),
                                   window("full", 1.0, 0.0, 60.0, 50.0, 100.0),
                                   window("leoam", 0.1, 0.5, 30.0, 25.0, 100.0),
                                   line("passkey", "full", 1.0, 100.0)};
  const std::vector<PplDepth> depths = ppl_rows(lines, "ppl");
  ASSERT_EQ(depths.size(), 2u);
  EXPECT_EQ(depths[0].depth, 0.0);
  ASSERT_EQ(depths[0].rows.size(), 2u);
  const PplRow& full = depths[0].rows[0];
  EXPECT_EQ(full.label, "full");
  EXPECT_EQ(full.n, 2);
  EXPECT_DOUBLE_EQ(full.perplexity(), std::exp(160.0 / 100.0)) << "pooled over the windows' tokens";
  EXPECT_DOUBLE_EQ(full.bits_per_byte(), 160.0 / std::log(2.0) / 300.0);
  const PplRow& leoam = depths[0].rows[1];
  EXPECT_DOUBLE_EQ(*depths[0].vs_full_pct(leoam), 100.0 * (std::exp(120.0 / 50.0) / std::exp(1.6) - 1.0));
  EXPECT_EQ(*depths[0].vs_full_pct(full), 0.0);

  EXPECT_EQ(depths[1].depth, 0.5);
  ASSERT_EQ(depths[1].rows.size(), 1u);
  EXPECT_FALSE(depths[1].vs_full_pct(depths[1].rows[0]).has_value()) << "no full at this depth";
}

TEST(SweepSummaryTest, FlagsABudgetWhosePoliciesAttendedSharesMoreThanAPointApart) {
  CostSummary full, leoam, quest, leoam_3, quest_3;
  full.add(line("passkey", "full", 1.0, 100.0));
  leoam.add(line("passkey", "leoam", 0.1, 12.0));
  quest.add(line("passkey", "quest", 0.1, 20.5));
  leoam_3.add(line("passkey", "leoam", 0.3, 30.0));
  quest_3.add(line("passkey", "quest", 0.3, 31.0));  // exactly 1 point: matched
  const std::vector<UnmatchedShare> flagged = unmatched_shares({&full, &leoam, &quest, &leoam_3, &quest_3});
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].budget, 0.1);
  EXPECT_EQ(flagged[0].lo, &leoam);
  EXPECT_EQ(flagged[0].hi, &quest);
  EXPECT_DOUBLE_EQ(flagged[0].gap_pct(), 8.5);
  EXPECT_TRUE(unmatched_shares({&full, &leoam}).empty()) << "a dense policy is never compared";
}

}  // namespace
}  // namespace leoam::eval
