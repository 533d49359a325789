// `leoam run`: generate text from a prompt.
// Output: the prompt text, echoed as given (like llama.cpp), then the generated text streamed as
// it is sampled (flushed per token), then a newline. stdout carries nothing else, so
// `leoam run ... > out.txt` captures exactly prompt + completion + "\n". Diagnostics, the prefill
// progress bar (terminal only, long prompts only) and the closing speed summary go to stderr.
// Ctrl-C (SigintScope): the first stops the prefill at its next batch, or the generation before its
// next token; the run then prints its summary and --kv-stats, saves --kv-save if generation had
// begun (a prefill cut short leaves nothing to save, and no file), and exits with status 130. A
// second Ctrl-C exits at once.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "cli_common.h"
#include "core/cpu_features.h"
#include "core/trace.h"
#include "kernels/cpu/blas_core.h"
#include "kv/kv_session.h"
#include "attention_options.h"
#include "kv_options.h"
#include "engine/batch_generator.h"
#include "engine/generator.h"
#include "engine/step_breakdown.h"
#include "leoam/session.h"
#include "progress_bar.h"
#include "sampler_options.h"
#include "sigint_scope.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

// Writes one line per position: n_vocab space-separated floats, printed like %.9g (enough
// digits to read back the same float).
class LogitsDump {
 public:
  ~LogitsDump() {
    if (file_ != nullptr) std::fclose(file_);
  }
  Status open(const std::string& path) {
    path_ = path;
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) return io_error("cannot write --dump-logits file '" + path + "': " + std::strerror(errno));
    return Status::ok();
  }
  void write_row(std::span<const float> row) {
    line_.clear();
    char buf[32];
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line_ += ' ';
      const auto r = std::to_chars(buf, buf + sizeof(buf), row[i], std::chars_format::general, 9);
      line_.append(buf, r.ptr);
    }
    line_ += '\n';
    if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) write_failed_ = true;
  }
  Status close() {
    const bool bad = write_failed_ || std::ferror(file_) != 0;
    const bool close_failed = std::fclose(file_) != 0;
    file_ = nullptr;
    if (bad || close_failed) return io_error("error writing --dump-logits file '" + path_ + "'");
    return Status::ok();
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string line_;
  bool write_failed_ = false;
};

const char* stop_reason_text(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfGeneration: return "end of generation token";
    case StopReason::kMaxTokens: return "-n tokens generated";
    case StopReason::kContextFull: return "context full (-c)";
    case StopReason::kInterrupted: return "interrupted (Ctrl-C)";
  }
  return "?";
}

// llama.cpp's -e: the escapes a shell makes hard to type.
std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    const char* to = text[i] != '\\' ? nullptr
                     : next == 'n'     ? "\n"
                     : next == 't'     ? "\t"
                     : next == 'r'     ? "\r"
                     : next == '\\'    ? "\\"
                     : next == '"'     ? "\""
                     : next == '\''    ? "'"
                                       : nullptr;
    if (to == nullptr) {
      out += text[i];
    } else {
      out += to;
      ++i;
    }
  }
  return out;
}

