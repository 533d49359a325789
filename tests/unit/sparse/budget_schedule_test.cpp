#include "sparse/budget_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace leoam::sparse {
namespace {

TEST(BudgetSchedule, AFractionKeepsHalfInTheFirstSixteenthOfTheLayers) {
  EXPECT_EQ(default_layer_budgets(0.1, 32), (std::map<int, double>{{0, 0.5}, {1, 0.5}}));
  EXPECT_EQ(default_layer_budgets(0.1, 16), (std::map<int, double>{{0, 0.5}}));
  EXPECT_EQ(default_layer_budgets(0.1, 40), (std::map<int, double>{{0, 0.5}, {1, 0.5}, {2, 0.5}}));  // 2.5 rounds up
  EXPECT_EQ(default_layer_budgets(0.1, 8), (std::map<int, double>{{0, 0.5}}));                      // 0.5 rounds up
  EXPECT_TRUE(default_layer_budgets(0.1, 7).empty());
  EXPECT_TRUE(default_layer_budgets(0.1, 4).empty()) << "the project's 4-layer model";
  EXPECT_EQ(default_layer_budgets(0.8, 32), (std::map<int, double>{{0, 0.8}, {1, 0.8}})) << "never below b";
  EXPECT_EQ(default_layer_budgets(1.0, 16), (std::map<int, double>{{0, 1.0}}));
  EXPECT_TRUE(default_layer_budgets(512, 32).empty()) << "a count of far tokens is the same in every layer";
}

// A fraction's share rounds up, a count is taken whole, and neither passes the far tokens.
TEST(BudgetSchedule, FarBudgetTokens) {
  EXPECT_EQ(far_budget_tokens(0.1, 1000), 100);
  EXPECT_EQ(far_budget_tokens(0.1, 1005), 101);
  EXPECT_EQ(far_budget_tokens(0.1, 5), 1) << "at least one far token when there is one";
  EXPECT_EQ(far_budget_tokens(0.1, 0), 0);
  EXPECT_EQ(far_budget_tokens(1.0, 7), 7);
  EXPECT_EQ(far_budget_tokens(4096, 100000), 4096);
  EXPECT_EQ(far_budget_tokens(4096, 1000), 1000);
  EXPECT_EQ(far_budget_tokens(1e300, 1000), 1000) << "no overflow";
}

TEST(BudgetSchedule, BudgetErrorAcceptsFractionsAndWholeCounts) {
  for (const double ok : {0.001, 0.1, 1.0, 2.0, 512.0}) EXPECT_EQ(budget_error(ok), "") << ok;
  for (const double bad : {0.0, -0.1, std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    EXPECT_EQ(budget_error(bad), "must be a positive finite number") << bad;
  }
  EXPECT_EQ(budget_error(1.5), "is above 1, a count of far tokens: it must be whole");
}

}  // namespace
}  // namespace leoam::sparse
