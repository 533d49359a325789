// The engine's front door: a loaded model (Engine) and, per sequence, its KV store, sparse
// attention and forward context (Session), made from options a program fills in, not from flags.
// The CLI, the server and the benchmarks all assemble a sequence through here; the parts it
// joins, and where each kind of code lives: docs/architecture.md
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "hf/hf_folder.h"
#include "engine/generator.h"
#include "kv/kv_cache.h"
#include "kv/kv_codec.h"
#include "kv/kv_stats.h"
#include "kv/transfer_compression.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "sparse/selection_policy.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam {

class TieredKvCache;
class Trace;

enum class DecodePipeline { kOff, kOn, kAuto };

// Where a sequence's KV lives: in RAM without `dir`; with it, the tiered store, whose device and
// host tiers hold at most device_bytes and host_bytes and whose disk tier is `dir`.
struct KvStoreOptions {
  std::string dir;
  KvDtype dtype = KvDtype::kF16;  // the stored form of device chunks (and of the in-memory cache)
  uint64_t device_bytes = uint64_t{256} << 20;
  uint64_t host_bytes = uint64_t{1024} << 20;
  int chunk_tokens = 0;  // 0: the policy's (default_chunk_tokens)
  KvCodec host_codec = KvCodec::kNone;
  KvCompress compress = KvCompress::kOff;  // TieredKvCacheOptions::compress
  int n_sink = 4;
  int n_recent = 64;
  int queue_depth = 32;
  uint64_t prefill_working_set_bytes = uint64_t{1024} << 20;  // with a dir (ForwardOptions)
  uint64_t meta_budget_bytes = 0;  // SparseAttentionOptions::memory_budget_bytes; 0: none
  DecodePipeline pipeline = DecodePipeline::kOff;  // with a dir (ForwardOptions::pipeline)
  uint64_t read_ahead_bytes = uint64_t{64} << 20;  // its staging (TieredKvCacheOptions::read_ahead_bytes)
  // A tiered store of a model with sliding-window layers keeps their positions behind the window
  // too (as a saved session or a kept prompt needs them) instead of dropping them
  // (TieredKvCacheOptions::layer_windows).
  bool swa_full = false;
};

// Which KV each decoded token attends to (sparse/policy_registry.h).
struct AttentionOptions {
  std::string policy = "full";
  double budget = 0.1;                  // far tokens per layer and step: a fraction, or a count > 1
  std::map<int, double> layer_budgets;  // empty: the default schedule of `budget` (budget_schedule.h)
  sparse::PolicyOptions policy_options; // its model is the session's
};

// What the attention policy needs of the store.
struct KvStoreNeeds {
  bool chunks = false;              // it scores chunk abstracts: a tiered store even without a dir
  bool resident_abstracts = false;  // it scores every far chunk at every step: device and host chunks
                                    // keep their abstracts (TieredKvCacheOptions::keep_abstracts)
  std::vector<int> abstract_tokens; // per layer, the positions a disk record covers; empty: a chunk
  // The store decodes in a batch with others (LlamaForward::decode_batch): its disk tier reads a
  // layer's selected chunks ahead while the other sequences select and attend, whatever the
  // pipeline says (those reads are the selection's own: none is speculated).
  bool batched = false;
};

// Whether the decode pipeline runs: asked for, and a disk tier to read ahead from.
bool decode_pipeline(const KvStoreOptions& kv);
// Sets ForwardOptions' pipeline, pipeline_auto and prefill_working_set_bytes as `kv` asks (a
// store in RAM reads nothing back from disk: its prompt runs batch by batch).
void apply_store_options(const KvStoreOptions& kv, ForwardOptions& forward);

