#include "engine/generator.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fake_model.h"

namespace leoam {
namespace {

using testing::FakeForwardContext;
using testing::FakeTokenizer;
using T = FakeTokenizer;

GenerateOptions greedy(int n_predict) {
  GenerateOptions o;
  o.n_predict = n_predict;
  o.sampler.temperature = 0.0f;
  return o;
}

// Predicts, after position p, scripted[p] (or `otherwise` past the end of the map).
std::function<int32_t(int64_t)> script(std::map<int64_t, int32_t> scripted, int32_t otherwise = T::kA) {
  return [scripted, otherwise](int64_t pos) {
    auto it = scripted.find(pos);
    return it == scripted.end() ? otherwise : it->second;
  };
}

struct RunResult {
  Result<GenerateStats> stats = internal_error("not run");
  std::vector<std::string> chunks;
  std::string text;
  std::vector<std::vector<float>> rows;
};

GenerateCallbacks record_into(RunResult& r, bool dump_logits) {
  GenerateCallbacks cb;
  cb.on_text = [&r](std::string_view t) {
    r.chunks.emplace_back(t);
    r.text += t;
  };
  if (dump_logits) cb.on_logits = [&r](std::span<const float> row) { r.rows.emplace_back(row.begin(), row.end()); };
  return cb;
}

RunResult run_generate(FakeForwardContext& ctx, std::string_view prompt, const GenerateOptions& options, bool dump_logits = false) {
  FakeTokenizer tok;
  RunResult r;
  r.stats = generate(ctx, tok, prompt, options, record_into(r, dump_logits));
  return r;
}

RunResult run_from_tokens(FakeForwardContext& ctx, const std::vector<int32_t>& tokens, const GenerateOptions& options,
                          bool dump_logits = false) {
  FakeTokenizer tok;
  RunResult r;
  r.stats = generate_from_tokens(ctx, tok, tokens, /*strip_leading_space=*/false, options, record_into(r, dump_logits));
  return r;
}

// Evaluates `tokens` into ctx, as a reloaded session would have them.
void prefill(FakeForwardContext& ctx, const std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  ASSERT_TRUE(ctx.eval(tokens, /*all_logits=*/false, logits).is_ok());
}

std::vector<int32_t> generated(const FakeForwardContext& ctx, size_t n_prompt, size_t n_generated) {
  return {ctx.history.begin() + static_cast<long>(n_prompt), ctx.history.begin() + static_cast<long>(n_prompt + n_generated)};
}

TEST(GeneratorTest, StreamsTheDetokenizedTextAndStopsAtEog) {
  // Prompt " Once upon" = [BOS, Once, upon] at positions 0..2.
  FakeForwardContext ctx(10, 64, script({{2, T::kA}, {3, T::kTime}, {4, T::kComma}, {5, T::kEos}}));
  RunResult r = run_generate(ctx, "Once upon", greedy(100), /*dump_logits=*/false);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_prompt_tokens, 3);
  EXPECT_EQ(r.stats->n_generated, 4);  // a, time, ",", </s>
  EXPECT_EQ(r.stats->stop_reason, StopReason::kEndOfGeneration);
  EXPECT_EQ(r.text, " a time,");
  EXPECT_EQ(r.chunks, (std::vector<std::string>{" a", " time", ","}));
  // Prefill in one eval, then one eval per generated token except the final EOG.
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{3, 1, 1, 1}));
  EXPECT_EQ(ctx.history, (std::vector<int32_t>{T::kBos, T::kOnce, T::kUpon, T::kA, T::kTime, T::kComma}));
  FakeTokenizer tok;
  EXPECT_EQ(r.text, tok.detokenize({T::kA, T::kTime, T::kComma, T::kEos}, /*remove_leading_space=*/false));
}

TEST(GeneratorTest, ShouldStopEndsTheRunBeforeTheNextToken) {
  FakeForwardContext ctx(10, 64, script({}, T::kTime));
  GenerateOptions options = greedy(100);
  int n_polls = 0;
  options.should_stop = [&n_polls] { return ++n_polls > 3; };
  RunResult r = run_generate(ctx, "Once", options);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->stop_reason, StopReason::kInterrupted);
  EXPECT_EQ(r.stats->n_generated, 3);
  EXPECT_EQ(n_polls, 4);
  EXPECT_TRUE(r.stats->prefill_complete());
  EXPECT_EQ(r.stats->n_prefilled, 2);
  EXPECT_EQ(r.text, " time time time");
  // Every generated token was evaluated, so the context holds a whole session to save.
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{2, 1, 1, 1}));
}

