// The selection explainer (selection_explainer.h): where the target ranked under each selector's
// scores, how much of it each picked, its mass and the cause of a miss. Two fixed rankers stand
// in for the policy and the oracle, so every figure can be pinned by hand; `eval --explain`
// (tests/integration) runs it on leoam and the real oracle.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "select_ok.h"
#include "sparse/selection_explainer.h"

namespace leoam::sparse {
namespace {

using testing_util::select_ok;

// Ranks fixed units with fixed scores and picks fixed ranges; counts what it was asked.
class FixedRanker final : public SelectionPolicy {
 public:
  FixedRanker(std::vector<ScoredUnit> units, std::vector<TokenRange> picks, bool desert = false)
      : units_(std::move(units)), picks_(std::move(picks)), desert_(desert) {}
  std::string_view name() const override { return "fixed"; }
  Result<Selection> select(const SelectionQuery& query, KvCatalog&) override {
    ++n_selects;
    explained += query.explain ? 1 : 0;
    Selection s;
    s.ranges = picks_;
    s.desert = desert_;
    if (query.explain) s.ranking = units_;
    return s;
  }
  PolicyMemory memory() const override { return {100, 200}; }
  int n_selects = 0;
  int explained = 0;

 private:
  std::vector<ScoredUnit> units_;
  std::vector<TokenRange> picks_;
  bool desert_;
};

SelectionQuery query_at(int layer, int64_t step) {
  SelectionQuery q;
  q.layer = layer;
  q.step = step;
  q.n_tokens = 200;
  q.n_head = 8;
  q.n_head_kv = 4;
  q.far = {4, 136};
  q.budget_tokens = 24;
  return q;
}

struct Explained {
  std::unique_ptr<SelectionPolicy> wrapper;
  FixedRanker* policy;
  FixedRanker* oracle;
  std::vector<LayerExplanation> out;
};

// The far tokens [4, 136) in units; the target is [40, 44).
std::unique_ptr<Explained> explain(std::vector<ScoredUnit> policy_units, std::vector<TokenRange> policy_picks,
                                   std::vector<TokenRange> oracle_picks, bool desert = false,
                                   float target_score = 0.3f) {
  auto e = std::make_unique<Explained>();
  auto policy = std::make_unique<FixedRanker>(std::move(policy_units), std::move(policy_picks), desert);
  // The oracle's chunks of 8 from 8: [8, 16) ... [128, 136), scored by position, [40, 48) at
  // target_score.
  std::vector<ScoredUnit> chunks = {{{4, 8}, 0.0f}};
  for (int64_t b = 8; b < 136; b += 8) chunks.push_back({{b, b + 8}, b == 40 ? target_score : 0.001f * static_cast<float>(b)});
  auto oracle = std::make_unique<FixedRanker>(std::move(chunks), std::move(oracle_picks));
  e->policy = policy.get();
  e->oracle = oracle.get();
  e->wrapper = make_selection_explainer(std::move(policy), std::move(oracle), {40, 44}, 2, &e->out);
  return e;
}

TEST(SelectionExplainer, RanksPicksAndMass) {
  // The policy's leaves: [4, 36) at 5, [36, 52) (holds the target) at 3, [52, 136) at 4.
  auto e = explain({{{4, 36}, 5.0f}, {{36, 52}, 3.0f}, {{52, 136}, 4.0f}}, {{4, 28}}, {{40, 48}, {8, 24}});
  KvCatalog& catalog = no_chunk_catalog();
  const Selection s = select_ok(*e->wrapper, query_at(1, 0), catalog);
  EXPECT_EQ(s.ranges, (std::vector<TokenRange>{{4, 28}})) << "the policy's picks are the ones attended";
  EXPECT_TRUE(s.ranking.empty()) << "the ranking stays inside the explainer";
  ASSERT_EQ(e->out.size(), 1u);
  const LayerExplanation& x = e->out[0];
  EXPECT_EQ(x.layer, 1);
  EXPECT_EQ(x.step, 0);
  EXPECT_EQ(x.budget_tokens, 24);
  EXPECT_DOUBLE_EQ(x.far_share, 1.0);
  EXPECT_EQ(x.policy.rank, 3);
  EXPECT_EQ(x.policy.tokens_ahead, 32 + 84);
  EXPECT_EQ(x.policy.unit_tokens, 16);
  EXPECT_DOUBLE_EQ(x.policy.picked, 0.0);
  EXPECT_EQ(x.oracle.rank, 1);
  EXPECT_EQ(x.oracle.tokens_ahead, 0);
  EXPECT_EQ(x.oracle.unit_tokens, 8);
  EXPECT_DOUBLE_EQ(x.oracle.picked, 1.0);
  // The oracle's chunk [40, 48): 0.3 a token, 8 tokens, over a group of 2 query heads.
  EXPECT_NEAR(x.mass, 0.3 * 8 / 2, 1e-6);
  EXPECT_EQ(x.cause, "coarse") << "the oracle's chunk holds it, the policy's larger leaf ranked too low";
  EXPECT_EQ(e->policy->explained, 1);
  EXPECT_EQ(e->oracle->explained, 1);
}

TEST(SelectionExplainer, CausesOfAMiss) {
  KvCatalog& catalog = no_chunk_catalog();
  {  // The policy's unit is a chunk too: its bound ranked it low.
    auto e = explain({{{36, 44}, 1.0f}, {{44, 136}, 2.0f}}, {{44, 68}}, {{40, 48}});
    select_ok(*e->wrapper, query_at(2, 1), catalog);
    ASSERT_EQ(e->out.size(), 1u);
    EXPECT_EQ(e->out[0].cause, "bound");
  }
  {  // Neither picks it: the budget.
    auto e = explain({{{36, 44}, 1.0f}, {{44, 136}, 2.0f}}, {{44, 68}}, {{8, 32}});
    select_ok(*e->wrapper, query_at(2, 1), catalog);
    EXPECT_EQ(e->out[0].cause, "budget");
  }
  {  // A desert.
    auto e = explain({{{36, 44}, 1.0f}, {{44, 136}, 2.0f}}, {}, {{40, 48}}, /*desert=*/true);
    select_ok(*e->wrapper, query_at(2, 1), catalog);
    EXPECT_EQ(e->out[0].cause, "desert");
  }
  {  // Missed, but the layer gives it under 1% of its attention: not needed, no cause.
    auto e = explain({{{36, 44}, 1.0f}, {{44, 136}, 2.0f}}, {{44, 68}}, {{40, 48}}, false, 0.002f);
    select_ok(*e->wrapper, query_at(2, 1), catalog);
    EXPECT_NEAR(e->out[0].mass, 0.008, 1e-6);
    EXPECT_EQ(e->out[0].cause, "");
  }
  {  // Picked whole: no cause.
    auto e = explain({{{36, 44}, 3.0f}, {{44, 136}, 2.0f}}, {{36, 44}}, {{40, 48}});
    select_ok(*e->wrapper, query_at(2, 1), catalog);
    EXPECT_EQ(e->out[0].cause, "");
    EXPECT_DOUBLE_EQ(e->out[0].policy.picked, 1.0);
  }
}

// Only the first n_steps decode steps are explained; later ones go to the policy alone, unasked
// for a ranking; the memory reported is the policy's.
TEST(SelectionExplainer, ExplainsOnlyTheAnswersSteps) {
  auto e = explain({{{4, 136}, 1.0f}}, {{4, 28}}, {{40, 48}});
  KvCatalog& catalog = no_chunk_catalog();
  for (int64_t step = 0; step < 4; ++step) select_ok(*e->wrapper, query_at(0, step), catalog);
  EXPECT_EQ(e->out.size(), 2u);
  EXPECT_EQ(e->policy->n_selects, 4);
  EXPECT_EQ(e->policy->explained, 2);
  EXPECT_EQ(e->oracle->n_selects, 2);
  EXPECT_EQ(e->wrapper->memory().bytes, 100u);
  EXPECT_EQ(e->wrapper->memory().peak_bytes, 200u);
  EXPECT_TRUE(e->wrapper->needs().keys) << "the oracle's keys";
}

}  // namespace
}  // namespace leoam::sparse
