// `leoam serve`: the OpenAI-compatible HTTP server (src/server/http_server.h) over continuous
// batching (src/engine/batch_scheduler.h). Each request gets a KV store of its own, made from
// the KV and policy flags as `leoam run` makes its one (with --kv-dir: the tier budgets each),
// freed when the request ends. With --kv-dir, prompts' KV is kept in DIR/prompt-cache
// (src/engine/prompt_cache.h) for later prompts that begin alike.
//
// Prints "leoam: serving MODEL on http://HOST:PORT ..." on stderr once it listens; Ctrl-C stops
// it (requests in flight end cancelled) and exits 0.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "attention_options.h"
#include "chat/chat_template.h"
#include "cli_common.h"
#include "engine/batch_scheduler.h"
#include "engine/prompt_cache.h"
#include "kv_options.h"
#include "model/model.h"
#include "sampler_options.h"
#include "server/http_server.h"
#include "sigint_scope.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

// What /v1/chat/completions renders messages with: --chat-template (a built-in name or a file),
// else the model's tokenizer.chat_template, else nothing (chat requests are refused). A template
// that does not parse, or fails on a plain conversation, fails the start naming its source.
Result<server::ChatRenderer> chat_renderer(const std::string& flag, const Model& model, const Tokenizer& tokenizer) {
  std::string source, what;
  if (!flag.empty()) {
    what = "--chat-template " + flag;
    if (Result<std::string> builtin = chat::builtin_template(flag); builtin.is_ok()) {
      source = std::move(*builtin);
    } else if (std::filesystem::is_regular_file(flag)) {
      LEOAM_ASSIGN_OR_RETURN(source, read_text_file(flag));
    } else {
      return invalid_argument(what + ": not a file, nor a built-in template (" + builtin.status().message() + ")");
    }
  } else {
    LEOAM_ASSIGN_OR_RETURN(std::optional<std::string> in_model, model.gguf().get_string("tokenizer.chat_template"));
    if (!in_model) return server::ChatRenderer{};
    source = std::move(*in_model);
    what = "the model's chat template (tokenizer.chat_template)";
  }
  const auto refuse = [&](const Status& st) {
    return invalid_argument(what + " cannot be used: " + st.message() +
                            "; give one that can with --chat-template NAME|FILE");
  };
  Result<chat::ChatTemplate> parsed = chat::ChatTemplate::parse(source);
  if (!parsed.is_ok()) return refuse(parsed.status());
  auto t = std::make_shared<const chat::ChatTemplate>(std::move(*parsed));
  const std::string bos = tokenizer.bos_id() >= 0 ? tokenizer.token_text(tokenizer.bos_id()) : "";
  const std::string eos = tokenizer.eos_id() >= 0 ? tokenizer.token_text(tokenizer.eos_id()) : "";
  const nlohmann::json probe = {{{"role", "user"}, {"content", "Hello"}}, {{"role", "assistant"}, {"content", "Hi."}},
                                {{"role", "user"}, {"content", "Bye"}}};
  if (Result<std::string> r = chat::render_chat(*t, probe, true, bos, eos); !r.is_ok()) return refuse(r.status());
  return server::ChatRenderer([t, bos, eos](const nlohmann::json& messages, const nlohmann::json& tools) {
    return chat::render_chat(*t, messages, /*add_generation_prompt=*/true, bos, eos, tools);
  });
}

class ServeCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
    add_model_options(*cmd, model_)->required();
    cmd->add_option("--host", http_.host, "address to listen on (127.0.0.1: this machine only)")->capture_default_str();
    cmd->add_option("--port", http_.port, "port to listen on (0: any free port, printed at the start)")
        ->capture_default_str()
        ->check(in_range(0, 65535));
    cmd->add_option("--api-key", http_.api_key,
                    "require 'Authorization: Bearer KEY' on every endpoint but /health");
    cmd->add_option("--allowed-hosts", http_.allowed_hosts,
                    "Host names the server answers besides its address (and localhost on loopback), so that a web "
                    "page cannot reach it by DNS rebinding; '*': any")
        ->delimiter(',')
        ->type_name("NAME[,NAME...]");
    cmd->add_option("--cors-origin", http_.cors_origin,
                    "a web origin (https://app.example) whose pages may call the API from a browser; '*': any; "
                    "other cross-origin browser requests are refused")
        ->type_name("ORIGIN");
    cmd->add_option("--backlog", http_.backlog, "connections the kernel queues before the server accepts them")
        ->capture_default_str()
        ->check(in_range(1, 65535));
    cmd->add_option("--chat-template", chat_template_,
                    "how /v1/chat/completions writes messages into a prompt: a Jinja file, or chatml, llama2, llama3, "
                    "gemma (default: the model's tokenizer.chat_template; without one, chat requests are refused)")
        ->type_name("NAME|FILE");
    cmd->add_option("--alias", http_.model_id, "the model's name in the API (default: the file name without .gguf)");
    cmd->add_option("--parallel", scheduler_.n_parallel, "requests decoded together, each with its own KV store")
        ->capture_default_str()
        ->check(in_range(1, 256));
    cmd->add_option("--max-queue", scheduler_.max_queued,
                    "requests that may wait for a place beyond --parallel; more are answered 503")
        ->capture_default_str()
        ->check(in_range(0, 1 << 20));
    cmd->add_option("--max-body-mb", max_body_mb_, "largest request body accepted (413 beyond)")
        ->capture_default_str()
        ->check(positive<double>());
    cmd->add_option("-c,--ctx-size", n_ctx_, "context of each request in tokens, prompt and answer (0: the model's training context)")
        ->capture_default_str()
        ->check(non_negative<int>());
    cmd->add_option("-n,--n-predict", http_.defaults.max_tokens, "tokens to generate when a request gives no max_tokens")
        ->capture_default_str()
        ->check(in_range(0, 1 << 30));
    cmd->add_option("-b,--batch-size", n_batch_, "prompt tokens per forward pass")
        ->capture_default_str()
        ->check(in_range(1, 1 << 20));
    add_threads_option(*cmd, n_threads_);
    add_sampler_options(*cmd, http_.defaults.sampler);
    add_kv_options(*cmd, kv_options_);
    cmd->add_option("--prompt-cache-gb", prompt_cache_gb_,
                    "with --kv-dir: keep the KV of prompts in DIR/prompt-cache, up to this many GB (least recently "
                    "used first out; 0: off), so that a prompt that begins like an earlier one (a long document, "
                    "another question) loads its KV instead of computing it, after a restart too")
        ->capture_default_str()
        ->check(non_negative<double>())
        ->group("KV store (tiers)");
    cmd->add_option("--prompt-cache-min-tokens", prompt_cache_.min_tokens, "shortest prompt the prompt cache keeps")
        ->capture_default_str()
        ->check(in_range<int64_t>(2, int64_t{1} << 30))
        ->group("KV store (tiers)");
    add_attention_options(*cmd, attention_options_);
    cmd->add_flag("--sparse-continuation", sparse_continuation_,
                  "a prompt's rows after a reused prefix (a question about a cached document) attend what the policy "
                  "picks for the prompt's last row, not the whole prefix: they read the document's KV selectively, as "
                  "decode does, but the answer may differ from a cold prompt's (whose prefill is dense)")
        ->group("Sparse attention");
    // A run's end-of-run report; the server's figures are at /metrics.
    for (const char* run_only : {"--kv-stats", "--kv-stats-json"}) cmd->remove_option(cmd->get_option(run_only));
    return cmd;
  }

  int execute() override {
    Result<std::unique_ptr<Engine>> engine = Engine::load(model_.path, model_.import_options());
    if (!engine.is_ok()) return fail(named(engine.status(), model_.path));
    const Model& m = (*engine)->model();
    const Tokenizer& tokenizer = (*engine)->tokenizer();
    Result<server::ChatRenderer> chat = chat_renderer(chat_template_, m, tokenizer);
    if (!chat.is_ok()) return fail(chat.status());
    http_.chat = std::move(*chat);
    const int64_t n_ctx = n_ctx_ > 0 ? n_ctx_ : m.hparams().n_ctx_train;
    Result<KvStoreOptions> checked_store = store_options(kv_options_);
    if (!checked_store.is_ok()) return fail(checked_store.status());
    KvStoreOptions store = *checked_store;
    // A kept prompt is reused from any of its positions, which a sliding-window layer must not drop.
    store.swa_full = store.swa_full || (!store.dir.empty() && prompt_cache_gb_ > 0);
    Result<AttentionOptions> checked_attention = attention_options(attention_options_, m.hparams().n_layer);
    if (!checked_attention.is_ok()) return fail(checked_attention.status());
    const AttentionOptions attention = *checked_attention;
    if (store.chunk_tokens == 0) {
      const Result<int> chunk_tokens = default_chunk_tokens(attention, store, n_ctx);
      if (!chunk_tokens.is_ok()) return fail(chunk_tokens.status());
      store.chunk_tokens = *chunk_tokens;
    }
    kv_options_.chunk_tokens = store.chunk_tokens;
    const Result<KvStoreNeeds> checked_needs = kv_store_needs(attention, store, m, n_ctx);
    if (!checked_needs.is_ok()) return fail(checked_needs.status());
    const KvStoreNeeds needs = *checked_needs;
    // Each request's store and selector, as `leoam run` makes its one. A first one is made now,
    // so that a flag the store or policy refuses fails at the start, not at the first request.
    SequenceFactory factory = [store, attention, needs, &m, n_ctx]() -> Result<SequenceSlot> {
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, make_kv_store(store, m, n_ctx, needs));
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::SparseAttention> selector, make_selector(attention, store, m, *kv));
      return SequenceSlot{std::move(kv), std::move(selector)};
    };
    {
      Result<SequenceSlot> probe = factory();
      if (!probe.is_ok()) return fail(probe.status());
      // The prompt cache's entries are saved as the requests' stores keep their disk chunks, so
      // that those read them in place.
      prompt_cache_.layout.chunk_tokens = kv_options_.chunk_tokens;
      if (!store.dir.empty()) prompt_cache_.layout.abstract_tokens = needs.abstract_tokens;
    }

    std::unique_ptr<PromptCache> prompt_cache;
    if (!kv_options_.dir.empty() && prompt_cache_gb_ > 0) {
      Result<uint64_t> hash = hash_model_file(model_);
      if (!hash.is_ok()) return fail(hash.status());
      prompt_cache_.dir = kv_options_.dir + "/prompt-cache";
      prompt_cache_.max_bytes = static_cast<uint64_t>(prompt_cache_gb_ * 1e9);
      prompt_cache_.model_hash = *hash;
      Result<std::unique_ptr<PromptCache>> opened = PromptCache::open(prompt_cache_);
      if (!opened.is_ok()) return fail(opened.status());
      prompt_cache = std::move(*opened);
      scheduler_.prompt_cache = prompt_cache.get();
      http_.prompt_cache = prompt_cache.get();
    }
    ForwardOptions fwd;
    fwd.n_threads = n_threads_;
    fwd.n_batch = n_batch_;
    apply_store_options(store, fwd);
    fwd.sparse_continuation = sparse_continuation_;
    Result<std::unique_ptr<BatchScheduler>> scheduler = BatchScheduler::create(m, tokenizer, fwd, factory, scheduler_);
    if (!scheduler.is_ok()) return fail(scheduler.status());

    if (http_.model_id.empty()) http_.model_id = model_source_name(model_.path);
    http_.n_ctx = n_ctx;
    http_.defaults.max_tokens_limit = static_cast<int>(std::min<int64_t>(n_ctx, 1 << 30));
    http_.max_body_bytes = mib_to_bytes(max_body_mb_);
    http_.setting_name = flag_for;
    // Every request running, every one waiting, and a few for /health and /metrics.
    http_.n_threads = scheduler_.n_parallel + scheduler_.max_queued + 4;
    Result<std::unique_ptr<server::HttpServer>> server = server::HttpServer::create(http_, **scheduler, tokenizer);
    if (!server.is_ok()) return fail(server.status());

    SigintScope sigint;
    std::thread http([&] { (*server)->run(); });
    std::fprintf(stderr, "leoam: serving %s on http://%s:%d (%d requests at once, %lld tokens each; Ctrl-C stops)\n",
                 http_.model_id.c_str(), http_.host.c_str(), (*server)->port(), scheduler_.n_parallel,
                 static_cast<long long>(n_ctx));
    if (!kv_options_.dir.empty()) {
      std::fprintf(stderr, "leoam: each request's KV: %g MiB device, %g MiB host, the rest in %s\n",
                   kv_options_.device_mb, kv_options_.host_mb, kv_options_.dir.c_str());
    }
    if (prompt_cache != nullptr) {
      const PromptCacheStats c = prompt_cache->stats();
      std::fprintf(stderr, "leoam: prompt cache %s: %lld prompts, %.1f MB of %.1f GB\n", prompt_cache_.dir.c_str(),
                   static_cast<long long>(c.n_entries), c.bytes / 1e6, prompt_cache_gb_);
    }
    while (!SigintScope::interrupted()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::fprintf(stderr, "leoam: stopping\n");
    (*scheduler)->stop();  // requests in flight end cancelled, and their streams close
    (*server)->stop();
    http.join();
    return kExitOk;
  }

 private:
  ModelSource model_;
  std::string chat_template_;
  server::HttpServerOptions http_;
  BatchSchedulerOptions scheduler_;
  KvCliOptions kv_options_;
  AttentionCliOptions attention_options_;
  PromptCacheOptions prompt_cache_;
  double prompt_cache_gb_ = 8.0;
  bool sparse_continuation_ = false;
  double max_body_mb_ = 8.0;
  int n_ctx_ = 0;
  int n_batch_ = 512;
  int n_threads_ = 0;
};

}  // namespace

std::unique_ptr<Command> make_serve_command() { return std::make_unique<ServeCommand>(); }

}  // namespace leoam::cli