// The per-layer budgets of every sparse policy alike: as given, else the default schedule.
std::map<int, double> effective_layer_budgets(const AttentionOptions& attention, int n_layer);
// The store's chunk size when none is given, for a context of n_ctx tokens: the policy's at its
// far budget over n_ctx outside the sink and the recent window. Fails for an unknown policy.
Result<int> default_chunk_tokens(const AttentionOptions& attention, const KvStoreOptions& kv, int64_t n_ctx);
// What the policy needs of a store for `model` at n_ctx positions (with kv.chunk_tokens set).
// Fails for an unknown policy.
Result<KvStoreNeeds> kv_store_needs(const AttentionOptions& attention, const KvStoreOptions& kv, const Model& model,
                                    int64_t n_ctx);

// The store the options describe for `model` at n_ctx positions: the tiered store with a dir,
// else the in-memory cache; or, when needs.chunks or the model has sliding-window layers to drop
// (swa_full not set) and no dir, a tiered store without a disk tier, whose device tier may hold
// the whole context (it opens no file). The tiered store records its disk reads in `trace` (may
// be null).
Result<std::unique_ptr<KvCache>> make_kv_store(const KvStoreOptions& kv, const Model& model, int64_t n_ctx,
                                               const KvStoreNeeds& needs, Trace* trace = nullptr);
// The tiered store of make_kv_store, with or without a dir: for the benchmarks of that store.
Result<std::unique_ptr<TieredKvCache>> make_tiered_kv_store(const KvStoreOptions& kv, const Model& model,
                                                            int64_t n_ctx, const KvStoreNeeds& needs,
                                                            Trace* trace = nullptr);
// The selector for `store`, or null for a dense policy (attention over every position), its
// selections explained where `explain` says. Fails on a bad budget, or a policy the store cannot
// serve.
Result<std::unique_ptr<sparse::SparseAttention>> make_selector(const AttentionOptions& attention,
                                                               const KvStoreOptions& kv, const Model& model,
                                                               KvCache& store,
                                                               const sparse::SparseAttentionOptions::Explain& explain = {});

// A loaded model and its tokenizer.
class Engine {
 public:
  // `path`: a GGUF file, or a Hugging Face checkpoint folder (hf/hf_folder.h) read with `options`.
  static Result<std::unique_ptr<Engine>> load(const std::string& path, const HfImportOptions& options = {});
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

struct SessionOptions {
  KvStoreOptions kv;
  AttentionOptions attention;
  ForwardOptions forward;  // its n_ctx, threads, batch and hooks; the session sets the rest
  bool batched = false;    // KvStoreNeeds::batched
  // The tiered store even where the policy scores no chunks (without a dir, in RAM): every
  // policy's reads counted alike.
  bool tiered = false;
  Trace* trace = nullptr;  // the store's disk reads and the decode steps, when set
  sparse::SparseAttentionOptions::Explain explain;
};

// One sequence: its store, its selector and the forward context that owns the store.
class Session {
 public:
  // n_ctx: forward.n_ctx, or the model's training context. Fills in kv.chunk_tokens when 0.
  static Result<std::unique_ptr<Session>> create(const Model& model, SessionOptions options);

  ForwardContext& context() { return *ctx_; }
  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }
  sparse::SparseAttention* selector() const { return selector_.get(); }
  const SessionOptions& options() const { return options_; }

  // Evaluates the prompt tokens after what the context holds and generates (generator.h).
  Result<GenerateStats> generate(const Tokenizer& tokenizer, std::span<const int32_t> prompt_tokens,
                                 bool strip_leading_space, const GenerateOptions& options,
                                 const GenerateCallbacks& callbacks) {
    return generate_from_tokens(*ctx_, tokenizer, prompt_tokens, strip_leading_space, options, callbacks);
  }
  // The store's traffic and residency, with what the policy holds about the KV.
  KvStats stats() const;

 private:
  SessionOptions options_;
  std::unique_ptr<sparse::SparseAttention> selector_;  // before ctx_: the context uses it until gone
  KvCache* kv_ = nullptr;                              // owned by ctx_
  std::unique_ptr<ForwardContext> ctx_;
};

}  // namespace leoam
