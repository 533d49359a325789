// The oracle policy: its selection against a ranking by exact attention mass computed here with
// plain loops in double, the GQA rule (a chunk scores its best KV head), and its errors. The
// shape comes from SmallModelTest's model: 2 layers, 4 query heads over 2 KV heads of 16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "keys_catalog.h"
#include "small_model_test.h"
#include "sparse/chunk_ranking.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

constexpr int kOracleHeads = 4;
constexpr int kKvHeads = 2;
constexpr int kDim = 16;
constexpr int kOracleRow = kKvHeads * kDim;

class OraclePolicyTest : public SmallModelTest {
 protected:
  void SetUp() override {
    SmallModelTest::SetUp();
    PolicyOptions o;
    o.model = model_.get();
    auto p = make_selection_policy("oracle", o);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    oracle_ = std::move(p).value();
    EXPECT_TRUE(oracle_->needs().keys);
  }

  // Keys of `layer`, positions [0, n): observed by the oracle, and sized into the catalog.
  void observe(int layer, const std::vector<float>& keys) {
    const int64_t n = static_cast<int64_t>(keys.size()) / kOracleRow;
    ASSERT_TRUE(oracle_->observe_keys(layer, 0, n, keys.data()).is_ok());
    catalog_.set_keys(0, n, std::vector<float>(kDim, 0.0f));
  }

  SelectionQuery query(int layer, const std::vector<float>& q, int64_t n_tokens, TokenRange far, int64_t budget) const {
    SelectionQuery s;
    s.layer = layer;
    s.n_tokens = n_tokens;
    s.q = q.data();
    s.n_head = kOracleHeads;
    s.n_head_kv = kKvHeads;
    s.head_dim = kDim;
    s.scale = 0.25f;
    s.far = far;
    s.budget_tokens = budget;
    return s;
  }

  testing_util::KeysCatalog catalog_{8, kKvHeads, kDim};
  std::unique_ptr<SelectionPolicy> oracle_;
};

// The reference: per query head the softmax over [0, n) in double; per KV head its query heads'
// mass in each chunk's part of far, summed; a chunk scores its best KV head's mass per far token;
// chunks in decreasing score (ties to the lower index) while their far tokens fit the budget, and
// the best one even when it alone does not.
std::vector<TokenRange> reference(const std::vector<float>& keys, const SelectionQuery& s, int chunk) {
  const int group = s.n_head / s.n_head_kv;
  const ChunkSpan span = chunks_overlapping(s.far, chunk);
  std::vector<double> mass(static_cast<size_t>(s.n_head_kv * span.size()), 0.0);
  for (int h = 0; h < s.n_head; ++h) {
    std::vector<double> p(static_cast<size_t>(s.n_tokens));
    for (int64_t t = 0; t < s.n_tokens; ++t) {
      double dot = 0.0;
      for (int c = 0; c < s.head_dim; ++c) dot += double{s.q[h * s.head_dim + c]} * keys[t * kOracleRow + (h / group) * kDim + c];
      p[t] = s.scale * dot;
    }
    const double m = *std::max_element(p.begin(), p.end());
    double total = 0.0;
    for (double& x : p) total += (x = std::exp(x - m));
    for (int64_t i = 0; i < span.size(); ++i) {
      const TokenRange part = chunk_part(span.i0 + i, s.far, chunk);
      for (int64_t t = part.begin; t < part.end; ++t) mass[(h / group) * span.size() + i] += p[t] / total;
    }
  }
  std::vector<double> score(static_cast<size_t>(span.size()));
  for (int64_t i = 0; i < span.size(); ++i) {
    double best = 0.0;
    for (int g = 0; g < s.n_head_kv; ++g) best = std::max(best, mass[g * span.size() + i]);
    score[i] = best / static_cast<double>(chunk_part(span.i0 + i, s.far, chunk).size());
  }
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  std::vector<int64_t> picked;
  int64_t used = 0;
  for (int64_t i : order) {
    const int64_t n = chunk_part(span.i0 + i, s.far, chunk).size();
    if (used + n > s.budget_tokens && !picked.empty()) break;
    used += n;
    picked.push_back(i);
  }
  std::sort(picked.begin(), picked.end());
  std::vector<TokenRange> out;
  for (int64_t i : picked) {
    const TokenRange part = chunk_part(span.i0 + i, s.far, chunk);
    if (!out.empty() && out.back().end == part.begin) {
      out.back().end = part.end;
    } else {
      out.push_back(part);
    }
  }
  return out;
}

