// The selection policies on constructed queries and abstracts, through a FakeCatalog that holds
// abstracts in memory and records every load_abstracts call. Most cases use chunks of 4 tokens,
// 32 tokens (chunks 0..7) and far = [4, 28) (chunks 1..6): chunk 0 is the sink, chunk 7 the
// recent window. A chunk of "keys k" has min = max = k, so its bounds are exactly q.k.
#include "sparse/selection_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "keys_catalog.h"
#include "kv/kv_catalog.h"
#include "sparse/policy_registry.h"
#include "select_ok.h"

namespace leoam::sparse {
namespace {

using testing_util::select_ok;
using testing_util::Load;

class FakeCatalog final : public KvCatalog {
 public:
  FakeCatalog(int chunk_tokens, int n_kv_heads, int head_dim, int64_t n_chunks)
      : chunk_tokens_(chunk_tokens),
        n_kv_heads_(n_kv_heads),
        head_dim_(head_dim),
        n_chunks_(n_chunks),
        abstracts_(static_cast<size_t>(n_chunks * stride()), 0.0f) {}

  // Every key of the chunk's kv head is `key`.
  void set_keys(int64_t chunk, int kv_head, const std::vector<float>& key) { set_box(chunk, kv_head, key, key); }
  void set_box(int64_t chunk, int kv_head, const std::vector<float>& min, const std::vector<float>& max) {
    float* a = abstracts_.data() + chunk * stride() + static_cast<int64_t>(kv_head) * head_dim_;
    for (int c = 0; c < head_dim_; ++c) {
      a[c] = min[static_cast<size_t>(c)];
      a[c + static_cast<int64_t>(n_kv_heads_) * head_dim_] = max[static_cast<size_t>(c)];
    }
  }
  void fail_loads_with(Status s) { fail_ = std::move(s); }
  const std::vector<Load>& loads() const { return loads_; }
  void clear_loads() { loads_.clear(); }

  int chunk_tokens() const override { return chunk_tokens_; }
  int catalog_kv_heads() const override { return n_kv_heads_; }
  int catalog_head_dim() const override { return head_dim_; }
  int64_t n_chunks(int /*layer*/) const override { return n_chunks_; }
  Tier chunk_tier(int /*layer*/, int64_t /*index*/) const override { return Tier::kDevice; }
  Status load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource /*source*/,
                        uint32_t* /*signs: has_key_signs() is false*/) override {
    loads_.push_back({layer, i0, i1});
    if (!fail_.is_ok()) return fail_;
    if (i0 < 0 || i0 > i1 || i1 > n_chunks_) return invalid_argument("fake catalog: chunks out of range");
    std::copy(abstracts_.begin() + i0 * stride(), abstracts_.begin() + i1 * stride(), dst);
    return Status::ok();
  }
  void raise_importance(ChunkKey /*key*/, float /*amount*/) override {}

 private:
  int64_t stride() const { return 2 * static_cast<int64_t>(n_kv_heads_) * head_dim_; }

