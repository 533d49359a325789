// h2o and h2o-chunked on constructed attention-mass sequences (observe_attention called directly,
// then select): exact heavy hitters, ties to the lower position, permanent eviction, the first
// step that attends everything, reset(); and end to end through SparseAttention and a synthetic
// model: just below a full budget, full attention on the first step and then the lightest left
// out; at a small one the budget kept.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_catalog.h"
#include "kv/tiered_kv_cache.h"
#include "model/llama_forward.h"
#include "model/model.h"
#include "select_ok.h"
#include "sparse/selection_policy.h"
#include "sparse/sparse_attention.h"
#include "small_model_test.h"

namespace leoam::sparse {
namespace {

using testing_util::select_ok;
using Ranges = std::vector<TokenRange>;

// A catalog of chunks of 4 tokens (1 kv head of dim 2) whose abstracts must never be read: h2o
// ranks by attention mass alone.
class ChunkOnlyCatalog final : public KvCatalog {
 public:
  explicit ChunkOnlyCatalog(int64_t n_chunks) : n_chunks_(n_chunks) {}
  int chunk_tokens() const override { return 4; }
  int catalog_kv_heads() const override { return 1; }
  int catalog_head_dim() const override { return 2; }
  int64_t n_chunks(int /*layer*/) const override { return n_chunks_; }
  Tier chunk_tier(int /*layer*/, int64_t /*index*/) const override { return Tier::kDevice; }
  Status load_abstracts(int, int64_t, int64_t, float*, AbstractSource, uint32_t*) override {
    ADD_FAILURE() << "h2o read abstracts";
    return internal_error("h2o read abstracts");
  }
  void raise_importance(ChunkKey /*key*/, float /*amount*/) override {}

 private:
  int64_t n_chunks_;
};

constexpr int kLayer = 3;

std::unique_ptr<SelectionPolicy> make(std::string_view name) {
  auto p = make_selection_policy(name, {});
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? std::move(p).value() : nullptr;
}

// A query that sees [0, n_tokens) and picks from far. h2o reads no query vector.
SelectionQuery make_query(int layer, int64_t n_tokens, TokenRange far, int64_t budget) {
  static const float q[2] = {1.0f, 0.0f};
  SelectionQuery query;
  query.layer = layer;
  query.n_tokens = n_tokens;
  query.q = q;
  query.n_head = 1;
  query.n_head_kv = 1;
  query.head_dim = 2;
  query.scale = 1.0f;
  query.far = far;
  query.budget_tokens = budget;
  return query;
}

// Observes `mass` for the positions of `ranges` (in order) of `layer`.
void observe(SelectionPolicy& p, int layer, const Ranges& ranges, const std::vector<float>& mass) {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += r.size();
  ASSERT_EQ(n, static_cast<int64_t>(mass.size()));
  p.observe_attention(layer, ranges.back().end - 1, ranges, mass);
}

// Over positions [0, n): `fill` everywhere, then the given (position, mass) pairs.
std::vector<float> masses(int64_t n, float fill, const std::vector<std::pair<int64_t, float>>& at) {
  std::vector<float> m(static_cast<size_t>(n), fill);
  for (const auto& [pos, x] : at) m[static_cast<size_t>(pos)] = x;
  return m;
}

// Two observations over 20 positions; far [4, 16). Accumulated far mass (the ties are exact in
// float: .2 + .2 == .4):
//   pos   4    5    6    7    8    9    10   11   12   13   14   15
//         .1   .4   .4   .3   .1   .5   .1   .1   .7   .3   .1   .6      (6: .2 + .2; 15: .1 + .5)
// Ranked: 12, 15, 9, then 5 and 6 (tie: 5 first), then 7 and 13 (tie: 7 first), then the .1s.
void observe_two_steps(SelectionPolicy& p) {
  observe(p, kLayer, {{0, 20}}, masses(20, 0.1f, {{5, 0.4f}, {6, 0.2f}, {7, 0.3f}, {9, 0.5f}, {12, 0.7f}, {13, 0.3f}}));
  observe(p, kLayer, {{0, 2}, {6, 7}, {15, 17}}, {1.0f, 1.0f, 0.2f, 0.5f, 1.0f});
}

TEST(H2oPolicy, NeedsAttentionMass) {
  EXPECT_TRUE(make("h2o")->needs().attention_mass);
  EXPECT_TRUE(make("h2o-chunked")->needs().attention_mass);
  EXPECT_EQ(make("h2o")->name(), "h2o");
  EXPECT_EQ(make("h2o-chunked")->name(), "h2o-chunked");
}

TEST(H2oPolicy, KeepsTheHeaviestHittersTiesToTheLowerPosition) {
  ChunkOnlyCatalog catalog(8);
  auto h2o = make("h2o");
  observe_two_steps(*h2o);
  Selection s = select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 6), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{5, 8}, {9, 10}, {12, 13}, {15, 16}}));  // 7 beats 13
  EXPECT_EQ(s.n_chunks_scored, 12);
  EXPECT_FALSE(s.desert);

  auto fresh = make("h2o");
  observe_two_steps(*fresh);
  s = select_ok(*fresh, make_query(kLayer, 20, {4, 16}, 4), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{5, 6}, {9, 10}, {12, 13}, {15, 16}}));  // 5 beats 6

  fresh = make("h2o");
  observe_two_steps(*fresh);
  s = select_ok(*fresh, make_query(kLayer, 20, {4, 16}, 0), catalog);
  EXPECT_EQ(s.ranges, Ranges{});
  EXPECT_EQ(s.n_chunks_scored, 12);
}

