#include "sparse/sparse_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/tiered_kv_cache.h"
#include "model/llama_forward.h"
#include "keys_catalog.h"
#include "small_model_test.h"

namespace leoam::sparse {
namespace {

AttentionShape shape_of(int n_layer) { return {n_layer, 4, 2, 8, 1.0f / std::sqrt(8.0f)}; }

std::vector<TokenRange> select(SparseAttention& s, int layer, int64_t pos) {
  const std::vector<float> q(4 * 8, 0.5f);
  ThreadPool pool(1);
  auto r = s.select(layer, pos, q.data(), pool);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : std::vector<TokenRange>{};
}

TEST(SparseAttention, FullAttendsToEveryPositionAndStreamingToSinkAndRecent) {
  SparseAttentionOptions o;
  o.n_sink = 4;
  o.n_recent = 16;
  o.policy = "full";
  auto full = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  EXPECT_EQ(select(**full, 0, 99), (std::vector<TokenRange>{{0, 100}}));
  EXPECT_EQ(select(**full, 1, 10), (std::vector<TokenRange>{{0, 11}}));

  o.policy = "streaming";
  o.budget = 20;  // far tokens, on top of the sink and the recent window
  auto streaming = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(streaming.is_ok());
  EXPECT_EQ(select(**streaming, 0, 99), (std::vector<TokenRange>{{0, 4}, {64, 100}}));
  EXPECT_EQ(select(**streaming, 0, 15), (std::vector<TokenRange>{{0, 16}}));  // everything is near
  const LayerSparseStats& s = (*streaming)->stats()[0];
  EXPECT_EQ(s.n_queries, 2);
  EXPECT_EQ(s.n_visible, 116);
  EXPECT_EQ(s.n_attended, 56);
}

// A budget is of the far tokens, on top of the sink and the recent window: a fraction of them or
// a count of them; a layer budget overrides it.
TEST(SparseAttention, AFractionIsAShareOfFarAndACountIsAFarCount) {
  SparseAttentionOptions o;
  o.n_sink = 4;
  o.n_recent = 16;
  o.policy = "streaming";  // its window stretches over the far budget: the ranges show the budget
  o.budget = 0.5;
  o.layer_budgets = {{1, 0.25}};
  auto s = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  // pos 99: far = [4, 84), 80 tokens; half of them (40) join the recent window.
  EXPECT_EQ(select(**s, 0, 99), (std::vector<TokenRange>{{0, 4}, {44, 100}}));
  // pos 30: far = [4, 15), 11 tokens: ceil(5.5) = 6.
  EXPECT_EQ(select(**s, 0, 30), (std::vector<TokenRange>{{0, 4}, {9, 31}}));
  EXPECT_EQ(select(**s, 1, 99), (std::vector<TokenRange>{{0, 4}, {64, 100}}));  // a quarter: 20
  o.budget = 30;  // far tokens
  o.layer_budgets.clear();
  auto count = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(count.is_ok());
  EXPECT_EQ(select(**count, 0, 99), (std::vector<TokenRange>{{0, 4}, {54, 100}}));
  // A count of 2 (at most 68 was all sink and recent window, before counts were of far tokens)
  // still picks 2 far tokens; a count past the far tokens takes them all.
  o.budget = 2;
  auto two = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(select(**two, 0, 99), (std::vector<TokenRange>{{0, 4}, {82, 100}}));
  o.budget = 1e300;
  auto all = SparseAttention::create(o, nullptr, shape_of(2));
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(select(**all, 0, 99), (std::vector<TokenRange>{{0, 100}}));
}

// Chunks a policy keeps picking become more important to the store's eviction.
TEST(SparseAttention, PickedChunksTellTheStoreTheyMatter) {
  testing_util::TempDir dir;
  TieredKvCacheOptions t;
  t.shape = {2, 2, 8, 512};
  t.chunk_tokens = 8;
  t.n_recent_tokens = 16;
  t.dir = dir.path();
  t.device_budget_bytes = uint64_t{1} << 20;
  auto kv = TieredKvCache::create(t);
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  std::vector<float> rows(200 * 16, 0.0f);
  for (int64_t p = 40; p < 48; ++p) std::fill_n(rows.begin() + p * 16, 16, 1.0f);  // chunk 5 aligns with q
  for (int il = 0; il < 2; ++il) ASSERT_TRUE((*kv)->append(il, 0, 200, rows.data(), rows.data()).is_ok());

  SparseAttentionOptions o;
  o.policy = "quest";
  o.budget = 8;  // one far chunk of 8, beside 4 sink and 16 recent tokens
  o.n_recent = 16;
  auto s = SparseAttention::create(o, kv->get(), shape_of(2));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(select(**s, 1, 199), (std::vector<TokenRange>{{0, 4}, {40, 48}, {184, 200}}));
  }
  EXPECT_EQ((*kv)->residency().find({1, 5})->importance, 3.0f);
  EXPECT_EQ((*kv)->residency().find({1, 6})->importance, 0.0f);
  EXPECT_EQ((*kv)->residency().find({0, 5})->importance, 0.0f);  // another layer
}

// A failed batch rolls the context back (LlamaForward truncates the store, then the selector):
// leoam's trees, grown over the rolled-back position, must not keep its keys. Layer 2 (leaves of
// 64 at a budget of 256), far [4, 596) at position 599: the edge leaf [576, 600) overlaps far. A
// huge key at 599 makes it the best leaf; after the rollback 599 holds a zero key, and the leaf
// with the keys (1, 0) wins, as for a selector that never saw the first key.
TEST(SparseAttention, ARollbackForgetsWhatThePolicyLearnedPastIt) {
  testing_util::KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 600, {0, 0});
  catalog.set_keys(64, 128, {1, 0});
  catalog.set_keys(599, 600, {100, 0});
  SparseAttentionOptions o;
  o.policy = "leoam";
  o.n_sink = 4;
  o.n_recent = 4;
  o.budget = 256;
  o.policy_options.desert = false;
  const AttentionShape shape{3, 1, 1, 2, 1.0f / std::sqrt(2.0f)};
  const std::vector<float> q = {1, 0};
  ThreadPool pool(1);
  auto pick = [&](SparseAttention& s) {
    auto r = s.select(2, 599, q.data(), pool);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? *r : std::vector<TokenRange>{};
  };
  auto seen = SparseAttention::create(o, &catalog, shape);
  ASSERT_TRUE(seen.is_ok()) << seen.status().message();
  const std::vector<TokenRange> with_huge = pick(**seen);
  EXPECT_TRUE(std::any_of(with_huge.begin(), with_huge.end(), [](const TokenRange& r) { return r.end == 600; }));