  int chunk_tokens_;
  int n_kv_heads_;
  int head_dim_;
  int64_t n_chunks_;
  std::vector<float> abstracts_;  // [n_chunks][2][n_kv_heads][head_dim]
  std::vector<Load> loads_;
  Status fail_;
};

// Chunk i's keys are (x_i, 0) with x = 0, 5, 3, 4, 2, 1, 6, 0: for q = (1, 0) the far chunks rank
// 6, 1, 3, 2, 4, 5.
FakeCatalog ranked_catalog() {
  FakeCatalog catalog(4, 1, 2, 8);
  const float x[] = {0, 5, 3, 4, 2, 1, 6, 0};
  for (int i = 0; i < 8; ++i) catalog.set_keys(i, 0, {x[i], 0});
  return catalog;
}

constexpr int kPolicyLayer = 3;

// A query of the layout above: 32 tokens, far [4, 28), scale 1. `q` must outlive the query.
SelectionQuery make_query(const std::vector<float>& q, int n_head, int n_head_kv, int head_dim, int64_t budget,
                          TokenRange far = {4, 28}) {
  SelectionQuery query;
  query.layer = kPolicyLayer;
  query.n_tokens = 32;
  query.q = q.data();
  query.n_head = n_head;
  query.n_head_kv = n_head_kv;
  query.head_dim = head_dim;
  query.scale = 1.0f;
  query.far = far;
  query.budget_tokens = budget;
  return query;
}

std::unique_ptr<SelectionPolicy> policy(std::string_view name, const PolicyOptions& options = {}) {
  auto p = make_selection_policy(name, options);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return std::move(p).value();
}

using Ranges = std::vector<TokenRange>;

TEST(SelectionPolicyFactory, MakesEachKnownPolicy) {
  EXPECT_EQ(policy_names(), "full streaming h2o h2o-chunked quest infinigen leoam oracle");
  // infinigen and oracle need a model (infinigen_policy_test.cpp, oracle_policy_test.cpp).
  for (std::string_view name : {"full", "streaming", "h2o", "h2o-chunked", "quest", "leoam"}) {
    EXPECT_EQ(policy(name)->name(), name);
  }
}

// What the registry says of each policy: full alone is dense; the chunk-scoring ones need the
// tiered store; the store's chunk each reads best (Quest's 16-token pages, leoam's 8 finer where
// fewer than 16 leaves fit the budget, 64 where a policy reads no finer); leoam without its trees
// scores every abstract at every step.
TEST(SelectionPolicyFactory, TheRegistryDescribesEachPolicy) {
  const auto info = [](std::string_view name) {
    const Result<const PolicyInfo*> p = find_policy(name);
    EXPECT_TRUE(p.is_ok()) << name;
    return *p.value();
  };
  PolicyOptions flat;
  flat.adaptive = false;
  for (const PolicyInfo& p : policies()) {
    EXPECT_EQ(p.dense, p.name == "full") << p.name;
    EXPECT_EQ(is_dense_policy(p.name), p.dense) << p.name;
    const bool chunks = p.name == "quest" || p.name == "leoam" || p.name == "h2o-chunked" || p.name == "oracle";
    EXPECT_EQ(p.needs_catalog, chunks) << p.name;
    EXPECT_EQ(p.scores_every_abstract(flat), p.name == "leoam") << p.name;
    EXPECT_FALSE(p.scores_every_abstract({})) << p.name;
  }
  EXPECT_FALSE(is_dense_policy("h3o"));
  EXPECT_EQ(info("quest").chunk_tokens({}, 1000), 16);
  EXPECT_EQ(info("infinigen").chunk_tokens({}, 1000), 8);
  EXPECT_EQ(info("full").chunk_tokens({}, 1000), 64);
  EXPECT_EQ(info("h2o-chunked").chunk_tokens({}, 1000), 64);
  EXPECT_EQ(info("leoam").chunk_tokens({}, 128), 8);
  EXPECT_EQ(info("leoam").chunk_tokens({}, 127), 4);
  EXPECT_EQ(info("leoam").chunk_tokens({}, 20), 2);
  EXPECT_EQ(info("leoam").chunk_tokens(flat, 20), 64);
  EXPECT_EQ(info("oracle").chunk_tokens({}, 100), 4);
}

TEST(SelectionPolicyFactory, UnknownNameListsTheKnownOnes) {
  auto p = make_selection_policy("h3o", {});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "selection policy 'h3o' is unknown; known policies: full streaming h2o h2o-chunked quest infinigen leoam "
            "oracle");
}

// The disk abstract records' grain: leoam's tree blocks (a store chunk in its two fine layers,
// or 32 tokens where their budget is a quarter of the far tokens or more; 64 in the others, over
// 8-token chunks), capped by a small budget as its trees' blocks are; a chunk for every other
// policy, and for leoam without its trees or its key signs (a box a chunk then).
int abstract_tokens(std::string_view name, const PolicyOptions& options, int layer, int chunk_tokens,
                    int64_t budget_tokens, int64_t far_tokens) {
  const Result<const PolicyInfo*> info = find_policy(name);
  EXPECT_TRUE(info.is_ok()) << name;
  return info.is_ok() ? (*info)->abstract_tokens(options, layer, chunk_tokens, budget_tokens, far_tokens) : -1;
}