TEST(H2oPolicy, EvictionIsForGood) {
  ChunkOnlyCatalog catalog(8);
  auto h2o = make("h2o");
  observe_two_steps(*h2o);
  // Step 1 keeps 5 6 7 9 12 15 and evicts 4 8 10 11 13 14.
  ASSERT_EQ(select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 6), catalog).ranges,
            (Ranges{{5, 8}, {9, 10}, {12, 13}, {15, 16}}));

  // The evicted 4 and 13 now get the largest mass of all; 16 and 17 gather some while recent.
  observe(*h2o, kLayer, {{0, 20}}, masses(20, 0.0f, {{4, 5.0f}, {13, 5.0f}, {17, 2.0f}}));
  Selection s = select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 6), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{5, 8}, {9, 10}, {12, 13}, {15, 16}}));  // the 6 survivors, nothing else
  EXPECT_EQ(s.n_chunks_scored, 6);

  // 16 (.1 + 1) and 17 (.1 + 2) enter far with the mass they got while recent: they push out 6
  // and 7 (5 and 6 tie at .4: 6 goes); 4 and 13 (5.1, 5.3) stay out.
  s = select_ok(*h2o, make_query(kLayer, 20, {4, 18}, 6), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{5, 6}, {9, 10}, {12, 13}, {15, 18}}));
  EXPECT_EQ(s.n_chunks_scored, 8);
  s = select_ok(*h2o, make_query(kLayer, 20, {4, 18}, 100), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{5, 6}, {9, 10}, {12, 13}, {15, 18}}));  // a large budget brings none back
  EXPECT_EQ(s.n_chunks_scored, 6);
}

TEST(H2oPolicy, FirstStepSelectsAllOfFarAndResetForgetsEverything) {
  ChunkOnlyCatalog catalog(8);
  auto h2o = make("h2o");
  // Nothing observed yet: all of far, whatever the budget.
  Selection s = select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 2), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 16}}));
  EXPECT_EQ(s.n_chunks_scored, 0);
  EXPECT_EQ(select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 2), catalog).ranges, (Ranges{{4, 16}}));

  observe_two_steps(*h2o);
  // Each layer has its own first step: layer 0 has observed nothing.
  EXPECT_EQ(select_ok(*h2o, make_query(0, 20, {4, 16}, 2), catalog).ranges, (Ranges{{4, 16}}));
  EXPECT_EQ(select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 2), catalog).ranges, (Ranges{{12, 13}, {15, 16}}));

  h2o->reset();  // forgets the mass, the evictions and the first step
  EXPECT_EQ(select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 2), catalog).ranges, (Ranges{{4, 16}}));
  observe(*h2o, kLayer, {{0, 20}}, masses(20, 0.0f, {{4, 1.0f}, {8, 2.0f}}));  // both were evicted before
  s = select_ok(*h2o, make_query(kLayer, 20, {4, 16}, 2), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 5}, {8, 9}}));
  EXPECT_EQ(s.n_chunks_scored, 12);
}