  catalog.set_keys(599, 600, {0, 0});  // the retried token's key
  (*seen)->truncate(599);
  auto fresh = SparseAttention::create(o, &catalog, shape);
  ASSERT_TRUE(fresh.is_ok());
  const std::vector<TokenRange> want = pick(**fresh);
  EXPECT_NE(want, with_huge);
  EXPECT_EQ(pick(**seen), want);
}

// A forecast (the prompt's last query) is what the policy would select at that position, far
// part only, for the policies that can say without side effects (leoam, quest); and it teaches
// the policy nothing: the steps after it select as if it had not been made. h2o, whose selection
// evicts, forecasts nothing.
TEST(SparseAttention, AForecastIsTheSelectionAndTeachesThePolicyNothing) {
  testing_util::KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 640, {0, 0});
  catalog.set_keys(64, 128, {1, 0});
  catalog.set_keys(300, 310, {0.5f, 0.5f});
  catalog.set_keys(500, 520, {0.8f, -0.2f});
  const AttentionShape shape{3, 1, 1, 2, 1.0f / std::sqrt(2.0f)};
  const std::vector<float> q = {1, 0};
  ThreadPool pool(1);
  for (const std::string policy : {"leoam", "quest"}) {
    SCOPED_TRACE(policy);
    SparseAttentionOptions o;
    o.policy = policy;
    o.n_sink = 4;
    o.n_recent = 4;
    o.budget = 96;
    o.policy_options.desert = false;
    auto make = [&] { return std::move(SparseAttention::create(o, &catalog, shape)).value(); };
    for (int layer = 0; layer < 3; ++layer) {
      auto fresh = make();
      auto r = fresh->select(layer, 599, q.data(), pool);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      const std::vector<TokenRange> far(r->begin() + 1, r->end() - 1);  // without the sink and the recent window
      ASSERT_FALSE(far.empty());
      auto forecaster = make();
      auto f = forecaster->forecast(layer, 599, 600, q.data(), pool, true);
      ASSERT_TRUE(f.is_ok()) << f.status().message();
      EXPECT_EQ(*f, far) << "layer " << layer;
      EXPECT_EQ(forecaster->total().n_queries, 0);  // not a decode step
      // The same decode steps after the forecast and without it.
      auto plain = make();
      for (int64_t pos = 600; pos < 640; ++pos) {
        auto a = forecaster->select(layer, pos, q.data(), pool);
        auto b = plain->select(layer, pos, q.data(), pool);
        ASSERT_TRUE(a.is_ok() && b.is_ok());
        EXPECT_EQ(*a, *b) << "layer " << layer << " position " << pos;
      }
    }
  }
  SparseAttentionOptions h;
  h.policy = "h2o";
  h.budget = 96;
  auto h2o = SparseAttention::create(h, &catalog, shape);
  ASSERT_TRUE(h2o.is_ok());
  auto f = (*h2o)->forecast(1, 599, 600, q.data(), pool, true);
  ASSERT_TRUE(f.is_ok());
  EXPECT_TRUE(f->empty());
}