TEST(SelectionPolicyFactory, DiskAbstractsFollowThePolicysBlocks) {
  const PolicyOptions leoam;
  EXPECT_EQ(abstract_tokens("leoam", leoam, 0, 8, 4000, 40000), 8);
  EXPECT_EQ(abstract_tokens("leoam", leoam, 1, 8, 4000, 40000), 8);
  EXPECT_EQ(abstract_tokens("leoam", leoam, 1, 8, 20000, 40000), 32) << "a budget of half";
  EXPECT_EQ(abstract_tokens("leoam", leoam, 1, 8, 10000, 40000), 32) << "a budget of a quarter";
  EXPECT_EQ(abstract_tokens("leoam", leoam, 1, 8, 9999, 40000), 8);
  EXPECT_EQ(abstract_tokens("leoam", leoam, 2, 8, 4000, 40000), 64);
  EXPECT_EQ(abstract_tokens("leoam", leoam, 31, 16, 4000, 40000), 64);
  EXPECT_EQ(abstract_tokens("leoam", leoam, 5, 8, 100, 1000), 16) << "four 16-token leaves fit 100";
  EXPECT_EQ(abstract_tokens("leoam", leoam, 5, 8, 40, 400), 8);
  PolicyOptions flat;
  flat.adaptive = false;
  EXPECT_EQ(abstract_tokens("leoam", flat, 5, 8, 4000, 40000), 8);
  PolicyOptions no_signs;
  no_signs.key_signs = false;
  EXPECT_EQ(abstract_tokens("leoam", no_signs, 5, 8, 4000, 40000), 8);
  for (const char* name : {"full", "streaming", "h2o", "h2o-chunked", "quest", "infinigen", "oracle"}) {
    EXPECT_EQ(abstract_tokens(name, leoam, 5, 16, 4000, 40000), 16) << name;
  }
}

TEST(FullPolicy, SelectsAllOfFarAndReadsNoAbstract) {
  FakeCatalog catalog(4, 1, 2, 8);
  const std::vector<float> q = {1, 0};
  const Selection s = select_ok(*policy("full"), make_query(q, 1, 1, 2, 4), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 28}}));
  EXPECT_FALSE(s.desert);
  EXPECT_EQ(s.n_chunks_scored, 0);
  EXPECT_TRUE(select_ok(*policy("full"), make_query(q, 1, 1, 2, 4, {10, 10}), catalog).ranges.empty());
  EXPECT_TRUE(catalog.loads().empty());
}

TEST(StreamingPolicy, StretchesTheRecentWindowOverTheBudget) {
  FakeCatalog catalog(4, 1, 2, 8);
  const std::vector<float> q = {1, 0};
  const Selection s = select_ok(*policy("streaming"), make_query(q, 1, 1, 2, 5), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{23, 28}}));  // the 5 far positions nearest the recent window
  EXPECT_FALSE(s.desert);
  EXPECT_EQ(s.n_chunks_scored, 0);
  EXPECT_TRUE(select_ok(*policy("streaming"), make_query(q, 1, 1, 2, 0), catalog).ranges.empty());
  EXPECT_EQ(select_ok(*policy("streaming"), make_query(q, 1, 1, 2, 1000), catalog).ranges, (Ranges{{4, 28}}));
  EXPECT_TRUE(catalog.loads().empty());
}

