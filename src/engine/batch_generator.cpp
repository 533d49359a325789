#include "engine/batch_generator.h"

#include <chrono>
#include <utility>

#include "engine/sampler.h"
#include "engine/stop_rules.h"
#include "engine/utf8_stream.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace leoam {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// One prompt's generation in progress.
struct Running {
  Sampler sampler;
  Utf8Stream stream;
  std::vector<float> row;  // the logits its next token is sampled from
  bool done = false;
};

}  // namespace

Result<std::vector<BatchSequenceResult>> generate_batch(ForwardContext& ctx, const Tokenizer& tokenizer,
                                                        std::span<const std::string> prompts,
                                                        std::span<const DecodeSequence> sequences,
                                                        const GenerateOptions& options, BatchGenerateStats* totals) {
  if (prompts.size() > sequences.size()) {
    return invalid_argument(std::to_string(prompts.size()) + " prompts for " + std::to_string(sequences.size()) +
                            " sequences");
  }
  const size_t n = prompts.size();
  const auto n_vocab = static_cast<size_t>(ctx.n_vocab());
  std::vector<BatchSequenceResult> results(n);
  std::vector<Running> running;
  running.reserve(n);
  BatchGenerateStats batch;
  const auto t_prefill = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int32_t> tokens = tokenizer.tokenize(prompts[i], options.add_bos, options.parse_special);
    KvCache& kv = *sequences[i].kv;
    if (tokens.empty()) return invalid_argument("prompt " + std::to_string(i + 1) + " is empty: nothing to generate from");
    if (static_cast<int64_t>(tokens.size()) > kv.n_ctx()) {
      return invalid_argument("prompt " + std::to_string(i + 1) + " has " + std::to_string(tokens.size()) +
                              " tokens, more than the context size of " + std::to_string(kv.n_ctx()) +
                              "; raise the context size or shorten the prompt")
          .about(Setting::kContextSize);
    }
    SamplerOptions so = options.sampler;
    so.seed = options.sampler.seed + i;
    running.push_back({Sampler(so), Utf8Stream(), {}, false});
    for (int32_t t : tokens) running[i].sampler.accept(t);
    GenerateStats& s = results[i].stats;
    s.n_prompt_tokens = static_cast<int64_t>(tokens.size());
    s.tokens = tokens;
    const auto t0 = std::chrono::steady_clock::now();
    LEOAM_RETURN_IF_ERROR(ctx.eval_sequence(sequences[i], tokens, false, running[i].row));
    s.prefill_ms = elapsed_ms(t0);
    s.n_prefilled = s.n_prompt_tokens;
  }
  batch.prefill_ms = elapsed_ms(t_prefill);

  const auto t_decode = std::chrono::steady_clock::now();
  std::vector<BatchToken> step;
  std::vector<size_t> rows;  // step row -> sequence
  std::vector<float> logits;
  const StopRules rules{options.n_predict};
  for (;;) {
    step.clear();
    rows.clear();
    const bool stop = options.should_stop && options.should_stop();
    for (size_t i = 0; i < n; ++i) {
      Running& r = running[i];
      GenerateStats& s = results[i].stats;
      if (r.done) continue;
      const KvCache& kv = *sequences[i].kv;
      const auto finish = [&](StopReason why) {
        r.done = true;
        s.stop_reason = why;
        results[i].text += r.stream.flush();
      };
      if (stop) {
        finish(StopReason::kInterrupted);
        continue;
      }
      if (const std::optional<StopReason> why = rules.before_sample(s.n_generated, kv.n_tokens(), kv.n_ctx())) {
        finish(*why);
        continue;
      }
      const int32_t token = r.sampler.sample(r.row);
      r.sampler.accept(token);
      s.tokens.push_back(token);
      ++s.n_generated;
      ++batch.n_generated;
      results[i].text += r.stream.push(tokenizer.token_to_piece(token));
      if (const std::optional<StopReason> end = rules.after_token(tokenizer.is_eog(token), s.n_generated)) {
        finish(*end);  // the last token needs no step
        continue;
      }
      step.push_back({token, sequences[i]});
      rows.push_back(i);
    }
    if (step.empty()) break;
    LEOAM_RETURN_IF_ERROR(ctx.decode_batch(step, logits));
    ++batch.n_steps;
    for (size_t k = 0; k < rows.size(); ++k) {
      std::vector<float>& row = running[rows[k]].row;
      row.assign(logits.begin() + k * n_vocab, logits.begin() + (k + 1) * n_vocab);
    }
  }
  batch.decode_ms = elapsed_ms(t_decode);
  for (size_t i = 0; i < n; ++i) {
    results[i].stats.decode_ms = batch.decode_ms;  // the steps are shared
    results[i].stats.sampler_rng_state = running[i].sampler.rng_state();
  }
  if (totals != nullptr) *totals = batch;
  return results;
}

}  // namespace leoam