TEST(SparseAttention, RejectsBadOptions) {
  SparseAttentionOptions o;
  o.policy = "nope";
  EXPECT_NE(SparseAttention::create(o, nullptr, shape_of(2)).status().message().find("leoam"), std::string::npos);
  o.policy = "quest";
  EXPECT_NE(SparseAttention::create(o, nullptr, shape_of(2)).status().message().find("tiered"), std::string::npos);
  o.policy = "full";
  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL, 2.5}) {
    o.budget = bad;
    const Status st = SparseAttention::create(o, nullptr, shape_of(2)).status();
    EXPECT_NE(st.message().find(bad == 2.5 ? "must be whole" : "positive finite"), std::string::npos) << bad;
    o.budget = 0.1;
    o.layer_budgets = {{1, bad}};
    EXPECT_NE(SparseAttention::create(o, nullptr, shape_of(2)).status().message().find("layer 1"),
              std::string::npos)
        << bad;
    o.layer_budgets.clear();
  }
  o.layer_budgets = {{2, 0.5}};
  EXPECT_NE(SparseAttention::create(o, nullptr, shape_of(2)).status().message().find("layer 2"), std::string::npos);
}

// SmallModelTest with a tiered store per run and a selector over it.
class SparseForwardTest : public SmallModelTest {
 protected:
  // A forward context over a fresh tiered store (chunks of 8, `n_recent` pinned), with `policy` at
  // `budget` selecting its decode steps (no policy: no selector), which *selector then points to.
  std::unique_ptr<ForwardContext> context(const std::string& policy, double budget, int n_recent, int n_batch,
                                          std::unique_ptr<SparseAttention>& selector,
                                          uint64_t memory_budget_bytes = 0) {
    TieredKvCacheOptions t;
    t.shape = {spec_.n_layer, spec_.n_head_kv, 16, spec_.n_ctx};
    t.chunk_tokens = 8;
    t.n_recent_tokens = n_recent;
    t.dir = dir_.path();
    t.device_budget_bytes = uint64_t{64} << 20;
    auto kv = TieredKvCache::create(t);
    EXPECT_TRUE(kv.is_ok()) << kv.status().message();
    if (!kv.is_ok()) return nullptr;
    selector.reset();
    if (!policy.empty()) {
      SparseAttentionOptions o;
      o.policy = policy;
      o.budget = budget;
      o.n_recent = n_recent;
      o.policy_options.model = model_.get();
      o.memory_budget_bytes = memory_budget_bytes;
      auto s = SparseAttention::create(o, kv->get(), {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f});
      EXPECT_TRUE(s.is_ok()) << s.status().message();
      if (s.is_ok()) selector = std::move(s).value();
    }
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.n_batch = n_batch;
    fo.selector = selector.get();
    auto ctx = LlamaForward::create(*model_, fo, std::move(kv).value());
    EXPECT_TRUE(ctx.is_ok());
    return ctx.is_ok() ? std::move(ctx).value() : nullptr;
  }
};

