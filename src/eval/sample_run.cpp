#include "eval/sample_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/explain_json.h"
#include "kv/kv_stats.h"

namespace leoam::eval {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Tokens attended as a percentage of those visible, over every layer and query the selector saw.
double attended_pct(const sparse::SparseAttention& selector) { return 100.0 * selector.total().attended_share(); }

// A line's "bytes_read": what the run read out of each tier, as `run --kv-stats` counts it.
Json bytes_read_json(const KvStats& stats) {
  Json j;
  j["device"] = stats[Tier::kDevice].bytes_read;
  j["host"] = stats[Tier::kHost].bytes_read;
  j["disk"] = stats[Tier::kDisk].bytes_read;
  return j;
}

// A line's "kv_bytes_per_token": the bytes each tier gave the decode since `before` (the stats
// at the end of the prefill), per decode step.
Json kv_bytes_per_token_json(const KvStats& before, const KvStats& after, int64_t n_steps) {
  Json j;
  for (const Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    const double n_bytes = static_cast<double>(after[t].bytes_read - before[t].bytes_read);
    j[tier_name(t)] = n_steps > 0 ? n_bytes / static_cast<double>(n_steps) : 0.0;
  }
  return j;
}

// A result line's first fields, which name its run (run_key()).
Json line_of(const SampleRunOptions& options, const SampleSpec& spec, const EvalRun& run) {
  Json j;
  j["task"] = options.task;
  j["ctx"] = spec.ctx;
  j["depth"] = spec.depth;
  j["seed"] = spec.seed;
  j["policy"] = run.policy;
  j["budget"] = run.budget;
  return j;
}

// Removes a run's store directory, before (a crashed run's) and after it.
struct RunDir {
  explicit RunDir(std::string d) : dir(std::move(d)) { remove(); }
  ~RunDir() { remove(); }
  void remove() const {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  std::string dir;
};

// ln sum_v e^row[v], in double: a logits row's log-softmax is row[v] minus it.
double log_sum_exp(std::span<const float> row) {
  double max_logit = row[0];
  for (const float l : row) max_logit = std::max(max_logit, static_cast<double>(l));
  double sum_exp = 0.0;
  for (const float l : row) sum_exp += std::exp(static_cast<double>(l) - max_logit);
  return max_logit + std::log(sum_exp);
}

// With --explain, how sure the model was of the first answer at each step that wrote it: for
// each of its tokens (" " + the answer, as explained) up to the first one the output got wrong,
// the probability of the expected token and of the one written. A miss whose expected token
// came close says that the model was on the edge there, whatever the policy.
class AnswerProbs {
 public:
  AnswerProbs(const Tokenizer& tok, const std::string& answer)
      : tok_(tok), expected_(tok.tokenize(" " + answer, /*add_bos=*/false, /*parse_special=*/false)) {}