// Two query heads share one kv head. Head 0 (q = (1, 0)) sees bounds 3, 2.9, 0, 2.8, 2.7, 2.6 on
// chunks 1..6; head 1 (q = (0, 1)) sees 1 on chunk 3 only. Normalized per head, chunk 3 is head
// 1's best (score 0), tied with chunk 1 (head 0's best): both are kept, where ranking by the raw
// bounds would take chunks 1 and 2 and starve head 1.
TEST(QuestPolicy, KeepsTheChunkOneHeadNeeds) {
  FakeCatalog catalog(4, 1, 2, 8);
  catalog.set_keys(0, 0, {100, 100});  // sink and recent window: not far, never scored
  catalog.set_keys(7, 0, {100, 100});
  catalog.set_keys(1, 0, {3, 0});
  catalog.set_keys(2, 0, {2.9f, 0});
  catalog.set_keys(3, 0, {0, 1});
  catalog.set_keys(4, 0, {2.8f, 0});
  catalog.set_keys(5, 0, {2.7f, 0});
  catalog.set_keys(6, 0, {2.6f, 0});
  const std::vector<float> q = {1, 0, 0, 1};
  auto quest = policy("quest");
  Selection s = select_ok(*quest, make_query(q, 2, 1, 2, 8), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 8}, {12, 16}}));
  EXPECT_FALSE(s.desert);
  EXPECT_EQ(s.n_chunks_scored, 6);
  EXPECT_EQ(catalog.loads(), (std::vector<Load>{{kPolicyLayer, 1, 7}}));
  // A third chunk: chunk 2 (score -0.1) joins, and the adjacent ranges merge.
  s = select_ok(*quest, make_query(q, 2, 1, 2, 12), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 16}}));
}

// far = [6, 26): chunk 1 holds 2 far tokens ([6, 8)), chunk 6 holds 2 ([24, 26)), chunks 2..5
// hold 4. Ranked by q.k: chunk 6, 1, 3, 2, 4, 5.
TEST(QuestPolicy, BudgetCountsFarTokensExactly) {
  FakeCatalog catalog = ranked_catalog();
  const std::vector<float> q = {1, 0};
  auto quest = policy("quest");
  auto pick = [&](int64_t budget) { return select_ok(*quest, make_query(q, 1, 1, 2, budget, {6, 26}), catalog).ranges; };
  EXPECT_EQ(pick(8), (Ranges{{6, 8}, {12, 16}, {24, 26}}));  // 2 + 2 + 4 = 8
  EXPECT_EQ(pick(7), (Ranges{{6, 8}, {24, 26}}));            // chunk 3 would make 8: the ranking stops
  EXPECT_EQ(pick(12), (Ranges{{6, 16}, {24, 26}}));
  EXPECT_EQ(pick(20), (Ranges{{6, 26}}));
  EXPECT_EQ(pick(1), (Ranges{{24, 26}}));  // the best chunk, though over a budget below it
  // Each whole chunk's box is read once and kept: one load for the five selections, and the
  // policy holds one block of 32 boxes (f16 min and max of 2 channels), six of them used.
  EXPECT_EQ(catalog.loads(), (std::vector<Load>{{kPolicyLayer, 1, 7}}));
  EXPECT_EQ(quest->memory().bytes, 32u * 2 * 2 * sizeof(uint16_t));
}

// Quest keeps the boxes of whole chunks as the context grows and reads a far chunk still being
// filled at each step; reset() (a new sequence) forgets them. 26 tokens: far [4, 26), chunk 6
// holds 2 of its 4 positions; then 28, chunk 6 whole.
TEST(QuestPolicy, KeepsWholeChunksBoxesAndReadsAPartialOneEachStep) {
  FakeCatalog catalog = ranked_catalog();
  const std::vector<float> q = {1, 0};
  auto quest = policy("quest");
  const auto pick = [&](int64_t n_tokens) {
    SelectionQuery query = make_query(q, 1, 1, 2, 4, {4, n_tokens});
    query.n_tokens = n_tokens;
    return select_ok(*quest, query, catalog).ranges;
  };
  EXPECT_EQ(pick(26), (Ranges{{24, 26}}));  // chunk 6, the best, though partly stored
  EXPECT_EQ(pick(26), (Ranges{{24, 26}}));
  EXPECT_EQ(pick(28), (Ranges{{24, 28}}));
  EXPECT_EQ(catalog.loads(),
            (std::vector<Load>{{kPolicyLayer, 1, 6}, {kPolicyLayer, 6, 7}, {kPolicyLayer, 6, 7}, {kPolicyLayer, 6, 7}}));
  EXPECT_EQ(quest->memory().bytes, 32u * 2 * 2 * sizeof(uint16_t));
  quest->reset();
  EXPECT_EQ(quest->memory().bytes, 0u);
  catalog.clear_loads();
  EXPECT_EQ(pick(28), (Ranges{{24, 28}}));
  EXPECT_EQ(catalog.loads(), (std::vector<Load>{{kPolicyLayer, 1, 7}}));
}