TEST(GeneratorTest, RespectsNPredict) {
  FakeForwardContext ctx(10, 64, script({}, T::kTime));
  RunResult r = run_generate(ctx, "Once", greedy(5));
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_generated, 5);
  EXPECT_EQ(r.stats->stop_reason, StopReason::kMaxTokens);
  EXPECT_EQ(r.text, " time time time time time");
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{2, 1, 1, 1, 1}));  // the 5th token is not evaluated

  FakeForwardContext ctx0(10, 64, script({}, T::kTime));
  RunResult zero = run_generate(ctx0, "Once", greedy(0));
  ASSERT_TRUE(zero.stats.is_ok());
  EXPECT_EQ(zero.stats->n_generated, 0);
  EXPECT_EQ(zero.text, "");
}

TEST(GeneratorTest, EmptyPromptGeneratesFromBosWithoutLeadingSpace) {
  FakeForwardContext ctx(10, 64, script({{0, T::kOnce}, {1, T::kUpon}, {2, T::kA}, {3, T::kTime}, {4, T::kEos}}));
  RunResult r = run_generate(ctx, "", greedy(-1));
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_prompt_tokens, 1);
  EXPECT_EQ(r.text, "Once upon a time");
  FakeTokenizer tok;
  EXPECT_EQ(r.text, tok.detokenize(generated(ctx, 1, 4), /*remove_leading_space=*/true));
}

TEST(GeneratorTest, HoldsBackUtf8SplitOverByteTokens) {
  FakeForwardContext ctx(10, 64, script({{1, T::kE2}, {2, T::k82}, {3, T::kAC}, {4, T::kComma}, {5, T::kEos}}));
  RunResult r = run_generate(ctx, "Once", greedy(-1));
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.chunks, (std::vector<std::string>{"\xE2\x82\xAC", ","}));
}

TEST(GeneratorTest, FlushesIncompleteUtf8AtTheEnd) {
  FakeForwardContext ctx(10, 64, script({{1, T::kE2}, {2, T::k82}}));
  RunResult r = run_generate(ctx, "Once", greedy(2));
  ASSERT_TRUE(r.stats.is_ok());
  EXPECT_EQ(r.text, "\xE2\x82");  // the stream delays bytes, never drops them
}

TEST(GeneratorTest, PromptLongerThanContextIsAnError) {
  FakeForwardContext ctx(10, 2, script({}));
  RunResult r = run_generate(ctx, "Once upon", greedy(10));
  ASSERT_FALSE(r.stats.is_ok());
  EXPECT_EQ(r.stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.stats.status().message(),
            "prompt has 3 tokens, more than the context size of 2; raise the context size or shorten the prompt");
  EXPECT_EQ(r.stats.status().setting(), Setting::kContextSize);
  EXPECT_TRUE(ctx.eval_sizes.empty());
}

TEST(GeneratorTest, EmptyPromptWithoutBosIsAnError) {
  FakeForwardContext ctx(10, 8, script({}));
  GenerateOptions o = greedy(10);
  o.add_bos = false;
  RunResult r = run_generate(ctx, "", o);
  ASSERT_FALSE(r.stats.is_ok());
  EXPECT_EQ(r.stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.stats.status().message().find("prompt is empty"), std::string::npos);
}

TEST(GeneratorTest, StopsWhenTheContextIsFull) {
  FakeForwardContext ctx(10, 5, script({}, T::kA));
  RunResult r = run_generate(ctx, "Once upon", greedy(-1));  // 3 prompt tokens, room for 2 more
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_generated, 2);
  EXPECT_EQ(r.stats->stop_reason, StopReason::kContextFull);
  EXPECT_EQ(ctx.n_past(), 5);

  FakeForwardContext exact(10, 3, script({}, T::kA));  // the prompt fills the context
  RunResult r2 = run_generate(exact, "Once upon", greedy(-1));
  ASSERT_TRUE(r2.stats.is_ok()) << r2.stats.status().message();
  EXPECT_EQ(r2.stats->n_generated, 0);
  EXPECT_EQ(r2.stats->stop_reason, StopReason::kContextFull);
}

