// LlamaForward: creation, the prompt in batches, and the steps of a layer (projections, attention
// through the selector, the FFN, logits) that every path runs; a decode step's fused regions and
// pipeline. The layered prefill and the batched decode have files of their own
// (llama_forward_layered.cpp, llama_forward_batch.cpp).
#include "model/llama_forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kv/memory_kv_cache.h"
#include "core/trace.h"
#include "model/attention_selector.h"
#include "model/block_norm.h"
#include "model/llama_forward_steps.h"

namespace leoam {

using detail::for_each_row;
using detail::observe_appended;

namespace {

using kernels::MatrixView;

// 8: rows per block of the fused decode regions, so ranges start at multiples of 8 rows.
constexpr int64_t kRowBlock = 8;

// One matrix-vector product of a fused decode region: y = w x (+ bias).
struct MatvecTask {
  const MatrixView* w = nullptr;
  const float* x = nullptr;     // [w->n_cols]
  float* y = nullptr;           // [w->n_rows]
  const float* bias = nullptr;  // [w->n_rows] or null
};

// Rows [r0, r1) of w as a matrix of its own.
MatrixView row_slice(const MatrixView& w, int64_t r0, int64_t r1) {
  MatrixView s = w;
  s.data = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_bytes;
  s.n_rows = r1 - r0;
  return s;
}

// Rows [r0, r1) of a task. The product is kernels::matvec's (whatever path it dispatches to) on
// a one-thread pool, which runs inline: the parallelism is the caller's region.
void run_task_rows(const MatvecTask& task, int64_t r0, int64_t r1, ThreadPool& inline_pool) {
  kernels::matvec(row_slice(*task.w, r0, r1), task.x, task.y + r0, inline_pool);
  if (task.bias != nullptr) {
    for (int64_t r = r0; r < r1; ++r) task.y[r] += task.bias[r];
  }
}

int64_t n_blocks(int64_t n_rows) { return (n_rows + kRowBlock - 1) / kRowBlock; }

// Runs the tasks in one parallel region over their concatenated rows (e.g. Q, K and V), instead
// of one region each; tiny regions run inline (the cost hint is rows x columns).
void fused_matvecs(std::span<const MatvecTask> tasks, ThreadPool& pool, ThreadPool& inline_pool) {
  int64_t n_total_blocks = 0;
  int64_t total_cost = 0;
  for (const MatvecTask& t : tasks) {
    n_total_blocks += n_blocks(t.w->n_rows);
    total_cost += t.w->n_rows * t.w->n_cols;
  }
  const int64_t cost_per_block = total_cost / std::max<int64_t>(1, n_total_blocks);
  pool.parallel_for(n_total_blocks, cost_per_block, [&](int64_t b0, int64_t b1, int) {
    int64_t first_block = 0;  // of the current task, in the concatenation
    for (const MatvecTask& t : tasks) {
      const int64_t tb0 = std::max(b0, first_block) - first_block;
      const int64_t tb1 = std::min(b1, first_block + n_blocks(t.w->n_rows)) - first_block;
      if (tb0 < tb1) run_task_rows(t, tb0 * kRowBlock, std::min(tb1 * kRowBlock, t.w->n_rows), inline_pool);
      first_block += n_blocks(t.w->n_rows);
      if (first_block >= b1) break;
    }
  });
}

// out = act(gate) * up: SwiGLU or GeGLU.
void gated(FfnActivation act, const float* gate, const float* up, int64_t n, float* out) {
  if (act == FfnActivation::kGeluTanh) {
    kernels::geglu(gate, up, n, out);
  } else {
    kernels::swiglu(gate, up, n, out);
  }
}

// The FFN's first half for one token in one region: gate = Wgate x, up = Wup x and then
// gate = act(gate) * up, each thread on the same rows of both, so the gating runs on rows just
// written (in cache) and needs no region of its own.
void ffn_gate_up(const MatrixView& w_gate, const MatrixView& w_up, FfnActivation act, const float* x, float* gate,
                 float* up, ThreadPool& pool, ThreadPool& inline_pool) {
  const int64_t n_ff = w_gate.n_rows;
  pool.parallel_for(n_blocks(n_ff), 2 * kRowBlock * w_gate.n_cols, [&](int64_t b0, int64_t b1, int) {
    const int64_t r0 = b0 * kRowBlock;
    const int64_t r1 = std::min(b1 * kRowBlock, n_ff);
    kernels::matvec(row_slice(w_gate, r0, r1), x, gate + r0, inline_pool);
    kernels::matvec(row_slice(w_up, r0, r1), x, up + r0, inline_pool);
    gated(act, gate + r0, up + r0, r1 - r0, gate + r0);
  });
}

// The log-n temperature (ModelHparams::query_scale) on one position's query heads.
void scale_query(float* q, int64_t n, float scale) {
  if (scale == 1.0f) return;
  for (int64_t i = 0; i < n; ++i) q[i] *= scale;
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < n_rows; ++r) kernels::add(y + r * n, bias, n);
}

void relu(float* x, int64_t n) {
  for (float* e = x; e < x + n; ++e) *e = std::max(*e, 0.0f);
}

// Qwen3's per-head RMSNorm of q or k (one position's heads), before RoPE; nothing without weights.
void norm_heads(float* v, const float* weight, int n_heads, int head_dim, float eps) {
  if (weight == nullptr) return;
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + int64_t{h} * head_dim;
    kernels::rmsnorm(head, weight, head_dim, eps, head);
  }
}

}  // namespace

