// Gemma's sliding layers on the tiered, sparse path: a Gemma 3 folder (five sliding layers to a
// global one) decoded past its window by leoam on a store mostly on disk. At a budget that picks
// everything, its logits are the dense pass's; at 10%, every sliding layer still reads its whole
// window (the selector picks only for the global layers) and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../hf/hf_folder_writer.h"
#include "../model/model_test_util.h"
#include "../temp_dir.h"
#include "hf/hf_folder.h"
#include "leoam/session.h"
#include "model/forward_context.h"
#include "model/model.h"

namespace leoam {
namespace {

constexpr int kGemmaWindow = 16;
constexpr int kGemmaLayers = 7;  // layers 0-4 and 6 slide, layer 5 is global
constexpr int kGemmaPrompt = 150;
constexpr int kGemmaSteps = 12;

class SlidingWindowSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_util::HfFolderSpec s;
    s.architecture = "Gemma3ForCausalLM";
    s.n_layer = kGemmaLayers;
    s.head_dim = 32;
    s.n_ctx = 512;
    s.tied = true;
    s.query_pre_attn_scalar = 32;
    s.sliding_window = kGemmaWindow;
    s.rope_theta = 1000000.0;
    s.rope_local_theta = 10000.0;
    testing_util::write_hf_folder(s, dir_.path());
    Result<GgufFile> gguf = open_model_source(dir_.path(), {});
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
    Result<std::unique_ptr<Model>> model = Model::from_gguf(std::move(*gguf));
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(*model);
    for (int i = 0; i < kGemmaPrompt; ++i) prompt_.push_back((7 + i * 37) % s.n_vocab);
  }

  // The prompt, then kGemmaSteps greedy steps one token at a time: each step's logits.
  std::vector<std::vector<float>> decode(ForwardContext& ctx) {
    std::vector<std::vector<float>> steps;
    std::vector<float> logits;
    EXPECT_TRUE(ctx.eval(prompt_, false, logits).is_ok());
    for (int i = 0; i < kGemmaSteps; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const int32_t token[1] = {next};
      Status st = ctx.eval(token, false, logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      steps.push_back(logits);
    }
    return steps;
  }

  SessionOptions sparse_options(double budget, const std::string& kv_dir) const {
    SessionOptions o;
    o.kv.dir = kv_dir;
    o.kv.device_bytes = 48 << 10;  // a few chunks: most of the KV lives on disk
    o.kv.host_bytes = 32 << 10;
    o.kv.chunk_tokens = 8;
    o.kv.n_recent = 8;
    o.attention.policy = "leoam";
    o.attention.budget = budget;
    o.forward.n_ctx = 512;
    o.forward.n_threads = 2;
    return o;
  }

  testing_util::TempDir dir_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(SlidingWindowSessionTest, AFullBudgetOnDiskGivesTheDenseLogits) {
  ForwardOptions dense_options;
  dense_options.n_ctx = 512;
  dense_options.n_threads = 2;
  Result<std::unique_ptr<ForwardContext>> dense = ForwardContext::create(*model_, dense_options);
  ASSERT_TRUE(dense.is_ok()) << dense.status().message();
  const std::vector<std::vector<float>> want = decode(**dense);

  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> sparse = Session::create(*model_, sparse_options(1.0, kv_dir.path()));
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  ASSERT_NE((*sparse)->selector(), nullptr) << "leoam selects, even at a budget of everything";
  const std::vector<std::vector<float>> got = decode((*sparse)->context());
  EXPECT_GT((*sparse)->stats().tiers[static_cast<int>(Tier::kDisk)].bytes_written, 0u) << "the KV went to disk";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // The same f16 KV summed in another order.
    EXPECT_LE(testing_util::rel_l2(got[i], want[i]), 1e-4) << "step " << i;
  }
}

TEST_F(SlidingWindowSessionTest, SlidingLayersReadTheirWindowWhateverTheBudget) {
  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> s = Session::create(*model_, sparse_options(0.1, kv_dir.path()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ForwardContext& ctx = (*s)->context();
  std::vector<float> logits;
  ASSERT_TRUE(ctx.eval(prompt_, false, logits).is_ok());
  const int n_sliding = kGemmaLayers - 1;
  for (int i = 0; i < kGemmaSteps; ++i) {
    const int64_t before = ctx.decode_positions_attended();
    const int32_t token[1] = {static_cast<int32_t>(i + 3)};
    ASSERT_TRUE(ctx.eval(token, false, logits).is_ok());
    const int64_t attended = ctx.decode_positions_attended() - before;
    const int64_t pos = kGemmaPrompt + i;
    // The global layer attends a tenth or so of pos + 1 positions; each sliding layer kGemmaWindow.
    EXPECT_GE(attended, int64_t{n_sliding} * kGemmaWindow + 1) << "step " << i;
    EXPECT_LE(attended, int64_t{n_sliding} * kGemmaWindow + (pos + 1) / 2) << "step " << i;
  }
}

}  // namespace
}  // namespace leoam