TEST_F(OraclePolicyTest, PicksTheChunksOfMostExactMass) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE(trial);
    const int64_t n = 64 + static_cast<int64_t>(rng() % 200);
    std::vector<float> keys(static_cast<size_t>(n * kOracleRow));
    for (float& k : keys) k = normal(rng) * 2.0f;
    std::vector<float> q(kOracleHeads * kDim);
    for (float& x : q) x = normal(rng) * 2.0f;
    const int layer = trial % 2;
    observe(layer, keys);
    // far from an unaligned sink to an unaligned recent window: the edge chunks count only their far part
    const TokenRange far{3, n - 13};
    const int64_t budget = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(far.size()));
    const SelectionQuery s = query(layer, q, n, far, budget);
    auto got = oracle_->select(s, catalog_);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(got->ranges, reference(keys, s, 8)) << "budget " << budget << " of " << far.size();
    int64_t attended = 0;
    for (const TokenRange& r : got->ranges) attended += r.size();
    EXPECT_LE(attended, std::max<int64_t>(budget, got->ranges.empty() ? 0 : got->ranges[0].size()));
    EXPECT_FALSE(got->desert);
  }
}

// Query heads 0, 1 read KV head 0 and heads 2, 3 KV head 1. Chunk 1 holds head 0's strongest key,
// chunk 3 KV head 1's; every other far key is flat. A budget of two chunks takes both: the chunk
// one KV head needs is kept, however little the other head's queries look at it.
TEST_F(OraclePolicyTest, KeepsTheChunkEachKvHeadNeeds) {
  const int64_t n = 64;
  std::vector<float> keys(static_cast<size_t>(n * kOracleRow), 0.0f);
  keys[12 * kOracleRow + 0] = 40.0f;              // position 12 (chunk 1), KV head 0, channel 0
  keys[28 * kOracleRow + kDim + 1] = 20.0f;       // position 28 (chunk 3), KV head 1, channel 1
  keys[44 * kOracleRow + 0] = 30.0f;              // position 44 (chunk 5), KV head 0: its second best
  observe(0, keys);
  std::vector<float> q(kOracleHeads * kDim, 0.0f);
  q[0 * kDim + 0] = 1.0f;  // head 0 looks at channel 0 of KV head 0
  q[2 * kDim + 1] = 1.0f;  // head 2 looks at channel 1 of KV head 1
  auto got = oracle_->select(query(0, q, n, {8, 56}, 16), catalog_);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->ranges, (std::vector<TokenRange>{{8, 16}, {24, 32}}));
}

TEST_F(OraclePolicyTest, FailsOnAQueryBeyondItsKeysOrShape) {
  std::vector<float> keys(static_cast<size_t>(32 * kOracleRow), 1.0f);
  observe(1, keys);
  catalog_.set_keys(0, 40, std::vector<float>(kDim, 0.0f));  // the store holds more than the oracle saw
  std::vector<float> q(kOracleHeads * kDim, 1.0f);
  auto beyond = oracle_->select(query(1, q, 40, {4, 30}, 8), catalog_);
  ASSERT_FALSE(beyond.is_ok());
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.status().message().find("keys for 32 positions"), std::string::npos) << beyond.status().message();
  auto unseen = oracle_->select(query(0, q, 32, {4, 28}, 8), catalog_);  // layer 0 got no keys
  ASSERT_FALSE(unseen.is_ok());
  EXPECT_NE(unseen.status().message().find("SelectorNeeds.keys"), std::string::npos) << unseen.status().message();
  EXPECT_FALSE(oracle_->observe_keys(2, 0, 1, keys.data()).is_ok());  // the model has 2 layers
  // Nothing to pick needs no keys.
  auto none = oracle_->select(query(0, q, 32, {4, 28}, 0), catalog_);
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->ranges.empty());
}

TEST(OraclePolicy, NeedsTheModel) {
  auto p = make_selection_policy("oracle", {});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("needs the model"), std::string::npos);
}

}  // namespace
}  // namespace leoam::sparse
