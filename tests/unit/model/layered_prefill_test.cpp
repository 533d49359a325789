// The layered prefill (ForwardOptions::prefill_working_set_bytes): a prompt runs layer by layer
// and attends to each layer's prompt KV in its working set, so a store that keeps the KV on disk
// reads none of the prompt's back. In one segment its logits are the in-memory cache's bit for
// bit; in several, each segment reads the earlier ones from the store, and the logits agree
// within float rounding. Decoding goes on from it as from the batch order.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/tiered_kv_cache.h"
#include "model/llama_forward.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "../temp_dir.h"
#include "model_test_util.h"

namespace leoam {
namespace {

using testing_util::rel_l2;

class LayeredPrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_vocab = 320;
    spec_.n_embd = 128;
    spec_.n_layer = 3;
    spec_.n_head = 8;
    spec_.n_head_kv = 2;
    spec_.n_ff = 256;
    spec_.n_ctx = 512;
    ASSERT_TRUE(write_synthetic_model(spec_, file_.path()).is_ok());
    auto model = Model::load(file_.path());
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(model).value();
    std::mt19937 rng(9);
    prompt_.resize(300);
    for (int32_t& id : prompt_) id = static_cast<int32_t>(rng() % spec_.n_vocab);
  }

  // A tiered store that holds a few chunks in memory and the rest on disk; *store points to it.
  std::unique_ptr<KvCache> small_store(const std::string& name, TieredKvCache** store) {
    TieredKvCacheOptions t;
    t.shape = {spec_.n_layer, spec_.n_head_kv, 16, spec_.n_ctx};
    t.chunk_tokens = 16;
    t.n_recent_tokens = 16;
    t.dir = dir_.path() + "/" + name;
    t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
    t.host_budget_bytes = 2 * TieredKvCache::chunk_budget_bytes(t, Tier::kHost);
    auto kv = TieredKvCache::create(t);
    EXPECT_TRUE(kv.is_ok()) << kv.status().message();
    if (!kv.is_ok()) return nullptr;
    *store = kv->get();
    return std::move(kv).value();
  }

  std::unique_ptr<ForwardContext> context(uint64_t working_set_bytes, std::unique_ptr<KvCache> kv, int n_batch = 64) {
    ForwardOptions o;
    o.n_threads = 2;
    o.n_batch = n_batch;
    o.n_ctx = spec_.n_ctx;
    o.prefill_working_set_bytes = working_set_bytes;
    auto ctx = LlamaForward::create(*model_, o, std::move(kv));
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    return ctx.is_ok() ? std::move(ctx).value() : nullptr;
  }

  // What one prompt row costs the working set: its residual stream and one layer's f16 K and V;
  // in a segment that reads the store, also its query, its attention output and attention's merge
  // scratch.
  uint64_t row_bytes() const { return spec_.n_embd * 4 + 2 * spec_.n_head_kv * 16 * 2; }
  uint64_t wide_row_bytes() const { return row_bytes() + (3 * spec_.n_embd + spec_.n_head) * 4; }

