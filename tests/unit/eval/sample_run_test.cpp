// One run of a sweep (eval/sample_run.h) over the tiny model: the fields of a retrieval and a ppl
// result line, an output equal to greedy generation through a session made by hand, the run's own
// store directory removed after it, and a stop asked for.
#include "eval/sample_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../engine/tiny_model_test.h"
#include "../temp_dir.h"

namespace leoam::eval {
namespace {

using Json = nlohmann::ordered_json;

class SampleRunTest : public TinyModelTest {
 protected:
  static SampleRunOptions options(const std::string& task) {
    SampleRunOptions o;
    o.task = task;
    o.session.kv.device_bytes = 96 << 10;
    o.session.kv.host_bytes = 32 << 10;
    o.session.kv.n_recent = 16;
    o.session.forward.n_threads = 2;
    return o;
  }
  // The sweep's first sample of `sweep`, planned for a context of 512.
  static SampleSpec first_sample(const SweepOptions& sweep) {
    Result<SweepPlan> plan = plan_sweep(sweep, *tokenizer_, 512);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    return plan.is_ok() ? plan->samples.front() : SampleSpec{};
  }
  static SampleSpec passkey(int64_t ctx) {
    SweepOptions o;
    o.task = "passkey";
    o.ctxs = {ctx};
    o.depths = {0.5};
    o.policies = {"full"};
    o.budgets = {0.1};
    return first_sample(o);
  }
  static SampleSpec ppl_window(int64_t ctx, double depth) {
    SweepOptions o;
    o.task = kPplTask;
    o.ctxs = {ctx};
    o.depths = {depth};
    o.policies = {"full"};
    o.budgets = {0.1};
    for (int i = 0; i < 20; ++i) o.text += "the quick brown fox " + std::to_string(i) + " jumps over the lazy dog. ";
    return first_sample(o);
  }
  // Greedy generation of spec's sample with full attention through a session of o's options,
  // as run_sample sets it up.
  static Result<GenerateStats> generate_full(const SampleRunOptions& o, const SampleSpec& spec,
                                             const GenerateCallbacks& cb) {
    SessionOptions so = o.session;
    so.attention.policy = "full";
    so.tiered = true;
    so.forward.n_ctx = static_cast<int>(spec.ctx + spec.sample.max_new_tokens);
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(*model_, so));
    GenerateOptions g;
    g.n_predict = spec.sample.max_new_tokens;
    g.sampler.temperature = 0.0f;
    return session->generate(*tokenizer_, spec.sample.tokens, false, g, cb);
  }
  static std::vector<std::string> keys(const Json& j) {
    std::vector<std::string> out;
    for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
    return out;
  }
};

TEST_F(SampleRunTest, ARetrievalLineHoldsItsFieldsAndTheGreedyOutput) {
  const SampleSpec spec = passkey(384);
  Result<Json> line = run_sample(*model_, *tokenizer_, options("passkey"), spec, {"full", 1.0}, 1);
  ASSERT_TRUE(line.is_ok()) << line.status().message();
  const Json& j = *line;
  EXPECT_EQ(keys(j), (std::vector<std::string>{"task", "ctx", "depth", "seed", "policy", "budget", "needle_pos", "answers",
                                               "output", "score", "tokens_attended_pct", "bytes_read",
                                               "kv_bytes_per_token", "n_generated", "decode_ms", "first_step_ms",
                                               "policy_memory_peak_bytes"}));
  EXPECT_EQ(j.at("task"), "passkey");
  EXPECT_EQ(j.at("ctx"), 384);
  EXPECT_EQ(j.at("depth"), 0.5);
  EXPECT_EQ(j.at("needle_pos"), spec.sample.needle_pos);
  EXPECT_EQ(j.at("answers"), Json(spec.sample.answers));
  EXPECT_EQ(j.at("score"), score_output(Scoring::kExactMatch, spec.sample.answers, j.at("output").get<std::string>()));
  EXPECT_EQ(j.at("tokens_attended_pct"), 100.0);
  EXPECT_EQ(j.at("policy_memory_peak_bytes"), 0);
  EXPECT_GT(j.at("bytes_read").at("device").get<uint64_t>(), 0u) << "every policy through the tiered store";
  EXPECT_GT(j.at("kv_bytes_per_token").at("device").get<double>(), 0.0);

  // The output is what greedy generation through a session of the same options writes.
  std::string output;
  GenerateCallbacks cb;
  cb.on_text = [&output](std::string_view t) { output += t; };
  Result<GenerateStats> stats = generate_full(options("passkey"), spec, cb);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  EXPECT_EQ(j.at("output").get<std::string>(), output);
  EXPECT_EQ(j.at("n_generated"), stats->n_generated);
}

TEST_F(SampleRunTest, ASparseRunRecordsItsShareItsStraddleAndItsExplanation) {
  const SampleSpec spec = passkey(384);
  SampleRunOptions o = options("passkey");
  o.straddle_chunk = 8;
  o.explain = true;
  Result<Json> line = run_sample(*model_, *tokenizer_, o, spec, {"leoam", 0.1}, 1);
  ASSERT_TRUE(line.is_ok()) << line.status().message();
  EXPECT_EQ(line->at("policy"), "leoam");
  EXPECT_EQ(line->at("budget"), 0.1);
  EXPECT_EQ(line->at("straddle_chunk"), 8);
  EXPECT_LT(line->at("tokens_attended_pct").get<double>(), 100.0);
  EXPECT_GT(line->at("policy_memory_peak_bytes").get<uint64_t>(), 0u);
  ASSERT_TRUE(line->contains("explain"));
  EXPECT_FALSE(line->at("explain").empty()) << "a record per step and layer";

  Result<Json> full = run_sample(*model_, *tokenizer_, o, spec, {"full", 1.0}, 2);
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  EXPECT_FALSE(full->contains("explain")) << "a dense policy has no selection to explain";

  // Both lines say how sure the model was of the answer's tokens, to the first written wrong;
  // full's probabilities are those of the rows that a session's logits sink gives.
  for (const Json* j : {&*line, &*full}) ASSERT_TRUE(j->contains("answer_probs")) << j->dump();
  std::vector<std::vector<double>> rows;  // softmax of each row, in double
  GenerateCallbacks cb;
  cb.on_logits = [&rows](std::span<const float> row) {
    const double m = *std::max_element(row.begin(), row.end());
    double z = 0.0;
    for (const float l : row) z += std::exp(l - m);
    std::vector<double> p;
    for (const float l : row) p.push_back(std::exp(l - m) / z);
    rows.push_back(std::move(p));
  };
  std::vector<int32_t> written;
  cb.on_token = [&written](int32_t t) { written.push_back(t); };
  const Result<GenerateStats> stats = generate_full(o, spec, cb);
  ASSERT_TRUE(stats.is_ok()) << stats.status().message();
  const std::vector<int32_t> expected =
      tokenizer_->tokenize(" " + spec.sample.answers.front(), /*add_bos=*/false, /*parse_special=*/false);
  const Json& probs = full->at("answer_probs");
  ASSERT_GE(probs.size(), 1u);
  for (size_t i = 0; i < probs.size(); ++i) {
    const std::vector<double>& p = rows[spec.sample.tokens.size() - 1 + i];  // the row token i was drawn from
    EXPECT_EQ(probs[i].at("expected"), tokenizer_->token_to_piece(expected[i]));
    EXPECT_EQ(probs[i].at("written"), tokenizer_->token_to_piece(written[i]));
    EXPECT_NEAR(probs[i].at("p_expected").get<double>(), p[static_cast<size_t>(expected[i])], 1e-5);
    EXPECT_NEAR(probs[i].at("p_written").get<double>(), p[static_cast<size_t>(written[i])], 1e-5);
    if (i + 1 < probs.size()) {
      EXPECT_EQ(written[i], expected[i]) << "the list ends at the first wrong token";
    }
  }
  EXPECT_TRUE(probs.size() == expected.size() || written[probs.size() - 1] != expected[probs.size() - 1]);
}

TEST_F(SampleRunTest, APplLineScoresTheWindowAfterItsPrefill) {
  const SampleSpec spec = ppl_window(64, 0.5);
  SampleRunOptions o = options(kPplTask);
  o.explain = true;
  Result<Json> line = run_sample(*model_, *tokenizer_, o, spec, {"leoam", 0.25}, 1);
  ASSERT_TRUE(line.is_ok()) << line.status().message();
  const Json& j = *line;
  EXPECT_EQ(keys(j), (std::vector<std::string>{"task", "ctx", "depth", "seed", "policy", "budget", "prefill_tokens",
                                               "nll_sum", "n_tokens", "n_bytes", "ppl", "bits_per_byte",
                                               "tokens_attended_pct", "bytes_read", "kv_bytes_per_token", "decode_ms",
                                               "policy_memory_peak_bytes", "explain_layers"}));
  EXPECT_EQ(j.at("prefill_tokens"), 31) << "floor(0.5 * 63)";
  EXPECT_EQ(j.at("n_tokens"), 32) << "every decoded position but the last predicts the next";
  const double nll_sum = j.at("nll_sum").get<double>();
  EXPECT_DOUBLE_EQ(j.at("ppl").get<double>(), std::exp(nll_sum / 32.0));
  EXPECT_DOUBLE_EQ(j.at("bits_per_byte").get<double>(), nll_sum / std::log(2.0) / j.at("n_bytes").get<double>());
  EXPECT_EQ(j.at("explain_layers").size(), 2u) << "one record per layer";
}

TEST_F(SampleRunTest, ARunsStoreLivesInItsOwnDirectoryRemovedAfterIt) {
  testing_util::TempDir dir;
  SampleRunOptions o = options("passkey");
  o.session.kv.dir = dir.path();
  const SampleSpec spec = passkey(384);
  Result<Json> on_disk = run_sample(*model_, *tokenizer_, o, spec, {"leoam", 0.1}, 7);
  ASSERT_TRUE(on_disk.is_ok()) << on_disk.status().message();
  EXPECT_GT(on_disk->at("bytes_read").at("disk").get<uint64_t>(), 0u) << "the tiers hold less than the KV";
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run-7"));
  EXPECT_TRUE(std::filesystem::exists(dir.path()));

  Result<Json> in_ram = run_sample(*model_, *tokenizer_, options("passkey"), spec, {"leoam", 0.1}, 7);
  ASSERT_TRUE(in_ram.is_ok()) << in_ram.status().message();
  EXPECT_EQ(on_disk->at("output"), in_ram->at("output")) << "where the KV lives changes no logit";
}

TEST_F(SampleRunTest, AStopAskedForCancelsTheRun) {
  for (const std::string task : {"passkey", kPplTask}) {
    SampleRunOptions o = options(task);
    o.session.forward.should_stop = [] { return true; };
    const SampleSpec spec = task == kPplTask ? ppl_window(64, 0.0) : passkey(384);
    Result<Json> line = run_sample(*model_, *tokenizer_, o, spec, {"full", 1.0}, 1);
    ASSERT_FALSE(line.is_ok()) << task;
    EXPECT_EQ(line.status().code(), StatusCode::kCancelled) << task << ": " << line.status().message();
  }
}

}  // namespace
}  // namespace leoam::eval
