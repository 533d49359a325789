// The sweep's plan (eval/sweep.h) over the tiny model's tokenizer: which samples and runs exist and
// in what order, ppl's windows, the errors (which name no flag), run keys, and reading a results
// file back to resume from it.
#include "eval/sweep.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "../engine/tiny_model_test.h"

namespace leoam::eval {
namespace {

using Json = nlohmann::ordered_json;

class SweepTest : public TinyModelTest {
 protected:
  static SweepOptions passkey() {
    SweepOptions o;
    o.task = "passkey";
    o.ctxs = {384};
    o.depths = {0.5};
    o.policies = {"full"};
    o.budgets = {0.1};
    return o;
  }
  static SweepOptions ppl(std::string text) {
    SweepOptions o;
    o.task = kPplTask;
    o.ctxs = {64};
    o.depths = {0.0};
    o.policies = {"full"};
    o.budgets = {0.1};
    o.text = std::move(text);
    return o;
  }
  // Text of many tokens: enough for several windows of 64.
  static std::string long_text() {
    std::string text;
    for (int i = 0; i < 40; ++i) text += "the quick brown fox " + std::to_string(i) + " jumps over the lazy dog. ";
    return text;
  }
  static Status plan_error(const SweepOptions& o, int64_t n_ctx_limit) {
    Result<SweepPlan> plan = plan_sweep(o, *tokenizer_, n_ctx_limit);
    EXPECT_FALSE(plan.is_ok());
    return plan.is_ok() ? Status::ok() : plan.status();
  }
};

TEST_F(SweepTest, PlansASampleOfEachCtxDepthAndSeedAndARunOfEachPolicyAtEachBudget) {
  SweepOptions o = passkey();
  o.ctxs = {384, 448, 384};  // repeats count once
  o.depths = {0.2, 0.8};
  o.first_seed = 3;
  o.n_seeds = 2;
  o.policies = {"full", "leoam", "full", "quest"};
  o.budgets = {0.1, 0.3, 0.1};
  Result<SweepPlan> plan = plan_sweep(o, *tokenizer_, 512);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();

  ASSERT_EQ(plan->samples.size(), 8u);
  size_t i = 0;
  for (const int64_t ctx : {384, 448}) {
    for (const double depth : {0.2, 0.8}) {
      for (const uint64_t seed : {3u, 4u}) {
        const SampleSpec& s = plan->samples[i++];
        EXPECT_EQ(s.ctx, ctx);
        EXPECT_EQ(s.depth, depth);
        EXPECT_EQ(s.seed, seed);
        // The sample make_sample() builds for the same params, BOS first.
        TaskParams params;
        params.task = "passkey";
        params.context_tokens = ctx;
        params.depth = depth;
        params.seed = seed;
        const TokenizeFn tokenize = [](std::string_view t) { return tokenizer_->tokenize(t, false, false); };
        Result<Sample> expected = make_sample(params, tokenize, tokenizer_->bos_id());
        ASSERT_TRUE(expected.is_ok()) << expected.status().message();
        EXPECT_EQ(s.sample.tokens, expected->tokens);
        EXPECT_EQ(s.sample.answers, expected->answers);
        EXPECT_EQ(s.sample.tokens.front(), tokenizer_->bos_id());
      }
    }
  }

  ASSERT_EQ(plan->runs.size(), 5u);
  const std::vector<std::string> labels = {"full", "leoam@0.1", "leoam@0.3", "quest@0.1", "quest@0.3"};
  for (size_t r = 0; r < labels.size(); ++r) {
    EXPECT_EQ(policy_label(plan->runs[r].policy, plan->runs[r].budget), labels[r]);
  }
  EXPECT_EQ(plan->runs[0].budget, 1.0) << "a dense policy runs once, at budget 1";
}

TEST_F(SweepTest, PplCutsConsecutiveWindowsEachItsIndexAsSeed) {
  const std::string text = long_text();
  const std::vector<int32_t> tokens = tokenizer_->tokenize(text, false, false);
  SweepOptions o = ppl(text);
  o.depths = {0.0, 0.5};
  o.n_windows = 3;
  o.first_seed = 7;  // ignored: a window's seed is its index
  Result<SweepPlan> plan = plan_sweep(o, *tokenizer_, 512);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->samples.size(), 6u) << "3 windows at each depth";
  for (size_t i = 0; i < plan->samples.size(); ++i) {
    const SampleSpec& s = plan->samples[i];
    const size_t w = i % 3;
    EXPECT_EQ(s.depth, i < 3 ? 0.0 : 0.5);
    EXPECT_EQ(s.seed, w);
    EXPECT_EQ(s.sample.max_new_tokens, 0);
    ASSERT_EQ(s.sample.tokens.size(), 64u);
    EXPECT_EQ(s.sample.tokens.front(), tokenizer_->bos_id());
    const std::vector<int32_t> expected(tokens.begin() + static_cast<int64_t>(w) * 63,
                                        tokens.begin() + static_cast<int64_t>(w + 1) * 63);
    EXPECT_EQ(std::vector<int32_t>(s.sample.tokens.begin() + 1, s.sample.tokens.end()), expected) << "window " << w;
  }