TEST(GeneratorTest, LogitsSinkGetsEveryPromptAndGeneratedPosition) {
  FakeForwardContext ctx(10, 64, script({{2, T::kA}, {3, T::kTime}, {4, T::kEos}}));
  RunResult r = run_generate(ctx, "Once upon", greedy(100), /*dump_logits=*/true);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_generated, 3);
  ASSERT_EQ(r.rows.size(), 3u + 3u);
  // Row p peaks at the scripted prediction after position p (the EOG token was evaluated too).
  const std::vector<int32_t> expect_peak = {T::kA, T::kA, T::kA, T::kTime, T::kEos, T::kA};
  for (size_t p = 0; p < r.rows.size(); ++p) {
    ASSERT_EQ(r.rows[p].size(), 10u);
    EXPECT_EQ(r.rows[p][static_cast<size_t>(expect_peak[p])], 10.0f) << "position " << p;
  }
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{3, 1, 1, 1}));

  FakeForwardContext ctx2(10, 64, script({}, T::kTime));
  RunResult r2 = run_generate(ctx2, "Once", greedy(4), /*dump_logits=*/true);
  ASSERT_TRUE(r2.stats.is_ok());
  EXPECT_EQ(r2.rows.size(), 2u + 4u);
}

TEST(GeneratorTest, SampleSinkGetsEachTokenWithItsRowAndNoExtraEval) {
  FakeForwardContext ctx(10, 64, script({{2, T::kA}, {3, T::kTime}, {4, T::kEos}}));
  FakeTokenizer tok;
  std::vector<std::pair<std::vector<float>, int32_t>> sampled;
  std::vector<int32_t> order;  // on_sample before on_token: -1 marks a sample
  GenerateCallbacks cb;
  cb.on_sample = [&](std::span<const float> row, int32_t token) {
    sampled.emplace_back(std::vector<float>(row.begin(), row.end()), token);
    order.push_back(-1);
  };
  cb.on_token = [&](int32_t token) { order.push_back(token); };
  const Result<GenerateStats> stats = generate(ctx, tok, "Once upon", greedy(100), cb);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  ASSERT_EQ(sampled.size(), 3u);
  const std::vector<int32_t> expect = {T::kA, T::kTime, T::kEos};
  for (size_t i = 0; i < sampled.size(); ++i) {
    ASSERT_EQ(sampled[i].first.size(), 10u);
    EXPECT_EQ(sampled[i].second, expect[i]);
    EXPECT_EQ(sampled[i].first[static_cast<size_t>(expect[i])], 10.0f) << "the row the token was drawn from";
  }
  EXPECT_EQ(order, (std::vector<int32_t>{-1, T::kA, -1, T::kTime, -1, T::kEos}));
  // The prefill keeps one row and the final EOG is not evaluated, as without the sink.
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{3, 1, 1}));
}

TEST(GeneratorTest, GenerateFromTextRejectsAUsedContext) {
  FakeForwardContext ctx(10, 64, script({}));
  prefill(ctx, {T::kBos});
  // generate_from_tokens would take [BOS, Once] over this context; text in means a fresh start.
  RunResult r = run_generate(ctx, "Once", greedy(1));
  ASSERT_FALSE(r.stats.is_ok());
  EXPECT_EQ(r.stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.stats.status().message(), "generate: the context already holds 1 tokens; start from a fresh context");
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{1}));
}

TEST(GeneratorTest, StatsHoldTheWholeSequence) {
  FakeForwardContext ctx(10, 64, script({{2, T::kA}, {3, T::kTime}, {4, T::kEos}}));
  RunResult r = run_generate(ctx, "Once upon", greedy(100));
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_reused_tokens, 0);
  EXPECT_EQ(r.stats->tokens, (std::vector<int32_t>{T::kBos, T::kOnce, T::kUpon, T::kA, T::kTime, T::kEos}));
}

TEST(GeneratorTest, EvaluatesOnlyThePromptTokensTheContextLacks) {
  FakeForwardContext ctx(10, 64, script({{2, T::kA}, {3, T::kTime}, {4, T::kComma}, {5, T::kEos}}));
  prefill(ctx, {T::kBos, T::kOnce});
  RunResult r = run_from_tokens(ctx, {T::kBos, T::kOnce, T::kUpon}, greedy(100), /*dump_logits=*/true);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_prompt_tokens, 3);
  EXPECT_EQ(r.stats->n_reused_tokens, 2);
  EXPECT_EQ(r.stats->n_generated, 4);
  EXPECT_EQ(r.text, " a time,");
  // The prefill evaluates "upon" alone; the generated tokens follow one by one (all of them,
  // since the logits are dumped).
  EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(ctx.history,
            (std::vector<int32_t>{T::kBos, T::kOnce, T::kUpon, T::kA, T::kTime, T::kComma, T::kEos}));
  EXPECT_EQ(r.stats->tokens, ctx.history);
  // Rows only for the evaluated positions 2..6.
  ASSERT_EQ(r.rows.size(), 1u + 4u);
  const std::vector<int32_t> expect_peak = {T::kA, T::kTime, T::kComma, T::kEos, T::kA};
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i][static_cast<size_t>(expect_peak[i])], 10.0f) << "row " << i;
  }
}

