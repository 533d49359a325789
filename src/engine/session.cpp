#include "leoam/session.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "sparse/budget_schedule.h"
#include "sparse/policy_registry.h"

namespace leoam {
namespace {

int64_t far_tokens(const KvStoreOptions& kv, int64_t n_ctx) {
  return std::max<int64_t>(0, n_ctx - kv.n_sink - kv.n_recent);
}

}  // namespace

bool decode_pipeline(const KvStoreOptions& kv) { return !kv.dir.empty() && kv.pipeline != DecodePipeline::kOff; }

void apply_store_options(const KvStoreOptions& kv, ForwardOptions& forward) {
  forward.prefill_working_set_bytes = kv.dir.empty() ? 0 : kv.prefill_working_set_bytes;
  forward.pipeline = decode_pipeline(kv);
  forward.pipeline_auto = forward.pipeline && kv.pipeline == DecodePipeline::kAuto;
}

std::map<int, double> effective_layer_budgets(const AttentionOptions& a, int n_layer) {
  return a.layer_budgets.empty() ? sparse::default_layer_budgets(a.budget, n_layer) : a.layer_budgets;
}

Result<int> default_chunk_tokens(const AttentionOptions& a, const KvStoreOptions& kv, int64_t n_ctx) {
  LEOAM_ASSIGN_OR_RETURN(const sparse::PolicyInfo* info, sparse::find_policy(a.policy));
  return info->chunk_tokens(a.policy_options, sparse::far_budget_tokens(a.budget, far_tokens(kv, n_ctx)));
}

Result<KvStoreNeeds> kv_store_needs(const AttentionOptions& a, const KvStoreOptions& kv, const Model& model,
                                    int64_t n_ctx) {
  LEOAM_ASSIGN_OR_RETURN(const sparse::PolicyInfo* info, sparse::find_policy(a.policy));
  KvStoreNeeds needs;
  needs.chunks = info->needs_catalog;
  needs.resident_abstracts = info->scores_every_abstract(a.policy_options);
  // The grain of the trees at the whole context's budget (as default_chunk_tokens sizes the
  // chunks): a shorter context's trees may use finer blocks, which a tree grown from the disk
  // then fills with its records' boxes (sound, looser).
  const int n_layer = model.hparams().n_layer;
  const int64_t far = far_tokens(kv, n_ctx);
  const std::map<int, double> budgets = effective_layer_budgets(a, n_layer);
  for (int il = 0; il < n_layer; ++il) {
    const double b = budgets.count(il) != 0 ? budgets.at(il) : a.budget;
    needs.abstract_tokens.push_back(
        info->abstract_tokens(a.policy_options, il, kv.chunk_tokens, sparse::far_budget_tokens(b, far), n_ctx));
  }
  return needs;
}

Result<std::unique_ptr<KvCache>> make_kv_store(const KvStoreOptions& kv, const Model& model, int64_t n_ctx,
                                               const KvStoreNeeds& needs, Trace* trace) {
  // A model with sliding-window layers keeps them in the tiered store even in RAM: its chunks,
  // made as they fill, let those layers drop their past, where the one buffer holds every position.
  const bool drops_windows = model.hparams().has_sliding_layers() && !kv.swa_full;
  if (kv.dir.empty() && !needs.chunks && !drops_windows) {
    const ModelHparams& hp = model.hparams();
    MemoryKvCacheOptions m;
    m.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx};
    m.dtype = kv.dtype;
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryKvCache> store, MemoryKvCache::create(m));
    return std::unique_ptr<KvCache>(std::move(store));
  }
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<TieredKvCache> store, make_tiered_kv_store(kv, model, n_ctx, needs, trace));
  return std::unique_ptr<KvCache>(std::move(store));
}

Result<std::unique_ptr<TieredKvCache>> make_tiered_kv_store(const KvStoreOptions& kv, const Model& model,
                                                            int64_t n_ctx, const KvStoreNeeds& needs, Trace* trace) {
  const ModelHparams& hp = model.hparams();
  TieredKvCacheOptions t;
  t.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx};
  t.dtype = kv.dtype;
  t.chunk_tokens = kv.chunk_tokens;
  t.n_sink_tokens = kv.n_sink;
  t.n_recent_tokens = kv.n_recent;
  t.dir = kv.dir;
  t.host_codec = kv.host_codec;  // these before the budgets, which depend on them
  t.compress = kv.compress;
  t.keep_abstracts = needs.resident_abstracts;
  if (!kv.dir.empty()) t.abstract_tokens = needs.abstract_tokens;
  if (!kv.swa_full && hp.has_sliding_layers()) {
    for (int il = 0; il < hp.n_layer; ++il) t.layer_windows.push_back(hp.window(il));
  }
  t.device_budget_bytes = kv.device_bytes;
  t.host_budget_bytes = kv.host_bytes;
  if (kv.dir.empty()) {  // no disk tier: every chunk stays on the device, and no file is written
    t.device_budget_bytes = TieredKvCache::in_memory_device_budget_bytes(t);
    t.host_budget_bytes = 0;
  }
  t.file_options.queue_depth = kv.queue_depth;
  if (decode_pipeline(kv) && kv.read_ahead_bytes == 0) {
    return invalid_argument("the decode pipeline reads the next layer's chunks ahead: it needs read-ahead staging");
  }
  if (decode_pipeline(kv) || needs.batched) t.read_ahead_bytes = kv.read_ahead_bytes;
  t.trace = trace;
  return TieredKvCache::create(t);
}

