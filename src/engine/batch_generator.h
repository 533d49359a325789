// Batched generation: several prompts, each in its own sequence (KV store and selector), decoded
// together, one pass over the weights a step for all the sequences still generating
// (ForwardContext::decode_batch).
//   per sequence: tokenize -> check it fits its store -> prefill (eval_sequence)
//   repeat { each active sequence samples its next token (its own sampler, seeded from
//            options.sampler.seed + its index); those that stop (end of generation, n_predict,
//            a full context) leave; the rest decode together }
// Each sequence gets the tokens it would get from generate() alone, up to the rounding of the
// batch's matrix products (a near tie in greedy sampling may tip). Its text is collected, not
// streamed. Stopping early (options.should_stop) ends every sequence with kInterrupted.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/generator.h"
#include "model/forward_context.h"

namespace leoam {

class Tokenizer;

struct BatchSequenceResult {
  std::string text;  // the generated tokens' text (the SentencePiece leading space kept)
  GenerateStats stats;
};

struct BatchGenerateStats {
  double prefill_ms = 0.0;  // all the prompts, one after the other
  double decode_ms = 0.0;   // from the first sample to the last step
  int64_t n_steps = 0;      // batched decode steps run
  int64_t n_generated = 0;  // tokens sampled, all sequences
  double decode_tokens_per_s() const { return decode_ms > 0 ? n_generated * 1000.0 / decode_ms : 0.0; }
};

// Generates from each of `prompts` into the sequence of the same index (fresh: empty stores) with
// `ctx`. Fails on a prompt that tokenizes to nothing or does not fit its store, on more prompts
// than sequences, and on the context's errors.
Result<std::vector<BatchSequenceResult>> generate_batch(ForwardContext& ctx, const Tokenizer& tokenizer,
                                                        std::span<const std::string> prompts,
                                                        std::span<const DecodeSequence> sequences,
                                                        const GenerateOptions& options,
                                                        BatchGenerateStats* totals = nullptr);

}  // namespace leoam