  o.n_windows = 0;  // every whole window
  Result<SweepPlan> all = plan_sweep(o, *tokenizer_, 512);
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  EXPECT_EQ(all->samples.size(), 2 * (tokens.size() / 63));
  EXPECT_EQ(ppl_prefill_tokens(128, 0.5), 63) << "floor(0.5 * 127)";
  EXPECT_EQ(ppl_prefill_tokens(128, 0.0), 0);
}

TEST_F(SweepTest, ErrorsSayWhatDoesNotFitAndNameNoFlag) {
  SweepOptions too_long = passkey();
  too_long.ctxs = {384, 600};
  const Status over = plan_error(too_long, 512);
  EXPECT_EQ(over.message(), "ctx 600 is larger than the context of 512 tokens");

  // The prompt fits, its answer does not.
  const Status answer = plan_error(passkey(), 384);
  EXPECT_NE(answer.message().find("ctx 384: the prompt and its "), std::string::npos) << answer.message();
  EXPECT_NE(answer.message().find("more than the context of 384"), std::string::npos) << answer.message();

  SweepOptions short_ctx = passkey();
  short_ctx.ctxs = {16};
  EXPECT_NE(plan_error(short_ctx, 512).message().find("too short"), std::string::npos);

  SweepOptions one = ppl(long_text());
  one.ctxs = {1};
  EXPECT_NE(plan_error(one, 512).message().find("leaves no next token to score"), std::string::npos);
  SweepOptions whole = ppl(long_text());
  whole.depths = {1.0};
  EXPECT_NE(plan_error(whole, 512).message().find("depth 1 prefills 63 of the 64 tokens of a window, which leaves "
                                                  "no token to decode"),
            std::string::npos);
  EXPECT_NE(plan_error(ppl("Once upon a time."), 512).message().find("fewer than one window"), std::string::npos);

  for (const SweepOptions& o : {too_long, short_ctx, one, whole}) {
    EXPECT_EQ(plan_error(o, 512).message().find("--"), std::string::npos) << "a flag named";
  }
}

TEST_F(SweepTest, ARunKeyNamesEveryFieldAndReadsBackFromItsLine) {
  const SampleSpec spec{2048, 0.3, 1, {}};
  const EvalRun run{"leoam", 0.1};
  const std::string key = run_key("ledger", spec, run, 0);
  EXPECT_EQ(key, "ledger|2048|0.29999999999999999|1|leoam|0.10000000000000001|0");
  EXPECT_NE(run_key("ledger", spec, run, 8), key);
  EXPECT_NE(run_key("ledger", spec, {"leoam", 0.3}, 0), key);
  EXPECT_NE(run_key("ledger", {2048, 0.3, 2, {}}, run, 0), key);

  const Json line = Json::parse(R"({"task":"ledger","ctx":2048,"depth":0.3,"seed":1,"policy":"leoam","budget":0.1})");
  EXPECT_EQ(run_key(Json::parse(line.dump())), key) << "doubles read back exactly; no straddle_chunk is 0";
  Json straddled = line;
  straddled["straddle_chunk"] = 8;
  EXPECT_EQ(run_key(straddled), run_key("ledger", spec, run, 8));
}

TEST_F(SweepTest, AResultsFileReadsBackItsCompleteLinesAndFindsATornLast) {
  const std::string a = R"({"task":"passkey","ctx":256,"depth":0.5,"seed":0,"policy":"full","budget":1})";
  const std::string b = R"({"task":"passkey","ctx":256,"depth":0.5,"seed":0,"policy":"leoam","budget":0.1})";
  const std::string text = a + "\n\n" + b + "\n" + R"({"task":"pass)";
  Result<ResultsFile> file = parse_results(text);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  ASSERT_EQ(file->lines.size(), 2u) << "the blank line skipped, the torn one not read";
  EXPECT_EQ(file->lines[1].at("policy"), "leoam");
  EXPECT_EQ(file->complete_bytes, a.size() + 2 + b.size() + 1);
  EXPECT_EQ(file->file_bytes, text.size());
  EXPECT_TRUE(file->torn());
  const SampleSpec spec{256, 0.5, 0, {}};
  EXPECT_EQ(file->run_keys(), (std::set<std::string>{run_key("passkey", spec, {"full", 1.0}, 0),
                                                     run_key("passkey", spec, {"leoam", 0.1}, 0)}));

  Result<ResultsFile> whole = parse_results(a + "\n");
  ASSERT_TRUE(whole.is_ok());
  EXPECT_FALSE(whole->torn());
  Result<ResultsFile> empty = parse_results("");
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->lines.empty());

  for (const std::string bad : {"not json\n", R"({"task":"passkey","ctx":256})" "\n", "[1, 2]\n"}) {
    Result<ResultsFile> r = parse_results(a + "\n" + bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().message(), "line 2: not a result line of an evaluation sweep");
  }
}

}  // namespace
}  // namespace leoam::eval