LlamaForward::LlamaForward(const Model& model, const ForwardOptions& options, Rope rope)
    : hp_(model.hparams()), w_(model.weights()), options_(options), rope_(std::move(rope)) {}

Result<std::unique_ptr<LlamaForward>> LlamaForward::create(const Model& model, const ForwardOptions& options,
                                                           std::unique_ptr<KvCache> kv_cache) {
  const ModelHparams& hp = model.hparams();
  if (options.n_ctx < 0) {
    return invalid_argument("the context size must not be negative, got " + std::to_string(options.n_ctx))
        .about(Setting::kContextSize);
  }
  if (options.n_batch <= 0) return invalid_argument("batch size must be positive, got " + std::to_string(options.n_batch));

  if (kv_cache == nullptr) {
    MemoryKvCacheOptions kv_options;
    kv_options.shape.n_layer = hp.n_layer;
    kv_options.shape.n_kv_heads = hp.n_head_kv;
    kv_options.shape.head_dim = hp.head_dim;
    // Larger than the training context is allowed: RoPE-scaled models are run that way.
    kv_options.shape.n_ctx = options.n_ctx > 0 ? options.n_ctx : hp.n_ctx_train;
    kv_options.dtype = options.kv_dtype;
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryKvCache> mem, MemoryKvCache::create(kv_options));
    kv_cache = std::move(mem);
  }
  const KvCacheShape& shape = kv_cache->shape();
  if (shape.n_layer != hp.n_layer || shape.n_kv_heads != hp.n_head_kv || shape.head_dim != hp.head_dim ||
      shape.n_ctx <= 0) {
    return invalid_argument("KV cache shaped for " + std::to_string(shape.n_layer) + " layers of " +
                            std::to_string(shape.n_kv_heads) + " heads of " + std::to_string(shape.head_dim) +
                            ", but the model has " + std::to_string(hp.n_layer) + " layers of " +
                            std::to_string(hp.n_head_kv) + " KV heads of " + std::to_string(hp.head_dim));
  }

  if (model.weights().position_embd.data != nullptr && shape.n_ctx > model.weights().position_embd.n_rows) {
    return invalid_argument("a context of " + std::to_string(shape.n_ctx) + " tokens is longer than the " +
                            std::to_string(model.weights().position_embd.n_rows) +
                            " positions this model learned embeddings for")
        .about(Setting::kContextSize);
  }
  // LongRoPE's factors follow the context the store holds (phi3), as llama.cpp picks them.
  LEOAM_ASSIGN_OR_RETURN(Rope rope, Rope::create(hp.rope, hp.head_dim, model.weights().rope_factors(hp, shape.n_ctx)));
  std::unique_ptr<LlamaForward> ctx(new LlamaForward(model, options, std::move(rope)));
  ctx->pool_ = std::make_unique<ThreadPool>(options.n_threads);
  ctx->inline_pool_ = std::make_unique<ThreadPool>(1);
  ctx->kv_ = std::move(kv_cache);
  ctx->seq_ = {ctx->kv_.get(), options.selector};
  ctx->n_batch_ = std::min<int64_t>(options.n_batch, ctx->kv_->n_ctx());
  ctx->attn_params_.n_head = hp.n_head;
  ctx->attn_params_.n_head_kv = hp.n_head_kv;
  ctx->attn_params_.head_dim = hp.head_dim;
  ctx->attn_params_.scale = hp.attn_scale;
  ctx->attn_params_.softcap = hp.attn_softcap;

  const size_t nb = static_cast<size_t>(ctx->n_batch_);
  ctx->x_.resize(nb * hp.n_embd);
  ctx->xn_.resize(nb * hp.n_embd);
  ctx->q_.resize(nb * hp.n_embd_q());
  ctx->k_.resize(nb * hp.n_embd_kv());
  ctx->v_.resize(nb * hp.n_embd_kv());
  ctx->attn_.resize(nb * hp.n_embd_q());
  ctx->proj_.resize(nb * hp.n_embd);
  ctx->gate_.resize(nb * hp.n_ff);
  ctx->up_.resize(nb * hp.n_ff);
  ctx->cos_.resize(nb * (hp.rope.n_rot / 2));
  ctx->sin_.resize(nb * (hp.rope.n_rot / 2));
  const bool own_swa_rope = hp.rope_swa.freq_base != hp.rope.freq_base || hp.rope_swa.scaling != hp.rope.scaling;
  if (hp.has_sliding_layers() && own_swa_rope) {
    LEOAM_ASSIGN_OR_RETURN(Rope rope_swa, Rope::create(hp.rope_swa, hp.head_dim, nullptr));
    ctx->rope_swa_.emplace(std::move(rope_swa));
    ctx->cos_swa_.resize(nb * (hp.rope.n_rot / 2));
    ctx->sin_swa_.resize(nb * (hp.rope.n_rot / 2));
  }
  return ctx;
}

