// The generator over a real forward pass and tokenizer (tiny_model_test.h).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/batch_generator.h"
#include "engine/generator.h"
#include "kv/memory_kv_cache.h"
#include "tiny_model_test.h"

namespace leoam {
namespace {

class GeneratorModelTest : public TinyModelTest {
 protected:
  struct Output {
    Result<GenerateStats> stats = internal_error("not run");
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> rows;
  };

  Output generate_text(std::string_view prompt, const GenerateOptions& options, int n_ctx = 128, bool dump = false) {
    auto ctx = context(n_ctx);
    if (ctx == nullptr) return Output{};
    return run_on(*ctx, prompt, {}, options, dump);
  }

  // Generates on `ctx`: from `prompt` text when `resume_tokens` is empty, else from
  // resume_tokens (the sequence of a session that ctx holds all but the last of).
  Output run_on(ForwardContext& ctx, std::string_view prompt, const std::vector<int32_t>& resume_tokens,
                const GenerateOptions& options, bool dump = false) {
    Output out;
    GenerateCallbacks cb;
    cb.on_text = [&](std::string_view t) { out.text += t; };
    cb.on_token = [&](int32_t t) { out.tokens.push_back(t); };
    if (dump) cb.on_logits = [&](std::span<const float> row) { out.rows.emplace_back(row.begin(), row.end()); };
    out.stats = resume_tokens.empty()
                    ? generate(ctx, *tokenizer_, prompt, options, cb)
                    : generate_from_tokens(ctx, *tokenizer_, resume_tokens, /*strip_leading_space=*/false, options, cb);
    return out;
  }

  static GenerateOptions sampling(int n_predict, uint64_t seed) {
    GenerateOptions o;
    o.n_predict = n_predict;
    o.sampler.temperature = 1.0f;
    o.sampler.seed = seed;
    return o;
  }

};

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
                                              " tokens, more than the context size of 16; raise the context size or shorten the prompt");
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

TEST_F(GeneratorModelTest, ResumedGenerationEqualsUnbrokenGeneration) {
  constexpr int kTotal = 24, kFirst = 10;
  // Gives ctx the KV of tokens[0, n), as loading a saved session does.
  auto refill = [](ForwardContext& ctx, const std::vector<int32_t>& tokens, size_t n) {
    ctx.reset();
    std::vector<float> logits;
    return ctx.eval(std::span(tokens).first(n), /*all_logits=*/false, logits);
  };
  for (uint64_t seed : {1u, 2u, 3u}) {
    for (float repeat_penalty : {1.0f, 1.3f}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " repeat_penalty " + std::to_string(repeat_penalty));
      GenerateOptions o;  // top-k, top-p and min-p at their defaults
      o.sampler.temperature = 0.8f;
      o.sampler.seed = seed;
      o.sampler.repeat_penalty = repeat_penalty;
      o.n_predict = kTotal;
      Output unbroken = generate_text("the cat", o);
      ASSERT_TRUE(unbroken.stats.is_ok()) << unbroken.stats.status().message();
      ASSERT_EQ(unbroken.stats->stop_reason, StopReason::kMaxTokens);

      for (bool reload : {false, true}) {
        SCOPED_TRACE(reload ? "context refilled from the tokens" : "the first run's context");
        auto ctx = context(128);
        ASSERT_NE(ctx, nullptr);
        GenerateOptions first_options = o;
        first_options.n_predict = kFirst;
        Output first = run_on(*ctx, "the cat", {}, first_options);
        ASSERT_TRUE(first.stats.is_ok()) << first.stats.status().message();
        const std::vector<int32_t>& seq = first.stats->tokens;
        const size_t n_held = seq.size() - 1;  // stopping at n_predict leaves the last token unevaluated
        ASSERT_EQ(ctx->n_past(), static_cast<int64_t>(n_held));
        if (reload) {
          ASSERT_TRUE(refill(*ctx, seq, n_held).is_ok());
        }

        GenerateOptions second_options = o;
        second_options.n_predict = kTotal - kFirst;
        second_options.sampler_rng_state = first.stats->sampler_rng_state;
        Output second = run_on(*ctx, "", seq, second_options);
        ASSERT_TRUE(second.stats.is_ok()) << second.stats.status().message();
        EXPECT_EQ(second.stats->n_prompt_tokens, static_cast<int64_t>(seq.size()));
        EXPECT_EQ(second.stats->n_reused_tokens, static_cast<int64_t>(n_held));

        std::vector<int32_t> joined = first.tokens;
        joined.insert(joined.end(), second.tokens.begin(), second.tokens.end());
        EXPECT_EQ(joined, unbroken.tokens);
        EXPECT_EQ(first.text + second.text, unbroken.text);
        EXPECT_EQ(second.stats->tokens, unbroken.stats->tokens);
        EXPECT_EQ(second.stats->sampler_rng_state, unbroken.stats->sampler_rng_state);

        // The saved state is what makes this work: the seed alone restarts the random stream.
        ASSERT_TRUE(refill(*ctx, seq, n_held).is_ok());
        second_options.sampler_rng_state.clear();
        Output reseeded = run_on(*ctx, "", seq, second_options);
        ASSERT_TRUE(reseeded.stats.is_ok()) << reseeded.stats.status().message();
        EXPECT_NE(reseeded.tokens, second.tokens);
      }
    }
  }
}

