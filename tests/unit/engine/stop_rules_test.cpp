#include "engine/stop_rules.h"

#include <gtest/gtest.h>

namespace leoam {
namespace {

TEST(StopRules, BeforeASampleTheTokensAskedForThenTheContext) {
  const StopRules four{4};
  EXPECT_EQ(four.before_sample(3, 10, 16), std::nullopt);
  EXPECT_EQ(four.before_sample(4, 10, 16), StopReason::kMaxTokens);
  EXPECT_EQ(four.before_sample(3, 16, 16), StopReason::kContextFull);
  EXPECT_EQ(four.before_sample(4, 16, 16), StopReason::kMaxTokens) << "both: the tokens asked for";
  const StopRules unbounded{-1};
  EXPECT_EQ(unbounded.before_sample(1000, 15, 16), std::nullopt);
  EXPECT_EQ(unbounded.before_sample(1000, 16, 16), StopReason::kContextFull);
  EXPECT_EQ(StopRules{0}.before_sample(0, 0, 16), StopReason::kMaxTokens);
}

TEST(StopRules, AfterATokenTheEndOfGenerationThenTheLastAskedFor) {
  const StopRules four{4};
  EXPECT_EQ(four.after_token(false, 3), std::nullopt);
  EXPECT_EQ(four.after_token(false, 4), StopReason::kMaxTokens);
  EXPECT_EQ(four.after_token(true, 2), StopReason::kEndOfGeneration);
  EXPECT_EQ(four.after_token(true, 4), StopReason::kEndOfGeneration);
  EXPECT_EQ(StopRules{-1}.after_token(false, 1000), std::nullopt);
}

TEST(StopRules, TokensLeftAfterTheNextOne) {
  EXPECT_EQ(StopRules{-1}.tokens_left(0, 10, 16), 5);  // positions 11..15 after the next token's
  EXPECT_EQ(StopRules{4}.tokens_left(0, 10, 16), 3);
  EXPECT_EQ(StopRules{4}.tokens_left(3, 10, 16), 0) << "the next is the last asked for";
  EXPECT_EQ(StopRules{10}.tokens_left(0, 15, 16), 0) << "the next fills the context";
}

}  // namespace
}  // namespace leoam