void LlamaForward::reset() {
  kv_->clear();
  if (options_.selector != nullptr) options_.selector->truncate(0);
}

Status LlamaForward::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
  return eval_sequence({kv_.get(), options_.selector}, tokens, all_logits, logits);
}

Status LlamaForward::eval_sequence(const DecodeSequence& seq, std::span<const int32_t> tokens, bool all_logits,
                                   std::vector<float>& logits) {
  LEOAM_RETURN_IF_ERROR(check_sequence(seq));
  const SequenceScope scope(*this, seq);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_past0 = seq_.kv->n_tokens();
  if (n == 0) return invalid_argument("eval: no tokens to evaluate");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(hp_.n_vocab) + ")");
    }
  }
  if (!seq_.kv->can_append(n)) {
    if (n_past0 == 0) {
      return invalid_argument("prompt of " + std::to_string(n) + " tokens exceeds the context size of " +
                              std::to_string(seq_.kv->n_ctx()) + " tokens")
          .about(Setting::kContextSize);
    }
    return invalid_argument(std::to_string(n) + " tokens at position " + std::to_string(n_past0) +
                            " (ending at position " + std::to_string(n_past0 + n) +
                            ") exceed the context size of " + std::to_string(seq_.kv->n_ctx()) + " tokens")
        .about(Setting::kContextSize);
  }

  logits.resize(static_cast<size_t>(all_logits ? n : 1) * hp_.n_vocab);
  // The batches: n_batch tokens each, the last two rebalanced so that a lone last token does not
  // run as a decode step (through the selector): a prompt's last position attends like the rest.
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t done = 0; done < n;) {
    int64_t n_chunk = std::min(n_batch_, n - done);
    if (n - done - n_chunk == 1 && n_chunk > 2) --n_chunk;
    chunks.emplace_back(done, n_chunk);
    done += n_chunk;
  }
  if (options_.prefill_working_set_bytes > 0 && chunks.size() > 1) {
    return eval_layered(tokens, chunks, all_logits, logits);
  }
  for (const auto& [done, n_chunk] : chunks) {
    const bool last = done + n_chunk == n;
    float* out = nullptr;
    if (all_logits) {
      out = logits.data() + done * hp_.n_vocab;
    } else if (last) {
      out = logits.data();
    }
    Status st = forward_batch(tokens.data() + done, n_chunk, n_past0 + done, all_logits, out, last && n > 1);
    if (!st.is_ok()) return roll_back(seq_, n_past0, st);  // leave the context as it was
    if (options_.progress) options_.progress(done + n_chunk, n);
    if (!last && options_.should_stop && options_.should_stop()) {
      return cancelled("prefill stopped after " + std::to_string(done + n_chunk) + " of " + std::to_string(n) +
                       " tokens");
    }
  }
  return Status::ok();
}