// Kept boxes past one block of 32: 80 chunks of 4 tokens, chunk 33 keys (50, 0), chunk 70 keys
// (100, 0), the rest (1, 0). At 200 tokens chunk 33 is the best far chunk; at 320, whose new whole
// chunks are kept into a second and third block, chunk 70.
TEST(QuestPolicy, KeepsBoxesAcrossBlocks) {
  FakeCatalog catalog(4, 1, 2, 80);
  for (int i = 0; i < 80; ++i) catalog.set_keys(i, 0, {1, 0});
  catalog.set_keys(33, 0, {50, 0});
  catalog.set_keys(70, 0, {100, 0});
  const std::vector<float> q = {1, 0};
  auto quest = policy("quest");
  const auto pick = [&](int64_t n_tokens) {
    SelectionQuery query = make_query(q, 1, 1, 2, 4, {4, n_tokens - 4});
    query.n_tokens = n_tokens;
    return select_ok(*quest, query, catalog).ranges;
  };
  EXPECT_EQ(pick(200), (Ranges{{132, 136}}));
  EXPECT_EQ(pick(320), (Ranges{{280, 284}}));
  EXPECT_EQ(quest->memory().bytes, 3 * 32u * 2 * 2 * sizeof(uint16_t));  // chunks 1..78: three blocks
  EXPECT_EQ(catalog.loads().back(), (Load{kPolicyLayer, 65, 79}));  // the third block's, no re-read
}

// A budget below one chunk attends the best chunk, in quest and leoam (fixed and adaptive chunks),
// rather than nothing.
TEST(SelectionPolicy, ABudgetBelowOneChunkTakesTheBestChunk) {
  FakeCatalog catalog = ranked_catalog();
  const std::vector<float> q = {1, 0};
  PolicyOptions fixed;
  fixed.adaptive = false;
  fixed.desert = false;
  PolicyOptions adaptive;
  adaptive.desert = false;
  for (auto& [name, options] : {std::pair<std::string, PolicyOptions>{"quest", {}}, {"leoam", fixed}, {"leoam", adaptive}}) {
    SCOPED_TRACE(name + (options.adaptive ? " adaptive" : ""));
    auto p = policy(name, options);
    for (const int64_t budget : {1, 3}) {
      EXPECT_EQ(select_ok(*p, make_query(q, 1, 1, 2, budget), catalog).ranges, (Ranges{{24, 28}})) << budget;
    }
  }
}

TEST(QuestPolicy, TiesGoToTheLowerIndex) {
  FakeCatalog catalog(4, 1, 2, 8);
  for (int i = 0; i < 8; ++i) catalog.set_keys(i, 0, {1, 0});
  catalog.set_keys(2, 0, {2, 0});
  catalog.set_keys(5, 0, {2, 0});
  const std::vector<float> q = {1, 0};
  auto quest = policy("quest");
  auto pick = [&](int64_t budget) { return select_ok(*quest, make_query(q, 1, 1, 2, budget), catalog).ranges; };
  EXPECT_EQ(pick(4), (Ranges{{8, 12}}));                 // chunks 2 and 5 tie: 2
  EXPECT_EQ(pick(8), (Ranges{{8, 12}, {20, 24}}));
  EXPECT_EQ(pick(12), (Ranges{{4, 12}, {20, 24}}));      // then chunks 1, 3, 4, 6 tie: 1
  EXPECT_EQ(pick(16), (Ranges{{4, 16}, {20, 24}}));
}

TEST(QuestPolicy, NothingToPickReadsNoAbstract) {
  FakeCatalog catalog(4, 1, 2, 8);
  const std::vector<float> q = {1, 0};
  auto quest = policy("quest");
  EXPECT_TRUE(select_ok(*quest, make_query(q, 1, 1, 2, 0), catalog).ranges.empty());
  EXPECT_TRUE(select_ok(*quest, make_query(q, 1, 1, 2, 8, {12, 12}), catalog).ranges.empty());
  EXPECT_TRUE(catalog.loads().empty());
}

