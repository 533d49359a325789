// `leoam eval`: score a model on long-context retrieval tasks (src/eval/task.h) across a sweep of
// context lengths, needle depths, seeds and sparse attention policies at several budgets; with
// `--task ppl`, perplexity of --text windows decoded token by token after a prefill of depth D.
// For each (ctx, depth, seed) the sample is built once; each (policy, budget) then generates
// greedily through a fresh context and KV store (the tiered store for every policy, full
// included, so the bytes compare), and its result is one JSON line appended to --out and flushed
// at once, so an interrupted sweep resumes (runs --out holds are skipped; a torn last line is cut
// off). Every flag is checked and every sample built before --out is touched. stdout: the closing
// markdown table (with --show, a block per run before it); stderr: progress and errors. Ctrl-C
// stops the run in progress and prints the table of those done (exit 130); a second exits at once.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "cli_common.h"
#include "engine/generator.h"
#include "eval/task.h"
#include "eval_explain.h"
#include "kv/kv_stats.h"
#include "kv_options.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "progress_bar.h"
#include "sigint_scope.h"
#include "sparse/budget_schedule.h"
#include "sparse/policy_registry.h"
#include "sparse/selection_policy.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Perplexity over a text: not one of eval::task_names(), this command handles it.
constexpr const char* kPplTask = "ppl";

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

template <typename T>
void remove_duplicates(std::vector<T>& v) {
  std::vector<T> out;
  for (const T& x : v) {
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  v = std::move(out);
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

// "full" (a dense policy has no budget), or "leoam@0.1".
std::string policy_label(const std::string& policy, double budget) {
  return sparse::is_dense_policy(policy) ? policy : policy + "@" + format_number(budget);
}

// What identifies a run in --out: doubles print with 17 digits, which JSON reads back exactly.
std::string run_key(const std::string& task, int64_t ctx, double depth, uint64_t seed, const std::string& policy,
                    double budget, int64_t straddle_chunk) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s|%lld|%.17g|%llu|%s|%.17g|%lld", task.c_str(), static_cast<long long>(ctx), depth,
                static_cast<unsigned long long>(seed), policy.c_str(), budget, static_cast<long long>(straddle_chunk));
  return buf;
}

// One (policy, budget) of the sweep; full's budget is 1.
struct EvalRun {
  std::string policy;
  double budget = 1.0;
};

struct SampleSpec {
  int64_t ctx = 0;
  double depth = 0.0;
  uint64_t seed = 0;
  eval::Sample sample;
};

// The lines --out holds: the complete ones, parsed; where the complete ones end (a torn last line
// starts there); and how many bytes the file has.
struct ResultsFile {
  std::vector<Json> lines;
  uint64_t complete_bytes = 0;
  uint64_t file_bytes = 0;
};

Result<ResultsFile> read_results(const std::string& path) {
  ResultsFile out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  LEOAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  out.file_bytes = text.size();
  const size_t last_newline = text.rfind('\n');
  out.complete_bytes = last_newline == std::string::npos ? 0 : last_newline + 1;
  size_t line_no = 0;
  for (size_t begin = 0; begin < out.complete_bytes;) {
    const size_t end = text.find('\n', begin);
    ++line_no;
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("task") || !j.contains("ctx") || !j.contains("depth") ||
        !j.contains("seed") || !j.contains("policy") || !j.contains("budget")) {
      return corrupt("--out file '" + path + "' line " + std::to_string(line_no) +
                     ": not a result line of `leoam eval`; remove it, or write to another --out file");
    }
    out.lines.push_back(std::move(j));
  }
  return out;
}

std::string key_of(const Json& j) {
  return run_key(j.at("task").get<std::string>(), j.at("ctx").get<int64_t>(), j.at("depth").get<double>(),
                 j.at("seed").get<uint64_t>(), j.at("policy").get<std::string>(), j.at("budget").get<double>(),
                 j.value("straddle_chunk", int64_t{0}));
}

// Tokens attended as a percentage of those visible, over every layer and query the selector saw.
double attended_pct(const sparse::SparseAttention& selector) {
  const sparse::LayerSparseStats t = selector.total();
  return t.n_visible > 0 ? 100.0 * static_cast<double>(t.n_attended) / static_cast<double>(t.n_visible) : 100.0;
}

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