// Chunks of 4, 36 tokens (9 chunks) in the catalog. Step 1: far [6, 26): chunk 1 holds 2 far
// tokens ([6, 8)), chunks 2..5 hold 4, chunk 6 holds 2 ([24, 26)). Far mass per chunk:
//   chunk 1: .5 .5 = 1 (4 and 5, outside far, have 8 each: not counted)
//   chunk 2: 4 x .125 = .5     chunk 3: 4 x .375 = 1.5     chunk 4: 0
//   chunk 5: 4 x .25 = 1       chunk 6: .75 .75 = 1.5 (26 and 27, still recent, have 8 each)
// Ranked: 3, 6 (tie: 3 first), 1, 5 (tie: 1 first), 2, 4.
TEST(H2oChunkedPolicy, KeepsTheHeaviestChunksAndEvictsTheOthersForGood) {
  ChunkOnlyCatalog catalog(9);
  auto h2o = make("h2o-chunked");
  // The first step: all of far.
  EXPECT_EQ(select_ok(*h2o, make_query(kLayer, 32, {6, 26}, 4), catalog).ranges, (Ranges{{6, 26}}));

  std::vector<float> m(32, 0.0f);
  const float per_chunk[8] = {0, 0.5f, 0.125f, 0.375f, 0, 0.25f, 0.75f, 0};
  for (int64_t p = 0; p < 32; ++p) m[static_cast<size_t>(p)] = per_chunk[p / 4];
  m[4] = m[5] = m[26] = m[27] = 8.0f;
  observe(*h2o, kLayer, {{0, 32}}, m);

  // Budget 9: chunk 3 (4 tokens), 6 (2), 1 (2) make 8; chunk 5's 4 would make 12: the ranking stops.
  Selection s = select_ok(*h2o, make_query(kLayer, 32, {6, 26}, 9), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{6, 8}, {12, 16}, {24, 26}}));
  EXPECT_EQ(s.n_chunks_scored, 6);  // chunks 2, 4 and 5 are evicted

  // Step 2: far [6, 30); chunk 6 is now whole (its recent mass 8 + 8 comes along), chunk 7 holds
  // 2 far tokens ([28, 30)) with 4 + 4. The evicted chunks 2 and 4 get 16 per token.
  std::vector<float> m2(36, 0.0f);
  for (int64_t p = 8; p < 12; ++p) m2[static_cast<size_t>(p)] = 16.0f;
  for (int64_t p = 16; p < 20; ++p) m2[static_cast<size_t>(p)] = 16.0f;
  m2[28] = m2[29] = 4.0f;
  m2[32] = m2[33] = 100.0f;  // chunk 8, still recent
  observe(*h2o, kLayer, {{0, 36}}, m2);
  // Candidates 1 (1), 3 (1.5), 6 (17.5), 7 (8): 6 and 7 make 6 tokens; 3 would make 10 > 8.
  s = select_ok(*h2o, make_query(kLayer, 34, {6, 30}, 8), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{24, 30}}));
  EXPECT_EQ(s.n_chunks_scored, 4);

  // Step 3: far [6, 34): candidates 6 (17.5), 7 ([28, 32): 8) and the edge chunk 8 ([32, 34):
  // 200, from while it was recent); budget 4: chunk 8 (2 tokens), then chunk 6 (4) would make 6.
  s = select_ok(*h2o, make_query(kLayer, 36, {6, 34}, 4), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{32, 34}}));
  EXPECT_EQ(s.n_chunks_scored, 3);
  // Chunks 6 and 7 are gone for good, whatever mass they get; chunk 8, kept, is all that is left.
  observe(*h2o, kLayer, {{0, 36}}, masses(36, 50.0f, {}));
  s = select_ok(*h2o, make_query(kLayer, 36, {6, 36}, 100), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{32, 36}}));
  EXPECT_EQ(s.n_chunks_scored, 1);
}