TEST(SelectionPolicy, PassesOnAbstractLoadErrors) {
  FakeCatalog catalog(4, 1, 2, 8);
  catalog.fail_loads_with(io_error("layer 3 abstracts: short read at offset 4096"));
  const std::vector<float> q = {1, 0};
  for (std::string_view name : {"quest", "leoam"}) {
    auto s = policy(name)->select(make_query(q, 1, 1, 2, 8), catalog);
    ASSERT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.status().code(), StatusCode::kIoError);
    EXPECT_EQ(s.status().message(), "layer 3 abstracts: short read at offset 4096");
  }
  EXPECT_EQ(catalog.loads().size(), 2u);
}

TEST(SelectionPolicy, RejectsAQueryThatDoesNotFitTheCatalog) {
  FakeCatalog catalog(4, 1, 2, 8);
  const std::vector<float> q = {1, 0, 0, 1};
  for (std::string_view name : {"quest", "leoam"}) {
    auto s = policy(name)->select(make_query(q, 1, 1, 4, 8), catalog);  // head_dim 4, catalog 2
    ASSERT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    auto t = policy(name)->select(make_query(q, 1, 1, 2, 8, {4, 40}), catalog);  // far past n_tokens
    ASSERT_FALSE(t.is_ok()) << name;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(catalog.loads().empty());
}

// One kv head serves q0 = (1, 0) and q1 = (0, 1). Chunk 2's keys (2, 0) give bounds 2 and 0;
// chunk 4's keys (1.5, 1.5) give 1.5 and 1.5; the rest (chunks 0..7, near ones too) are 0. Each
// head's bounds become log mass shares per token, scale * (bound - max) - ln(total), total the
// head's bounded mass over all 8 chunks of 4 tokens, with make_query's scale 1: head 0 (total
// 4 (1 + e^-0.5 + 6 e^-2), ln 2.27) gives chunk 2 -2.27, chunk 4 -2.77, the rest -4.27; head 1
// (total 4 (1 + 7 e^-1.5), ln 2.33) gives chunk 4 -2.33, the rest -3.83. By max, chunk 2 (-2.27)
// leads chunk 4 (-2.33). By sum, log(e^a + e^b): chunk 4 (-1.83) leads chunk 2 (-2.08).
TEST(LeoamPolicy, GroupCombineDecidesTheGqaRanking) {
  FakeCatalog catalog(4, 1, 2, 8);
  catalog.set_keys(2, 0, {2, 0});
  catalog.set_keys(4, 0, {1.5f, 1.5f});
  const std::vector<float> q = {1, 0, 0, 1};
  PolicyOptions options;
  options.adaptive = false;  // the store's fixed chunks
  options.desert = false;
  options.group_combine = GroupCombine::kMax;
  const Selection by_max = select_ok(*policy("leoam", options), make_query(q, 2, 1, 2, 4), catalog);
  EXPECT_EQ(by_max.ranges, (Ranges{{8, 12}}));
  options.group_combine = GroupCombine::kSum;
  const Selection by_sum = select_ok(*policy("leoam", options), make_query(q, 2, 1, 2, 4), catalog);
  EXPECT_EQ(by_sum.ranges, (Ranges{{16, 20}}));
  EXPECT_EQ(by_sum.n_chunks_scored, 8);  // every chunk, with or without the desert check
  EXPECT_EQ(catalog.loads(), (std::vector<Load>{{kPolicyLayer, 0, 8}, {kPolicyLayer, 0, 8}}));
}

// Two kv heads of one query head each, ranked by each head's mass shares per token: kv head 0's
// best chunk (1, bound 10) takes 1 / (4 (1 + e^-1 + 6 e^-10)) = 0.183 of its mass a token, and
// kv head 1's best (5, bound 1) 1 / (4 (1 + 7 e^-1)) = 0.070, which edges out kv head 0's second
// (2, bound 9: 0.067). The budget of two chunks keeps chunks 1 and 5.
TEST(LeoamPolicy, NormalizesPerKvHead) {
  FakeCatalog catalog(4, 2, 2, 8);
  catalog.set_keys(1, 0, {10, 0});
  catalog.set_keys(2, 0, {9, 0});
  catalog.set_keys(5, 1, {1, 0});
  const std::vector<float> q = {1, 0, 1, 0};
  PolicyOptions options;
  options.adaptive = false;  // the store's fixed chunks
  options.desert = false;
  const Selection s = select_ok(*policy("leoam", options), make_query(q, 2, 2, 2, 8), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{4, 8}, {20, 24}}));
}