  SyntheticModelSpec spec_;
  testing_util::TempFile file_{"layered_prefill"};
  testing_util::TempDir dir_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(LayeredPrefill, OneSegmentReadsNoPromptKvBackAndGivesTheInMemoryLogits) {
  std::vector<float> want, got;
  ASSERT_TRUE(context(0, nullptr)->eval(prompt_, true, want).is_ok());

  TieredKvCache* store = nullptr;
  std::unique_ptr<ForwardContext> ctx = context(uint64_t{64} << 20, small_store("one", &store));
  ASSERT_NE(ctx, nullptr);
  ASSERT_TRUE(ctx->eval(prompt_, true, got).is_ok());
  EXPECT_EQ(got, want) << "bit for bit";
  const KvStats stats = store->stats();
  EXPECT_EQ(stats[Tier::kDisk].bytes_read, 0u) << "the prompt's KV is attended from the working set";
  EXPECT_GT(stats[Tier::kDisk].bytes_written, 0u) << "and written through once";
  EXPECT_GT(store->residency().n_chunks(Tier::kDisk), store->residency().n_chunks() / 2);
  const PrefillStats p = ctx->prefill_stats();
  EXPECT_EQ(p.n_segments, 1);
  EXPECT_EQ(p.n_layered_tokens, 300);
  EXPECT_GE(p.working_set_bytes, 300 * row_bytes());

  // The batch order over the same store reads the earlier batches' KV back from disk.
  TieredKvCache* batch_store = nullptr;
  std::vector<float> batch;
  std::unique_ptr<ForwardContext> batch_ctx = context(0, small_store("batch", &batch_store));  // owns the store
  ASSERT_NE(batch_ctx, nullptr);
  ASSERT_TRUE(batch_ctx->eval(prompt_, true, batch).is_ok());
  EXPECT_GT(batch_store->stats()[Tier::kDisk].bytes_read, 0u);
  EXPECT_LT(rel_l2(batch, want), 1e-5);
}

// A working set of 100 rows: segments of one 64-token batch (one at least), each reading the
// earlier segments' KV from the store. Decoding then goes on as after the batch order.
TEST_F(LayeredPrefill, SegmentsReadTheEarlierOnesFromTheStoreAndDecodingGoesOn) {
  TieredKvCache* batch_store = nullptr;
  std::unique_ptr<ForwardContext> batch_ctx = context(0, small_store("batch", &batch_store));
  TieredKvCache* store = nullptr;
  std::unique_ptr<ForwardContext> ctx = context(100 * row_bytes(), small_store("segments", &store));
  ASSERT_NE(batch_ctx, nullptr);
  ASSERT_NE(ctx, nullptr);
  std::vector<float> want, got;
  ASSERT_TRUE(batch_ctx->eval(prompt_, true, want).is_ok());
  ASSERT_TRUE(ctx->eval(prompt_, true, got).is_ok());
  EXPECT_LT(rel_l2(got, want), 1e-5);
  EXPECT_EQ(ctx->prefill_stats().n_segments, 5);  // 4 batches of 64 and one of 44
  EXPECT_GT(store->stats()[Tier::kDisk].bytes_read, 0u);
  EXPECT_EQ(ctx->n_past(), 300);

  std::mt19937 rng(2);
  for (int step = 0; step < 4; ++step) {
    const int32_t next[1] = {static_cast<int32_t>(rng() % spec_.n_vocab)};
    ASSERT_TRUE(batch_ctx->eval(next, false, want).is_ok());
    ASSERT_TRUE(ctx->eval(next, false, got).is_ok());
    EXPECT_LT(rel_l2(got, want), 1e-5) << "decode step " << step;
  }
}

// Each later segment reads the KV before it from the store once a layer, for all of its batches
// together: here segments [0, 224), [224, 288) (two batches of 32) and [288, 300), so the disk
// reads are at most the slots of [0, 224) and [0, 288) in every layer, where reading once a
// batch would take those of [0, 224) twice. The logits stay those of the batch order.
TEST_F(LayeredPrefill, LaterSegmentsReadTheEarlierKvOnceForAllTheirBatches) {
  TieredKvCache* batch_store = nullptr;
  std::unique_ptr<ForwardContext> batch_ctx = context(0, small_store("batch", &batch_store), 32);
  TieredKvCache* store = nullptr;
  const uint64_t ws = 224 * row_bytes();  // 224 rows of the first segment, 64 of a later one
  ASSERT_EQ(ws / wide_row_bytes(), 64u);
  std::unique_ptr<ForwardContext> ctx = context(ws, small_store("once", &store), 32);
  ASSERT_NE(batch_ctx, nullptr);
  ASSERT_NE(ctx, nullptr);
  std::vector<float> want, got;
  ASSERT_TRUE(batch_ctx->eval(prompt_, true, want).is_ok());
  ASSERT_TRUE(ctx->eval(prompt_, true, got).is_ok());
  EXPECT_LT(rel_l2(got, want), 1e-5);
  const PrefillStats p = ctx->prefill_stats();
  EXPECT_EQ(p.n_segments, 3);
  EXPECT_LE(p.working_set_bytes, ws);
  const uint64_t slot = store->disk().slot_bytes();
  const uint64_t at_most = spec_.n_layer * (224 / 16 + 288 / 16) * slot;
  const uint64_t read = store->stats()[Tier::kDisk].bytes_read;
  EXPECT_GT(read, 0u);
  EXPECT_LE(read, at_most) << "a byte before a segment is read once a layer for it";

  // A prompt that continues the context reads the context once a layer too, in one segment.
  std::vector<int32_t> more(prompt_.begin(), prompt_.begin() + 96);
  const uint64_t before = store->stats()[Tier::kDisk].bytes_read;
  ASSERT_TRUE(batch_ctx->eval(more, true, want).is_ok());
  ASSERT_TRUE(ctx->eval(more, true, got).is_ok());
  EXPECT_LT(rel_l2(got, want), 1e-5);
  EXPECT_EQ(ctx->prefill_stats().n_segments, 5) << "96 rows: segments of 64 and 32";
  EXPECT_LE(store->stats()[Tier::kDisk].bytes_read - before, spec_.n_layer * (300 / 16 + 1 + 364 / 16 + 1) * slot);
}

// Ctrl-C is heard between a segment's layers and between segments (a segment polls after each
// layer but its last, then once done: n_layer polls a segment). A stop between segments keeps
// the segments done; one inside a segment drops its KV, which some layers held: either way the
// KV kept is complete in every layer.
TEST_F(LayeredPrefill, AStopKeepsTheSegmentsDoneWhole) {
  ASSERT_GE(spec_.n_layer, 2);
  for (const int stop_at : {2 * spec_.n_layer, spec_.n_layer + 1, 1}) {
    TieredKvCache* store = nullptr;
    ForwardOptions o;
    o.n_threads = 1;
    o.n_batch = 64;
    o.prefill_working_set_bytes = 128 * row_bytes();  // segments of two batches
    int polls = 0;
    o.should_stop = [&polls, stop_at] { return ++polls == stop_at; };
    auto ctx = LlamaForward::create(*model_, o, small_store("stop" + std::to_string(stop_at), &store));
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
    std::vector<float> logits;
    const Status st = (*ctx)->eval(prompt_, false, logits);
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.message();
    EXPECT_EQ(polls, stop_at);
    // After two whole segments; inside the second (after its first layer); inside the first.
    const int64_t kept = stop_at == 2 * spec_.n_layer ? 256 : stop_at == 1 ? 0 : 128;
    EXPECT_EQ((*ctx)->n_past(), kept) << "stop at poll " << stop_at;
    for (int il = 0; il < spec_.n_layer; ++il) EXPECT_EQ(store->n_tokens(il), kept) << "layer " << il;
  }
}

}  // namespace
}  // namespace leoam