// An edge chunk partly in far that is evicted loses its recent positions too, once they leave
// the recent window.
TEST(H2oChunkedPolicy, AnEvictedEdgeChunkStaysEvictedAsItEntersFar) {
  ChunkOnlyCatalog catalog(8);
  auto h2o = make("h2o-chunked");
  std::vector<float> m(32, 0.0f);
  m[8] = 1.0f;   // chunk 2
  m[13] = 0.5f;  // chunk 3, partly in far [4, 14)
  observe(*h2o, kLayer, {{0, 32}}, m);
  Selection s = select_ok(*h2o, make_query(kLayer, 32, {4, 14}, 4), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{8, 12}}));  // chunk 2; chunk 3 ([12, 14), .5) would make 6
  EXPECT_EQ(s.n_chunks_scored, 3);
  observe(*h2o, kLayer, {{0, 32}}, masses(32, 0.0f, {{14, 9.0f}, {15, 9.0f}}));
  s = select_ok(*h2o, make_query(kLayer, 32, {4, 20}, 8), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{8, 12}, {16, 20}}));  // chunk 3 (19.5) stays out; chunk 4 (0) fits
  EXPECT_EQ(s.n_chunks_scored, 2);
}

TEST(H2oChunkedPolicy, RejectsAQueryTheCatalogDoesNotHold) {
  ChunkOnlyCatalog catalog(4);  // 16 tokens
  auto h2o = make("h2o-chunked");
  EXPECT_EQ(h2o->select(make_query(kLayer, 32, {4, 28}, 4), catalog).status().code(), StatusCode::kInvalidArgument);
}

// ---- end to end ----------------------------------------------------------------------------

class H2oEndToEnd : public SmallModelTest {
 protected:
  void SetUp() override {
    SmallModelTest::SetUp();
    if (HasFatalFailure()) return;
    std::mt19937 rng(7);
    prompt_ = random_tokens(150, rng);
    decode_ = random_tokens(10, rng);
  }

