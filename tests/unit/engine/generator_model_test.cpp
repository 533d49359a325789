// The generator over a real forward pass and tokenizer: a small synthetic llama written to a
// temporary directory once for the suite.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;

class GeneratorModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fs::temp_directory_path() / ("leoam_generator_test_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const std::string path = *dir_ + "/tiny.gguf";
    SyntheticModelSpec spec;  // the defaults: 2 layers, n_embd 128, vocab 512, context 256
    spec.n_ctx = 256;
    Status st = write_synthetic_model(spec, path);
    ASSERT_TRUE(st.is_ok()) << st.message();
    auto model = Model::load(path);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = model->release();
    auto tok = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    tokenizer_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    std::error_code ec;
    if (dir_ != nullptr) fs::remove_all(*dir_, ec);
    delete dir_;
    tokenizer_ = nullptr;
    model_ = nullptr;
    dir_ = nullptr;
  }

  std::unique_ptr<ForwardContext> context(int n_ctx) {
    ForwardOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    auto ctx = ForwardContext::create(*model_, o);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    return ctx.is_ok() ? std::move(*ctx) : nullptr;
  }

  struct Output {
    Result<GenerateStats> stats = internal_error("not run");
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> rows;
  };

  Output generate_text(std::string_view prompt, const GenerateOptions& options, int n_ctx = 128, bool dump = false) {
    Output out;
    auto ctx = context(n_ctx);
    if (ctx == nullptr) return out;
    GenerateCallbacks cb;
    cb.on_text = [&](std::string_view t) { out.text += t; };
    cb.on_token = [&](int32_t t) { out.tokens.push_back(t); };
    if (dump) cb.on_logits = [&](std::span<const float> row) { out.rows.emplace_back(row.begin(), row.end()); };
    out.stats = generate(*ctx, *tokenizer_, prompt, options, cb);
    return out;
  }

  static GenerateOptions sampling(int n_predict, uint64_t seed) {
    GenerateOptions o;
    o.n_predict = n_predict;
    o.sampler.temperature = 1.0f;
    o.sampler.seed = seed;
    return o;
  }

  static std::string* dir_;
  static Model* model_;
  static Tokenizer* tokenizer_;
};

std::string* GeneratorModelTest::dir_ = nullptr;
Model* GeneratorModelTest::model_ = nullptr;
Tokenizer* GeneratorModelTest::tokenizer_ = nullptr;

TEST_F(GeneratorModelTest, StreamedTextIsTheDetokenizedTokens) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    for (const char* prompt : {"", "the cat"}) {
      Output out = generate_text(prompt, sampling(48, seed));
      ASSERT_TRUE(out.stats.is_ok()) << out.stats.status().message();
      ASSERT_EQ(static_cast<int64_t>(out.tokens.size()), out.stats->n_generated);
      EXPECT_EQ(out.text, tokenizer_->detokenize(out.tokens, /*remove_leading_space=*/std::string_view(prompt).empty()))
          << "seed " << seed << " prompt '" << prompt << "'";
    }
  }
}

TEST_F(GeneratorModelTest, NPredictIsRespectedUnlessGenerationEnds) {
  for (int n : {0, 1, 7, 30}) {
    Output out = generate_text("the", sampling(n, 5));
    ASSERT_TRUE(out.stats.is_ok()) << out.stats.status().message();
    if (out.stats->stop_reason == StopReason::kEndOfGeneration) {
      EXPECT_LE(out.stats->n_generated, n);
      EXPECT_TRUE(tokenizer_->is_eog(out.tokens.back()));
    } else {
      EXPECT_EQ(out.stats->n_generated, n);
      EXPECT_EQ(out.stats->stop_reason, StopReason::kMaxTokens);
    }
    for (size_t i = 0; i + 1 < out.tokens.size(); ++i) EXPECT_FALSE(tokenizer_->is_eog(out.tokens[i]));
  }
}

TEST_F(GeneratorModelTest, SameSeedSameTextGreedyIsDeterministic) {
  Output a = generate_text("the", sampling(32, 11));
  Output b = generate_text("the", sampling(32, 11));
  ASSERT_TRUE(a.stats.is_ok() && b.stats.is_ok());
  EXPECT_EQ(a.tokens, b.tokens);

  GenerateOptions greedy = sampling(32, 0);
  greedy.sampler.temperature = 0.0f;
  Output g1 = generate_text("the", greedy);
  greedy.sampler.seed = 999;  // the seed does not matter when greedy
  Output g2 = generate_text("the", greedy);
  EXPECT_EQ(g1.tokens, g2.tokens);
}

TEST_F(GeneratorModelTest, PromptLongerThanContextIsAnError) {
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "the cat ";
  const auto n_tokens = tokenizer_->tokenize(prompt, true, false).size();
  ASSERT_GT(n_tokens, 16u);
  Output out = generate_text(prompt, sampling(4, 1), /*n_ctx=*/16);
  ASSERT_FALSE(out.stats.is_ok());
  EXPECT_EQ(out.stats.status().message(), "prompt has " + std::to_string(n_tokens) +
                                              " tokens, more than the context size of 16 (-c); raise -c or shorten the prompt");
  EXPECT_TRUE(out.text.empty());
}

TEST_F(GeneratorModelTest, StopsWhenTheContextIsFull) {
  GenerateOptions o = sampling(-1, 3);
  o.sampler.temperature = 0.0f;
  const auto n_prompt = static_cast<int64_t>(tokenizer_->tokenize("the", true, false).size());
  Output out = generate_text("the", o, /*n_ctx=*/20);
  ASSERT_TRUE(out.stats.is_ok()) << out.stats.status().message();
  if (out.stats->stop_reason != StopReason::kEndOfGeneration) {
    EXPECT_EQ(out.stats->stop_reason, StopReason::kContextFull);
    EXPECT_EQ(out.stats->n_generated, 20 - n_prompt);
  }
}

TEST_F(GeneratorModelTest, LogitsRowsCoverEveryPositionAndMatchThePrefill) {
  GenerateOptions o = sampling(6, 0);
  o.sampler.temperature = 0.0f;
  Output out = generate_text("the cat", o, 128, /*dump=*/true);
  ASSERT_TRUE(out.stats.is_ok()) << out.stats.status().message();
  ASSERT_EQ(static_cast<int64_t>(out.rows.size()), out.stats->n_prompt_tokens + out.stats->n_generated);
  for (const auto& row : out.rows) ASSERT_EQ(row.size(), 512u);
  // Greedy: each generated token is the argmax of the row before it.
  const auto n_prompt = static_cast<size_t>(out.stats->n_prompt_tokens);
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    EXPECT_EQ(out.tokens[i], sampling::argmax(out.rows[n_prompt - 1 + i])) << "token " << i;
  }
  // Dumping changes nothing about the tokens.
  Output plain = generate_text("the cat", o);
  EXPECT_EQ(plain.tokens, out.tokens);
}

}  // namespace
}  // namespace leoam
