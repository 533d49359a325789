// `leoam eval`: score a model on long-context retrieval tasks (src/eval/task.h) across a sweep of
// context lengths, needle depths, seeds and sparse attention policies at several budgets.
//
// The sweep: for each (ctx, depth, seed) the sample is built once; then for each (policy, budget)
// (full once, its budget recorded as 1) greedy generation runs from the sample's tokens through a
// fresh context with a fresh KV store, and the output is scored. Each result is one JSON line
// appended to --out and flushed as soon as it exists:
//   {"task","ctx","depth","seed","policy","budget","needle_pos","answers","output","score",
//    "tokens_attended_pct","disk_bytes_read","decode_ms"}
// so an interrupted sweep resumes: the runs --out already holds are skipped, and a torn last line
// (an interrupted write) is cut off and run again.
//
// Every flag is checked and every sample built before --out is touched, so a bad flag appends
// nothing. stdout carries only the closing markdown table (one row per policy and budget, over
// every line of --out for the task); progress and errors go to stderr.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "cli_common.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "eval/task.h"
#include "kv/tiered_kv_cache.h"
#include "kv_options.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "progress_bar.h"
#include "sparse/selection_policy.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

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

// "full", or "leoam@0.1".
std::string policy_label(const std::string& policy, double budget) {
  return policy == "full" ? policy : policy + "@" + format_number(budget);
}

// What identifies a run in --out: doubles print with 17 digits, which JSON reads back exactly.
std::string run_key(const std::string& task, int64_t ctx, double depth, uint64_t seed, const std::string& policy,
                    double budget) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s|%lld|%.17g|%llu|%s|%.17g", task.c_str(), static_cast<long long>(ctx), depth,
                static_cast<unsigned long long>(seed), policy.c_str(), budget);
  return buf;
}

// One (policy, budget) of the sweep; full's budget is 1.
struct PolicyRun {
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
                 j.at("seed").get<uint64_t>(), j.at("policy").get<std::string>(), j.at("budget").get<double>());
}

// Tokens attended as a percentage of those visible, over every layer and query the selector saw.
double attended_pct(const sparse::SparseAttention& selector) {
  int64_t n_attended = 0, n_visible = 0;
  for (const sparse::LayerSparseStats& s : selector.stats()) {
    n_attended += s.n_attended;
    n_visible += s.n_visible;
  }
  return n_visible > 0 ? 100.0 * static_cast<double>(n_attended) / static_cast<double>(n_visible) : 100.0;
}

class EvalCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("eval", "score a model on long-context retrieval tasks across a sweep");
    cmd->add_option("-m,--model", model_path_, "model file (GGUF)")
        ->required()
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--task", task_, std::string("the task: ") + eval::task_names())->required();
    cmd->add_option("--ctx", ctxs_, "context lengths in tokens (the whole prompt, BOS included), comma-separated")
        ->required()
        ->delimiter(',')
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
    cmd->add_option("--depth", depths_, "needle depths in [0, 1], comma-separated")
        ->capture_default_str()
        ->delimiter(',')
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seeds", n_seeds_, "samples per context and depth (seeds 0 .. N-1)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--out", out_path_, "append one JSON line per run to FILE; the runs it holds are skipped")
        ->required()
        ->type_name("FILE");
    cmd->add_option("--haystack", haystack_path_, "cut the haystack from this text file (default: filler sentences)")
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("-c,--ctx-size", n_ctx_, "context size in tokens (0: the model's training context); every --ctx "
                                             "plus the answer tokens must fit")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("-b,--batch-size", n_batch_, "prompt tokens per forward pass")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("-t,--threads", n_threads_,
                    "threads (0: the physical cores, " + std::to_string(ThreadPool::default_thread_count()) + " here)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    add_kv_options(*cmd, kv_options_);
    add_attention_options(*cmd, attention_options_);
    // --policy and --budget are lists here: the sweep runs each policy at each budget.
    cmd->remove_option(cmd->get_option("--policy"));
    cmd->remove_option(cmd->get_option("--budget"));
    cmd->add_option("--policy", policies_,
                    std::string("policies to sweep, comma-separated: ") + sparse::selection_policy_names())
        ->capture_default_str()
        ->delimiter(',')
        ->check(CLI::IsMember({"full", "streaming", "h2o", "h2o-chunked", "quest", "infinigen", "leoam"}))
        ->group("Sparse attention");
    cmd->add_option("--budget", budgets_,
                    "budgets to sweep each policy but full at, comma-separated: a fraction of the context (<= 1) or "
                    "a token count (> 1)")
        ->capture_default_str()
        ->delimiter(',')
        ->check(CLI::Validator(
            [](std::string& value) {
              double x = 0.0;
              return CLI::detail::lexical_cast(value, x) && x > 0.0 ? std::string()
                                                                    : "'" + value + "' is not a positive number";
            },
            "POSITIVE"))
        ->group("Sparse attention");
    return cmd;
  }

  int execute() override {
    // Checks that need no model.
    const std::vector<std::string> tasks = split_words(eval::task_names());
    if (std::find(tasks.begin(), tasks.end(), task_) == tasks.end()) {
      print_error("--task '" + task_ + "' is not a task; tasks: " + eval::task_names());
      return kExitUsage;
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
    if (!model.is_ok()) return fail(named(model.status()));
    Result<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::from_gguf((*model)->gguf());
    if (!tokenizer.is_ok()) return fail(named(tokenizer.status()));
    const Tokenizer& tok = **tokenizer;
    const int64_t n_ctx_limit = n_ctx_ > 0 ? n_ctx_ : (*model)->hparams().n_ctx_train;

    // Every sample, before --out is touched: a context that does not fit fails here.
    const eval::TokenizeFn tokenize = [&tok](std::string_view text) {
      return tok.tokenize(text, /*add_bos=*/false, /*parse_special=*/false);
    };
    const std::vector<int32_t> probe = tok.tokenize("a", /*add_bos=*/true, /*parse_special=*/false);
    const int32_t bos = tok.bos_id() >= 0 && !probe.empty() && probe.front() == tok.bos_id() ? tok.bos_id() : -1;
    std::vector<SampleSpec> samples;
    for (const int64_t ctx : ctxs_) {
      if (ctx > n_ctx_limit) {
        print_error("--ctx " + std::to_string(ctx) + " is larger than the context of " + std::to_string(n_ctx_limit) +
                    " tokens (" + (n_ctx_ > 0 ? "-c" : "the model's training context; raise it with -c") + ")");
        return kExitUsage;
      }
      for (const double depth : depths_) {
        for (int seed = 0; seed < n_seeds_; ++seed) {
          eval::TaskParams params;
          params.task = task_;
          params.context_tokens = ctx;
          params.depth = depth;
          params.seed = static_cast<uint64_t>(seed);
          params.haystack_text = haystack;
          Result<eval::Sample> sample = eval::make_sample(params, tokenize, bos);
          if (!sample.is_ok()) {  // e.g. a context too short for the task
            print_error(sample.status().message());
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
    std::vector<PolicyRun> runs;
    for (const std::string& policy : policies_) {
      if (policy == "full") {
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
      for (const PolicyRun& r : runs) {
        (done.count(run_key(task_, s.ctx, s.depth, s.seed, r.policy, r.budget)) != 0 ? n_skipped : n_todo)++;
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
    for (const SampleSpec& s : samples) {
      for (const PolicyRun& r : runs) {
        const std::string key = run_key(task_, s.ctx, s.depth, s.seed, r.policy, r.budget);
        if (done.count(key) != 0) continue;
        ++n_run;
        char what[256];
        std::snprintf(what, sizeof(what), "%d/%d %s ctx %lld depth %g seed %llu %s", n_run, n_todo, task_.c_str(),
                      static_cast<long long>(s.ctx), s.depth, static_cast<unsigned long long>(s.seed),
                      policy_label(r.policy, r.budget).c_str());
        status.show(what);
        Result<Json> line = run_one(**model, tok, s, r, n_run);
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
        const std::string result = std::string(what) + ": score " + format_number((*line)["score"].get<double>());
        if (on_terminal) {
          status.show(result);
        } else {
          std::fprintf(stderr, "eval: %s\n", result.c_str());
        }
        lines.push_back(std::move(*line));
      }
      if (exit_code != kExitOk) break;
    }
    status.clear();
    if (std::fclose(out) != 0 && exit_code == kExitOk) {
      exit_code = fail(io_error("error writing --out file '" + out_path_ + "'"));
    }
    if (exit_code != kExitOk) return exit_code;
    print_table(lines);
    return kExitOk;
  }

 private:
  // One greedy generation of `spec`'s sample under `run`'s policy: its result line.
  Result<Json> run_one(const Model& model, const Tokenizer& tok, const SampleSpec& spec, const PolicyRun& run,
                       int run_index) const {
    const eval::Sample& sample = spec.sample;
    AttentionCliOptions attention = attention_options_;
    attention.policy = run.policy;
    attention.budget = run.budget;
    KvCliOptions kv_options = kv_options_;
    if (kv_options.chunk_tokens == 0) kv_options.chunk_tokens = default_chunk_tokens(attention);
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

    // The prompt and every answer token fit: checked when the sample was built.
    const int64_t n_ctx = spec.ctx + sample.max_new_tokens;
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                           make_kv_cache(kv_options, model, n_ctx, policy_needs_catalog(attention)));
    KvCache& kv_cache = *kv;  // owned by the context from here on
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::SparseAttention> selector,
                           make_sparse_attention(attention, kv_options, model, kv_cache));
    ForwardOptions fwd;
    fwd.n_ctx = n_ctx;
    fwd.n_threads = n_threads_;
    fwd.n_batch = n_batch_;
    fwd.selector = selector.get();
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardContext> ctx, ForwardContext::create(model, fwd, std::move(kv)));

    GenerateOptions options;
    options.n_predict = sample.max_new_tokens;
    options.sampler.temperature = 0.0f;  // greedy
    std::string output;
    GenerateCallbacks callbacks;
    callbacks.on_text = [&output](std::string_view text) { output += text; };
    LEOAM_ASSIGN_OR_RETURN(GenerateStats stats, generate_from_tokens(*ctx, tok, sample.tokens,
                                                                     /*strip_leading_space=*/false, options, callbacks));

    const auto* tiered = dynamic_cast<const TieredKvCache*>(&kv_cache);
    Json j;
    j["task"] = task_;
    j["ctx"] = spec.ctx;
    j["depth"] = spec.depth;
    j["seed"] = spec.seed;
    j["policy"] = run.policy;
    j["budget"] = run.budget;
    j["needle_pos"] = sample.needle_pos;
    j["answers"] = sample.answers;
    j["output"] = output;
    j["score"] = eval::score_output(eval::task_scoring(task_), sample.answers, output);
    j["tokens_attended_pct"] = selector != nullptr ? attended_pct(*selector) : 100.0;
    j["disk_bytes_read"] = tiered != nullptr ? tiered->stats()[Tier::kDisk].bytes_read : uint64_t{0};
    j["decode_ms"] = stats.decode_ms;
    return j;
  }

  // The markdown table over every line of --out for the task: one row per (policy, budget), in
  // the order they first appear.
  void print_table(const std::vector<Json>& lines) const {
    struct Row {
      std::string label;
      int n = 0;
      double score_sum = 0.0;
      double attended_sum = 0.0;
    };
    std::vector<Row> rows;
    for (const Json& j : lines) {
      if (j.value("task", "") != task_) continue;
      const std::string label = policy_label(j.value("policy", ""), j.value("budget", 1.0));
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.label == label; });
      if (it == rows.end()) it = rows.insert(rows.end(), Row{label});
      ++it->n;
      it->score_sum += j.value("score", 0.0);
      it->attended_sum += j.value("tokens_attended_pct", 100.0);
    }
    std::printf("| task | policy | samples | score | tokens attended |\n");
    std::printf("|------|--------|--------:|------:|----------------:|\n");
    for (const Row& r : rows) {
      std::printf("| %s | %s | %d | %.1f%% | %.1f%% |\n", task_.c_str(), r.label.c_str(), r.n,
                  100.0 * r.score_sum / r.n, r.attended_sum / r.n);
    }
    std::fflush(stdout);
  }

  // Prefixes the model path unless the message already names it.
  Status named(const Status& st) const {
    return st.message().find(model_path_) == std::string::npos ? st.with_context(model_path_) : st;
  }

  std::string model_path_;
  std::string task_;
  std::vector<int64_t> ctxs_;
  std::vector<double> depths_ = {0.1, 0.5, 0.9};
  int n_seeds_ = 1;
  std::vector<std::string> policies_ = {"full", "leoam"};
  std::vector<double> budgets_ = {0.1};
  std::string out_path_;
  std::string haystack_path_;
  KvCliOptions kv_options_;
  AttentionCliOptions attention_options_;
  int n_ctx_ = 0;
  int n_threads_ = 0;
  int n_batch_ = 512;
};

}  // namespace

std::unique_ptr<Command> make_eval_command() { return std::make_unique<EvalCommand>(); }

}  // namespace leoam::cli
