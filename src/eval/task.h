// Evaluation tasks: seeded generators of long-context prompts whose answers are known, and their
// scoring. A prompt is built at the token level, so the needle sits exactly where asked:
//   [BOS] [instruction] [haystack ... ][needle][ ... haystack] [question]
//                                      ^ needle_pos = instruction + floor(depth * haystack tokens)
// Each piece is tokenized on its own and the ids concatenated, so a needle's tokens are exactly
// tokenize(needle text) wherever it lands. A sample depends only on its params, the tokenizer and
// bos, alike on every platform (FNV-1a, splitmix64 and mt19937_64 reduced by modulo); its answers
// only on (task, seed). Scoring, ASCII case-insensitive: exact match (each answer next, after only
// whitespace and punctuation) or recall (the share found), a digit-edged answer never inside a
// longer number. Tasks, placement and scoring in full: docs/evaluation.md#how-a-sample-is-built
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace leoam::eval {

// Token ids of `text` without BOS: the model's tokenizer.
using TokenizeFn = std::function<std::vector<int32_t>(std::string_view text)>;

struct TaskParams {
  std::string task = "passkey";  // task_names()
  int64_t context_tokens = 1024; // the whole prompt's length in tokens, BOS included
  double depth = 0.5;            // in [0, 1]: where the needle sits in the haystack
  uint64_t seed = 0;
  std::string haystack_text;     // real text to cut the haystack from; empty: filler sentences
  int64_t straddle_chunk = 0;    // > 0: the first needle straddles a multiple of this many tokens
};

struct Sample {
  std::vector<int32_t> tokens;       // the prompt, BOS first when bos >= 0
  int64_t needle_pos = 0;            // the token index where the (first) needle starts
  int64_t needle_tokens = 0;         // its length in tokens
  std::vector<std::string> answers;  // the expected values
  int max_new_tokens = 16;           // enough to say every answer
};

enum class Scoring { kExactMatch, kRecall };

// The development tasks, which policies may be tuned on: "passkey niah_single niah_multikey
// niah_multivalue niah_multiquery vt"
const char* task_names();
// The held-out tasks (heldout_tasks.h), which they must not be: "ledger logbook dialogue source"
const char* heldout_task_names();
Scoring task_scoring(std::string_view task);

// The sample of `params` for a tokenizer; bos < 0: no BOS. Fails for an unknown task, a depth
// outside [0, 1], a negative straddle_chunk, or a context too short for the instruction, the
// needles and the question (the message says how many tokens they need) or with no place for the
// needle across an edge. Deterministic: the same params give the same sample.
Result<Sample> make_sample(const TaskParams& params, const TokenizeFn& tokenize, int32_t bos);

// The score of a model's output in [0, 1]: exact match (0 or 1) or recall, by the task's scoring.
double score_output(Scoring scoring, const std::vector<std::string>& answers, std::string_view output);

}  // namespace leoam::eval