void write_stdout(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

class RunCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
    add_model_options(*cmd, model_)->required();
    CLI::Option* prompts = cmd->add_option("--prompts", prompts_file_,
                                           "generate from each line of FILE (empty lines skipped), all the prompts "
                                           "decoded together, one pass over the weights a step for all: each its own "
                                           "KV store (with --kv-dir, the tier budgets each), selector and sampler "
                                           "(seeds --seed, --seed + 1, ...); prints each prompt and its text in turn")
                               ->check(readable_file())
                               ->type_name("FILE");
    add_prompt_options(*cmd, prompt_, prompt_file_, {"--kv-load", "--prompts"});
    cmd->add_option("-n,--n-predict", options_.n_predict, "tokens to generate at most (-1: until end of generation or a full context)")
        ->capture_default_str()
        ->check(in_range(-1, 1 << 30));
    cmd->add_option("-c,--ctx-size", n_ctx_, "context size in tokens (0: the model's training context)")
        ->capture_default_str()
        ->check(non_negative<int>());
    cmd->add_option("-b,--batch-size", n_batch_,
                    "prompt tokens per forward pass (1: every prompt token is decoded alone, through the sparse "
                    "attention policy, so --dump-logits scores the policy on the prompt)")
        ->capture_default_str()
        ->check(in_range(1, 1 << 20));
    add_threads_option(*cmd, n_threads_);
    add_sampler_options(*cmd, options_.sampler);
    cmd->add_option("-s,--seed", seed_, "random seed for sampling (-1: a random one; --verbose prints it)")
        ->capture_default_str()
        ->check(at_least<int64_t>(-1));
    cmd->add_flag("--no-bos", no_bos_, "do not prepend the BOS token to the prompt");
    cmd->add_flag("-e,--escape", escape_, "read \\n, \\t, \\\\, \\\" and \\' in the prompt as the characters they stand for");
    cmd->add_flag("--no-display-prompt", no_display_prompt_, "do not print the prompt before the generated text");
    // llama.cpp's, so that its command lines run: there is no GPU to offload to, and run is never
    // a conversation (-ngl and -no-cnv, rewritten before parsing: llama_cpp_spellings.h).
    cmd->add_option("--n-gpu-layers", n_gpu_layers_, "llama.cpp's: accepted; this build runs every layer on the CPU")
        ->check(at_least<int>(-1))
        ->group("Accepted for llama.cpp's command lines");
    cmd->add_flag("--no-conversation", no_conversation_, "llama.cpp's: accepted; run generates once, never a chat")
        ->group("Accepted for llama.cpp's command lines");
    cmd->add_flag("--parse-special", options_.parse_special, "recognize special tokens such as </s> written in the prompt");
    cmd->add_option("--dump-logits", dump_logits_path_,
                    "write every position's logits to FILE: one line per prompt and generated token, n_vocab floats")
        ->type_name("FILE");
    cmd->add_flag("--verbose", verbose_, "print the settings (seed included) and load details on stderr");
    add_kv_options(*cmd, kv_options_);
    add_attention_options(*cmd, attention_options_);
    cmd->add_option("--kv-save", kv_save_dir_,
                    "at the end, save the session (tokens, KV, sampler state) to DIR, for --kv-load")
        ->check(writable_dir())
        ->type_name("DIR")
        ->group("KV store (tiers)");
    cmd->add_option("--trace", trace_path_,
                    "write a timeline of the decode steps to FILE, as Chrome trace-event JSON (open it in "
                    "ui.perfetto.dev): per layer the projections, selection, attention and FFN on the compute "
                    "thread, and the disk reads, on the read-ahead thread with --pipeline on")
        ->check(writable_file())
        ->type_name("FILE");
    cmd->add_option("--kv-load", kv_load_dir_,
                    "continue the session saved in DIR without recomputing it; -p/-f then add text to it")
        ->type_name("DIR")
        ->group("KV store (tiers)");
    // One sequence's files and reports; a batch of prompts has several.
    for (const char* one : {"-p", "-f", "--kv-load", "--kv-save", "--dump-logits", "--trace", "--kv-stats",
                            "--kv-stats-json"}) {
      prompts->excludes(cmd->get_option(one));
    }
    return cmd;
  }

  int execute() override {
    Result<std::string> prompt = resolve_prompt(prompt_, prompt_file_);
    if (!prompt.is_ok()) return fail(prompt.status());
    if (escape_) *prompt = unescape(*prompt);
    if (n_gpu_layers_ > 0) {
      std::fprintf(stderr, "leoam: -ngl %d: this build has no GPU backend; every layer runs on the CPU\n", n_gpu_layers_);
    }
    options_.add_bos = !no_bos_;
    if (seed_ == kRandomSeed) {
      std::random_device rd;
      options_.sampler.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    } else {
      options_.sampler.seed = static_cast<uint64_t>(seed_);
    }

    LogitsDump dump;
    if (!dump_logits_path_.empty()) {
      if (Status st = dump.open(dump_logits_path_); !st.is_ok()) {
        print_error(error_text(st));
        return kExitUsage;
      }
    }

    Result<std::unique_ptr<Engine>> engine = Engine::load(model_.path, model_.import_options());
    if (!engine.is_ok()) return fail(named(engine.status(), model_.path));
    const Model& model = (*engine)->model();
    const Tokenizer& tokenizer = (*engine)->tokenizer();

    ProgressBar bar(::isatty(STDERR_FILENO) != 0);
    SessionOptions so;
    Result<KvStoreOptions> store = store_options(kv_options_);
    if (!store.is_ok()) return fail(store.status());
    so.kv = *store;
    so.kv.swa_full = so.kv.swa_full || !kv_save_dir_.empty();  // a saved session holds every position
    Result<AttentionOptions> attention = attention_options(attention_options_, model.hparams().n_layer);
    if (!attention.is_ok()) return fail(attention.status());
    so.attention = *attention;
    so.forward.n_ctx = n_ctx_;
    so.forward.n_threads = n_threads_;
    so.forward.n_batch = n_batch_;
    so.forward.progress = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
    so.forward.should_stop = &SigintScope::interrupted;
    so.batched = !prompts_file_.empty();
    std::unique_ptr<Trace> trace;
    if (!trace_path_.empty()) {
      trace = std::make_unique<Trace>();
      trace->name_thread("compute");
      so.trace = trace.get();
    }
    options_.should_stop = &SigintScope::interrupted;
    Result<std::unique_ptr<Session>> made = Session::create(model, so);
    if (!made.is_ok()) return fail(made.status());
    Session& session = **made;
    kv_options_.chunk_tokens = session.options().kv.chunk_tokens;
    KvCache& kv_cache = session.kv();
    if (!kv_options_.dir.empty()) std::fprintf(stderr, "leoam: %s\n", kv_store_summary(kv_options_, kv_cache).c_str());

    if (verbose_) print_settings(session.context());
    if (!prompts_file_.empty()) return run_batch(session, model, tokenizer);

    uint64_t model_hash = 0;
    if (!kv_save_dir_.empty() || !kv_load_dir_.empty()) {
      Result<uint64_t> hash = hash_model_file(model_);
      if (!hash.is_ok()) return fail(hash.status());
      model_hash = *hash;
    }
    std::vector<int32_t> tokens;
    if (!kv_load_dir_.empty()) {
      Result<KvSession> saved = load_kv_session(kv_load_dir_, model_hash, kv_cache);
      if (!saved.is_ok()) return fail(saved.status());
      tokens = std::move(saved->tokens);
      if (seed_ == kRandomSeed) options_.sampler_rng_state = saved->sampler_state;
      if (verbose_) {
        std::fprintf(stderr, "leoam: loaded %s: %zu tokens, KV of %lld\n", kv_load_dir_.c_str(), tokens.size(),
                     static_cast<long long>(saved->n_kv));
      }
      const std::vector<int32_t> more = tokenizer.tokenize(*prompt, /*add_bos=*/false, options_.parse_special);
      tokens.insert(tokens.end(), more.begin(), more.end());
    } else {
      tokens = tokenizer.tokenize(*prompt, options_.add_bos, options_.parse_special);
    }

    GenerateCallbacks callbacks;
    const std::string& prompt_text = *prompt;
    PrefillIoStats prefill;
    callbacks.on_prefill_done = [&](int64_t n_prompt_tokens) {
      if (const KvStats at_end = kv_cache.stats(); at_end.tiered) {
        prefill.known = true;
        for (int t = 0; t < kNumTiers; ++t) {
          prefill.bytes_read[t] = at_end.tiers[t].bytes_read;
          prefill.bytes_written[t] = at_end.tiers[t].bytes_written;
        }
      }
      bar.clear();
      if (verbose_) std::fprintf(stderr, "leoam: prompt: %lld tokens\n", static_cast<long long>(n_prompt_tokens));
      if (!no_display_prompt_) write_stdout(prompt_text);
    };
    callbacks.on_text = write_stdout;
    if (!dump_logits_path_.empty()) callbacks.on_logits = [&dump](std::span<const float> row) { dump.write_row(row); };

    const bool strip_leading_space = kv_load_dir_.empty() && prompt_text.empty();
    SigintScope sigint;
    Result<GenerateStats> stats = session.generate(tokenizer, tokens, strip_leading_space, options_, callbacks);
    bar.clear();
    if (!stats.is_ok()) return fail(stats.status());
    if (stats->prefill_complete()) write_stdout("\n");
    if (!dump_logits_path_.empty()) {
      if (Status st = dump.close(); !st.is_ok()) return fail(st);
    }
    print_summary(*stats);
    if (!kv_save_dir_.empty() && !stats->prefill_complete()) {
      std::fprintf(stderr, "leoam: --kv-save: nothing saved to %s: interrupted before the whole prompt was evaluated\n",
                   kv_save_dir_.c_str());
    } else if (!kv_save_dir_.empty()) {
      KvSession saved;
      saved.model_hash = model_hash;
      saved.tokens = stats->tokens;
      // At least one token is left to evaluate on resume: its logits drive the next sample.
      saved.n_kv = std::min<int64_t>(session.context().n_past(), static_cast<int64_t>(saved.tokens.size()) - 1);
      saved.sampler_state = stats->sampler_rng_state;
      if (Status st = save_kv_session(kv_cache, saved, kv_save_dir_); !st.is_ok()) return fail(st);
      if (verbose_) std::fprintf(stderr, "leoam: saved the session to %s\n", kv_save_dir_.c_str());
    }
    const PrefillStats layered = session.context().prefill_stats();
    prefill.working_set_budget_bytes = kv_options_.dir.empty() ? 0 : so.kv.prefill_working_set_bytes;
    prefill.working_set_bytes = layered.working_set_bytes;
    prefill.n_segments = layered.n_segments;
    if (Status st = report_kv_stats(kv_options_, session.stats(), prefill); !st.is_ok()) return fail(st);
    if (trace != nullptr) {
      if (Status st = trace->write(trace_path_); !st.is_ok()) return fail(st);
      std::fprintf(stderr, "leoam: wrote the trace of the decode to %s (%zu events)\n", trace_path_.c_str(),
                   trace->n_events());
      if (const StepBreakdown b = summarize_decode_steps(*trace); b.n_steps > 0) {
        std::fprintf(stderr, "leoam: %s (the first step left out)\n", b.to_text().c_str());
      }
    }
    if (kv_options_.print_stats && session.selector() != nullptr) {
      std::fprintf(stderr, "%sattention: %s\n", session.selector()->stats_text().c_str(),
                   budget_rule_text(attention_options_, kv_options_, model.hparams().n_layer).c_str());
    }
    return stats->stop_reason == StopReason::kInterrupted ? kExitInterrupted : kExitOk;
  }

 private:
  // Prefixes the model path unless the message already names it.

  void print_settings(const ForwardContext& ctx) const {
    const SamplerOptions& s = options_.sampler;
    std::fprintf(stderr, "leoam: model %s: n_vocab %d, context %lld tokens, %d threads\n", model_.path.c_str(),
                 ctx.n_vocab(), static_cast<long long>(ctx.n_ctx()), ctx.n_threads());
    const std::string_view path = cpu_path_name();
    const std::string_view blas = kernels::blas_core();
    std::fprintf(stderr, "leoam: kernel path: %.*s, OpenBLAS core (prefill): %.*s\n", static_cast<int>(path.size()),
                 path.data(), static_cast<int>(blas.size()), blas.data());
    std::fprintf(stderr,
                 "leoam: sampling: seed %llu, temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, "
                 "repeat-last-n %d; n-predict %d\n",
                 static_cast<unsigned long long>(s.seed), s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty,
                 s.repeat_last_n, options_.n_predict);
  }

  // --prompts: the file's prompts decoded together; the first takes the session's own sequence
  // (the others get stores and selectors of their own, alike).
  int run_batch(Session& session, const Model& model, const Tokenizer& tokenizer) {
    Result<std::string> text = read_text_file(prompts_file_);
    if (!text.is_ok()) return fail(text.status());
    std::vector<std::string> prompts;
    for (size_t at = 0; at < text->size();) {
      const size_t end = std::min(text->find('\n', at), text->size());
      if (end > at) prompts.push_back(text->substr(at, end - at));
      at = end + 1;
    }
    if (prompts.empty()) return fail(invalid_argument(prompts_file_ + ": --prompts: no prompt (the file has no non-empty line)"));
    if (static_cast<int64_t>(prompts.size()) > n_batch_) {
      return fail(invalid_argument(prompts_file_ + ": --prompts: " + std::to_string(prompts.size()) +
                                   " prompts, more than the batch size of " + std::to_string(n_batch_) + " (-b)"));
    }
    std::vector<std::unique_ptr<KvCache>> stores;
    std::vector<std::unique_ptr<sparse::SparseAttention>> selectors;
    std::vector<DecodeSequence> sequences = {{&session.kv(), session.selector()}};
    const SessionOptions& so = session.options();
    const int64_t n_ctx = session.context().n_ctx();
    for (size_t i = 1; i < prompts.size(); ++i) {
      Result<KvStoreNeeds> needs = kv_store_needs(so.attention, so.kv, model, n_ctx);
      if (!needs.is_ok()) return fail(needs.status());
      needs->batched = true;
      Result<std::unique_ptr<KvCache>> kv = make_kv_store(so.kv, model, n_ctx, *needs);
      if (!kv.is_ok()) return fail(kv.status());
      Result<std::unique_ptr<sparse::SparseAttention>> selector = make_selector(so.attention, so.kv, model, **kv);
      if (!selector.is_ok()) return fail(selector.status());
      sequences.push_back({kv->get(), selector->get()});
      stores.push_back(std::move(*kv));
      selectors.push_back(std::move(*selector));
    }
    SigintScope sigint;
    BatchGenerateStats totals;
    Result<std::vector<BatchSequenceResult>> results =
        generate_batch(session.context(), tokenizer, prompts, sequences, options_, &totals);
    if (!results.is_ok()) return fail(results.status());
    bool interrupted = false;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const BatchSequenceResult& r = (*results)[i];
      std::printf("[%zu] %s%s\n\n", i + 1, prompts[i].c_str(), r.text.c_str());
      interrupted = interrupted || r.stats.stop_reason == StopReason::kInterrupted;
    }
    std::fflush(stdout);
    std::fprintf(stderr, "leoam: %zu prompts: prefill %10.1f ms; generated %lld tokens in %lld batched steps, "
                 "%10.1f ms, %.1f tok/s\n",
                 prompts.size(), totals.prefill_ms, static_cast<long long>(totals.n_generated),
                 static_cast<long long>(totals.n_steps), totals.decode_ms, totals.decode_tokens_per_s());
    return interrupted ? kExitInterrupted : kExitOk;
  }

  static void print_summary(const GenerateStats& st) {
    std::string cut;
    if (!st.prefill_complete()) {
      cut = " (interrupted: " + std::to_string(st.n_reused_tokens + st.n_prefilled) + " of them evaluated)";
    }
    std::fprintf(stderr, "leoam: prompt    %6lld tokens %10.1f ms %10.1f tok/s%s\n",
                 static_cast<long long>(st.n_prompt_tokens), st.prefill_ms, st.prefill_tokens_per_s(), cut.c_str());
    std::fprintf(stderr, "leoam: generated %6lld tokens %10.1f ms %10.1f tok/s (stopped: %s)\n",
                 static_cast<long long>(st.n_generated), st.decode_ms, st.decode_tokens_per_s(),
                 stop_reason_text(st.stop_reason));
  }

  ModelSource model_;
  std::string prompt_;
  std::string prompt_file_;
  bool escape_ = false;
  bool no_display_prompt_ = false;
  int n_gpu_layers_ = 0;
  bool no_conversation_ = false;
  std::string dump_logits_path_;
  std::string kv_save_dir_;
  std::string trace_path_;
  std::string kv_load_dir_;
  std::string prompts_file_;
  KvCliOptions kv_options_;
  AttentionCliOptions attention_options_;
  int n_ctx_ = 0;
  int n_threads_ = 0;
  int n_batch_ = 512;
  bool no_bos_ = false;
  bool verbose_ = false;
  GenerateOptions options_;
  static constexpr int64_t kRandomSeed = -1;  // as llama.cpp's --seed -1
  int64_t seed_ = kRandomSeed;
};

}  // namespace

std::unique_ptr<Command> make_run_command() { return std::make_unique<RunCommand>(); }

}  // namespace leoam::cli