// The decode logits of 10 steps after a 150-token prompt, and the selector's per-layer stats.
struct DecodeRun {
  std::vector<std::vector<float>> rows;
  std::vector<LayerSparseStats> stats;
};

class SparseDecodeTest : public SparseForwardTest {
 protected:
  DecodeRun run(const std::string& policy, double budget) {
    std::mt19937 rng(3);
    const std::vector<int32_t> prompt = random_tokens(150, rng);
    const std::vector<int32_t> decode = random_tokens(10, rng);
    std::unique_ptr<SparseAttention> selector;
    std::unique_ptr<ForwardContext> ctx = context(policy, budget, 16, 512, selector);
    DecodeRun r;
    if (ctx == nullptr) return r;
    std::vector<float> logits;
    EXPECT_TRUE(ctx->eval(prompt, false, logits).is_ok());
    for (int32_t tok : decode) {
      const int32_t one[1] = {tok};
      EXPECT_TRUE(ctx->eval(one, false, logits).is_ok());
      r.rows.push_back(logits);
    }
    if (selector != nullptr) r.stats = selector->stats();
    return r;
  }
};

// A budget of every far token skips the policy (nothing to choose): full attention's logits, and
// no chunk scored.
TEST_F(SparseDecodeTest, AFullBudgetSkipsThePolicyAndGivesTheLogitsOfFullAttention) {
  const auto want = run("", 1.0).rows;
  for (const char* policy : {"full", "streaming", "quest", "leoam"}) {
    const DecodeRun r = run(policy, 1.0);
    EXPECT_EQ(r.rows, want) << policy;
    for (const LayerSparseStats& s : r.stats) {
      EXPECT_EQ(s.n_attended, s.n_visible) << policy;
      EXPECT_EQ(s.n_chunks_scored, 0) << policy;
    }
  }
}

// Just below a full budget (ceil(0.99 far) = far - 1 far tokens: far is 130..139) each policy runs
// and leaves out its least wanted unit, and only that (every other fits): streaming the oldest far
// token, quest its lowest-ranked chunk (a far part of 4 or 8 tokens, chunks of 8), leoam its
// lowest-ranked leaf (at most 32 tokens: four leaves fit the budget). The logits leave full
// attention's.
TEST_F(SparseDecodeTest, JustBelowAFullBudgetEachPolicyLeavesOutItsLowestRankedUnit) {
  const auto want = run("", 1.0).rows;
  for (const auto& [policy, most] : {std::pair<std::string, int64_t>{"streaming", 1}, {"quest", 8}, {"leoam", 32}}) {
    SCOPED_TRACE(policy);
    const DecodeRun r = run(policy, 0.99);
    EXPECT_NE(r.rows, want);
    ASSERT_EQ(r.stats.size(), static_cast<size_t>(spec_.n_layer));
    for (const LayerSparseStats& s : r.stats) {
      EXPECT_EQ(s.n_queries, 10);
      const int64_t left_out = s.n_visible - s.n_attended;
      EXPECT_GE(left_out, 10);  // at least one token a step
      EXPECT_LE(left_out, 10 * most);
      if (policy == "streaming") {
        EXPECT_EQ(s.n_chunks_scored, 0);
      } else {
        EXPECT_GT(s.n_chunks_scored, 0);
      }
    }
  }
}

