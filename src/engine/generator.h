// The generation loop: prompt text in, streamed text out.
//
//   tokenize(prompt) -> check it fits in n_ctx -> prefill (one eval of the whole prompt; the
//   ForwardContext splits it into n_batch chunks and reports progress through the
//   ForwardOptions::progress it was created with) -> repeat { sample, stream its text, eval }
//   until an end-of-generation token, n_predict tokens, or a full context.
//
// Streamed text: the pieces of the generated tokens, in order, with incomplete UTF-8 sequences
// held back until complete (see Utf8Stream). When the prompt text is empty (generation from BOS
// alone), the leading space that SentencePiece puts on a word-initial first token is removed,
// as Tokenizer::detokenize does. So the concatenation of everything passed to on_text equals
//   tokenizer.detokenize(generated_ids, /*remove_leading_space=*/prompt.empty()).
// End-of-generation tokens are counted in n_generated and passed to the sampler's history but
// their piece (empty for control tokens) is streamed like any other.
//
// Logits sink: when on_logits is set, it receives one row of n_vocab logits per position, in
// order: every prompt position (the prefill runs with all_logits), then every generated token,
// which is then always evaluated (even the last) so its row exists. Total rows:
// n_prompt_tokens + n_generated.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"

namespace leoam {

class ForwardContext;
class Tokenizer;

struct GenerateOptions {
  int n_predict = 128;        // tokens to generate at most; < 0: until EOG or a full context
  bool add_bos = true;        // prepend BOS to the prompt
  bool parse_special = false; // recognize special tokens written in the prompt text
  SamplerOptions sampler;
};

enum class StopReason : uint8_t {
  kEndOfGeneration,  // sampled an EOG token
  kMaxTokens,        // generated n_predict tokens
  kContextFull,      // no room left in the context for another token
};

struct GenerateStats {
  int64_t n_prompt_tokens = 0;
  int64_t n_generated = 0;
  double prefill_ms = 0.0;  // the prefill eval
  double decode_ms = 0.0;   // from the end of the prefill to the last token sampled (or evaluated)
  StopReason stop_reason = StopReason::kMaxTokens;

  double prefill_tokens_per_s() const { return prefill_ms > 0 ? n_prompt_tokens * 1000.0 / prefill_ms : 0.0; }
  double decode_tokens_per_s() const { return decode_ms > 0 ? n_generated * 1000.0 / decode_ms : 0.0; }
};

struct GenerateCallbacks {
  // Receives each sampled token id, before its text; may be empty.
  std::function<void(int32_t token)> on_token;
  // Receives the text of the generated tokens as soon as each is sampled; never called with "".
  std::function<void(std::string_view text)> on_text;
  // Receives each position's logits (see the header comment); may be empty.
  std::function<void(std::span<const float> logits)> on_logits;
  // Called once the prompt is evaluated, before the first token is sampled (e.g. to clear a
  // progress bar, or to take the time to first token); may be empty.
  std::function<void(int64_t n_prompt_tokens)> on_prefill_done;
};

// Tokenizes `prompt` with `tokenizer` and generates from it with `ctx`, which must be fresh
// (n_past() == 0). Fails with kInvalidArgument when the prompt is empty after tokenization or
// longer than the context, and passes on errors from eval().
Result<GenerateStats> generate(ForwardContext& ctx, const Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options, const GenerateCallbacks& callbacks);

// The same from prompt tokens (options.add_bos and parse_special are not used). `strip_leading_space`
// removes the SentencePiece leading space from the first generated token's piece.
Result<GenerateStats> generate_from_tokens(ForwardContext& ctx, const Tokenizer& tokenizer,
                                           std::span<const int32_t> prompt_tokens, bool strip_leading_space,
                                           const GenerateOptions& options, const GenerateCallbacks& callbacks);

}  // namespace leoam