Status LlamaForward::roll_back(const DecodeSequence& seq, int64_t n, const Status& error) {
  if (const Status cut = seq.kv->truncate(n); !cut.is_ok()) {
    seq.kv->clear();
    if (seq.selector != nullptr) seq.selector->truncate(0);
    return Status(error.code(), error.message() + "; the context was cleared, since it could not go back to " +
                                    std::to_string(n) + " positions: " + cut.message())
        .about(error.setting());
  }
  if (seq.selector != nullptr) seq.selector->truncate(n);
  return error;
}

void LlamaForward::fill_rope_tables(int64_t pos0, int64_t n, int64_t row0) {
  const int64_t at = row0 * (hp_.rope.n_rot / 2);
  rope_.fill_tables(pos0, n, cos_.data() + at, sin_.data() + at);
  if (rope_swa_) rope_swa_->fill_tables(pos0, n, cos_swa_.data() + at, sin_swa_.data() + at);
}

void LlamaForward::project_qkv(int layer, const float* xn, int64_t n, int64_t pos0, const int64_t* positions) {
  const LayerWeights& L = w_.layers[layer];
  const float* cos = rope_cos(layer);
  const float* sin = rope_sin(layer);
  const int64_t n_q = hp_.n_embd_q();
  const int64_t n_kv = hp_.n_embd_kv();
  const int64_t n_pairs = hp_.rope.n_rot / 2;
  const kernels::RopeShape q_shape = rope_.shape(hp_.n_head);
  const kernels::RopeShape k_shape = rope_.shape(hp_.n_head_kv);
  ThreadPool& pool = *pool_;
  if (n == 1) {
    const MatvecTask qkv[] = {{&L.attn_q, xn, q_.data(), L.attn_q_bias},
                              {&L.attn_k, xn, k_.data(), L.attn_k_bias},
                              {&L.attn_v, xn, v_.data(), L.attn_v_bias}};
    fused_matvecs(qkv, pool, *inline_pool_);
    norm_heads(q_.data(), L.attn_q_norm, hp_.n_head, hp_.head_dim, hp_.rms_eps);
    norm_heads(k_.data(), L.attn_k_norm, hp_.n_head_kv, hp_.head_dim, hp_.rms_eps);
    kernels::rope(q_.data(), q_shape, cos, sin);
    kernels::rope(k_.data(), k_shape, cos, sin);
    scale_query(q_.data(), n_q, hp_.query_scale(pos0));
    return;
  }
  kernels::matmul(L.attn_q, xn, n, q_.data(), pool);
  kernels::matmul(L.attn_k, xn, n, k_.data(), pool);
  kernels::matmul(L.attn_v, xn, n, v_.data(), pool);
  add_bias(q_.data(), L.attn_q_bias, n, n_q);
  add_bias(k_.data(), L.attn_k_bias, n, n_kv);
  add_bias(v_.data(), L.attn_v_bias, n, n_kv);
  const int64_t rope_cost = 4 * (n_q + n_kv);
  for_each_row(pool, n, rope_cost, [&](int64_t t) {
    norm_heads(q_.data() + t * n_q, L.attn_q_norm, hp_.n_head, hp_.head_dim, hp_.rms_eps);
    norm_heads(k_.data() + t * n_kv, L.attn_k_norm, hp_.n_head_kv, hp_.head_dim, hp_.rms_eps);
    kernels::rope(q_.data() + t * n_q, q_shape, cos + t * n_pairs, sin + t * n_pairs);
    kernels::rope(k_.data() + t * n_kv, k_shape, cos + t * n_pairs, sin + t * n_pairs);
    scale_query(q_.data() + t * n_q, n_q, hp_.query_scale(positions != nullptr ? positions[t] : pos0 + t));
  });
}