// What each policy keeps about the KV after a 150-token prompt and 10 decoded tokens (160
// positions, 2 layers, 2 KV heads of 16: E = 32 key channels a position) is reported, at least
// what its state must hold: leoam its trees (a box of 2E floats a leaf of at most 64 tokens, a
// sign bit a key channel), h2o a mass a position, infinigen a partial key column a position,
// oracle every key; quest keeps nothing but reads the far chunks' boxes each step (peak). The
// chunks' pick counts are the store's (KvCatalog::raise_importance), not the policies'.
TEST_F(SparseDecodeTest, EveryPolicyReportsWhatItKeepsAboutTheKv) {
  constexpr uint64_t kLayers = 2, kPositions = 160, kE = 32;
  const std::map<std::string, uint64_t> least_kept = {
      {"leoam", kLayers * (kPositions * kE / 8 + 3 * 2 * kE * 4)},
      {"h2o", kLayers * kPositions * 4},
      {"h2o-chunked", kLayers * kPositions * 4},
      {"infinigen", kLayers * kPositions * 4},
      {"oracle", kLayers * kPositions * kE * 4},
      {"quest", 0},
      {"streaming", 0}};
  for (const auto& [policy, least] : least_kept) {
    SCOPED_TRACE(policy);
    std::mt19937 rng(3);
    std::unique_ptr<SparseAttention> selector;
    std::unique_ptr<ForwardContext> ctx = context(policy, 0.25, 16, 512, selector);
    ASSERT_NE(ctx, nullptr);
    std::vector<float> logits;
    ASSERT_TRUE(ctx->eval(random_tokens(150, rng), false, logits).is_ok());
    for (int32_t tok : random_tokens(10, rng)) {
      const int32_t one[1] = {tok};
      ASSERT_TRUE(ctx->eval(one, false, logits).is_ok());
    }
    const PolicyMemory m = selector->memory();
    EXPECT_GE(m.bytes, least);
    EXPECT_GE(m.peak_bytes, m.bytes);
    if (policy == "quest") {
      EXPECT_GE(m.peak_bytes, 16 * 2 * kE * 4) << "the boxes of 16 far chunks or more";
    }
  }
}

// Past --kv-meta-mb's budget the call that went past fails (kResourceExhausted), naming the
// flag: leoam as its trees grow in the decode steps, infinigen as its partial keys grow in the
// prompt. A budget of exactly the peak an unbounded run reached lets the same run through.
TEST_F(SparseDecodeTest, APolicyPastItsMemoryBudgetStopsTheRun) {
  for (const std::string policy : {"leoam", "infinigen"}) {
    SCOPED_TRACE(policy);
    const auto attempt = [&](uint64_t budget, uint64_t* peak) {
      std::mt19937 rng(3);
      std::unique_ptr<SparseAttention> selector;
      std::unique_ptr<ForwardContext> ctx = context(policy, 0.25, 16, 512, selector, budget);
      EXPECT_NE(ctx, nullptr);
      if (ctx == nullptr) return internal_error("no context");
      std::vector<float> logits;
      LEOAM_RETURN_IF_ERROR(ctx->eval(random_tokens(150, rng), false, logits));
      for (int32_t tok : random_tokens(10, rng)) {
        const int32_t one[1] = {tok};
        LEOAM_RETURN_IF_ERROR(ctx->eval(one, false, logits));
      }
      if (peak != nullptr) *peak = selector->memory().peak_bytes;
      return Status::ok();
    };
    uint64_t peak = 0;
    ASSERT_TRUE(attempt(0, &peak).is_ok());
    ASSERT_GT(peak, 1000u);
    EXPECT_TRUE(attempt(peak, nullptr).is_ok());
    const Status st = attempt(peak - 1, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
    EXPECT_EQ(st.setting(), Setting::kKvMetaBudget) << st.message();
  }
}

// A selector that hides the forecast of the prompt's last query (the store prefetches nothing)
// and, with hide_stored, SelectorNeeds::stored too, as before the prompt built leoam's trees:
// they are then built at the first decode step, from the abstracts read back.
class Blinded final : public AttentionSelector {
 public:
  Blinded(SparseAttention& inner, bool hide_stored) : inner_(inner), hide_stored_(hide_stored) {}
  Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float* q, ThreadPool& pool) override {
    return inner_.select(layer, pos, q, pool);
  }
  SelectorNeeds needs() const override {
    SelectorNeeds n = inner_.needs();
    n.stored = n.stored && !hide_stored_;
    return n;
  }
  Status observe_stored(int layer, int64_t n_tokens) override { return inner_.observe_stored(layer, n_tokens); }

 private:
  SparseAttention& inner_;
  bool hide_stored_;
};