TEST(GeneratorTest, ContinuingFromTheStatsEqualsOneUnbrokenRun) {
  const auto steps = script({{2, T::kA}, {3, T::kTime}, {4, T::kComma}, {5, T::kOnce}, {6, T::kUpon}}, T::kTime);
  FakeForwardContext whole(10, 64, steps);
  RunResult unbroken = run_generate(whole, "Once upon", greedy(7));
  ASSERT_TRUE(unbroken.stats.is_ok()) << unbroken.stats.status().message();

  FakeForwardContext ctx(10, 64, steps);
  RunResult first = run_generate(ctx, "Once upon", greedy(3));
  ASSERT_TRUE(first.stats.is_ok()) << first.stats.status().message();
  // Stopping at n_predict leaves the last sampled token unevaluated.
  EXPECT_EQ(ctx.n_past(), static_cast<int64_t>(first.stats->tokens.size()) - 1);
  RunResult second = run_from_tokens(ctx, first.stats->tokens, greedy(4));
  ASSERT_TRUE(second.stats.is_ok()) << second.stats.status().message();
  EXPECT_EQ(second.stats->n_reused_tokens, 5);
  EXPECT_EQ(second.stats->tokens, unbroken.stats->tokens);
  EXPECT_EQ(first.text + second.text, unbroken.text);
  EXPECT_EQ(first.text + second.text, " a time, Once upon time time");
  EXPECT_EQ(ctx.history, whole.history);
}

TEST(GeneratorTest, RepeatPenaltySeesTheReusedPromptTokens) {
  // Every position predicts "Once" (10), with "a" the runner-up (9). Penalty 2: "Once", in the
  // prompt, drops to 5 and "a" wins; then both are in the history and "Once" (5 > 4.5) wins.
  FakeForwardContext ctx(10, 64, script({}, T::kOnce));
  ctx.runner_up = T::kA;
  prefill(ctx, {T::kBos, T::kOnce});
  GenerateOptions o = greedy(2);
  o.sampler.repeat_penalty = 2.0f;
  RunResult r = run_from_tokens(ctx, {T::kBos, T::kOnce, T::kUpon}, o);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->tokens, (std::vector<int32_t>{T::kBos, T::kOnce, T::kUpon, T::kA, T::kOnce}));
}

TEST(GeneratorTest, AContextHoldingTheWholePromptIsAnError) {
  for (size_t n_held : {3u, 4u}) {
    FakeForwardContext ctx(10, 64, script({}));
    prefill(ctx, std::vector<int32_t>(n_held, T::kA));
    RunResult r = run_from_tokens(ctx, {T::kBos, T::kOnce, T::kUpon}, greedy(5));
    ASSERT_FALSE(r.stats.is_ok());
    EXPECT_EQ(r.stats.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.stats.status().message(),
              "generate: the context already holds " + std::to_string(n_held) +
                  " positions and the prompt has 3 tokens, so there is nothing to evaluate for the first "
                  "token's logits; leave at least the last prompt token out of the context");
    EXPECT_EQ(ctx.eval_sizes, (std::vector<size_t>{n_held}));
  }
}

TEST(GeneratorTest, ContinuesTheSamplerStateAndReportsIt) {
  GenerateOptions o = greedy(4);
  o.sampler.temperature = 0.8f;
  o.sampler.seed = 17;
  // The fake's logits leave one candidate after min-p, but each sample still draws once.
  Sampler reference(o.sampler);
  for (int i = 0; i < 2; ++i) reference.sample(std::vector<float>(10, 0.0f));
  o.sampler_rng_state = reference.rng_state();
  for (int i = 0; i < 4; ++i) reference.sample(std::vector<float>(10, 0.0f));

  FakeForwardContext ctx(10, 64, script({}, T::kTime));
  RunResult r = run_generate(ctx, "Once", o);
  ASSERT_TRUE(r.stats.is_ok()) << r.stats.status().message();
  EXPECT_EQ(r.stats->n_generated, 4);
  EXPECT_EQ(r.stats->sampler_rng_state, reference.rng_state());
}

TEST(GeneratorTest, AnInvalidSamplerStateIsAnErrorBeforeAnyEval) {
  FakeForwardContext ctx(10, 64, script({}));
  GenerateOptions o = greedy(5);
  o.sampler_rng_state = "not a state";
  RunResult r = run_generate(ctx, "Once", o);
  ASSERT_FALSE(r.stats.is_ok());
  EXPECT_EQ(r.stats.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.stats.status().message().starts_with("sampler state (11 bytes) is not valid"))
      << r.stats.status().message();
  EXPECT_TRUE(ctx.eval_sizes.empty());
}

}  // namespace
}  // namespace leoam