// leoam on the store's fixed chunks, without the desert check.
PolicyOptions fixed_chunks() {
  PolicyOptions options;
  options.adaptive = false;
  options.desert = false;
  return options;
}

// make_query's query of one head and a budget of 4 tokens, in layer 0: a fine layer.
SelectionQuery fine_query(const std::vector<float>& q) {
  SelectionQuery query = make_query(q, 1, 1, 2, 4);
  query.layer = 0;
  return query;
}

// With fine_midpoint, the fine layers rank by the rows' midpoint estimates, the others by their
// bounds. q = (1, 1);
// chunk 2's keys are (1, 1): q.k = 2, its box a point, bound and midpoint 2. Chunk 4's rows
// alternate (3, -2) and (-2, 3): q.k = 1, but its box [-2, 3] in each channel, cut by a row's
// signs to [0, 3] x [-2, 0], bounds q.k by 3, with midpoint 1.5 - 1 = 0.5. A budget of one
// chunk takes chunk 4 by bound, chunk 2 (the keys attention prefers) by midpoint.
TEST(LeoamPolicy, FineMidpointRanksTheFineLayersByTheRowsMidpoints) {
  testing_util::KeysCatalog catalog(4, 1, 2);
  catalog.with_key_signs();
  catalog.set_keys(0, 32, {0, 0});
  catalog.set_keys(8, 12, {1, 1});
  for (int64_t p = 16; p < 20; p += 2) {
    catalog.set_keys(p, p + 1, {3, -2});
    catalog.set_keys(p + 1, p + 2, {-2, 3});
  }
  const std::vector<float> q = {1, 1};
  PolicyOptions options = fixed_chunks();
  const SelectionQuery fine = fine_query(q);
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{16, 20}}));  // the default
  options.fine_midpoint = true;
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{8, 12}}));
  EXPECT_EQ(select_ok(*policy("leoam", options), make_query(q, 1, 1, 2, 4), catalog).ranges, (Ranges{{16, 20}}));
}

// In the fine layers the rows' bounded masses add up (PolicyOptions::row_mass). q = (1, 0),
// scale 1. Chunk 2 holds one key (4, 0) and three (-4, 0): its box [-4, 4] cut by the rows'
// signs bounds them by 4 and 0, a mass of e^4 + 3 = 57.6 (true: e^4 + 3 e^-4 = 54.6). Chunk 4
// holds four keys (3, 0), bounded by 3: a mass of 4 e^3 = 80.3, the larger. Chunk 2's best row
// bounds more (4 > 3); with row_mass the budget of one chunk takes chunk 4, which holds more of
// the attention, and without it, or in a coarse layer, chunk 2.
TEST(LeoamPolicy, RowMassSumsTheFineLayersRows) {
  testing_util::KeysCatalog catalog(4, 1, 2);
  catalog.with_key_signs();
  catalog.set_keys(0, 32, {0, 0});
  catalog.set_keys(8, 9, {4, 0});
  catalog.set_keys(9, 12, {-4, 0});
  catalog.set_keys(16, 20, {3, 0});
  const std::vector<float> q = {1, 0};
  PolicyOptions options = fixed_chunks();
  const SelectionQuery fine = fine_query(q);
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{16, 20}}));  // the default
  EXPECT_EQ(select_ok(*policy("leoam", options), make_query(q, 1, 1, 2, 4), catalog).ranges, (Ranges{{8, 12}}));
  options.adaptive = true;  // the same on the tree's 4-token leaves
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{16, 20}}));
  options.row_mass = false;
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{8, 12}}));
  options.adaptive = false;
  EXPECT_EQ(select_ok(*policy("leoam", options), fine, catalog).ranges, (Ranges{{8, 12}}));
}