// leoam over a tiered store of 8-token chunks, a prompt, then decode steps.
class LeoamStoreTest : public SparseForwardTest {
 protected:
  struct Run {
    std::vector<std::vector<float>> rows;  // each step's logits
    uint64_t first_step_disk_bytes = 0;
    uint64_t prefetched = 0;  // disk bytes read ahead (KvStats::disk_bytes_prefetched) after the prompt
    int64_t attended = 0;
    ReadAheadStats read_ahead;
  };
  // `device_chunks`: the device tier's room besides its pinned chunks; `wrap` picks the selector
  // the forward pass gets from leoam's (itself when null).
  Run run(const std::string& name, uint64_t working_set, int64_t device_chunks, double budget, int64_t n_prompt,
          int n_steps, const std::function<std::unique_ptr<AttentionSelector>(SparseAttention&)>& wrap) {
    Run r;
    TieredKvCacheOptions t = tiered_options(name, device_chunks);
    t.read_ahead_bytes = pipeline_ ? uint64_t{1} << 20 : 0;
    auto kv = TieredKvCache::create(t);
    EXPECT_TRUE(kv.is_ok()) << kv.status().message();
    if (!kv.is_ok()) return r;
    TieredKvCache* store = kv->get();
    SparseAttentionOptions o;
    o.policy = "leoam";
    o.budget = budget;
    o.n_recent = 16;
    auto s = SparseAttention::create(o, store, {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f});
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (!s.is_ok()) return r;
    std::unique_ptr<AttentionSelector> wrapped = wrap ? wrap(**s) : nullptr;
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.n_batch = 64;
    fo.prefill_working_set_bytes = working_set;
    fo.pipeline = pipeline_;
    fo.selector = wrapped != nullptr ? wrapped.get() : s->get();
    auto ctx = LlamaForward::create(*model_, fo, std::move(kv).value());
    EXPECT_TRUE(ctx.is_ok());
    if (!ctx.is_ok()) return r;
    std::mt19937 rng(8);
    std::vector<float> logits;
    EXPECT_TRUE((*ctx)->eval(random_tokens(n_prompt, rng), false, logits).is_ok());
    r.prefetched = store->stats().disk_bytes_prefetched;
    const uint64_t before = store->stats()[Tier::kDisk].bytes_read;
    for (int step = 0; step < n_steps; ++step) {
      const int32_t one[1] = {random_tokens(1, rng)[0]};
      EXPECT_TRUE((*ctx)->eval(one, false, logits).is_ok());
      if (step == 0) r.first_step_disk_bytes = store->stats()[Tier::kDisk].bytes_read - before;
      r.rows.push_back(logits);
    }
    EXPECT_EQ(store->stats().disk_bytes_prefetched, r.prefetched);  // only the prompt reads ahead
    r.attended = (*s)->total().n_attended;
    r.read_ahead = store->stats().read_ahead;
    return r;
  }
  bool pipeline_ = false;  // run() decodes in the pipeline (ForwardOptions::pipeline)
  static std::unique_ptr<AttentionSelector> forecast_blind(SparseAttention& s) {
    return std::make_unique<Blinded>(s, false);
  }
  static std::unique_ptr<AttentionSelector> prompt_blind(SparseAttention& s) {
    return std::make_unique<Blinded>(s, true);
  }
};