// A JSON string literal: quoted, with newlines and control bytes escaped, so any text fits on
// one line (invalid UTF-8 becomes U+FFFD).
std::string quoted(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// --show: the block printed for one run, from its result line. A retrieval run:
//   == passkey ctx 256 depth 0.2 seed 0: leoam@0.5
//   expected:   "51853"
//   output:     "Tim and Sue.\nThey"
//   score:      0
//   attended:   56.2% of tokens
//   bytes read: device 1.1 MiB, host 96.0 KiB, disk 5.3 MiB
//   decode:     1.52 ms/token, 12.2 ms total (8 tokens; the first step 2.1 ms, then 1.44 ms/token)
// and a blank line (the first step apart where there are two tokens or more and it was timed).
// A ppl run has "perplexity:" and "bits/byte:" in place of expected, output and score.
std::string show_block(const Json& j) {
  const bool ppl = j.value("task", "") == kPplTask;
  char buf[256];
  std::string out;
  std::snprintf(buf, sizeof(buf), "== %s ctx %lld depth %g seed %llu: %s\n", j.value("task", "").c_str(),
                static_cast<long long>(j.value("ctx", int64_t{0})), j.value("depth", 0.0),
                static_cast<unsigned long long>(j.value("seed", uint64_t{0})),
                policy_label(j.value("policy", ""), j.value("budget", 1.0)).c_str());
  out += buf;
  if (ppl) {
    out += "perplexity: " + format_number(j.value("ppl", 0.0)) + "\n";
    out += "bits/byte:  " + format_number(j.value("bits_per_byte", 0.0)) + "\n";
  } else {
    std::string answers;
    for (const Json& a : j.value("answers", Json::array())) {
      answers += (answers.empty() ? "" : ", ") + quoted(a.get<std::string>());
    }
    out += "expected:   " + answers + "\n";
    out += "output:     " + quoted(j.value("output", "")) + "\n";
    out += "score:      " + format_number(j.value("score", 0.0)) + "\n";
  }
  std::snprintf(buf, sizeof(buf), "attended:   %.1f%% of tokens\n", j.value("tokens_attended_pct", 100.0));
  out += buf;
  const Json& b = j.at("bytes_read");
  out += "bytes read: device " + human_bytes(b.value("device", uint64_t{0})) + ", host " +
         human_bytes(b.value("host", uint64_t{0})) + ", disk " + human_bytes(b.value("disk", uint64_t{0})) + "\n";
  const double decode_ms = j.value("decode_ms", 0.0);
  const int64_t n_decoded = ppl ? j.value("n_tokens", int64_t{0}) : j.value("n_generated", int64_t{0});
  std::snprintf(buf, sizeof(buf), "decode:     %.2f ms/token, %.1f ms total (%lld tokens",
                n_decoded > 0 ? decode_ms / static_cast<double>(n_decoded) : 0.0, decode_ms,
                static_cast<long long>(n_decoded));
  out += buf;
  // The first step apart: a sparse policy builds its indexes over the prompt there, once.
  const double first_step_ms = j.value("first_step_ms", 0.0);
  if (!ppl && n_decoded > 1 && first_step_ms > 0.0) {
    std::snprintf(buf, sizeof(buf), "; the first step %.1f ms, then %.2f ms/token",
                  first_step_ms, (decode_ms - first_step_ms) / static_cast<double>(n_decoded - 1));
    out += buf;
  }
  out += ")\n\n";
  return out;
}

// --show-prompt: the block printed for a sample before its first run:
//   == passkey ctx 256 depth 0.2 seed 0: prompt, 256 tokens, needle at token 52
//   "There is an important info hidden ...\nWhat is the pass key? The pass key is"
// and a blank line: the prompt detokenized (BOS gives no text), escaped on one line. A ppl
// window says "window" and has no needle.
std::string prompt_block(const std::string& task, const SampleSpec& spec, const Tokenizer& tok) {
  char buf[256];
  const bool ppl = task == kPplTask;
  std::snprintf(buf, sizeof(buf), "== %s ctx %lld depth %g seed %llu: %s, %zu tokens", task.c_str(),
                static_cast<long long>(spec.ctx), spec.depth, static_cast<unsigned long long>(spec.seed),
                ppl ? "window" : "prompt", spec.sample.tokens.size());
  std::string out = buf;
  if (!ppl) out += ", needle at token " + std::to_string(spec.sample.needle_pos);
  return out + "\n" + quoted(tok.detokenize(spec.sample.tokens)) + "\n\n";
}

// What a table row shows next to its score or perplexity, averaged over its lines: the measured
// share of tokens attended, and the KV bytes read per decode step from each tier ("-" where no
// line has kv_bytes_per_token: lines written before it existed).
struct CostColumns {
  static constexpr const char* kHeader = "tokens attended | KV read/token: device | host | disk |";
  static constexpr const char* kRule = "----------------:|----------------------:|-----:|-----:|";

  std::string policy;
  double budget = 1.0;
  int n_lines = 0;
  double attended_sum = 0.0;
  int n_with_bytes = 0;
  std::array<double, kNumTiers> bytes_sum{};  // per token, summed over lines, by Tier

  void add(const Json& j) {
    policy = j.value("policy", "");
    budget = j.value("budget", 1.0);
    ++n_lines;
    attended_sum += j.value("tokens_attended_pct", 100.0);
    if (!j.contains("kv_bytes_per_token")) return;
    ++n_with_bytes;
    for (const Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
      bytes_sum[static_cast<int>(t)] += j.at("kv_bytes_per_token").value(tier_name(t), 0.0);
    }
  }
  double attended_pct() const { return n_lines > 0 ? attended_sum / n_lines : 0.0; }
  // "12.3% | 1.2 KiB | 0 B | 3.4 KiB |"
  std::string cells() const {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%% |", attended_pct());
    std::string out = buf;
    for (const double sum : bytes_sum) {
      out += n_with_bytes == 0 ? " - |" : " " + human_bytes(static_cast<uint64_t>(std::llround(sum / n_with_bytes))) + " |";
    }
    return out;
  }
};

// A warning line for each budget whose sparse policies attended shares more than 1 percentage
// point apart (a policy's chunk grain, or a schedule of its own, can make the same budget attend
// more): their scores are then not at matched costs. `where` prefixes the budget ("prefill 0.5, ").
std::string unmatched_share_warnings(const std::vector<const CostColumns*>& rows, const std::string& where) {
  constexpr double kMaxGapPct = 1.0;
  std::vector<double> budgets;
  for (const CostColumns* r : rows) {
    if (!sparse::is_dense_policy(r->policy) && std::find(budgets.begin(), budgets.end(), r->budget) == budgets.end()) {
      budgets.push_back(r->budget);
    }
  }
  std::string out;
  for (const double budget : budgets) {
    const CostColumns* lo = nullptr;
    const CostColumns* hi = nullptr;
    for (const CostColumns* r : rows) {
      if (sparse::is_dense_policy(r->policy) || r->budget != budget) continue;
      if (lo == nullptr || r->attended_pct() < lo->attended_pct()) lo = r;
      if (hi == nullptr || r->attended_pct() > hi->attended_pct()) hi = r;
    }
    const double gap = hi->attended_pct() - lo->attended_pct();
    if (gap <= kMaxGapPct) continue;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "\nwarning: %sbudget %s: the policies attended from %.1f%% (%s) to %.1f%% (%s) of the tokens, %.1f "
                  "points apart: compare their scores at equal shares attended (a budget sweep), not at equal "
                  "budgets\n",
                  where.c_str(), format_number(budget).c_str(), lo->attended_pct(), lo->policy.c_str(),
                  hi->attended_pct(), hi->policy.c_str(), gap);
    out += buf;
  }
  return out;
}

class EvalCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("eval", "score a model on long-context retrieval tasks across a sweep");
    cmd->add_option("-m,--model", model_path_, "model file (GGUF)")
        ->required()
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--task", task_,
                    std::string("the task: ") + eval::task_names() + "; held out (check a policy change, do not tune on): " +
                        eval::heldout_task_names() + "; or ppl (the perplexity of --text)")
        ->required();
    cmd->add_option("--ctx", ctxs_, "context lengths in tokens (the whole prompt, BOS included), comma-separated")
        ->required()
        ->delimiter(',')
        ->check(in_range(int64_t{1}, int64_t{1} << 30));
    depth_option_ = cmd->add_option("--depth", depths_,
                                    "needle depths in [0, 1], comma-separated. --task ppl: the share of each window "
                                    "prefilled as a prompt (full attention) before the rest is decoded through the "
                                    "policy and scored (default there 0: every position decoded)")
        ->capture_default_str()
        ->delimiter(',')
        ->check(in_range(0.0, 1.0));
    cmd->add_option("--seeds", n_seeds_,
                    "samples per context and depth (seeds 0 .. N-1, or from --first-seed; ignored for --task ppl)")
        ->capture_default_str()
        ->check(in_range(1, 1 << 20));
    cmd->add_option("--first-seed", first_seed_,
                    "the first sample seed: the samples use seeds S .. S + --seeds - 1 (ignored for --task ppl)")
        ->capture_default_str()
        ->check(in_range(0, 1 << 30));
    cmd->add_option("--out", out_path_,
                    "append one JSON line per run to FILE; the runs it holds are skipped. A line has bytes_read "
                    "{device, host, disk}: the bytes read out of each KV tier during the run, as `run --kv-stats` "
                    "counts them, and kv_bytes_per_token, the same per decode step (every policy runs through "
                    "the tiered store; without --kv-dir all of it on the device tier)")
        ->required()
        ->type_name("FILE");
    cmd->add_flag("--show", show_,
                  "after each run, print to stdout policy@budget, the expected answer, the output (escaped, one "
                  "line), the score, the tokens attended, the bytes read per KV tier and the decode latency; the "
                  "table still closes");
    cmd->add_flag("--explain", explain_,
                  "run the exact-mass oracle beside each sparse policy: for a retrieval task, at the decode steps "
                  "that write the answer, per layer, how much of the answer's tokens in the needle each picked, "
                  "their rank under each one's scores, their exact attention mass, the far mass each left out, and "
                  "for a miss its cause (budget, coarse, bound or desert); for ppl, per layer, the mean far mass "
                  "each left out; into --out (\"explain\", \"explain_layers\") and, with --show, printed");
    cmd->add_flag("--show-prompt", show_prompt_,
                  "before each sample's first run, print to stdout its prompt (a ppl window's text), escaped on one "
                  "line, with its length in tokens and where the needle starts");
    cmd->add_option("--haystack", haystack_path_, "cut the haystack from this text file (default: filler sentences)")
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--straddle-chunk", straddle_chunk_,
                    "place each sample's (first) needle across a multiple of N tokens, the edge of a KV chunk of N "
                    "(e.g. 8, leoam's store chunk, or 64, its tree's first leaves): at the place nearest --depth "
                    "where the edge cuts off the last 1 or 2 tokens of the needle's answer. 0: the needle at "
                    "--depth exactly. Retrieval tasks only")
        ->capture_default_str()
        ->check(in_range(int64_t{0}, int64_t{1} << 20));
    cmd->add_option("--text", text_path_,
                    "--task ppl: the text to score, cut into consecutive windows of --ctx tokens (BOS included)")
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--windows", n_windows_, "--task ppl: score at most N windows of each --ctx (0: every whole one)")
        ->capture_default_str()
        ->check(non_negative<int64_t>());
    cmd->add_option("-c,--ctx-size", n_ctx_, "context size in tokens (0: the model's training context); every --ctx "
                                             "plus the answer tokens must fit")
        ->capture_default_str()
        ->check(non_negative<int>());
    cmd->add_option("-b,--batch-size", n_batch_, "prompt tokens per forward pass")
        ->capture_default_str()
        ->check(in_range(1, 1 << 20));
    add_threads_option(*cmd, n_threads_);
    add_kv_options(*cmd, kv_options_);
    add_attention_options(*cmd, attention_options_);
    // --policy and --budget are lists here: the sweep runs each policy at each budget.
    cmd->remove_option(cmd->get_option("--policy"));
    cmd->remove_option(cmd->get_option("--budget"));
    cmd->add_option("--policy", policies_,
                    std::string("policies to sweep, comma-separated: ") + sparse::policy_names())
        ->capture_default_str()
        ->delimiter(',')
        ->check(CLI::IsMember(policy_names()))
        ->group("Sparse attention");
    cmd->add_option("--budget", budgets_,
                    "budgets to sweep each policy but full at, comma-separated: far tokens attended per layer and "
                    "step, a fraction of them (<= 1) or a whole count (> 1); see --layer-budget")
        ->capture_default_str()
        ->delimiter(',')
        ->check(positive<double>())
        ->group("Sparse attention");
    return cmd;
  }

  int execute() override {
    // Checks that need no model.
    const bool ppl = task_ == kPplTask;
    const std::vector<std::string> tasks = split_words(std::string(eval::task_names()) + " " + eval::heldout_task_names());
    if (!ppl && std::find(tasks.begin(), tasks.end(), task_) == tasks.end()) {
      print_error("--task '" + task_ + "' is not a task; tasks: " + eval::task_names() + " " +
                  eval::heldout_task_names() + " ppl");
      return kExitUsage;
    }
    if (ppl && text_path_.empty()) {
      print_error("--task ppl needs --text FILE, the text to score");
      return kExitUsage;
    }
    if (!ppl && (!text_path_.empty() || n_windows_ != 0)) {
      print_error("--text and --windows apply to --task ppl only, not to --task " + task_);
      return kExitUsage;
    }
    if (ppl && straddle_chunk_ != 0) {
      print_error("--straddle-chunk applies to the retrieval tasks, not to --task ppl (which has no needle)");
      return kExitUsage;
    }
    if (ppl && !haystack_path_.empty()) {
      print_error("--haystack applies to the retrieval tasks, not to --task ppl (which scores --text)");
      return kExitUsage;
    }
    if (ppl) {  // one sample per window and depth: --seeds and --first-seed do not apply
      if (depth_option_->count() == 0) depths_ = {0.0};
      n_seeds_ = 1;
      first_seed_ = 0;
    }
    if (ctxs_.empty() || depths_.empty() || policies_.empty() || budgets_.empty()) {
      print_error("--ctx, --depth, --policy and --budget each need at least one value");
      return kExitUsage;
    }
    remove_duplicates(ctxs_);
    remove_duplicates(depths_);
    remove_duplicates(policies_);
    remove_duplicates(budgets_);
    std::string haystack;
    if (!haystack_path_.empty()) {
      Result<std::string> text = read_text_file(haystack_path_);
      if (!text.is_ok()) {
        print_error("--haystack: " + text.status().message());
        return kExitUsage;
      }
      haystack = std::move(*text);
    }

    Result<std::unique_ptr<Model>> model = Model::load(model_path_);
    if (!model.is_ok()) return fail(named(model.status(), model_path_));
    Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf((*model)->gguf());
    if (!tokenizer.is_ok()) return fail(named(tokenizer.status(), model_path_));
    const Tokenizer& tok = **tokenizer;
    const int64_t n_ctx_limit = n_ctx_ > 0 ? n_ctx_ : (*model)->hparams().n_ctx_train;
    n_layer_ = (*model)->hparams().n_layer;
    for (const double budget : budgets_) {
      if (const std::string why = sparse::budget_error(budget); !why.empty()) {
        print_error("--budget " + format_number(budget) + ": " + why);
        return kExitUsage;
      }
    }
    if (Result<AttentionOptions> checked = attention_options(attention_options_, n_layer_); !checked.is_ok()) {
      print_error(error_text(checked.status()));
      return kExitUsage;
    }
    if (Result<KvStoreOptions> checked = store_options(kv_options_); !checked.is_ok()) {
      print_error(error_text(checked.status()));
      return kExitUsage;
    }

    // Every sample, before --out is touched: a context that does not fit fails here.
    const eval::TokenizeFn tokenize = [&tok](std::string_view text) {
      return tok.tokenize(text, /*add_bos=*/false, /*parse_special=*/false);
    };
    const std::vector<int32_t> probe = tok.tokenize("a", /*add_bos=*/true, /*parse_special=*/false);
    const int32_t bos = tok.bos_id() >= 0 && !probe.empty() && probe.front() == tok.bos_id() ? tok.bos_id() : -1;
    std::vector<SampleSpec> samples;
    std::vector<int32_t> text_tokens;  // --task ppl: --text, without BOS
    if (ppl) {
      Result<std::string> text = read_text_file(text_path_);
      if (!text.is_ok()) {
        print_error("--text: " + text.status().message());
        return kExitUsage;
      }
      text_tokens = tok.tokenize(*text, /*add_bos=*/false, /*parse_special=*/false);
    }
    for (const int64_t ctx : ctxs_) {
      if (ctx > n_ctx_limit) {
        print_error("--ctx " + std::to_string(ctx) + " is larger than the context of " + std::to_string(n_ctx_limit) +
                    " tokens (" + (n_ctx_ > 0 ? "-c" : "the model's training context; raise it with -c") + ")");
        return kExitUsage;
      }
      if (ppl) {
        for (const double depth : depths_) {
          if (!add_windows(text_tokens, ctx, depth, bos, samples)) return kExitUsage;
        }
        continue;
      }
      for (const double depth : depths_) {
        for (int seed = first_seed_; seed < first_seed_ + n_seeds_; ++seed) {
          eval::TaskParams params;
          params.task = task_;
          params.context_tokens = ctx;
          params.depth = depth;
          params.seed = static_cast<uint64_t>(seed);
          params.haystack_text = haystack;
          params.straddle_chunk = straddle_chunk_;
          Result<eval::Sample> sample = eval::make_sample(params, tokenize, bos);
          if (!sample.is_ok()) {  // e.g. a context too short for the task
            print_error(error_text(sample.status()));
            return kExitUsage;
          }
          if (ctx + sample->max_new_tokens > n_ctx_limit) {
            print_error("--ctx " + std::to_string(ctx) + ": the prompt and its " +
                        std::to_string(sample->max_new_tokens) + " answer tokens need " +
                        std::to_string(ctx + sample->max_new_tokens) + " positions, more than the context of " +
                        std::to_string(n_ctx_limit) + " (-c)");
            return kExitUsage;
          }
          samples.push_back({ctx, depth, static_cast<uint64_t>(seed), std::move(*sample)});
        }
      }
    }
    std::vector<EvalRun> runs;
    for (const std::string& policy : policies_) {
      if (sparse::is_dense_policy(policy)) {
        runs.push_back({policy, 1.0});
        continue;
      }
      for (const double budget : budgets_) runs.push_back({policy, budget});
    }

    // Resume: skip what --out holds; cut a torn last line off.
    Result<ResultsFile> existing = read_results(out_path_);
    if (!existing.is_ok()) return fail(existing.status());
    std::vector<Json> lines = std::move(existing->lines);
    std::set<std::string> done;
    for (const Json& j : lines) done.insert(key_of(j));
    if (existing->complete_bytes < existing->file_bytes) {
      std::error_code ec;
      fs::resize_file(out_path_, existing->complete_bytes, ec);
      if (ec) return fail(io_error("cannot cut the torn last line of --out file '" + out_path_ + "': " + ec.message()));
      std::fprintf(stderr, "leoam: eval: %s: cut off a torn last line (an interrupted write)\n", out_path_.c_str());
    }
    int n_skipped = 0, n_todo = 0;
    for (const SampleSpec& s : samples) {
      for (const EvalRun& r : runs) {
        const bool is_done = done.count(run_key(task_, s.ctx, s.depth, s.seed, r.policy, r.budget, straddle_chunk_)) != 0;
        ++(is_done ? n_skipped : n_todo);
      }
    }
    std::fprintf(stderr, "leoam: eval: %d runs, %d skipped (already in %s)\n", n_todo + n_skipped, n_skipped,
                 out_path_.c_str());

    std::FILE* out = std::fopen(out_path_.c_str(), "ab");
    if (out == nullptr) {
      return fail(io_error("cannot write --out file '" + out_path_ + "': " + std::strerror(errno)));
    }
    const bool on_terminal = ::isatty(STDERR_FILENO) != 0;
    StatusLine status(on_terminal, "eval");
    int n_run = 0;
    int exit_code = kExitOk;
    // Ctrl-C stops the run in progress (its line is not written), prints the table of the runs
    // done, and exits 130: the same command resumes from --out.
    SigintScope sigint;
    bool interrupted = false;
    for (const SampleSpec& s : samples) {
      bool prompt_shown = false;
      for (const EvalRun& r : runs) {
        const std::string key = run_key(task_, s.ctx, s.depth, s.seed, r.policy, r.budget, straddle_chunk_);
        if (done.count(key) != 0) continue;
        if (show_prompt_ && !prompt_shown) {
          status.clear();  // the last run's status line, on a terminal
          const std::string block = prompt_block(task_, s, tok);
          std::fwrite(block.data(), 1, block.size(), stdout);
          std::fflush(stdout);
          prompt_shown = true;
        }
        ++n_run;
        char what[256];
        std::snprintf(what, sizeof(what), "%d/%d %s ctx %lld depth %g seed %llu %s", n_run, n_todo, task_.c_str(),
                      static_cast<long long>(s.ctx), s.depth, static_cast<unsigned long long>(s.seed),
                      policy_label(r.policy, r.budget).c_str());
        status.show(what);
        Result<Json> line = SigintScope::interrupted() ? Result<Json>(cancelled("interrupted"))
                                                       : run_one(**model, tok, s, r, n_run);
        if (!line.is_ok() && line.status().code() == StatusCode::kCancelled) {
          status.clear();
          interrupted = true;
          std::fprintf(stderr, "leoam: eval: interrupted in run %d of %d; its result is not written. The same "
                       "command resumes from %s\n", n_run, n_todo, out_path_.c_str());
          break;
        }
        if (!line.is_ok()) {
          status.clear();
          exit_code = fail(line.status().with_context(what));
          break;
        }
        const std::string text = line->dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
        if (std::fwrite(text.data(), 1, text.size(), out) != text.size() || std::fflush(out) != 0) {
          status.clear();
          exit_code = fail(io_error("error writing --out file '" + out_path_ + "': " + std::strerror(errno)));
          break;
        }
        done.insert(key);
        if (show_) {
          status.clear();
          const std::string block = show_block(*line) + explain_block(*line);
          std::fwrite(block.data(), 1, block.size(), stdout);
          std::fflush(stdout);
        }
        const std::string result = std::string(what) + (ppl ? ": perplexity " + format_number((*line)["ppl"].get<double>())
                                                            : ": score " + format_number((*line)["score"].get<double>()));
        if (on_terminal) {
          status.show(result);
        } else {
          std::fprintf(stderr, "eval: %s\n", result.c_str());
        }
        lines.push_back(std::move(*line));
      }
      if (exit_code != kExitOk || interrupted) break;
    }
    status.clear();
    if (std::fclose(out) != 0 && exit_code == kExitOk) {
      exit_code = fail(io_error("error writing --out file '" + out_path_ + "'"));
    }
    if (exit_code != kExitOk) return exit_code;
    if (ppl) {
      print_ppl_table(lines);
    } else {
      print_table(lines);
    }
    return interrupted ? kExitInterrupted : kExitOk;
  }

 private:
  // --task ppl: appends the windows of `ctx` tokens cut from `text` (BOS first when bos >= 0), at
  // most --windows of them, each a sample with `depth` (its prefilled share) and its index as
  // seed. False, said, when the text has no whole window or the prefill leaves nothing to score.
  bool add_windows(const std::vector<int32_t>& text, int64_t ctx, double depth, int32_t bos,
                   std::vector<SampleSpec>& samples) const {
    if (ctx < 2) {
      print_error("--task ppl: --ctx " + std::to_string(ctx) + " leaves no next token to score; use --ctx 2 or more");
      return false;
    }
    if (prefill_tokens(ctx, depth) > ctx - 2) {
      print_error("--task ppl: --depth " + format_number(depth) + " prefills " +
                  std::to_string(prefill_tokens(ctx, depth)) + " of the " + std::to_string(ctx) +
                  " tokens of a window, which leaves no token to decode and score; use a smaller --depth");
      return false;
    }
    const int64_t n_text_per_window = bos >= 0 ? ctx - 1 : ctx;  // [BOS] + text tokens
    int64_t n_windows = static_cast<int64_t>(text.size()) / n_text_per_window;
    if (n_windows == 0) {
      print_error("--text '" + text_path_ + "' has " + std::to_string(text.size()) +
                  " tokens, fewer than one window of --ctx " + std::to_string(ctx) + " (" +
                  std::to_string(n_text_per_window) + " text tokens); use a longer text or a smaller --ctx");
      return false;
    }
    if (n_windows_ > 0) n_windows = std::min<int64_t>(n_windows, n_windows_);
    for (int64_t w = 0; w < n_windows; ++w) {
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
    return true;
  }


  // One greedy generation of `spec`'s sample under `run`'s policy: its result line.
  Result<Json> run_one(const Model& model, const Tokenizer& tok, const SampleSpec& spec, const EvalRun& run,
                       int run_index) const {
    const eval::Sample& sample = spec.sample;
    AttentionCliOptions attention_flags = attention_options_;
    attention_flags.policy = run.policy;
    attention_flags.budget = run.budget;
    SessionOptions so;
    LEOAM_ASSIGN_OR_RETURN(so.attention, attention_options(attention_flags, n_layer_));
    LEOAM_ASSIGN_OR_RETURN(so.kv, store_options(kv_options_));
    KvStoreOptions& kv_options = so.kv;
    // The prompt and every answer token fit: checked when the sample was built.
    const int64_t n_ctx = spec.ctx + sample.max_new_tokens;
    // A subdirectory per run: no run sees another's files, and none is left behind.
    if (!kv_options.dir.empty()) kv_options.dir = (fs::path(kv_options_.dir) / ("run-" + std::to_string(run_index))).string();
    struct RemoveDir {
      std::string dir;
      ~RemoveDir() {
        std::error_code ec;
        if (!dir.empty()) fs::remove_all(dir, ec);
      }
    } remove_dir{kv_options.dir};
    if (!kv_options.dir.empty()) {
      std::error_code ec;
      fs::remove_all(kv_options.dir, ec);
    }

    // Every policy through the tiered store (without --kv-dir, in RAM): its counts compare.
    so.tiered = true;
    // --explain: the steps that write the first answer (its tokens after a space, and the space).
    std::vector<sparse::LayerExplanation> explanations;
    sparse::SparseAttentionOptions::Explain& explain = so.explain;
    if (explain_ && task_ == kPplTask) {  // every step, no target: the mass each layer's picks leave out
      explain.n_steps = std::numeric_limits<int64_t>::max();
      explain.out = &explanations;
    } else if (explain_ && !sample.answers.empty()) {
      explain.target = answer_in_needle(sample, tok);
      explain.n_steps = static_cast<int64_t>(
          tok.tokenize(" " + sample.answers.front(), /*add_bos=*/false, /*parse_special=*/false).size());
      explain.out = &explanations;
    }
    so.forward.n_ctx = static_cast<int>(n_ctx);
    so.forward.n_threads = n_threads_;
    so.forward.n_batch = n_batch_;
    so.forward.should_stop = &SigintScope::interrupted;
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(model, so));
    const KvCache& kv_cache = session->kv();
    ForwardContext* ctx = &session->context();
    const sparse::SparseAttention* selector = session->selector();
    if (task_ == kPplTask) {
      LEOAM_ASSIGN_OR_RETURN(Json j, score_window(*ctx, tok, spec, run, selector, kv_cache));
      if (explain.out != nullptr && selector != nullptr) j["explain_layers"] = explain_layers_json(explanations);
      return j;
    }

    GenerateOptions options;
    options.n_predict = sample.max_new_tokens;
    options.should_stop = &SigintScope::interrupted;
    options.sampler.temperature = 0.0f;  // greedy
    std::string output;
    GenerateCallbacks callbacks;
    callbacks.on_text = [&output](std::string_view text) { output += text; };
    KvStats at_prefill_end;
    callbacks.on_prefill_done = [&](int64_t) { at_prefill_end = kv_cache.stats(); };
    LEOAM_ASSIGN_OR_RETURN(GenerateStats stats, generate_from_tokens(*ctx, tok, sample.tokens,
                                                                     /*strip_leading_space=*/false, options, callbacks));
    if (stats.stop_reason == StopReason::kInterrupted) return cancelled("interrupted");

    Json j;
    j["task"] = task_;
    j["ctx"] = spec.ctx;
    j["depth"] = spec.depth;
    j["seed"] = spec.seed;
    j["policy"] = run.policy;
    j["budget"] = run.budget;
    j["needle_pos"] = sample.needle_pos;
    if (straddle_chunk_ > 0) j["straddle_chunk"] = straddle_chunk_;
    j["answers"] = sample.answers;
    j["output"] = output;
    j["score"] = eval::score_output(eval::task_scoring(task_), sample.answers, output);
    j["tokens_attended_pct"] = selector != nullptr ? attended_pct(*selector) : 100.0;
    j["bytes_read"] = bytes_read_json(kv_cache.stats());
    j["kv_bytes_per_token"] =
        kv_bytes_per_token_json(at_prefill_end, kv_cache.stats(), ctx->n_past() - static_cast<int64_t>(sample.tokens.size()));
    j["n_generated"] = stats.n_generated;
    j["decode_ms"] = stats.decode_ms;
    j["first_step_ms"] = stats.first_step_ms;
    j["policy_memory_peak_bytes"] = selector != nullptr ? selector->memory().peak_bytes : 0;
    if (explain.out != nullptr && selector != nullptr) j["explain"] = explain_json(explanations);
    return j;
  }

  // --task ppl: the tokens of a window of `ctx` prefilled at `depth`, floor(D * (ctx - 1)).
  static int64_t prefill_tokens(int64_t ctx, double depth) {
    return static_cast<int64_t>(std::floor(depth * static_cast<double>(ctx - 1)));
  }

  // --task ppl: prefills the window's first prefill_tokens() as a prompt, then decodes the rest
  // one token at a time (every position through the selector), summing the negative
  // log-likelihood of each decoded position's next token: its line.
  Result<Json> score_window(ForwardContext& ctx, const Tokenizer& tok, const SampleSpec& spec, const EvalRun& run,
                            const sparse::SparseAttention* selector, const KvCache& kv_cache) const {
    const std::vector<int32_t>& tokens = spec.sample.tokens;
    const int32_t n_vocab = ctx.n_vocab();
    std::vector<float> logits;  // [n_vocab]: the last evaluated position's
    const int64_t n_prefill = prefill_tokens(spec.ctx, spec.depth);
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
      if (SigintScope::interrupted()) return cancelled("interrupted");
      LEOAM_RETURN_IF_ERROR(ctx.eval(std::span<const int32_t>(&tokens[p], 1), /*all_logits=*/false, logits));
      // log-softmax in double: nll = logsumexp(logits) - logits[next]
      double max_logit = logits[0];
      for (int32_t v = 1; v < n_vocab; ++v) max_logit = std::max(max_logit, static_cast<double>(logits[v]));
      double sum_exp = 0.0;
      for (int32_t v = 0; v < n_vocab; ++v) sum_exp += std::exp(static_cast<double>(logits[v]) - max_logit);
      const int32_t next = tokens[p + 1];
      nll_sum += max_logit + std::log(sum_exp) - static_cast<double>(logits[next]);
      n_bytes += static_cast<int64_t>(tok.token_to_piece(next).size());
    }
    const double decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int64_t n_tokens = static_cast<int64_t>(tokens.size()) - 1 - n_prefill;
    Json j;
    j["task"] = task_;
    j["ctx"] = spec.ctx;
    j["depth"] = spec.depth;
    j["seed"] = spec.seed;
    j["policy"] = run.policy;
    j["budget"] = run.budget;
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

  // The task's lines of --out at this --straddle-chunk grouped by policy@budget, in the order the
  // labels first appear: add(row, line) folds each line into its row (a Row starts with its label
  // and counts lines in n).
  template <typename Row, typename Add>
  std::vector<Row> rows_by_label(const std::vector<Json>& lines, Add add) const {
    std::vector<Row> rows;
    for (const Json& j : lines) {
      if (j.value("task", "") != task_ || j.value("straddle_chunk", int64_t{0}) != straddle_chunk_) continue;
      const std::string label = policy_label(j.value("policy", ""), j.value("budget", 1.0));
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.label == label; });
      if (it == rows.end()) it = rows.insert(rows.end(), Row{label});
      ++it->n;
      add(*it, j);
    }
    return rows;
  }

  // --task ppl's markdown table over every ppl line of --out: one row per (depth, policy, budget),
  // in the order they first appear; perplexity and bits per byte pool every window's tokens and
  // bytes, and "vs full" compares with full at the same depth (the same tokens scored).
  void print_ppl_table(const std::vector<Json>& lines) const {
    struct Row {
      std::string label;
      int n = 0;
      double nll_sum = 0.0;
      double n_tokens = 0.0;
      double n_bytes = 0.0;
      CostColumns cost = {};
    };
    std::vector<double> depths;  // in the order they first appear
    for (const Json& j : lines) {
      const double d = j.value("depth", 0.0);
      if (j.value("task", "") == task_ && std::find(depths.begin(), depths.end(), d) == depths.end()) depths.push_back(d);
    }
    const auto perplexity = [](const Row& r) { return r.n_tokens > 0 ? std::exp(r.nll_sum / r.n_tokens) : 0.0; };
    std::printf("%s\n\n", budget_rule().c_str());
    std::printf("| task | prefill | policy | windows | perplexity | bits per byte | vs full | %s\n", CostColumns::kHeader);
    std::printf("|------|--------:|--------|--------:|-----------:|--------------:|--------:|%s\n", CostColumns::kRule);
    std::string warnings;
    for (const double depth : depths) {
      std::vector<Json> at_depth;
      for (const Json& j : lines) {
        if (j.value("depth", 0.0) == depth) at_depth.push_back(j);
      }
      const std::vector<Row> rows = rows_by_label<Row>(at_depth, [](Row& r, const Json& j) {
        r.nll_sum += j.value("nll_sum", 0.0);
        r.n_tokens += j.value("n_tokens", 0.0);
        r.n_bytes += j.value("n_bytes", 0.0);
        r.cost.add(j);
      });
      const auto full = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return sparse::is_dense_policy(r.label); });
      std::vector<const CostColumns*> costs;
      for (const Row& r : rows) {
        const double bpb = r.n_bytes > 0 ? r.nll_sum / std::log(2.0) / r.n_bytes : 0.0;
        char vs_full[32] = "-";
        if (full != rows.end() && perplexity(*full) > 0.0) {
          std::snprintf(vs_full, sizeof(vs_full), "%+.2f%%", 100.0 * (perplexity(r) / perplexity(*full) - 1.0));
        }
        std::printf("| %s | %s | %s | %d | %.4f | %.4f | %s | %s\n", task_.c_str(), format_number(depth).c_str(),
                    r.label.c_str(), r.n, perplexity(r), bpb, vs_full, r.cost.cells().c_str());
        costs.push_back(&r.cost);
      }
      warnings += unmatched_share_warnings(costs, "prefill " + format_number(depth) + ", ");
    }
    std::printf("%s", warnings.c_str());
    std::fflush(stdout);
  }

  // The markdown table over every line of --out for the task at this --straddle-chunk: one row per
  // (policy, budget), in the order they first appear.
  void print_table(const std::vector<Json>& lines) const {
    struct Row {
      std::string label;
      int n = 0;
      double score_sum = 0.0;
      CostColumns cost = {};
    };
    const std::vector<Row> rows = rows_by_label<Row>(lines, [](Row& r, const Json& j) {
      r.score_sum += j.value("score", 0.0);
      r.cost.add(j);
    });
    std::printf("%s\n\n", budget_rule().c_str());
    std::printf("| task | policy | samples | score | %s\n", CostColumns::kHeader);
    std::printf("|------|--------|--------:|------:|%s\n", CostColumns::kRule);
    std::vector<const CostColumns*> costs;
    for (const Row& r : rows) {
      std::printf("| %s | %s | %d | %.1f%% | %s\n", task_.c_str(), r.label.c_str(), r.n, 100.0 * r.score_sum / r.n,
                  r.cost.cells().c_str());
      costs.push_back(&r.cost);
    }
    std::printf("%s", unmatched_share_warnings(costs, "").c_str());
    std::fflush(stdout);
  }

  // The rule line above a table (budget_rule_text), for the model the sweep ran.
  std::string budget_rule() const { return budget_rule_text(attention_options_, kv_options_, n_layer_); }

  // Prefixes the model path unless the message already names it.

  std::string model_path_;
  std::string task_;
  std::vector<int64_t> ctxs_;
  std::vector<double> depths_ = {0.1, 0.5, 0.9};
  CLI::Option* depth_option_ = nullptr;  // --depth: whether it was given (--task ppl defaults to 0)
  int n_seeds_ = 1;
  int first_seed_ = 0;
  std::vector<std::string> policies_ = {"full", "leoam"};
  std::vector<double> budgets_ = {0.1};
  std::string out_path_;
  std::string haystack_path_;
  std::string text_path_;  // --task ppl
  int64_t straddle_chunk_ = 0;  // > 0: needles across a multiple of this many tokens
  int64_t n_windows_ = 0;  // --task ppl: 0 for every whole window
  bool show_ = false;
  bool explain_ = false;
  bool show_prompt_ = false;
  KvCliOptions kv_options_;
  AttentionCliOptions attention_options_;
  int n_ctx_ = 0;
  int n_threads_ = 0;
  int n_batch_ = 512;
  int n_layer_ = 0;  // the model's, for the budget rule line
};

}  // namespace

std::unique_ptr<Command> make_eval_command() { return std::make_unique<EvalCommand>(); }

}  // namespace leoam::cli