  void add(std::span<const float> row, int32_t token) {
    const size_t step = n_seen_++;
    if (wrong_ || step >= expected_.size()) return;
    const double lse = log_sum_exp(row);
    const auto prob = [&](int32_t t) { return std::exp(static_cast<double>(row[static_cast<size_t>(t)]) - lse); };
    const int32_t want = expected_[step];
    steps_.push_back({{"expected", tok_.token_to_piece(want)},
                      {"p_expected", prob(want)},
                      {"written", tok_.token_to_piece(token)},
                      {"p_written", prob(token)}});
    wrong_ = token != want;
  }
  Json json() const { return steps_; }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> expected_;
  size_t n_seen_ = 0;
  bool wrong_ = false;
  Json steps_ = Json::array();
};

// Ppl: prefills the window's first ppl_prefill_tokens() as a prompt, then decodes the rest one
// token at a time (every position through the selector), summing the negative log-likelihood of
// each decoded position's next token: its line.
Result<Json> score_window(Session& session, const Tokenizer& tok, const SampleRunOptions& options,
                          const SampleSpec& spec, const EvalRun& run) {
  ForwardContext& ctx = session.context();
  const KvCache& kv_cache = session.kv();
  const sparse::SparseAttention* selector = session.selector();
  const std::function<bool()>& should_stop = options.session.forward.should_stop;
  const std::vector<int32_t>& tokens = spec.sample.tokens;
  std::vector<float> logits;  // [n_vocab]: the last evaluated position's
  const int64_t n_prefill = ppl_prefill_tokens(spec.ctx, spec.depth);
  if (n_prefill > 0) {
    LEOAM_RETURN_IF_ERROR(ctx.eval(std::span<const int32_t>(tokens.data(), static_cast<size_t>(n_prefill)),
                                   /*all_logits=*/false, logits));
  }
  const KvStats at_prefill_end = kv_cache.stats();
  double nll_sum = 0.0;
  int64_t n_bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // The last token predicts nothing in the window: it is never evaluated.
  for (size_t p = static_cast<size_t>(n_prefill); p + 1 < tokens.size(); ++p) {
    if (should_stop && should_stop()) return cancelled("interrupted");
    LEOAM_RETURN_IF_ERROR(ctx.eval(std::span<const int32_t>(&tokens[p], 1), /*all_logits=*/false, logits));
    const int32_t next = tokens[p + 1];
    nll_sum += log_sum_exp(logits) - static_cast<double>(logits[next]);
    n_bytes += static_cast<int64_t>(tok.token_to_piece(next).size());
  }
  const double decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t n_tokens = static_cast<int64_t>(tokens.size()) - 1 - n_prefill;
  Json j = line_of(options, spec, run);
  j["prefill_tokens"] = n_prefill;
  j["nll_sum"] = nll_sum;
  j["n_tokens"] = n_tokens;
  j["n_bytes"] = n_bytes;
  j["ppl"] = std::exp(nll_sum / static_cast<double>(n_tokens));
  j["bits_per_byte"] = n_bytes > 0 ? nll_sum / std::log(2.0) / static_cast<double>(n_bytes) : 0.0;
  j["tokens_attended_pct"] = selector != nullptr ? attended_pct(*selector) : 100.0;
  j["bytes_read"] = bytes_read_json(kv_cache.stats());
  j["kv_bytes_per_token"] = kv_bytes_per_token_json(at_prefill_end, kv_cache.stats(), n_tokens);
  j["decode_ms"] = decode_ms;
  j["policy_memory_peak_bytes"] = selector != nullptr ? selector->memory().peak_bytes : 0;
  return j;
}

}  // namespace

Result<Json> run_sample(const Model& model, const Tokenizer& tok, const SampleRunOptions& options,
                        const SampleSpec& spec, const EvalRun& run, int run_index) {
  const Sample& sample = spec.sample;
  const bool ppl = options.task == kPplTask;
  SessionOptions so = options.session;
  so.attention.policy = run.policy;
  so.attention.budget = run.budget;
  // A subdirectory per run: no run sees another's files, and none is left behind.
  if (!so.kv.dir.empty()) so.kv.dir = (fs::path(so.kv.dir) / ("run-" + std::to_string(run_index))).string();
  const RunDir run_dir(so.kv.dir);
  // Every policy through the tiered store (without a dir, in RAM): its counts compare.
  so.tiered = true;
  // Explained: the steps that write the first answer (its tokens after a space, and the space).
  std::vector<sparse::LayerExplanation> explanations;
  sparse::SparseAttentionOptions::Explain& explain = so.explain;
  if (options.explain && ppl) {  // every step, no target: the mass each layer's picks leave out
    explain.n_steps = std::numeric_limits<int64_t>::max();
    explain.out = &explanations;
  } else if (options.explain && !sample.answers.empty()) {
    explain.target = answer_in_needle(sample, tok);
    explain.n_steps = static_cast<int64_t>(
        tok.tokenize(" " + sample.answers.front(), /*add_bos=*/false, /*parse_special=*/false).size());
    explain.out = &explanations;
  }
  // The prompt and every answer token fit: checked when the sample was planned.
  so.forward.n_ctx = static_cast<int>(spec.ctx + sample.max_new_tokens);
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(model, so));
  const KvCache& kv_cache = session->kv();
  const sparse::SparseAttention* selector = session->selector();
  if (ppl) {
    LEOAM_ASSIGN_OR_RETURN(Json j, score_window(*session, tok, options, spec, run));
    if (explain.out != nullptr && selector != nullptr) j["explain_layers"] = explain_layers_json(explanations);
    return j;
  }

  GenerateOptions generate;
  generate.n_predict = sample.max_new_tokens;
  generate.should_stop = so.forward.should_stop;
  generate.sampler.temperature = 0.0f;  // greedy
  std::string output;
  GenerateCallbacks callbacks;
  callbacks.on_text = [&output](std::string_view text) { output += text; };
  KvStats at_prefill_end;
  callbacks.on_prefill_done = [&](int64_t) { at_prefill_end = kv_cache.stats(); };
  std::optional<AnswerProbs> answer_probs;
  if (options.explain && !sample.answers.empty()) {
    answer_probs.emplace(tok, sample.answers.front());
    callbacks.on_sample = [&answer_probs](std::span<const float> row, int32_t token) { answer_probs->add(row, token); };
  }
  LEOAM_ASSIGN_OR_RETURN(GenerateStats stats, session->generate(tok, sample.tokens, /*strip_leading_space=*/false,
                                                                generate, callbacks));
  if (stats.stop_reason == StopReason::kInterrupted) return cancelled("interrupted");

  Json j = line_of(options, spec, run);
  j["needle_pos"] = sample.needle_pos;
  if (options.straddle_chunk > 0) j["straddle_chunk"] = options.straddle_chunk;
  j["answers"] = sample.answers;
  j["output"] = output;
  j["score"] = score_output(task_scoring(options.task), sample.answers, output);
  j["tokens_attended_pct"] = selector != nullptr ? attended_pct(*selector) : 100.0;
  j["bytes_read"] = bytes_read_json(kv_cache.stats());
  const int64_t n_decoded = session->context().n_past() - static_cast<int64_t>(sample.tokens.size());
  j["kv_bytes_per_token"] = kv_bytes_per_token_json(at_prefill_end, kv_cache.stats(), n_decoded);
  j["n_generated"] = stats.n_generated;
  j["decode_ms"] = stats.decode_ms;
  j["first_step_ms"] = stats.first_step_ms;
  j["policy_memory_peak_bytes"] = selector != nullptr ? selector->memory().peak_bytes : 0;
  if (explain.out != nullptr && selector != nullptr) j["explain"] = explain_json(explanations);
  if (answer_probs) j["answer_probs"] = answer_probs->json();
  return j;
}

}  // namespace leoam::eval
