// The generation loop: prompt text in, streamed text out.
//
//   tokenize(prompt) -> check it fits in n_ctx -> prefill (one eval of the prompt tokens the
//   context does not hold yet, in n_batch chunks) -> repeat { sample, stream its text, eval }
//   until an end-of-generation token, n_predict tokens, or a full context.
//
// Streamed text: the pieces of the generated tokens, in order, incomplete UTF-8 held back until
// complete (Utf8Stream); end-of-generation tokens are streamed too (empty for control tokens).
// So everything passed to on_text equals tokenizer.detokenize(generated_ids, prompt.empty()): an
// empty prompt drops the SentencePiece leading space. Resuming: generate_from_tokens below.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/stop_rules.h"  // StopReason

namespace leoam {

class ForwardContext;
class Tokenizer;

struct GenerateOptions {
  int n_predict = 128;        // tokens to generate at most; < 0: until EOG or a full context
  bool add_bos = true;        // prepend BOS to the prompt
  bool parse_special = false; // recognize special tokens written in the prompt text
  SamplerOptions sampler;
  // non-empty: the sampler's random stream continues from this state (a resumed session); see
  // GenerateStats::sampler_rng_state and Sampler::rng_state.
  std::string sampler_rng_state;
  // Polled before each token is sampled, and during the prefill between chunks (the context must
  // have been created with the same callback as ForwardOptions::should_stop); true returns the
  // stats so far with StopReason::kInterrupted. A prefill stopped so leaves prefill_complete()
  // false, and the context holds the KV of the chunks done. May be empty.
  std::function<bool()> should_stop;
};

struct GenerateStats {
  int64_t n_prompt_tokens = 0;
  int64_t n_reused_tokens = 0;  // prompt positions whose KV the context already held (not evaluated)
  // prompt positions the prefill evaluated: n_prompt_tokens - n_reused_tokens, unless interrupted
  int64_t n_prefilled = 0;
  int64_t n_generated = 0;
  double prefill_ms = 0.0;  // the prefill eval (of the n_prompt_tokens - n_reused_tokens others)
  double decode_ms = 0.0;   // from the end of the prefill to the last token sampled (or evaluated)
  // The first decode eval, part of decode_ms: a sparse policy's first selection after a prefill
  // builds its indexes over the whole prompt there (0 when no token was evaluated).
  double first_step_ms = 0.0;
  StopReason stop_reason = StopReason::kMaxTokens;
  std::vector<int32_t> tokens;    // the whole sequence: prompt tokens, then the generated ones
  std::string sampler_rng_state;  // the sampler's state after the last token was sampled

  bool prefill_complete() const { return n_reused_tokens + n_prefilled == n_prompt_tokens; }
  double prefill_tokens_per_s() const {
    return prefill_ms > 0 ? static_cast<double>(n_prefilled) * 1000.0 / prefill_ms : 0.0;
  }
  double decode_tokens_per_s() const { return decode_ms > 0 ? n_generated * 1000.0 / decode_ms : 0.0; }
};

struct GenerateCallbacks {
  // Receives each sampled token id, before its text; may be empty.
  std::function<void(int32_t token)> on_token;
  // Receives the text of the generated tokens as soon as each is sampled; never called with "".
  std::function<void(std::string_view text)> on_text;
  // Receives one row of n_vocab logits per evaluated position, in order: every prompt position
  // the prefill evaluates (it runs with all_logits; the n_reused_tokens positions whose KV the
  // context already held get no row), then every generated token, which is then always
  // evaluated (even the last) so its row exists. Total rows: n_prompt_tokens - n_reused_tokens +
  // n_generated. May be empty.
  std::function<void(std::span<const float> logits)> on_logits;
  // Receives each generated token with the row of n_vocab logits it was sampled from, before
  // on_token. Unlike on_logits it asks for no extra rows: the prefill keeps its last row only,
  // and the last token is not evaluated for it. May be empty.
  std::function<void(std::span<const float> logits, int32_t token)> on_sample;
  // Called once the prompt is evaluated, before the first token is sampled (e.g. to clear a
  // progress bar, or to take the time to first token), with the whole prompt's size (reused
  // positions included); may be empty.
  std::function<void(int64_t n_prompt_tokens)> on_prefill_done;
};

// Tokenizes `prompt` with `tokenizer` and generates from it with `ctx`, which must be fresh
// (n_past() == 0). Fails with kInvalidArgument when the context is not fresh, or the prompt is
// empty after tokenization or longer than the context; passes on errors from eval() and from
// restoring options.sampler_rng_state.
Result<GenerateStats> generate(ForwardContext& ctx, const Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options, const GenerateCallbacks& callbacks);

// The same from prompt tokens (options.add_bos and parse_special are not used). `strip_leading_space`
// removes the SentencePiece leading space from the first generated token's piece.
// `ctx` may already hold the KV of prompt_tokens[0, ctx.n_past()) (the caller vouches that it
// is that prefix; nothing here can check it): only [n_past(), size) is evaluated, but every
// prompt token enters the sampler's history, so the repetition penalty sees the whole sequence.
// At least one prompt token must be left to evaluate, since the first token is sampled from its
// logits: n_past() >= prompt_tokens.size() fails with kInvalidArgument, as does an empty
// prompt or one longer than the context.
// Resuming: when a call stops at n_predict or at an end-of-generation token, its context holds
// the KV of all of stats.tokens but the last (the last sampled token is not evaluated unless
// on_logits is set). Passing stats.tokens as the prompt tokens and stats.sampler_rng_state in
// GenerateOptions (same model, same sampler options, strip_leading_space false) continues where
// the call stopped: the same tokens and text as one unbroken call, at any temperature.
Result<GenerateStats> generate_from_tokens(ForwardContext& ctx, const Tokenizer& tokenizer,
                                           std::span<const int32_t> prompt_tokens, bool strip_leading_space,
                                           const GenerateOptions& options, const GenerateCallbacks& callbacks);

}  // namespace leoam
