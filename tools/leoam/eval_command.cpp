// `leoam eval`: the flags of an evaluation sweep (eval/sweep.h: a retrieval task, or --task ppl's
// windows of --text, across context lengths, depths, seeds, policies and budgets; each run through
// a fresh session, eval/sample_run.h), its progress and its tables. Every flag is checked and every
// sample built before --out is touched; each run's line is appended to --out and flushed at once,
// so an interrupted sweep resumes (runs --out holds are skipped; a torn last line is cut off).
// stdout: the closing markdown table (with --show, a block per run before it); stderr: progress
// and errors. Ctrl-C stops the run in progress and prints the table of those done (exit 130); a
// second exits at once.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "cli_common.h"
#include "eval/sample_run.h"
#include "eval/sweep.h"
#include "eval/sweep_summary.h"
#include "eval/task.h"
#include "eval_explain.h"
#include "kv/kv_stats.h"
#include "kv_options.h"
#include "model/model.h"
#include "progress_bar.h"
#include "sigint_scope.h"
#include "sparse/budget_schedule.h"
#include "sparse/policy_registry.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using eval::format_number;
using eval::kPplTask;
using eval::policy_label;

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// --out as read back (eval::parse_results), empty when there is none.
Result<eval::ResultsFile> read_results(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return eval::ResultsFile{};
  LEOAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  Result<eval::ResultsFile> file = eval::parse_results(text);
  if (!file.is_ok()) {
    return corrupt("--out file '" + path + "' " + file.status().message() +
                   "; remove it, or write to another --out file");
  }
  return file;
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
std::string prompt_block(const std::string& task, const eval::SampleSpec& spec, const Tokenizer& tok) {
  char buf[256];
  const bool ppl = task == kPplTask;
  std::snprintf(buf, sizeof(buf), "== %s ctx %lld depth %g seed %llu: %s, %zu tokens", task.c_str(),
                static_cast<long long>(spec.ctx), spec.depth, static_cast<unsigned long long>(spec.seed),
                ppl ? "window" : "prompt", spec.sample.tokens.size());
  std::string out = buf;
  if (!ppl) out += ", needle at token " + std::to_string(spec.sample.needle_pos);
  return out + "\n" + quoted(tok.detokenize(spec.sample.tokens)) + "\n\n";
}

// What a table row shows next to its score or perplexity (eval::CostSummary): the share of tokens
// attended, and the KV bytes read per decode step from each tier ("-" where no line has them).
constexpr const char* kCostHeader = "tokens attended | KV read/token: device | host | disk |";
constexpr const char* kCostRule = "----------------:|----------------------:|-----:|-----:|";

// "12.3% | 1.2 KiB | 0 B | 3.4 KiB |"
std::string cost_cells(const eval::CostSummary& cost) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%% |", cost.attended_pct());
  std::string out = buf;
  for (const Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    const std::optional<uint64_t> bytes = cost.bytes_per_token(t);
    out += bytes ? " " + human_bytes(*bytes) + " |" : " - |";
  }
  return out;
}

// A warning line for each budget whose sparse policies attended unmatched shares
// (eval::unmatched_shares): their scores are then not at matched costs. `where` prefixes the
// budget ("prefill 0.5, ").
std::string unmatched_share_warnings(const std::vector<const eval::CostSummary*>& rows, const std::string& where) {
  std::string out;
  for (const eval::UnmatchedShare& u : eval::unmatched_shares(rows)) {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "\nwarning: %sbudget %s: the policies attended from %.1f%% (%s) to %.1f%% (%s) of the tokens, %.1f "
                  "points apart: compare their scores at equal shares attended (a budget sweep), not at equal "
                  "budgets\n",
                  where.c_str(), format_number(u.budget).c_str(), u.lo->attended_pct(), u.lo->policy.c_str(),
                  u.hi->attended_pct(), u.hi->policy.c_str(), u.gap_pct());
    out += buf;
  }
  return out;
}

class EvalCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("eval", "score a model on long-context retrieval tasks across a sweep");
    add_model_options(*cmd, model_)->required();
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
                  "each left out; and for every policy, full included, the probability of each of the answer's "
                  "tokens up to the first written wrong, beside the written one's; into --out (\"explain\", "
                  "\"answer_probs\", \"explain_layers\") and, with --show, printed");
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

  // The flags' consistency, checked before the model loads: an error message, or "". Sets --task
  // ppl's one sample per window and depth (--seeds and --first-seed do not apply) and its depth 0.
  std::string check_flags() {
    const bool ppl = task_ == kPplTask;
    const std::vector<std::string> tasks = split_words(std::string(eval::task_names()) + " " + eval::heldout_task_names());
    if (!ppl && std::find(tasks.begin(), tasks.end(), task_) == tasks.end()) {
      return "--task '" + task_ + "' is not a task; tasks: " + eval::task_names() + " " + eval::heldout_task_names() +
             " ppl";
    }
    if (ppl && text_path_.empty()) return "--task ppl needs --text FILE, the text to score";
    if (!ppl && (!text_path_.empty() || n_windows_ != 0)) {
      return "--text and --windows apply to --task ppl only, not to --task " + task_;
    }
    if (ppl && straddle_chunk_ != 0) {
      return "--straddle-chunk applies to the retrieval tasks, not to --task ppl (which has no needle)";
    }
    if (ppl && !haystack_path_.empty()) {
      return "--haystack applies to the retrieval tasks, not to --task ppl (which scores --text)";
    }
    if (ppl) {
      if (depth_option_->count() == 0) depths_ = {0.0};
      n_seeds_ = 1;
      first_seed_ = 0;
    }
    if (ctxs_.empty() || depths_.empty() || policies_.empty() || budgets_.empty()) {
      return "--ctx, --depth, --policy and --budget each need at least one value";
    }
    return "";
  }

  int execute() override {
    Prepared p;
    if (const int code = prepare(p); code != kExitOk) return code;
    std::set<std::string> done;
    std::vector<Json> lines;
    int n_todo = 0;
    if (const int code = resume(p.plan, done, lines, n_todo); code != kExitOk) return code;
    bool interrupted = false;
    if (const int code = run_plan(p, n_todo, done, lines, interrupted); code != kExitOk) return code;
    if (task_ == kPplTask) {
      print_ppl_table(lines);
    } else {
      print_table(lines);
    }
    return interrupted ? kExitInterrupted : kExitOk;
  }

 private:
  // What the runs need: the model, each run's options and the sweep's samples and runs.
  struct Prepared {
    std::unique_ptr<Engine> engine;
    eval::SampleRunOptions run_options;
    eval::SweepPlan plan;
  };

  // Checks the flags, loads the model and plans every sample, before --out is touched (a context
  // that does not fit fails here). kExitOk, or the exit code after the error is printed.
  int prepare(Prepared& p) {
    if (const std::string why = check_flags(); !why.empty()) {
      print_error(why);
      return kExitUsage;
    }
    std::string haystack;
    if (!haystack_path_.empty()) {
      Result<std::string> text = read_text_file(haystack_path_);
      if (!text.is_ok()) {
        print_error("--haystack: " + text.status().message());
        return kExitUsage;
      }
      haystack = std::move(*text);
    }

    Result<std::unique_ptr<Engine>> engine = Engine::load(model_.path, model_.import_options());
    if (!engine.is_ok()) return fail(named(engine.status(), model_.path));
    p.engine = std::move(*engine);
    const Model& model = p.engine->model();
    const int64_t n_ctx_limit = n_ctx_ > 0 ? n_ctx_ : model.hparams().n_ctx_train;
    n_layer_ = model.hparams().n_layer;
    for (const double budget : budgets_) {
      if (const std::string why = sparse::budget_error(budget); !why.empty()) {
        print_error("--budget " + format_number(budget) + ": " + why);
        return kExitUsage;
      }
    }
    eval::SampleRunOptions& run_options = p.run_options;
    if (Result<AttentionOptions> checked = attention_options(attention_options_, n_layer_); checked.is_ok()) {
      run_options.session.attention = std::move(*checked);
    } else {
      print_error(error_text(checked.status()));
      return kExitUsage;
    }
    if (Result<KvStoreOptions> checked = store_options(kv_options_); checked.is_ok()) {
      run_options.session.kv = std::move(*checked);
    } else {
      print_error(error_text(checked.status()));
      return kExitUsage;
    }
    run_options.task = task_;
    run_options.straddle_chunk = straddle_chunk_;
    run_options.explain = explain_;
    run_options.session.forward.n_threads = n_threads_;
    run_options.session.forward.n_batch = n_batch_;
    run_options.session.forward.should_stop = &SigintScope::interrupted;

    eval::SweepOptions sweep;
    sweep.task = task_;
    sweep.ctxs = ctxs_;
    sweep.depths = depths_;
    sweep.first_seed = static_cast<uint64_t>(first_seed_);
    sweep.n_seeds = n_seeds_;
    sweep.policies = policies_;
    sweep.budgets = budgets_;
    sweep.haystack_text = std::move(haystack);
    sweep.straddle_chunk = straddle_chunk_;
    sweep.n_windows = n_windows_;
    if (task_ == kPplTask) {
      Result<std::string> text = read_text_file(text_path_);
      if (!text.is_ok()) {
        print_error("--text: " + text.status().message());
        return kExitUsage;
      }
      sweep.text = std::move(*text);
    }
    for (const int64_t ctx : ctxs_) {  // before the plan, which checks it too, to say which flag raises it
      if (ctx > n_ctx_limit) {
        print_error("--ctx " + std::to_string(ctx) + " is larger than the context of " + std::to_string(n_ctx_limit) +
                    " tokens (" + (n_ctx_ > 0 ? "-c" : "the model's training context; raise it with -c") + ")");
        return kExitUsage;
      }
    }
    Result<eval::SweepPlan> plan = eval::plan_sweep(sweep, p.engine->tokenizer(), n_ctx_limit);
    if (!plan.is_ok()) {  // e.g. a context too short for the task
      print_error(error_text(plan.status()));
      return kExitUsage;
    }
    p.plan = std::move(*plan);
    return kExitOk;
  }

  // Resume: the runs --out holds (their keys in `done`, their lines in `lines`), a torn last
  // line cut off, and n_todo the plan's runs it lacks. kExitOk, or the exit code after the error
  // is printed.
  int resume(const eval::SweepPlan& plan, std::set<std::string>& done, std::vector<Json>& lines, int& n_todo) {
    Result<eval::ResultsFile> existing = read_results(out_path_);
    if (!existing.is_ok()) return fail(existing.status());
    done = existing->run_keys();
    if (existing->torn()) {
      std::error_code ec;
      fs::resize_file(out_path_, existing->complete_bytes, ec);
      if (ec) return fail(io_error("cannot cut the torn last line of --out file '" + out_path_ + "': " + ec.message()));
      std::fprintf(stderr, "leoam: eval: %s: cut off a torn last line (an interrupted write)\n", out_path_.c_str());
    }
    lines = std::move(existing->lines);
    int n_skipped = 0;
    n_todo = 0;
    for (const eval::SampleSpec& s : plan.samples) {
      for (const eval::EvalRun& r : plan.runs) {
        ++(done.count(eval::run_key(task_, s, r, straddle_chunk_)) != 0 ? n_skipped : n_todo);
      }
    }
    std::fprintf(stderr, "leoam: eval: %d runs, %d skipped (already in %s)\n", n_todo + n_skipped, n_skipped,
                 out_path_.c_str());
    return kExitOk;
  }

  // Runs what `done` lacks, each line appended to --out as it ends and to `lines`. Ctrl-C stops
  // the run in progress (its line is not written) and sets `interrupted`: the same command
  // resumes from --out. kExitOk, or the exit code after the error is printed.
  int run_plan(const Prepared& p, int n_todo, std::set<std::string>& done, std::vector<Json>& lines,
               bool& interrupted) {
    const Model& model = p.engine->model();
    const Tokenizer& tok = p.engine->tokenizer();
    std::FILE* out = std::fopen(out_path_.c_str(), "ab");
    if (out == nullptr) {
      return fail(io_error("cannot write --out file '" + out_path_ + "': " + std::strerror(errno)));
    }
    const bool on_terminal = ::isatty(STDERR_FILENO) != 0;
    StatusLine status(on_terminal, "eval");
    int n_run = 0;
    int exit_code = kExitOk;
    SigintScope sigint;
    for (const eval::SampleSpec& s : p.plan.samples) {
      bool prompt_shown = false;
      for (const eval::EvalRun& r : p.plan.runs) {
        const std::string key = eval::run_key(task_, s, r, straddle_chunk_);
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
                                                       : eval::run_sample(model, tok, p.run_options, s, r, n_run);
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
        const std::string result =
            std::string(what) + (task_ == kPplTask ? ": perplexity " + format_number((*line)["ppl"].get<double>())
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
    return exit_code;
  }

  // --task ppl's markdown table over every ppl line of --out: one row per (depth, policy, budget),
  // in the order they first appear; perplexity and bits per byte pool every window's tokens and
  // bytes, and "vs full" compares with full at the same depth (the same tokens scored).
  void print_ppl_table(const std::vector<Json>& lines) const {
    std::printf("%s\n\n", budget_rule().c_str());
    std::printf("| task | prefill | policy | windows | perplexity | bits per byte | vs full | %s\n", kCostHeader);
    std::printf("|------|--------:|--------|--------:|-----------:|--------------:|--------:|%s\n", kCostRule);
    std::string warnings;
    for (const eval::PplDepth& at : eval::ppl_rows(lines, task_)) {
      std::vector<const eval::CostSummary*> costs;
      for (const eval::PplRow& r : at.rows) {
        char vs_full[32] = "-";
        if (const std::optional<double> pct = at.vs_full_pct(r)) std::snprintf(vs_full, sizeof(vs_full), "%+.2f%%", *pct);
        std::printf("| %s | %s | %s | %d | %.4f | %.4f | %s | %s\n", task_.c_str(), format_number(at.depth).c_str(),
                    r.label.c_str(), r.n, r.perplexity(), r.bits_per_byte(), vs_full, cost_cells(r.cost).c_str());
        costs.push_back(&r.cost);
      }
      warnings += unmatched_share_warnings(costs, "prefill " + format_number(at.depth) + ", ");
    }
    std::printf("%s", warnings.c_str());
    std::fflush(stdout);
  }

  // The markdown table over every line of --out for the task at this --straddle-chunk: one row per
  // (policy, budget), in the order they first appear.
  void print_table(const std::vector<Json>& lines) const {
    const std::vector<eval::ScoreRow> rows = eval::score_rows(lines, task_, straddle_chunk_);
    std::printf("%s\n\n", budget_rule().c_str());
    std::printf("| task | policy | samples | score | %s\n", kCostHeader);
    std::printf("|------|--------|--------:|------:|%s\n", kCostRule);
    std::vector<const eval::CostSummary*> costs;
    for (const eval::ScoreRow& r : rows) {
      std::printf("| %s | %s | %d | %.1f%% | %s\n", task_.c_str(), r.label.c_str(), r.n, r.score_pct(),
                  cost_cells(r.cost).c_str());
      costs.push_back(&r.cost);
    }
    std::printf("%s", unmatched_share_warnings(costs, "").c_str());
    std::fflush(stdout);
  }

  // The rule line above a table (budget_rule_text), for the model the sweep ran.
  std::string budget_rule() const { return budget_rule_text(attention_options_, kv_options_, n_layer_); }

  ModelSource model_;
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