// Batched generation: each prompt in its own store gets the greedy tokens it gets alone, one
// sequence stopping at a full context while the others go on to n_predict.
TEST_F(GeneratorModelTest, ABatchGeneratesWhatEachPromptGeneratesAlone) {
  const std::vector<std::string> prompts = {"the cat", "once upon a time", "a", "the dog and the"};
  GenerateOptions greedy;
  greedy.n_predict = 24;
  greedy.sampler.temperature = 0.0f;
  auto ctx = context(128);
  ASSERT_NE(ctx, nullptr);
  std::vector<std::unique_ptr<KvCache>> stores;
  std::vector<DecodeSequence> sequences;
  for (size_t i = 0; i < prompts.size(); ++i) {
    MemoryKvCacheOptions m;
    const ModelHparams& hp = model_->hparams();
    m.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, i == 2 ? 12 : 128};  // the third fills at 12 tokens
    stores.push_back(std::move(MemoryKvCache::create(m)).value());
    sequences.push_back({stores.back().get(), nullptr});
  }
  BatchGenerateStats totals;
  auto results = generate_batch(*ctx, *tokenizer_, prompts, sequences, greedy, &totals);
  ASSERT_TRUE(results.is_ok()) << results.status().message();
  ASSERT_EQ(results->size(), prompts.size());
  int64_t generated = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const BatchSequenceResult& r = (*results)[i];
    Output alone = generate_text(prompts[i], greedy, i == 2 ? 12 : 128);
    ASSERT_TRUE(alone.stats.is_ok());
    EXPECT_EQ(r.stats.tokens, alone.stats->tokens) << "prompt " << i;
    EXPECT_EQ(r.text, alone.text) << "prompt " << i;
    EXPECT_EQ(r.stats.stop_reason, alone.stats->stop_reason) << "prompt " << i;
    generated += r.stats.n_generated;
  }
  EXPECT_EQ((*results)[2].stats.stop_reason, StopReason::kContextFull);
  EXPECT_EQ((*results)[0].stats.stop_reason, StopReason::kMaxTokens);
  EXPECT_EQ(totals.n_generated, generated);
  EXPECT_EQ(totals.n_steps, 23);  // 24 tokens a sequence, the last sampled without a step

  // More prompts than sequences, and a prompt too long for its store, are refused.
  const std::vector<std::string> five(5, "the");
  EXPECT_EQ(generate_batch(*ctx, *tokenizer_, five, sequences, greedy).status().code(), StatusCode::kInvalidArgument);
  MemoryKvCacheOptions tiny;
  tiny.shape = {model_->hparams().n_layer, model_->hparams().n_head_kv, model_->hparams().head_dim, 2};
  auto small = std::move(MemoryKvCache::create(tiny)).value();
  const DecodeSequence one[] = {{small.get(), nullptr}};
  const std::vector<std::string> longer = {"the cat sat on the mat"};
  const Status st = generate_batch(*ctx, *tokenizer_, longer, one, greedy).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("prompt 1 has"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace leoam