Result<std::unique_ptr<sparse::SparseAttention>> make_selector(const AttentionOptions& a, const KvStoreOptions& kv,
                                                               const Model& model, KvCache& store,
                                                               const sparse::SparseAttentionOptions::Explain& explain) {
  if (const std::string why = sparse::budget_error(a.budget); !why.empty()) {
    std::ostringstream budget;
    budget << "the budget " << a.budget << ": ";  // %g: "the budget inf: "
    return invalid_argument(budget.str() + why);
  }
  LEOAM_ASSIGN_OR_RETURN(const sparse::PolicyInfo* info, sparse::find_policy(a.policy));
  const ModelHparams& hp = model.hparams();
  sparse::SparseAttentionOptions s;
  s.layer_budgets = effective_layer_budgets(a, hp.n_layer);
  if (info->dense) return std::unique_ptr<sparse::SparseAttention>();
  s.policy = a.policy;
  s.budget = a.budget;
  s.n_sink = kv.n_sink;
  s.n_recent = kv.n_recent;
  s.memory_budget_bytes = kv.meta_budget_bytes;
  s.policy_options = a.policy_options;
  s.policy_options.model = &model;
  s.explain = explain;
  sparse::AttentionShape shape;
  shape.n_layer = hp.n_layer;
  shape.n_head = hp.n_head;
  shape.n_head_kv = hp.n_head_kv;
  shape.head_dim = hp.head_dim;
  shape.scale = hp.attn_scale;
  shape.softcap = hp.attn_softcap;
  return sparse::SparseAttention::create(s, store.catalog(), shape);
}

Result<std::unique_ptr<Engine>> Engine::load(const std::string& path, const HfImportOptions& options) {
  auto engine = std::make_unique<Engine>();
  LEOAM_ASSIGN_OR_RETURN(GgufFile gguf, open_model_source(path, options));
  LEOAM_ASSIGN_OR_RETURN(engine->model_, Model::from_gguf(std::move(gguf)));
  LEOAM_ASSIGN_OR_RETURN(engine->tokenizer_, Tokenizer::from_gguf(engine->model_->gguf()));
  return engine;
}

Result<std::unique_ptr<Session>> Session::create(const Model& model, SessionOptions options) {
  const int64_t n_ctx = options.forward.n_ctx > 0 ? options.forward.n_ctx : model.hparams().n_ctx_train;
  if (options.kv.chunk_tokens == 0) {
    LEOAM_ASSIGN_OR_RETURN(options.kv.chunk_tokens, default_chunk_tokens(options.attention, options.kv, n_ctx));
  }
  LEOAM_ASSIGN_OR_RETURN(KvStoreNeeds needs, kv_store_needs(options.attention, options.kv, model, n_ctx));
  needs.batched = options.batched;
  needs.chunks = needs.chunks || options.tiered;
  auto session = std::unique_ptr<Session>(new Session());
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> store, make_kv_store(options.kv, model, n_ctx, needs, options.trace));
  session->kv_ = store.get();
  LEOAM_ASSIGN_OR_RETURN(session->selector_,
                         make_selector(options.attention, options.kv, model, *store, options.explain));
  apply_store_options(options.kv, options.forward);
  options.forward.kv_dtype = options.kv.dtype;
  options.forward.selector = session->selector_.get();
  options.forward.trace = options.trace;
  LEOAM_ASSIGN_OR_RETURN(session->ctx_, ForwardContext::create(model, options.forward, std::move(store)));
  session->options_ = std::move(options);
  return session;
}

KvStats Session::stats() const {
  KvStats s = kv_->stats();
  if (selector_ != nullptr) {
    const sparse::PolicyMemory m = selector_->memory();
    s.policy_memory = {std::string(selector_->policy_name()), m.bytes, m.peak_bytes, options_.kv.meta_budget_bytes};
  }
  return s;
}

}  // namespace leoam