  // The decode logits of every step with `policy` at `budget` (policy "": no selector, full
  // attention), on the tiered store or the in-memory one. attended[step][layer]: the tokens that
  // step attended.
  std::vector<std::vector<float>> run(const std::string& policy, double budget, bool tiered,
                                      std::vector<std::vector<int64_t>>* attended = nullptr) {
    std::unique_ptr<KvCache> kv;
    KvCatalog* catalog = nullptr;
    if (tiered) {
      TieredKvCacheOptions t;
      t.shape = {spec_.n_layer, spec_.n_head_kv, 16, spec_.n_ctx};
      t.chunk_tokens = 8;
      t.n_recent_tokens = 16;
      t.dir = dir_.path();
      t.device_budget_bytes = uint64_t{64} << 20;
      auto store = TieredKvCache::create(t);
      EXPECT_TRUE(store.is_ok()) << store.status().message();
      if (!store.is_ok()) return {};
      catalog = store->get();
      kv = std::move(store).value();
    }
    std::unique_ptr<SparseAttention> selector;
    if (!policy.empty()) {
      SparseAttentionOptions o;
      o.policy = policy;
      o.budget = budget;
      o.n_sink = 4;
      o.n_recent = 16;
      auto s = SparseAttention::create(o, catalog, {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f});
      EXPECT_TRUE(s.is_ok()) << s.status().message();
      if (!s.is_ok()) return {};
      selector = std::move(s).value();
    }
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.selector = selector.get();
    auto ctx = LlamaForward::create(*model_, fo, std::move(kv));
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    if (!ctx.is_ok()) return {};
    std::vector<float> logits;
    EXPECT_TRUE((*ctx)->eval(prompt_, false, logits).is_ok());
    std::vector<std::vector<float>> rows;
    std::vector<int64_t> before(static_cast<size_t>(spec_.n_layer), 0);
    for (int32_t tok : decode_) {
      const int32_t one[1] = {tok};
      const Status st = (*ctx)->eval(one, false, logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      rows.push_back(logits);
      if (attended != nullptr && selector != nullptr) {
        std::vector<int64_t> step;
        for (int il = 0; il < spec_.n_layer; ++il) {
          const int64_t total = selector->stats()[static_cast<size_t>(il)].n_attended;
          step.push_back(total - before[static_cast<size_t>(il)]);
          before[static_cast<size_t>(il)] = total;
        }
        attended->push_back(step);
      }
    }
    return rows;
  }

  std::vector<int32_t> prompt_, decode_;
};

// Just below a full budget (ceil(0.99 far) = far - 1: a full budget would skip the policy) the
// first step attends everything, so its logits are full attention's; from the second step h2o
// evicts its lightest far token and h2o-chunked its lightest chunk (at most 8 tokens a step, each
// step at least one more), so the logits leave full attention's.
TEST_F(H2oEndToEnd, JustBelowAFullBudgetTheFirstStepIsFullThenTheLightestGoes) {
  for (const auto& [policy, tiered] : {std::pair<std::string, bool>{"h2o", false}, {"h2o", true},
                                       {"h2o-chunked", true}}) {
    SCOPED_TRACE(policy + (tiered ? " tiered" : " in memory"));
    std::vector<std::vector<int64_t>> attended;
    const auto rows = run(policy, 0.99, tiered, &attended);
    const auto full = run("", 1.0, tiered);
    ASSERT_EQ(rows.size(), full.size());
    ASSERT_EQ(attended.size(), decode_.size());
    EXPECT_EQ(rows[0], full[0]);
    for (int64_t n : attended[0]) EXPECT_EQ(n, 151);
    for (size_t step = 1; step < attended.size(); ++step) {
      const int64_t visible = 151 + static_cast<int64_t>(step);
      EXPECT_NE(rows[step], full[step]) << "step " << step;
      for (int64_t n : attended[step]) {
        if (policy == "h2o") {
          EXPECT_EQ(n, visible - 1) << "step " << step;
        } else {
          EXPECT_LT(n, visible) << "step " << step;
          EXPECT_GE(n, visible - 8 * static_cast<int64_t>(step)) << "step " << step;
        }
      }
    }
  }
}

TEST_F(H2oEndToEnd, ASmallBudgetIsKeptAfterTheFirstStep) {
  // A budget of 20 far tokens: with the sink (4) and the recent window (16), 40 tokens.
  for (const auto& [policy, tiered] : {std::pair<std::string, bool>{"h2o", false}, {"h2o", true},
                                       {"h2o-chunked", true}}) {
    SCOPED_TRACE(policy + (tiered ? " tiered" : " in memory"));
    std::vector<std::vector<int64_t>> attended;
    const auto rows = run(policy, 20, tiered, &attended);
    ASSERT_EQ(attended.size(), decode_.size());
    const auto full = run("", 1.0, tiered);
    // The first step attends every position (the prompt and the token): 151.
    for (int64_t n : attended[0]) EXPECT_EQ(n, 151);
    EXPECT_EQ(rows[0], full[0]);
    for (size_t step = 1; step < attended.size(); ++step) {
      for (int64_t n : attended[step]) {
        if (policy == "h2o") {
          EXPECT_EQ(n, 40) << "step " << step;  // token grain: the budget exactly
        } else {
          EXPECT_LE(n, 40) << "step " << step;  // whole chunks: at most the budget
        }
      }
    }
    EXPECT_NE(rows.back(), full.back());  // sparse attention changed something
  }
}

}  // namespace
}  // namespace leoam::sparse