void LlamaForward::output_and_ffn(const LayerWeights& L, float* x, float* xn, int64_t n) {
  attention_output(L, x, xn, n);
  ffn(L, xn, n);
}

void LlamaForward::attention_output(const LayerWeights& L, float* x, float* xn, int64_t n) {
  const int64_t n_embd = hp_.n_embd;
  ThreadPool& pool = *pool_;
  float* proj = proj_.data();
  if (n == 1) {
    const MatvecTask out_proj[] = {{&L.attn_output, attn_.data(), proj, L.attn_output_bias}};
    fused_matvecs(out_proj, pool, *inline_pool_);
  } else {
    kernels::matmul(L.attn_output, attn_.data(), n, proj, pool);
    add_bias(proj, L.attn_output_bias, n, n_embd);
  }
  for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
    if (L.attn_post_norm != nullptr) {
      kernels::rmsnorm(proj + t * n_embd, L.attn_post_norm, n_embd, hp_.rms_eps, proj + t * n_embd);
    }
    add_block_norm(hp_, x + t * n_embd, proj + t * n_embd, L.ffn_norm, L.ffn_norm_b, xn + t * n_embd);
  });
}

void LlamaForward::ffn(const LayerWeights& L, const float* xn, int64_t n) {
  const int64_t n_ff = hp_.n_ff;
  ThreadPool& pool = *pool_;
  float* proj = proj_.data();
  const FfnActivation act = hp_.ffn_activation;
  if (act == FfnActivation::kRelu) {
    ffn_relu(L, xn, n);
  } else if (n == 1) {
    ffn_gate_up(L.ffn_gate, L.ffn_up, act, xn, gate_.data(), up_.data(), pool, *inline_pool_);
    const MatvecTask down[] = {{&L.ffn_down, gate_.data(), proj, nullptr}};
    fused_matvecs(down, pool, *inline_pool_);
  } else {
    kernels::matmul(L.ffn_gate, xn, n, gate_.data(), pool);
    kernels::matmul(L.ffn_up, xn, n, up_.data(), pool);
    for_each_row(pool, n, 16 * n_ff, [&](int64_t t) {
      gated(act, gate_.data() + t * n_ff, up_.data() + t * n_ff, n_ff, gate_.data() + t * n_ff);
    });
    kernels::matmul(L.ffn_down, gate_.data(), n, proj, pool);
  }
  if (L.ffn_post_norm != nullptr) {
    const int64_t n_embd = hp_.n_embd;
    for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
      kernels::rmsnorm(proj + t * n_embd, L.ffn_post_norm, n_embd, hp_.rms_eps, proj + t * n_embd);
    });
  }
}

void LlamaForward::output_logits(float* x, int64_t n, bool all_rows, float* logits) {
  const int64_t n_embd = hp_.n_embd;
  ThreadPool& pool = *pool_;
  const int64_t first = all_rows ? 0 : n - 1;
  const int64_t n_out = n - first;
  float* xn = xn_.data();
  float* proj = proj_.data();
  for_each_row(pool, n_out, 4 * n_embd, [&](int64_t i) {
    const int64_t t = first + i;
    add_block_norm(hp_, x + t * n_embd, proj + t * n_embd, w_.output_norm, w_.output_norm_b, xn + i * n_embd);
  });
  if (n_out == 1) {
    const MatvecTask out[] = {{&w_.output, xn, logits, nullptr}};
    fused_matvecs(out, pool, *inline_pool_);
  } else {
    kernels::matmul(w_.output, xn, n_out, logits, pool);
  }
  if (const float cap = hp_.final_softcap; cap > 0.0f) {
    const int64_t n_vocab = hp_.n_vocab;
    for_each_row(pool, n_out, 16 * n_vocab, [&](int64_t i) {
      for (float* l = logits + i * n_vocab; l < logits + (i + 1) * n_vocab; ++l) *l = kernels::softcap(*l, cap);
    });
  }
}

