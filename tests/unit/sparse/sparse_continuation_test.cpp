// A prompt batch continuing a stored past (ForwardOptions::sparse_continuation): with a budget
// that covers the past it is the dense prefill bit for bit; with a small one its rows attend the
// sink, the policy's picks for the last row and the recent window and themselves, reading fewer
// of the past's chunks from disk; a first batch (no past) is never sparse.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kv/tiered_kv_cache.h"
#include "model/llama_forward.h"
#include "small_model_test.h"
#include "sparse/sparse_attention.h"

namespace leoam::sparse {
namespace {

class SparseContinuationTest : public SmallModelTest {
 protected:
  std::unique_ptr<TieredKvCache> tiered(const std::string& name) const { return tiered_store(name, 0); }
  std::unique_ptr<SparseAttention> leoam(TieredKvCache* store, double budget) const {
    SparseAttentionOptions o;
    o.policy = "leoam";
    o.budget = budget;
    o.n_recent = 16;
    return std::move(SparseAttention::create(o, store, {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f}))
        .value();
  }
  // The logits of `question` after `document`, evaluated as two prompts into a tiered store, and
  // the disk bytes the question's evaluation read.
  struct Answer {
    std::vector<float> logits;
    uint64_t disk_read = 0;
  };
  Answer ask(const std::string& name, double budget, bool sparse, const std::vector<int32_t>& document,
             const std::vector<int32_t>& question) {
    std::unique_ptr<TieredKvCache> store = tiered(name);
    TieredKvCache* kv = store.get();
    std::unique_ptr<SparseAttention> selector = leoam(kv, budget);
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.n_batch = 64;
    fo.selector = selector.get();
    fo.sparse_continuation = sparse;
    auto ctx = std::move(LlamaForward::create(*model_, fo, std::move(store))).value();
    Answer a;
    std::vector<float> ignored;
    EXPECT_TRUE(ctx->eval(document, false, ignored).is_ok());
    const uint64_t before = kv->stats()[Tier::kDisk].bytes_read;
    EXPECT_TRUE(ctx->eval(question, false, a.logits).is_ok());
    a.disk_read = kv->stats()[Tier::kDisk].bytes_read - before;
    return a;
  }
};

TEST_F(SparseContinuationTest, AWholeBudgetIsTheDensePrefillAndASmallOneReadsLess) {
  std::mt19937 rng(9);
  const std::vector<int32_t> document = random_tokens(200, rng);
  const std::vector<int32_t> question = random_tokens(12, rng);

  const Answer dense = ask("dense", 0.1, false, document, question);
  const Answer whole = ask("whole", 1.0, true, document, question);
  {
    SCOPED_TRACE("a budget that covers the past chooses nothing");
    expect_logits_near(whole.logits, dense.logits);
  }

  const Answer sparse = ask("sparse", 0.1, true, document, question);
  ASSERT_EQ(sparse.logits.size(), dense.logits.size());
  for (float v : sparse.logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(sparse.logits, dense.logits) << "the rows attended fewer positions";
  EXPECT_GT(dense.disk_read, 0u);
  EXPECT_LT(sparse.disk_read, dense.disk_read) << "the past read selectively";
}

TEST_F(SparseContinuationTest, TheRangesHoldTheSinkThePicksAndTheRowsWhole) {
  std::unique_ptr<TieredKvCache> store = tiered("ranges");
  std::unique_ptr<SparseAttention> selector = leoam(store.get(), 0.1);
  std::mt19937 rng(3);
  const int64_t past = 200, rows = 12;
  const int64_t row = spec_.n_head_kv * 16;
  const int64_t n = past + rows;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(n * row)), v(k.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (int il = 0; il < spec_.n_layer; ++il) {
    ASSERT_TRUE(store->append(il, 0, n, k.data(), v.data()).is_ok());
    ASSERT_TRUE(selector->observe_stored(il, n).is_ok());
  }
  std::vector<float> q(static_cast<size_t>(spec_.n_head * 16));
  for (float& x : q) x = normal(rng);
  ThreadPool pool(1);
  auto ranges = selector->select_continuation(1, past, rows, q.data(), pool);
  ASSERT_TRUE(ranges.is_ok()) << ranges.status().message();
  ASSERT_FALSE(ranges->empty());
  EXPECT_EQ(ranges->front().begin, 0) << "the sink";
  EXPECT_EQ(ranges->back().end, n);
  EXPECT_LE(ranges->back().begin, past) << "the rows whole";
  int64_t attended = 0;
  for (size_t i = 0; i < ranges->size(); ++i) {
    EXPECT_LT((*ranges)[i].begin, (*ranges)[i].end);
    if (i > 0) {
      EXPECT_GT((*ranges)[i].begin, (*ranges)[i - 1].end) << "sorted and disjoint";
    }
    attended += (*ranges)[i].size();
  }
  EXPECT_LT(attended, n / 2) << "a tenth of the far past, the sink, the recent window and the rows";
  // No past: nothing to choose from.
  auto first = selector->select_continuation(1, 0, rows, q.data(), pool);
  ASSERT_TRUE(first.is_ok());
  EXPECT_TRUE(first->empty());
}

}  // namespace
}  // namespace leoam::sparse
