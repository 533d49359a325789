#include "engine/generator.h"

#include <chrono>
#include <string>

#include "engine/utf8_stream.h"
#include "model/forward_context.h"
#include "tokenizer/tokenizer.h"

namespace leoam {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<GenerateStats> generate(ForwardContext& ctx, const Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options, const GenerateCallbacks& callbacks) {
  if (ctx.n_past() != 0) {
    return invalid_argument("generate: the context already holds " + std::to_string(ctx.n_past()) +
                            " tokens; start from a fresh context");
  }
  const std::vector<int32_t> tokens = tokenizer.tokenize(prompt, options.add_bos, options.parse_special);
  return generate_from_tokens(ctx, tokenizer, tokens, prompt.empty(), options, callbacks);
}

Result<GenerateStats> generate_from_tokens(ForwardContext& ctx, const Tokenizer& tokenizer,
                                           std::span<const int32_t> prompt_tokens, bool strip_leading_space,
                                           const GenerateOptions& options, const GenerateCallbacks& callbacks) {
  const auto n_prompt = static_cast<int64_t>(prompt_tokens.size());
  const int64_t n_reused = ctx.n_past();
  if (n_prompt == 0) {
    return invalid_argument(
               "the prompt is empty and no BOS token is added (not asked for, or a vocab without BOS): nothing to "
               "generate from")
        .about(Setting::kBos);
  }
  if (n_prompt > ctx.n_ctx()) {
    return invalid_argument("prompt has " + std::to_string(n_prompt) + " tokens, more than the context size of " +
                            std::to_string(ctx.n_ctx()) + "; raise the context size or shorten the prompt")
        .about(Setting::kContextSize);
  }
  if (n_reused >= n_prompt) {
    return invalid_argument("generate: the context already holds " + std::to_string(n_reused) +
                            " positions and the prompt has " + std::to_string(n_prompt) +
                            " tokens, so there is nothing to evaluate for the first token's logits; "
                            "leave at least the last prompt token out of the context");
  }

  Sampler sampler(options.sampler);
  if (!options.sampler_rng_state.empty()) LEOAM_RETURN_IF_ERROR(sampler.restore_rng_state(options.sampler_rng_state));
  for (int32_t t : prompt_tokens) sampler.accept(t);

  GenerateStats stats;
  stats.n_prompt_tokens = n_prompt;
  stats.n_reused_tokens = n_reused;
  stats.tokens.assign(prompt_tokens.begin(), prompt_tokens.end());

  const auto n_vocab = static_cast<size_t>(ctx.n_vocab());
  const bool want_logits = static_cast<bool>(callbacks.on_logits);
  std::vector<float> logits;

  const std::span<const int32_t> to_eval = prompt_tokens.subspan(static_cast<size_t>(n_reused));
  const auto t_prefill = std::chrono::steady_clock::now();
  const Status prefilled = ctx.eval(to_eval, /*all_logits=*/want_logits, logits);
  stats.prefill_ms = ms_since(t_prefill);
  stats.n_prefilled = ctx.n_past() - n_reused;
  if (prefilled.code() == StatusCode::kCancelled) {
    stats.stop_reason = StopReason::kInterrupted;
    stats.sampler_rng_state = sampler.rng_state();
    return stats;
  }
  LEOAM_RETURN_IF_ERROR(prefilled);
  if (callbacks.on_prefill_done) callbacks.on_prefill_done(n_prompt);

  std::span<const float> row(logits);
  if (want_logits) {
    for (size_t i = 0; i < to_eval.size(); ++i) callbacks.on_logits(row.subspan(i * n_vocab, n_vocab));
    row = row.subspan((to_eval.size() - 1) * n_vocab, n_vocab);
  }

  auto emit = [&](const std::string& text) {
    if (!text.empty() && callbacks.on_text) callbacks.on_text(text);
  };

  Utf8Stream stream;
  const auto t_decode = std::chrono::steady_clock::now();
  const StopRules rules{options.n_predict};
  for (;;) {
    if (const std::optional<StopReason> why = rules.before_sample(stats.n_generated, ctx.n_past(), ctx.n_ctx())) {
      stats.stop_reason = *why;
      break;
    }
    if (options.should_stop && options.should_stop()) {
      stats.stop_reason = StopReason::kInterrupted;
      break;
    }
    const int32_t token = sampler.sample(row);
    if (callbacks.on_sample) callbacks.on_sample(row, token);
    sampler.accept(token);
    stats.tokens.push_back(token);
    const bool first = stats.n_generated == 0;
    ++stats.n_generated;
    if (callbacks.on_token) callbacks.on_token(token);
    emit(stream.push(first && strip_leading_space ? tokenizer.detokenize({token}, /*remove_leading_space=*/true)
                                                  : tokenizer.token_to_piece(token)));

    const std::optional<StopReason> end = rules.after_token(tokenizer.is_eog(token), stats.n_generated);
    // The last token needs no eval unless its logits row was asked for.
    if (want_logits || !end) {
      const int32_t one[1] = {token};
      const auto t_step = std::chrono::steady_clock::now();
      LEOAM_RETURN_IF_ERROR(ctx.eval(one, /*all_logits=*/false, logits));
      if (first) stats.first_step_ms = ms_since(t_step);
      row = logits;
      if (want_logits) callbacks.on_logits(row);
    }
    if (end) {
      stats.stop_reason = *end;
      break;
    }
  }
  emit(stream.flush());
  stats.decode_ms = ms_since(t_decode);
  stats.sampler_rng_state = sampler.rng_state();
  return stats;
}

}  // namespace leoam