void LlamaForward::ffn_relu(const LayerWeights& L, const float* xn, int64_t n) {
  const int64_t n_ff = hp_.n_ff;
  ThreadPool& pool = *pool_;
  float* up = gate_.data();
  if (n == 1) {
    const MatvecTask up_task[] = {{&L.ffn_up, xn, up, L.ffn_up_bias}};
    fused_matvecs(up_task, pool, *inline_pool_);
    relu(up, n_ff);
    const MatvecTask down[] = {{&L.ffn_down, up, proj_.data(), L.ffn_down_bias}};
    fused_matvecs(down, pool, *inline_pool_);
    return;
  }
  kernels::matmul(L.ffn_up, xn, n, up, pool);
  add_bias(up, L.ffn_up_bias, n, n_ff);
  relu(up, n * n_ff);
  kernels::matmul(L.ffn_down, up, n, proj_.data(), pool);
  add_bias(proj_.data(), L.ffn_down_bias, n, hp_.n_embd);
}

void LlamaForward::embed(const int32_t* tokens, int64_t n, int64_t pos0, const int64_t* positions, float* x) const {
  const kernels::MatrixView& pe = w_.position_embd;
  std::vector<float> position_row(pe.data != nullptr ? static_cast<size_t>(hp_.n_embd) : 0);
  for (int64_t t = 0; t < n; ++t) {
    const auto* row = static_cast<const uint8_t*>(w_.token_embd.data) + static_cast<size_t>(tokens[t]) * w_.token_embd.row_bytes;
    kernels::dequantize_row(w_.token_embd.type, row, x + t * hp_.n_embd, hp_.n_embd);
    if (pe.data != nullptr) {  // learned positions (opt): create() bounds the context by their rows
      const int64_t pos = positions != nullptr ? positions[t] : pos0 + t;
      kernels::dequantize_row(pe.type, static_cast<const uint8_t*>(pe.data) + static_cast<size_t>(pos) * pe.row_bytes,
                              position_row.data(), hp_.n_embd);
      kernels::add(x + t * hp_.n_embd, position_row.data(), hp_.n_embd);
    }
    if (hp_.embd_scale != 1.0f) {
      for (float* e = x + t * hp_.n_embd; e < x + (t + 1) * hp_.n_embd; ++e) *e *= hp_.embd_scale;
    }
  }
}

Status LlamaForward::check_sequence(const DecodeSequence& seq) const {
  if (seq.kv == nullptr) return invalid_argument("a sequence needs a KV store");
  const KvCacheShape& shape = seq.kv->shape();
  if (shape.n_layer != hp_.n_layer || shape.n_kv_heads != hp_.n_head_kv || shape.head_dim != hp_.head_dim) {
    return invalid_argument("a sequence's KV store holds " + std::to_string(shape.n_layer) + " layers of " +
                            std::to_string(shape.n_kv_heads) + " heads of " + std::to_string(shape.head_dim) +
                            "; the model needs " + std::to_string(hp_.n_layer) + " of " + std::to_string(hp_.n_head_kv) +
                            " of " + std::to_string(hp_.head_dim));
  }
  return Status::ok();
}

Status LlamaForward::attend(const DecodeSequence& seq, int layer, int64_t pos, int64_t n, const float* q, float* out,
                            Trace* trace) {
  ThreadPool& pool = *pool_;
  const AttentionParams params = layer_params(layer);
  if (params.window > 0) {  // a sliding layer: its window, whatever the selector
    const TraceSpan span(trace, "attention", "attention", layer, pos);
    const TokenRange window = window_range(layer, pos, n);
    if (n == 1) decode_positions_attended_ += window.size();
    return attention(*seq.kv, layer, {&window, 1}, params, q, pos, n, out, pool);
  }
  if (n > 1 && pos > 0 && seq.selector != nullptr && options_.sparse_continuation) {
    std::vector<TokenRange> ranges;
    {
      const TraceSpan span(trace, "select", "selection", layer, pos);
      LEOAM_ASSIGN_OR_RETURN(ranges, seq.selector->select_continuation(layer, pos, n, q + (n - 1) * hp_.n_embd_q(), pool));
    }
    if (!ranges.empty()) {
      const TraceSpan span(trace, "attention", "attention", layer, pos);
      return attention(*seq.kv, layer, ranges, attn_params_, q, pos, n, out, pool);
    }
  }
  if (n != 1 || seq.selector == nullptr) {
    const TraceSpan span(trace, "attention", "attention", layer, pos);
    const TokenRange visible{0, pos + n};
    if (n == 1) decode_positions_attended_ += visible.size();
    return attention(*seq.kv, layer, {&visible, 1}, attn_params_, q, pos, n, out, pool);
  }
  LEOAM_ASSIGN_OR_RETURN(const std::vector<TokenRange> ranges, select_row(seq, layer, pos, q, *pool_, trace));
  return attend_selected(seq, layer, pos, q, out, ranges, *pool_, key_mass_, trace);
}

