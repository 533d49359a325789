#include "eval/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "sparse/policy_registry.h"

namespace leoam::eval {
namespace {

using Json = nlohmann::ordered_json;

// The values of `v` in the order they first appear.
template <typename T>
std::vector<T> without_repeats(const std::vector<T>& v) {
  std::vector<T> out;
  for (const T& x : v) {
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return out;
}

std::string run_key(const std::string& task, int64_t ctx, double depth, uint64_t seed, const std::string& policy,
                    double budget, int64_t straddle_chunk) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s|%lld|%.17g|%llu|%s|%.17g|%lld", task.c_str(), static_cast<long long>(ctx), depth,
                static_cast<unsigned long long>(seed), policy.c_str(), budget, static_cast<long long>(straddle_chunk));
  return buf;
}

// Appends the windows of `ctx` tokens cut from `text` (BOS first when bos >= 0), at most
// n_windows of them (0: every whole one), each a sample with `depth` and its index as seed.
Status add_windows(const std::vector<int32_t>& text, int64_t ctx, double depth, int32_t bos, int64_t n_windows,
                   std::vector<SampleSpec>& samples) {
  if (ctx < 2) {
    return invalid_argument("ppl: a window of ctx " + std::to_string(ctx) +
                            " tokens leaves no next token to score; windows need 2 tokens or more");
  }
  if (ppl_prefill_tokens(ctx, depth) > ctx - 2) {
    return invalid_argument("ppl: depth " + format_number(depth) + " prefills " +
                            std::to_string(ppl_prefill_tokens(ctx, depth)) + " of the " + std::to_string(ctx) +
                            " tokens of a window, which leaves no token to decode and score; use a smaller depth");
  }
  const int64_t n_text_per_window = bos >= 0 ? ctx - 1 : ctx;  // [BOS] + text tokens
  int64_t n_whole = static_cast<int64_t>(text.size()) / n_text_per_window;
  if (n_whole == 0) {
    return invalid_argument("ppl: the text has " + std::to_string(text.size()) + " tokens, fewer than one window of ctx " +
                            std::to_string(ctx) + " (" + std::to_string(n_text_per_window) +
                            " text tokens); use a longer text or a smaller ctx");
  }
  if (n_windows > 0) n_whole = std::min(n_whole, n_windows);
  for (int64_t w = 0; w < n_whole; ++w) {
    SampleSpec spec;
    spec.ctx = ctx;
    spec.depth = depth;
    spec.seed = static_cast<uint64_t>(w);
    std::vector<int32_t>& tokens = spec.sample.tokens;
    tokens.reserve(static_cast<size_t>(ctx));
    if (bos >= 0) tokens.push_back(bos);
    // A loop, not insert(): GCC 12 reports a false -Wstringop-overflow on the range insert.
    for (int64_t i = w * n_text_per_window; i < (w + 1) * n_text_per_window; ++i) {
      tokens.push_back(text[static_cast<size_t>(i)]);
    }
    spec.sample.max_new_tokens = 0;
    samples.push_back(std::move(spec));
  }
  return Status::ok();
}

}  // namespace

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string policy_label(const std::string& policy, double budget) {
  return sparse::is_dense_policy(policy) ? policy : policy + "@" + format_number(budget);
}

int64_t ppl_prefill_tokens(int64_t ctx, double depth) {
  return static_cast<int64_t>(std::floor(depth * static_cast<double>(ctx - 1)));
}

Result<SweepPlan> plan_sweep(const SweepOptions& options, const Tokenizer& tok, int64_t n_ctx_limit) {
  const bool ppl = options.task == kPplTask;
  const TokenizeFn tokenize = [&tok](std::string_view text) {
    return tok.tokenize(text, /*add_bos=*/false, /*parse_special=*/false);
  };
  // BOS only where the tokenizer puts one before a prompt.
  const std::vector<int32_t> probe = tok.tokenize("a", /*add_bos=*/true, /*parse_special=*/false);
  const int32_t bos = tok.bos_id() >= 0 && !probe.empty() && probe.front() == tok.bos_id() ? tok.bos_id() : -1;
  const std::vector<int32_t> text_tokens = ppl ? tokenize(options.text) : std::vector<int32_t>{};
  SweepPlan plan;
  for (const int64_t ctx : without_repeats(options.ctxs)) {
    if (ctx > n_ctx_limit) {
      return invalid_argument("ctx " + std::to_string(ctx) + " is larger than the context of " +
                              std::to_string(n_ctx_limit) + " tokens");
    }
    for (const double depth : without_repeats(options.depths)) {
      if (ppl) {
        LEOAM_RETURN_IF_ERROR(add_windows(text_tokens, ctx, depth, bos, options.n_windows, plan.samples));
        continue;
      }
      for (uint64_t seed = options.first_seed; seed < options.first_seed + static_cast<uint64_t>(options.n_seeds);
           ++seed) {
        TaskParams params;
        params.task = options.task;
        params.context_tokens = ctx;
        params.depth = depth;
        params.seed = seed;
        params.haystack_text = options.haystack_text;
        params.straddle_chunk = options.straddle_chunk;
        LEOAM_ASSIGN_OR_RETURN(Sample sample, make_sample(params, tokenize, bos));
        if (ctx + sample.max_new_tokens > n_ctx_limit) {
          return invalid_argument("ctx " + std::to_string(ctx) + ": the prompt and its " +
                                  std::to_string(sample.max_new_tokens) + " answer tokens need " +
                                  std::to_string(ctx + sample.max_new_tokens) +
                                  " positions, more than the context of " + std::to_string(n_ctx_limit));
        }
        plan.samples.push_back({ctx, depth, seed, std::move(sample)});
      }
    }
  }
  for (const std::string& policy : without_repeats(options.policies)) {
    if (sparse::is_dense_policy(policy)) {
      plan.runs.push_back({policy, 1.0});
      continue;
    }
    for (const double budget : without_repeats(options.budgets)) plan.runs.push_back({policy, budget});
  }
  return plan;
}

std::string run_key(const std::string& task, const SampleSpec& spec, const EvalRun& run, int64_t straddle_chunk) {
  return run_key(task, spec.ctx, spec.depth, spec.seed, run.policy, run.budget, straddle_chunk);
}

std::string run_key(const Json& line) {
  return run_key(line.at("task").get<std::string>(), line.at("ctx").get<int64_t>(), line.at("depth").get<double>(),
                 line.at("seed").get<uint64_t>(), line.at("policy").get<std::string>(), line.at("budget").get<double>(),
                 line.value("straddle_chunk", int64_t{0}));
}

std::set<std::string> ResultsFile::run_keys() const {
  std::set<std::string> keys;
  for (const Json& j : lines) keys.insert(run_key(j));
  return keys;
}

Result<ResultsFile> parse_results(std::string_view text) {
  ResultsFile out;
  out.file_bytes = text.size();
  const size_t last_newline = text.rfind('\n');
  out.complete_bytes = last_newline == std::string_view::npos ? 0 : last_newline + 1;
  size_t line_no = 0;
  for (size_t begin = 0; begin < out.complete_bytes;) {
    const size_t end = text.find('\n', begin);
    ++line_no;
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("task") || !j.contains("ctx") || !j.contains("depth") ||
        !j.contains("seed") || !j.contains("policy") || !j.contains("budget")) {
      return corrupt("line " + std::to_string(line_no) + ": not a result line of an evaluation sweep");
    }
    out.lines.push_back(std::move(j));
  }
  return out;
}

}  // namespace leoam::eval
