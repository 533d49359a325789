// Batched decode (ForwardContext::decode_batch): several sequences, each with its own KV store
// and selector, step together through one pass over the weights, and each gets the logits it
// would get alone: bit for bit in a batch of one, and up to the rounding of a matrix product
// against a matrix-vector one in larger batches. Prompts go into each sequence with
// eval_sequence. Bad batches are refused and leave every sequence as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/tiered_kv_cache.h"
#include "model/llama_forward.h"
#include "small_model_test.h"
#include "sparse/sparse_attention.h"

namespace leoam::sparse {
namespace {

class BatchedDecodeTest : public SmallModelTest {
 protected:
  std::unique_ptr<ForwardContext> context(AttentionSelector* selector, std::unique_ptr<KvCache> kv,
                                          int n_threads = 1) const {
    ForwardOptions fo;
    fo.n_threads = n_threads;
    fo.n_batch = 64;
    fo.selector = selector;
    return std::move(LlamaForward::create(*model_, fo, std::move(kv))).value();
  }
  std::unique_ptr<SparseAttention> leoam(TieredKvCache* store) const {
    SparseAttentionOptions o;
    o.policy = "leoam";
    o.budget = 0.2;
    o.n_recent = 16;
    return std::move(SparseAttention::create(o, store, {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f}))
        .value();
  }
  std::unique_ptr<TieredKvCache> tiered(const std::string& name) const { return tiered_store(name, 4); }
  // A batch of one is the single-token decode, bit for bit, through a sparse policy over a tiered
  // store too; a batch of n_seqs sequences with their own leoam selectors attends as they do
  // alone (with batch_threads, in a context of that many threads: with 2 rows a thread or more
  // the rows run side by side). With read_ahead_bytes, the batched stores read each layer's
  // selected disk chunks ahead while the other sequences select and attend. The batched stores'
  // stats go to `stats`.
  void expect_sparse_batch_as_alone(uint64_t read_ahead_bytes, std::vector<KvStats>& stats, size_t n_seqs = 2,
                                    int batch_threads = 1) const {
    std::mt19937 rng(9);
    const size_t lengths[] = {180, 120, 150, 100};
    ASSERT_LE(n_seqs, std::size(lengths));
    std::vector<std::vector<int32_t>> prompts, steps;
    for (size_t i = 0; i < n_seqs; ++i) prompts.push_back(random_tokens(lengths[i], rng));
    for (size_t i = 0; i < n_seqs; ++i) steps.push_back(random_tokens(8, rng));
    struct Alone {
      std::vector<std::vector<float>> rows;
      int64_t attended = 0;
    };
    std::vector<Alone> alone(n_seqs);
    for (size_t i = 0; i < n_seqs; ++i) {
      std::unique_ptr<TieredKvCache> store = tiered("alone" + std::to_string(i));
      auto selector = leoam(store.get());
      auto ctx = context(selector.get(), std::move(store));
      std::vector<float> logits;
      ASSERT_TRUE(ctx->eval(prompts[i], false, logits).is_ok());
      for (int32_t tok : steps[i]) {
        const int32_t one[1] = {tok};
        ASSERT_TRUE(ctx->eval(one, false, logits).is_ok());
        alone[i].rows.push_back(logits);
      }
      alone[i].attended = selector->total().n_attended;
    }
    auto ctx = context(nullptr, memory_cache(), batch_threads);
    std::vector<std::unique_ptr<TieredKvCache>> stores;
    std::vector<std::unique_ptr<SparseAttention>> selectors;
    for (size_t i = 0; i < n_seqs; ++i) {
      TieredKvCacheOptions o = tiered_options("batched" + std::to_string(i), 4);
      o.read_ahead_bytes = read_ahead_bytes;
      stores.push_back(std::move(TieredKvCache::create(o)).value());
      selectors.push_back(leoam(stores[i].get()));
      std::vector<float> logits;
      ASSERT_TRUE(ctx->eval_sequence({stores[i].get(), selectors[i].get()}, prompts[i], false, logits).is_ok());
    }
    const auto n_vocab = static_cast<size_t>(spec_.n_vocab);
    for (size_t s = 0; s < 8; ++s) {
      if (s < 2) {  // the first steps one sequence at a time: batches of one
        for (size_t i = 0; i < n_seqs; ++i) {
          const BatchToken one{steps[i][s], {stores[i].get(), selectors[i].get()}};
          std::vector<float> logits;
          ASSERT_TRUE(ctx->decode_batch({&one, 1}, logits).is_ok());
          // Bit for bit on one thread; a row's attention split between two may round apart.
          const double most = batch_threads == 1 ? 0.0 : 1e-4;
          EXPECT_LE(rel_diff(logits, alone[i].rows[s]), most) << "step " << s << " sequence " << i;
        }
        continue;
      }
      std::vector<BatchToken> all;
      for (size_t i = 0; i < n_seqs; ++i) all.push_back({steps[i][s], {stores[i].get(), selectors[i].get()}});
      std::vector<float> logits;
      ASSERT_TRUE(ctx->decode_batch(all, logits).is_ok());
      for (size_t i = 0; i < n_seqs; ++i) {
        const std::vector<float> row(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
        EXPECT_LT(rel_diff(row, alone[i].rows[s]), 1e-4) << "step " << s << " sequence " << i;
      }
    }
    for (size_t i = 0; i < n_seqs; ++i) {
      EXPECT_EQ(selectors[i]->total().n_attended, alone[i].attended) << "sequence " << i;
      EXPECT_LT(selectors[i]->total().n_attended, selectors[i]->total().n_visible);  // it did choose
      stats.push_back(stores[i]->stats());
    }
  }

  // Largest |a - b| over the largest |b|.
  static double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < b.size(); ++i) {
      d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
      m = std::max(m, std::fabs(static_cast<double>(b[i])));
    }
    return d / m;
  }
};

TEST_F(BatchedDecodeTest, EachSequenceGetsTheLogitsItWouldGetAlone) {
  std::mt19937 rng(4);
  const std::vector<size_t> lengths = {40, 90, 150};
  std::vector<std::vector<int32_t>> prompts, steps;
  for (size_t n : lengths) {
    prompts.push_back(random_tokens(n, rng));
    steps.push_back(random_tokens(6, rng));
  }
  // Alone: a context each.
  std::vector<std::vector<std::vector<float>>> alone(lengths.size());
  std::vector<std::vector<float>> alone_prompt(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto ctx = context(nullptr, memory_cache());
    ASSERT_TRUE(ctx->eval(prompts[i], false, alone_prompt[i]).is_ok());
    for (int32_t tok : steps[i]) {
      std::vector<float> logits;
      const int32_t one[1] = {tok};
      ASSERT_TRUE(ctx->eval(one, false, logits).is_ok());
      alone[i].push_back(logits);
    }
  }
  // Together: one context, a store each.
  auto ctx = context(nullptr, memory_cache());
  std::vector<std::unique_ptr<KvCache>> stores;
  for (size_t i = 0; i < lengths.size(); ++i) {
    stores.push_back(memory_cache());
    std::vector<float> logits;
    ASSERT_TRUE(ctx->eval_sequence({stores[i].get(), nullptr}, prompts[i], false, logits).is_ok());
    EXPECT_EQ(logits, alone_prompt[i]);  // the same code on the same store kind
  }
  EXPECT_EQ(ctx->n_past(), 0);  // the context's own store saw nothing
  const auto n_vocab = static_cast<size_t>(spec_.n_vocab);
  for (size_t s = 0; s < 6; ++s) {
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < lengths.size(); ++i) batch.push_back({steps[i][s], {stores[i].get(), nullptr}});
    std::vector<float> logits;
    ASSERT_TRUE(ctx->decode_batch(batch, logits).is_ok());
    ASSERT_EQ(logits.size(), lengths.size() * n_vocab);
    for (size_t i = 0; i < lengths.size(); ++i) {
      const std::vector<float> row(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
      EXPECT_LT(rel_diff(row, alone[i][s]), 1e-4) << "step " << s << " sequence " << i;
      EXPECT_EQ(stores[i]->n_tokens(), static_cast<int64_t>(lengths[i] + s + 1));
    }
  }
}

TEST_F(BatchedDecodeTest, SparseSequencesSelectAsTheyWouldAlone) {
  std::vector<KvStats> stats;
  expect_sparse_batch_as_alone(0, stats);
  for (const KvStats& st : stats) EXPECT_EQ(st.read_ahead.jobs, 0u);
}

// The stores' read-ahead takes exactly the chunks the selection reads from disk: every one
// staged is used, and none is missed.
TEST_F(BatchedDecodeTest, ABatchReadsEachSequencesSelectionAhead) {
  std::vector<KvStats> stats;
  expect_sparse_batch_as_alone(uint64_t{1} << 20, stats);
  uint64_t staged = 0;
  for (const KvStats& st : stats) {
    EXPECT_GT(st.read_ahead.jobs, 0u);
    EXPECT_EQ(st.read_ahead.chunks_used, st.read_ahead.chunks_staged);
    EXPECT_EQ(st.read_ahead.chunks_missed, 0u);
    staged += st.read_ahead.chunks_staged;
  }
  EXPECT_GT(staged, 0u);
}

// Four sequences on two threads: each thread takes whole rows, single-threaded, and the rows'
// selections, reads ahead and logits are still those of each sequence alone.
TEST_F(BatchedDecodeTest, RowsSideBySideSelectAndAttendAsAlone) {
  std::vector<KvStats> stats;
  expect_sparse_batch_as_alone(uint64_t{1} << 20, stats, 4, 2);
  for (const KvStats& st : stats) {
    EXPECT_GT(st.read_ahead.jobs, 0u);
    EXPECT_EQ(st.read_ahead.chunks_used, st.read_ahead.chunks_staged);
    EXPECT_EQ(st.read_ahead.chunks_missed, 0u);
  }
}

// Full attention in a batch reads like a sparse policy's rows: each row's whole past goes to its
// store's read-ahead, on one thread and with the rows side by side on two (four rows), and each
// row gets the logits it gets alone, its disk chunks all from the staging.
TEST_F(BatchedDecodeTest, FullRowsReadTheirPastAheadAsSparseRowsDo) {
  std::mt19937 rng(6);
  const size_t lengths[] = {180, 120, 150, 100};
  std::vector<std::vector<int32_t>> prompts, steps;
  for (size_t n : lengths) {
    prompts.push_back(random_tokens(n, rng));
    steps.push_back(random_tokens(4, rng));
  }
  std::vector<std::vector<std::vector<float>>> alone(std::size(lengths));
  for (size_t i = 0; i < std::size(lengths); ++i) {
    auto ctx = context(nullptr, tiered("alone" + std::to_string(i)));
    std::vector<float> logits;
    ASSERT_TRUE(ctx->eval(prompts[i], false, logits).is_ok());
    for (int32_t tok : steps[i]) {
      const int32_t one[1] = {tok};
      ASSERT_TRUE(ctx->eval(one, false, logits).is_ok());
      alone[i].push_back(logits);
    }
  }
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    auto ctx = context(nullptr, memory_cache(), threads);
    std::vector<std::unique_ptr<TieredKvCache>> stores;
    for (size_t i = 0; i < std::size(lengths); ++i) {
      TieredKvCacheOptions o = tiered_options("full" + std::to_string(threads) + "_" + std::to_string(i), 4);
      o.read_ahead_bytes = uint64_t{1} << 20;
      stores.push_back(std::move(TieredKvCache::create(o)).value());
      std::vector<float> logits;
      ASSERT_TRUE(ctx->eval_sequence({stores[i].get(), nullptr}, prompts[i], false, logits).is_ok());
    }
    const auto n_vocab = static_cast<size_t>(spec_.n_vocab);
    for (size_t s = 0; s < 4; ++s) {
      std::vector<BatchToken> all;
      for (size_t i = 0; i < std::size(lengths); ++i) all.push_back({steps[i][s], {stores[i].get(), nullptr}});
      std::vector<float> logits;
      ASSERT_TRUE(ctx->decode_batch(all, logits).is_ok());
      for (size_t i = 0; i < std::size(lengths); ++i) {
        const std::vector<float> row(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
        EXPECT_LT(rel_diff(row, alone[i][s]), 1e-4) << "step " << s << " sequence " << i;
      }
    }
    for (const auto& store : stores) {
      const KvStats st = store->stats();
      EXPECT_GT(st.read_ahead.chunks_staged, 0u);
      EXPECT_EQ(st.read_ahead.chunks_used, st.read_ahead.chunks_staged);
      EXPECT_EQ(st.read_ahead.chunks_missed, 0u);
    }
  }
}

TEST_F(BatchedDecodeTest, BadBatchesAreRefusedAndLeaveTheSequencesAsTheyWere) {
  auto ctx = context(nullptr, memory_cache());
  auto a = memory_cache();
  auto b = memory_cache();
  std::mt19937 rng(2);
  std::vector<float> logits;
  ASSERT_TRUE(ctx->eval_sequence({a.get(), nullptr}, random_tokens(20, rng), false, logits).is_ok());
  ASSERT_TRUE(ctx->eval_sequence({b.get(), nullptr}, random_tokens(30, rng), false, logits).is_ok());
  const auto refused = [&](std::vector<BatchToken> batch, const std::string& why) {
    const Status st = ctx->decode_batch(batch, logits);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(a->n_tokens(), 20);
    EXPECT_EQ(b->n_tokens(), 30);
  };
  refused({}, "no sequences");
  refused({{1, {a.get(), nullptr}}, {2, {a.get(), nullptr}}}, "share a KV store");
  refused({{1, {a.get(), nullptr}}, {static_cast<int32_t>(spec_.n_vocab), {b.get(), nullptr}}}, "out of range");
  refused({{1, {nullptr, nullptr}}}, "needs a KV store");
  std::vector<BatchToken> too_many(65, {1, {a.get(), nullptr}});
  refused(too_many, "more than the batch size of 64");
  MemoryKvCacheOptions m;
  m.shape = {spec_.n_layer, spec_.n_head_kv, 16, 30};
  auto full = std::move(MemoryKvCache::create(m)).value();
  ASSERT_TRUE(ctx->eval_sequence({full.get(), nullptr}, random_tokens(30, rng), false, logits).is_ok());
  refused({{1, {a.get(), nullptr}}, {1, {full.get(), nullptr}}}, "is full");
  m.shape.head_dim = 8;
  auto odd = std::move(MemoryKvCache::create(m)).value();
  refused({{1, {odd.get(), nullptr}}}, "the model needs");
}

}  // namespace
}  // namespace leoam::sparse
