// The fidelity probe in the forward pass: every path that appends KV (a prompt batch by batch, the
// layered prefill, a single decode step, a batched decode) hands it the keys and values of every
// position, so that each decoded query's full attention can be computed; over full attention
// (no selector inside) it measures no error, over leoam some.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/llama_forward.h"
#include "small_model_test.h"
#include "sparse/fidelity_probe.h"
#include "sparse/sparse_attention.h"

namespace leoam::sparse {
namespace {

class FidelityProbeForwardTest : public SmallModelTest {
 protected:
  std::unique_ptr<FidelityProbe> probe(AttentionSelector* inner) const {
    FidelityProbeOptions o{.n_head = spec_.n_head, .n_head_kv = spec_.n_head_kv, .head_dim = 16, .scale = 0.25f,
                           .layers = {0, 1}, .kv_heads = {0, 1}};
    return std::move(FidelityProbe::create(inner, o, spec_.n_layer)).value();
  }
  std::unique_ptr<ForwardContext> context(AttentionSelector* selector, std::unique_ptr<KvCache> kv,
                                          uint64_t working_set) const {
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.n_batch = 16;
    fo.selector = selector;
    fo.prefill_working_set_bytes = working_set;
    return std::move(LlamaForward::create(*model_, fo, std::move(kv))).value();
  }
};

TEST_F(FidelityProbeForwardTest, EveryPathHandsItTheKvOfEveryPosition) {
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = random_tokens(60, rng);
  for (const uint64_t working_set : {uint64_t{0}, uint64_t{1} << 20}) {
    auto p = probe(nullptr);
    auto ctx = context(p.get(), memory_cache(), working_set);
    std::vector<float> logits;
    ASSERT_TRUE(ctx->eval(prompt, false, logits).is_ok());
    EXPECT_EQ(ctx->prefill_stats().n_layered_tokens > 0, working_set > 0);
    for (int s = 0; s < 3; ++s) {
      const int32_t one[1] = {static_cast<int32_t>(rng() % spec_.n_vocab)};
      ASSERT_TRUE(ctx->eval(one, false, logits).is_ok());
    }
    auto f = p->measure();
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->n_samples, 3 * 2 * spec_.n_head) << "working set " << working_set;
    EXPECT_NEAR(f->mass_covered, 1.0, 1e-9);
    EXPECT_NEAR(f->output_error, 0.0, 1e-6);
  }
}

TEST_F(FidelityProbeForwardTest, BatchedRowsAndASparsePolicy) {
  std::mt19937 rng(8);
  auto ctx = context(nullptr, memory_cache(), 0);
  std::vector<std::unique_ptr<TieredKvCache>> stores;
  std::vector<std::unique_ptr<SparseAttention>> policies;
  std::vector<std::unique_ptr<FidelityProbe>> probes;
  for (int i = 0; i < 2; ++i) {
    stores.push_back(tiered_store("s" + std::to_string(i), 4));
    SparseAttentionOptions o;
    o.policy = "leoam";
    o.budget = 0.1;
    o.n_recent = 16;
    policies.push_back(std::move(SparseAttention::create(o, stores[i].get(),
                                                         {spec_.n_layer, spec_.n_head, spec_.n_head_kv, 16, 0.25f}))
                           .value());
    probes.push_back(probe(policies[i].get()));
    std::vector<float> logits;
    ASSERT_TRUE(ctx->eval_sequence({stores[i].get(), probes[i].get()}, random_tokens(200, rng), false, logits).is_ok());
  }
  for (int s = 0; s < 3; ++s) {
    std::vector<BatchToken> batch;
    for (int i = 0; i < 2; ++i) {
      batch.push_back({static_cast<int32_t>(rng() % spec_.n_vocab), {stores[i].get(), probes[i].get()}});
    }
    std::vector<float> logits;
    ASSERT_TRUE(ctx->decode_batch(batch, logits).is_ok());
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(policies[i]->total().n_attended, policies[i]->total().n_visible);  // it chose
    auto f = probes[i]->measure();
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->n_samples, 3 * 2 * spec_.n_head);
    EXPECT_GT(f->mass_covered, 0.0);
    EXPECT_LT(f->mass_covered, 1.0);
    EXPECT_GT(f->output_error, 0.0);
  }
}

}  // namespace
}  // namespace leoam::sparse