Result<std::vector<TokenRange>> LlamaForward::select_row(const DecodeSequence& seq, int layer, int64_t pos,
                                                         const float* q, ThreadPool& pool, Trace* trace) {
  if (hp_.is_sliding(layer)) return std::vector<TokenRange>{window_range(layer, pos, 1)};
  if (seq.selector == nullptr) return std::vector<TokenRange>{{0, pos + 1}};
  const TraceSpan span(trace, "select", "selection", layer, pos);
  return seq.selector->select(layer, pos, q, pool);
}

Status LlamaForward::attend_selected(const DecodeSequence& seq, int layer, int64_t pos, const float* q, float* out,
                                     std::span<const TokenRange> ranges, ThreadPool& pool, std::vector<float>& key_mass,
                                     Trace* trace) {
  const TraceSpan span(trace, "attention", "attention", layer, pos);
  int64_t n_keys = 0;
  for (const TokenRange& r : ranges) n_keys += r.size();
  decode_positions_attended_ += n_keys;
  if (seq.selector == nullptr || !seq.selector->needs().attention_mass || hp_.is_sliding(layer)) {
    return attention(*seq.kv, layer, ranges, layer_params(layer), q, pos, 1, out, pool);
  }
  key_mass.resize(static_cast<size_t>(n_keys));
  LEOAM_RETURN_IF_ERROR(attention(*seq.kv, layer, ranges, attn_params_, q, pos, 1, out, pool, key_mass));
  seq.selector->observe_attention(layer, pos, ranges, key_mass);
  return Status::ok();
}

Status LlamaForward::read_ahead_next(int layer, const float* x, int64_t pos) {
  if (hp_.is_sliding(layer + 1)) {  // its window: the step's own position is not stored yet
    const TokenRange window{window_range(layer + 1, pos, 1).begin, pos};
    return seq_.kv->read_ahead(layer + 1, {&window, 1});
  }
  const LayerWeights& next = w_.layers[layer + 1];
  spec_xn_.resize(static_cast<size_t>(hp_.n_embd));
  spec_q_.resize(static_cast<size_t>(hp_.n_embd_q()));
  block_norm(hp_, x, next.attn_norm, next.attn_norm_b, spec_xn_.data());
  const MatvecTask q[] = {{&next.attn_q, spec_xn_.data(), spec_q_.data(), next.attn_q_bias}};
  fused_matvecs(q, *pool_, *inline_pool_);
  norm_heads(spec_q_.data(), next.attn_q_norm, hp_.n_head, hp_.head_dim, hp_.rms_eps);
  kernels::rope(spec_q_.data(), rope_.shape(hp_.n_head), rope_cos(layer + 1), rope_sin(layer + 1));
  scale_query(spec_q_.data(), hp_.n_embd_q(), hp_.query_scale(pos));
  if (options_.decode_query_hook) options_.decode_query_hook(*seq_.kv, layer + 1, spec_q_.data());
  // The step's own KV of layer + 1 is not stored yet: the forecast chooses among [0, pos).
  LEOAM_ASSIGN_OR_RETURN(const std::vector<TokenRange> ranges,
                         seq_.selector->forecast(layer + 1, pos, pos, spec_q_.data(), *pool_, false));
  return seq_.kv->read_ahead(layer + 1, ranges);
}

Status LlamaForward::prefetch_last_row(int layer, int64_t pos0, int64_t n) {
  if (seq_.selector == nullptr || hp_.is_sliding(layer)) return Status::ok();
  const float* q = q_.data() + (n - 1) * hp_.n_embd_q();
  const int64_t pos = pos0 + n - 1;
  LEOAM_ASSIGN_OR_RETURN(const std::vector<TokenRange> ranges,
                         seq_.selector->forecast(layer, pos, pos + 1, q, *pool_, true));
  return seq_.kv->prefetch(layer, ranges);
}