// Desert fixture: q0 = (10, 0), q1 = (0, 10); sink and recent keys (1, 1), bound 10 for both
// heads; far keys 0. Per head, m = 10, near_lower = 8 tokens * e^0 = 8 and
// far_upper = 24 * e^-10 = 0.0011 < 0.01 * 8: a desert for both heads.
class LeoamDesert : public ::testing::Test {
 protected:
  LeoamDesert() : catalog_(4, 1, 2, 8) {
    catalog_.set_keys(0, 0, {1, 1});
    catalog_.set_keys(7, 0, {1, 1});
  }

  // On the store's fixed chunks (options.adaptive is set false).
  Result<Selection> select(PolicyOptions options, int64_t budget = 4) {
    options.adaptive = false;
    return policy("leoam", options)->select(make_query(q_, 2, 1, 2, budget), catalog_);
  }

  FakeCatalog catalog_;
  std::vector<float> q_ = {10, 0, 0, 10};
};

TEST_F(LeoamDesert, DetectedWhenFarKeysAreNegligible) {
  PolicyOptions options;
  options.adaptive = false;  // the store's fixed chunks
  const Selection s = select_ok(*policy("leoam", options), make_query(q_, 2, 1, 2, 4), catalog_);
  EXPECT_TRUE(s.desert);
  EXPECT_TRUE(s.ranges.empty());
  EXPECT_EQ(s.n_chunks_scored, 8);
  EXPECT_EQ(catalog_.loads(), (std::vector<Load>{{kPolicyLayer, 0, 8}}));  // every chunk, in one call
}

TEST_F(LeoamDesert, NotDetectedWhenOneFarChunkHasALargeBound) {
  catalog_.set_keys(3, 0, {1, 1});  // far_upper >= 4 tokens * e^0
  auto s = select({});
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(s->desert);
  EXPECT_EQ(s->ranges, (Ranges{{12, 16}}));
  EXPECT_EQ(s->n_chunks_scored, 8);
}

TEST_F(LeoamDesert, NeedsEveryQueryHead) {
  // Near keys (1, 0): head 1 now sees bound 0 everywhere, near_lower = 8 = far_upper / 3.
  catalog_.set_keys(0, 0, {1, 0});
  catalog_.set_keys(7, 0, {1, 0});
  auto s = select({});
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(s->desert);
  EXPECT_EQ(s->ranges, (Ranges{{4, 8}}));  // far bounds all tie at 0
}

TEST_F(LeoamDesert, OffByOption) {
  PolicyOptions options;
  options.desert = false;
  auto s = select(options);
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(s->desert);
  EXPECT_EQ(s->ranges, (Ranges{{4, 8}}));
  EXPECT_EQ(s->n_chunks_scored, 8);  // still every chunk: the near ones weigh in the mass shares
  EXPECT_EQ(catalog_.loads(), (std::vector<Load>{{kPolicyLayer, 0, 8}}));
}

// The shares' float exp keeps far_upper an upper bound where it underflows. q = (100, 0),
// (0, 100); the near chunks' boxes [-1, 1] bound q.k by 100 above and -100 below, so
// near_lower = 8 e^-200; the far keys 0 give far_upper = 24 e^-100, below a float's range
// (e^-87.3) but far above 0.01 near_lower: no desert.
TEST_F(LeoamDesert, NotDetectedWhenTheFarMassesUnderflowAFloat) {
  q_ = {100, 0, 0, 100};
  catalog_.set_box(0, 0, {-1, -1}, {1, 1});
  catalog_.set_box(7, 0, {-1, -1}, {1, 1});
  auto s = select({});
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(s->desert);
}

TEST_F(LeoamDesert, ThresholdIsDesertMass) {
  // q = (4, 0), (0, 4): far_upper = 24 * e^-4 = 0.44 against near_lower = 8.
  q_ = {4, 0, 0, 4};
  PolicyOptions options;
  options.desert_mass = 0.05;  // 0.44 >= 0.4
  auto s = select(options);
  ASSERT_TRUE(s.is_ok());
  EXPECT_FALSE(s->desert);
  options.desert_mass = 0.06;  // 0.44 < 0.48
  s = select(options);
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE(s->desert);
}

}  // namespace
}  // namespace leoam::sparse
