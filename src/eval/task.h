// Evaluation tasks: seeded generators of long-context prompts whose answers are known, and their
// scoring. Every task takes a context length (in tokens of the model's tokenizer) and a depth;
// the prompt is built at the token level, so the needle sits exactly where asked:
//
//   [BOS] [instruction] [haystack ... ][needle][ ... haystack] [question]
//                       ^ haystack token 0
//                                      ^ needle_pos = instruction + floor(depth * haystack tokens)
//
// Multi-needle tasks put their other needles into the haystack too: "haystack tokens" counts the
// haystack alone, and needle_pos grows by the lengths of the other needles placed before it.
//
// Across a chunk edge (straddle_chunk = N > 0): the first needle goes instead at the haystack
// boundary whose needle_pos is nearest the depth's and puts a multiple of N (a store chunk's or
// tree leaf's edge) strictly inside the needle, cutting its answer's tail off: the tokens that hold
// the answer's first occurrence in the needle end 1 or 2 (seeded) tokens past the edge.
//
//   ... haystack ][ One of the special magic numbers for apple is: 12345|67. ][ haystack ...
//                  ^ needle_pos                                          ^ a multiple of N (tail 2)
//
// Haystacks are filler sentences (the generator's own), or real long text (e.g. a book from
// ../shared/fixtures/text), cut at token granularity to fill the context.
//
// Tasks:
//   passkey         "The pass key is 58213. Remember it." in the haystack; "What is the pass key?"
//   niah_single     one "special magic number for <word> is <7 digits>" needle (RULER's single NIAH)
//   niah_multikey   that needle plus 3 distractors with other words and values; asks for the first
//   niah_multivalue 4 needles for one word with 4 values; asks for all 4 (recall)
//   niah_multiquery 4 needles for 4 words; asks for the values of all 4 words (recall)
//   vt              "VAR ABCDE = 12345." then 4 hops "VAR FGHIJ = VAR ABCDE." ... after it; asks
//                   which variables hold 12345 (recall over the 5 names; RULER's variable tracking)
// Held-out tasks (heldout_tasks.cpp), each with a filler of its own instead of the sentences:
//   ledger          a number-dense ledger of days, places and amounts; one account's float
//   logbook         timestamped log lines with badge and gate numbers; the code a vault was reset to
//   dialogue        a transcript of speakers chatting; the locker number one of them tells
//   source          C source code; the value one constant is set to
//
// The first needle (needle_pos, needle_tokens) sits at the requested depth (with straddle_chunk,
// near it). The others go in whole at haystack token boundaries, so no needle splits another:
// each draws a seeded fraction f in [0, 1] and goes at boundary floor(f * haystack tokens); vt's
// hops go at floor(f * haystack tokens after the first needle) past it, in chain order. Needles
// at the same boundary sit side by side: the first needle, then the others in order. The
// fractions depend only on (task, seed), like the answers.
//
// Each text piece (instruction, needle, question, haystack) is tokenized on its own and the ids
// concatenated, so the needle's tokens are exactly tokenize(needle text) wherever it lands. The
// needle text starts with a space so a BPE vocab reads it as words; a SentencePiece vocab that adds
// a dummy prefix gives every piece a leading "▁" (the needle then starts "▁" "▁The").
//
// Haystack: with haystack_text, the text is tokenized once and n_haystack tokens are taken from a
// seeded token offset (wrapping to the text's start only when it has fewer tokens than needed);
// otherwise seeded filler sentences (no digits, nothing like a needle), cut to n_haystack tokens.
//
// Determinism: a sample depends only on (task, seed, depth, context_tokens, haystack_text,
// straddle_chunk, the tokenizer, bos); straddle_chunk 0 gives the samples it always gave. Seeds
// go through FNV-1a of the task name, splitmix64 and mt19937_64, reduced by modulo (not
// std::uniform_int_distribution, whose algorithm is implementation-defined), so samples are the
// same on every platform. The answer depends only on (task, seed): one seed asks for the
// same value at every depth and context length, and so does the 1 or 2 of straddle_chunk.
//
// Scoring (ASCII case-insensitive; no answers scores 0):
//   exact match  each answer in turn comes next in the output with only whitespace and punctuation
//                before it (" 58213." and ": 58213 is it" match; "is 58213" does not)
//   recall       the fraction of answers found anywhere in the output
// In both, an answer that starts (ends) with a digit must not have a digit just before (after) it:
// "123" does not match inside "91234", and "58213" does not match "582130".
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