Status LlamaForward::forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, bool all_rows, float* logits,
                                   bool prompt_end) {
  const int64_t n_embd = hp_.n_embd;
  const bool decode = n == 1;
  ThreadPool& pool = *pool_;
  float* x = x_.data();
  float* xn = xn_.data();
  float* proj = proj_.data();

  embed(tokens, n, pos0, nullptr, x);
  fill_rope_tables(pos0, n);
  const int64_t norm_cost = 4 * n_embd;

  // The attention norm of layer 0; every later norm is fused with the residual add before it.
  for_each_row(pool, n, norm_cost, [&](int64_t t) {
    block_norm(hp_, x + t * n_embd, w_.layers[0].attn_norm, w_.layers[0].attn_norm_b, xn + t * n_embd);
  });

  AttentionSelector* selector = seq_.selector;
  const SelectorNeeds needs = selector != nullptr ? selector->needs() : SelectorNeeds{};
  Trace* trace = decode ? options_.trace : nullptr;  // decode steps only: a prompt would flood it
  const TraceSpan step_span(trace, "decode step", "decode", -1, pos0);
  const bool choose = decode && options_.pipeline && options_.pipeline_auto && selector != nullptr;
  const bool pipelined = decode && options_.pipeline && selector != nullptr && (!choose || pipeline_choice_.next());
  // Full attention in the pipeline reads the next layer's past ahead from the start of this
  // layer's attention (ForwardOptions::pipeline), as far as the store's staging holds.
  const bool read_all_ahead = decode && options_.pipeline && selector == nullptr;
  const auto step_start = std::chrono::steady_clock::now();
  for (int il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    if (decode && needs.layer_inputs) LEOAM_RETURN_IF_ERROR(selector->observe_layer_input(il, pos0, x));
    {
      const TraceSpan span(trace, "qkv", "compute", il, pos0);
      project_qkv(il, xn, n, pos0);
      LEOAM_RETURN_IF_ERROR(seq_.kv->append(il, pos0, n, k_.data(), v_.data()));
    }
    if (decode && options_.decode_query_hook) options_.decode_query_hook(*seq_.kv, il, q_.data());
    AttentionSelector* watching = watcher(selector, il);
    LEOAM_RETURN_IF_ERROR(observe_appended(watching, il, pos0, n, k_.data(), v_.data()));
    if (!decode && needs.stored && watching != nullptr) LEOAM_RETURN_IF_ERROR(watching->observe_stored(il, pos0 + n));
    if (prompt_end) LEOAM_RETURN_IF_ERROR(prefetch_last_row(il, pos0, n));
    if (read_all_ahead && il + 1 < hp_.n_layer) {
      // The step's own KV of layer + 1 is not stored yet: its past is [0, pos0) (or its window's).
      const TokenRange past{window_range(il + 1, pos0, 0).begin, pos0};
      LEOAM_RETURN_IF_ERROR(seq_.kv->read_ahead(il + 1, {&past, 1}));
    }
    LEOAM_RETURN_IF_ERROR(attend(seq_, il, pos0, n, q_.data(), attn_.data(), trace));
    release_window(*seq_.kv, il, pos0);  // a failed later step can still go back to pos0
    {
      const TraceSpan span(trace, "attn_output", "compute", il, pos0);
      attention_output(L, x, xn, n);
    }
    if (pipelined && il + 1 < hp_.n_layer) {
      const TraceSpan span(trace, "speculate next layer", "selection", il + 1, pos0);
      LEOAM_RETURN_IF_ERROR(read_ahead_next(il, x, pos0));
    }
    {
      const TraceSpan span(trace, "ffn", "compute", il, pos0);
      ffn(L, xn, n);
    }
    if (il + 1 < hp_.n_layer) {
      const LayerWeights& next = w_.layers[il + 1];
      for_each_row(pool, n, norm_cost, [&](int64_t t) {
        add_block_norm(hp_, x + t * n_embd, proj + t * n_embd, next.attn_norm, next.attn_norm_b, xn + t * n_embd);
      });
    }
  }

  if (choose) {
    pipeline_choice_.record(
        pipelined, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count());
  }

  // The last residual add is needed only by the rows whose logits are wanted.
  if (logits != nullptr) output_logits(x, n, all_rows, logits);
  return Status::ok();
}

}  // namespace leoam
