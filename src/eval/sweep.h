// An evaluation sweep's plan: its samples (a retrieval prompt per (ctx, depth, seed), or a ppl
// window per (ctx, depth, index)) and, for each, its runs (a policy at each budget; a dense one
// once, at budget 1). Each run's result is one JSON line of a results file, named by run_key(), so
// a sweep resumes by skipping the runs whose keys the file holds. Every sample is built, and every
// fit checked, before a run starts. The sweep and its lines: docs/evaluation.md#the-lines-of---out
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/task.h"
#include "tokenizer/tokenizer.h"

namespace leoam::eval {

// Perplexity over a text: not one of task_names(); the sweep scores windows of SweepOptions::text.
inline constexpr const char* kPplTask = "ppl";

struct SweepOptions {
  std::string task;                   // task_names(), heldout_task_names() or kPplTask
  std::vector<int64_t> ctxs;          // prompt lengths in tokens, BOS included
  std::vector<double> depths;         // needle depths; ppl: the share of each window prefilled
  uint64_t first_seed = 0;            // retrieval: seeds [first_seed, first_seed + n_seeds)
  int n_seeds = 1;
  std::vector<std::string> policies;  // sparse/policy_registry.h
  std::vector<double> budgets;        // each sparse policy runs at each
  std::string haystack_text;          // TaskParams::haystack_text
  int64_t straddle_chunk = 0;         // TaskParams::straddle_chunk
  std::string text;                   // ppl: the text cut into consecutive windows
  int64_t n_windows = 0;              // ppl: at most this many windows of each ctx; 0: every whole one
};

// One (policy, budget) of the sweep; a dense policy's budget is 1.
struct EvalRun {
  std::string policy;
  double budget = 1.0;
};

// A ppl window's seed is its index in the text.
struct SampleSpec {
  int64_t ctx = 0;
  double depth = 0.0;
  uint64_t seed = 0;
  Sample sample;
};

struct SweepPlan {
  std::vector<SampleSpec> samples;  // by ctx, then depth, then seed
  std::vector<EvalRun> runs;        // by policy, then budget
};

// %g: "0.1", "16".
std::string format_number(double x);
// "full" (a dense policy has no budget), or "leoam@0.1".
std::string policy_label(const std::string& policy, double budget);

// Ppl: the tokens of a window of `ctx` prefilled at `depth`, floor(depth * (ctx - 1)).
int64_t ppl_prefill_tokens(int64_t ctx, double depth);

// The plan of `options` for a tokenizer whose context holds n_ctx_limit positions; repeated values
// count once. Fails, saying which ctx or depth, for a sample make_sample() refuses, a prompt and
// its answer that do not fit, or a ppl text with no whole window or a depth that leaves no token
// to score.
Result<SweepPlan> plan_sweep(const SweepOptions& options, const Tokenizer& tok, int64_t n_ctx_limit);

// What names a run in the results file: its task, sample, policy and budget, and the straddle
// (doubles with 17 digits, which JSON reads back exactly).
std::string run_key(const std::string& task, const SampleSpec& spec, const EvalRun& run, int64_t straddle_chunk);
// The key of a result line (one that parse_results() accepted).
std::string run_key(const nlohmann::ordered_json& line);

// A results file's text as read back: its complete lines, parsed; where they end (a torn last
// line, an interrupted write, starts there); and how many bytes it has.
struct ResultsFile {
  std::vector<nlohmann::ordered_json> lines;
  uint64_t complete_bytes = 0;
  uint64_t file_bytes = 0;

  bool torn() const { return complete_bytes < file_bytes; }
  // The keys of its lines: the runs a resumed sweep skips.
  std::set<std::string> run_keys() const;
};

// Parses a results file's text (blank lines skipped). Fails, naming the line ("line 3: ..."), on
// a complete line that is not a result: not a JSON object with task, ctx, depth, seed, policy and
// budget.
Result<ResultsFile> parse_results(std::string_view text);

}  // namespace leoam::eval