// leoam's trees grow while the prompt is written (the layered prefill and the batch order alike),
// from the abstracts still in memory: the first decode step reads fewer abstract bytes back from
// disk, and every step selects, and so computes, exactly as with trees built at the first step.
TEST_F(LeoamStoreTest, TreesBuiltFromThePromptSelectAsTreesBuiltAtTheFirstStep) {
  for (const uint64_t working_set : {uint64_t{0}, uint64_t{64} << 20}) {
    SCOPED_TRACE(working_set == 0 ? "batch order" : "layered prefill");
    const Run seeing = run("seeing", working_set, 0, 0.25, 200, 8, forecast_blind);
    const Run blind = run("blind", working_set, 0, 0.25, 200, 8, prompt_blind);
    ASSERT_EQ(seeing.rows.size(), 8u);
    EXPECT_EQ(seeing.rows, blind.rows);
    EXPECT_EQ(seeing.attended, blind.attended);
    EXPECT_LT(seeing.first_step_disk_bytes, blind.first_step_disk_bytes);
  }
}

// The prompt's last query forecasts, per layer, what the first decode step reads, and the store
// brings it up before the later layers push it to disk (layered prefill and batch order alike):
// the first step reads less from disk, what was read ahead is counted, and every step attends as
// many positions as without the forecast, to the same logits up to float rounding (the chunks sit
// in other tiers, so attention merges its batches in another order).
TEST_F(LeoamStoreTest, ThePromptsLastQueryPrefetchesWhatTheFirstStepReads) {
  for (const uint64_t working_set : {uint64_t{0}, uint64_t{64} << 20}) {
    SCOPED_TRACE(working_set == 0 ? "batch order" : "layered prefill");
    const Run forecast = run("forecast", working_set, 16, 0.1, 240, 6, nullptr);
    const Run blind = run("blind", working_set, 16, 0.1, 240, 6, forecast_blind);
    ASSERT_EQ(forecast.rows.size(), 6u);
    ASSERT_EQ(blind.rows.size(), 6u);
    for (size_t step = 0; step < 6; ++step) expect_logits_near(forecast.rows[step], blind.rows[step]);
    EXPECT_EQ(forecast.attended, blind.attended);
    // The layered prefill can hold the forecast's chunks before they reach the disk: then none
    // is read ahead, and the first step still reads less.
    if (working_set == 0) {
      EXPECT_GT(forecast.prefetched, 0u);
    }
    EXPECT_EQ(blind.prefetched, 0u);
    EXPECT_LT(forecast.first_step_disk_bytes, blind.first_step_disk_bytes);
  }
}

// The decode pipeline reads the next layer's speculated chunks ahead, and the layer still selects
// with its own query: the tokens attended are those of the unpipelined decode, and the logits too
// up to float rounding (chunks read ahead sit in other tiers, so attention merges its batches in
// another order).
TEST_F(LeoamStoreTest, APipelinedDecodeComputesAsAnUnpipelinedOne) {
  const Run plain = run("plain", 0, 4, 0.2, 240, 10, nullptr);
  pipeline_ = true;
  const Run piped = run("piped", 0, 4, 0.2, 240, 10, nullptr);
  ASSERT_EQ(piped.rows.size(), 10u);
  ASSERT_EQ(plain.rows.size(), 10u);
  for (size_t step = 0; step < 10; ++step) expect_logits_near(piped.rows[step], plain.rows[step]);
  EXPECT_EQ(piped.attended, plain.attended);
  EXPECT_EQ(plain.read_ahead.jobs, 0u);
  EXPECT_GT(piped.read_ahead.jobs, 0u);
  EXPECT_GT(piped.read_ahead.chunks_staged, 0u);
  EXPECT_LE(piped.read_ahead.chunks_used, piped.read_ahead.chunks_staged);
}

