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

TEST(BudgetSchedule, BudgetErrorAcceptsFractionsAndWholeCounts) {
  for (const double ok : {0.001, 0.1, 1.0, 2.0, 512.0}) EXPECT_EQ(budget_error(ok), "") << ok;
  for (const double bad : {0.0, -0.1, std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    EXPECT_EQ(budget_error(bad), "must be a positive finite number") << bad;
  }
  EXPECT_EQ(budget_error(1.5), "is above 1, a count of far tokens: it must be whole");
}

}  // namespace
}  // namespace leoam::sparse