// Full attention in the pipeline reads each next layer's past ahead while this layer attends
// (FlexGen's schedule): the logits are the unpipelined decode's, the disk bytes read are the same,
// and layer 1's disk chunks come from the staging, every one staged used. One is missed in these
// 6 steps: a chunk that leaves the recent window goes to disk in layer 1 after that layer's read
// ahead began.
TEST_F(SparseForwardTest, FullAttentionReadsTheNextLayerAheadInThePipeline) {
  struct Out {
    std::vector<std::vector<float>> rows;
    KvStats stats;
    int64_t attended = 0;  // ForwardContext::decode_positions_attended
  };
  const auto run = [&](bool pipeline) {
    Out out;
    TieredKvCacheOptions t = tiered_options(pipeline ? "piped" : "plain", 0);
    t.read_ahead_bytes = pipeline ? uint64_t{1} << 20 : 0;
    auto kv = TieredKvCache::create(t);
    EXPECT_TRUE(kv.is_ok()) << kv.status().message();
    if (!kv.is_ok()) return out;
    TieredKvCache* store = kv->get();
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.n_batch = 64;
    fo.pipeline = pipeline;
    auto ctx = LlamaForward::create(*model_, fo, std::move(kv).value());
    EXPECT_TRUE(ctx.is_ok());
    if (!ctx.is_ok()) return out;
    std::mt19937 rng(8);
    std::vector<float> logits;
    EXPECT_TRUE((*ctx)->eval(random_tokens(200, rng), false, logits).is_ok());
    for (int step = 0; step < 6; ++step) {
      const int32_t one[1] = {random_tokens(1, rng)[0]};
      EXPECT_TRUE((*ctx)->eval(one, false, logits).is_ok());
      out.rows.push_back(logits);
    }
    out.stats = store->stats();
    out.attended = (*ctx)->decode_positions_attended();
    return out;
  };
  const Out plain = run(false);
  const Out piped = run(true);
  ASSERT_EQ(piped.rows.size(), 6u);
  for (size_t step = 0; step < 6; ++step) expect_logits_near(piped.rows[step], plain.rows[step]);
  EXPECT_EQ(plain.stats.read_ahead.jobs, 0u);
  EXPECT_EQ(piped.stats.read_ahead.jobs, 6u);  // layer 1 of each step; layer 0 has no layer before it
  EXPECT_GT(piped.stats.read_ahead.chunks_staged, 0u);
  EXPECT_EQ(piped.stats.read_ahead.chunks_used, piped.stats.read_ahead.chunks_staged);
  EXPECT_EQ(piped.stats.read_ahead.chunks_missed, 1u);
  EXPECT_EQ(piped.stats[Tier::kDisk].bytes_read, plain.stats[Tier::kDisk].bytes_read);
  // Every visible position of both layers at positions 200..205, counted where attention ran.
  EXPECT_EQ(plain.attended, 2 * (201 + 202 + 203 + 204 + 205 + 206));
  EXPECT_EQ(piped.attended, plain.attended);
}

TEST_F(SparseForwardTest, APromptAttendsInFullHoweverItsBatchesFall) {
  // 2 batches of 32 and one token more: that token must not run as a decode step.
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_tokens(65, rng);
  // The prompt's last logits under streaming at 4 far tokens (or no selector), and the queries
  // the selector saw after the prompt and after one decoded token.
  struct Run {
    std::vector<float> prompt_logits;
    int64_t prompt_queries = 0;
    int64_t decode_queries = 0;
  };
  auto run = [&](const std::string& policy) -> Run {
    std::unique_ptr<SparseAttention> selector;
    std::unique_ptr<ForwardContext> ctx = context(policy, 4, 8, 32, selector);
    Run r;
    if (ctx == nullptr) return r;
    EXPECT_TRUE(ctx->eval(prompt, false, r.prompt_logits).is_ok());
    if (selector != nullptr) r.prompt_queries = selector->total().n_queries;
    std::vector<float> logits;
    const int32_t one[1] = {prompt[0]};
    EXPECT_TRUE(ctx->eval(one, false, logits).is_ok());
    if (selector != nullptr) r.decode_queries = selector->total().n_queries;
    return r;
  };
  const Run full = run("");
  const Run sparse = run("streaming");
  EXPECT_EQ(sparse.prompt_queries, 0) << "no prompt position is a decode step";
  EXPECT_EQ(sparse.prompt_logits, full.prompt_logits) << "the prompt's last position attends in full";
  EXPECT_GT(sparse.decode_queries, 0) << "a decoded token goes through the selector";
}

}  // namespace
}  // namespace leoam::sparse
