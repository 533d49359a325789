#include "model/llama_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kv/memory_kv_cache.h"

namespace leoam {

namespace {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for each of n_rows rows of n elements.
void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
  }
}

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

LlamaForward::LlamaForward(const Model& model, const ForwardOptions& options, Rope rope)
    : hp_(model.hparams()), w_(model.weights()), options_(options), rope_(std::move(rope)) {}

Result<std::unique_ptr<LlamaForward>> LlamaForward::create(const Model& model, const ForwardOptions& options,
                                                           std::unique_ptr<KvCache> kv_cache) {
  const ModelHparams& hp = model.hparams();
  if (options.n_ctx < 0) return invalid_argument("context size (-c) must not be negative, got " + std::to_string(options.n_ctx));
  if (options.n_batch <= 0) return invalid_argument("batch size must be positive, got " + std::to_string(options.n_batch));
  LEOAM_ASSIGN_OR_RETURN(Rope rope, Rope::create(hp.rope, hp.head_dim, model.weights().rope_freqs));

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

  std::unique_ptr<LlamaForward> ctx(new LlamaForward(model, options, std::move(rope)));
  ctx->pool_ = std::make_unique<ThreadPool>(options.n_threads);
  ctx->kv_ = std::move(kv_cache);
  ctx->n_batch_ = std::min<int64_t>(options.n_batch, ctx->kv_->n_ctx());
  ctx->attn_params_.n_head = hp.n_head;
  ctx->attn_params_.n_head_kv = hp.n_head_kv;
  ctx->attn_params_.head_dim = hp.head_dim;
  ctx->attn_params_.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

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
  return ctx;
}

Status LlamaForward::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_past0 = n_past();
  if (n == 0) return invalid_argument("eval: no tokens to evaluate");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(hp_.n_vocab) + ")");
    }
  }
  if (!kv_->can_append(n)) {
    if (n_past0 == 0) {
      return invalid_argument("prompt of " + std::to_string(n) + " tokens exceeds the context size of " +
                              std::to_string(n_ctx()) + " tokens (-c)");
    }
    return invalid_argument(std::to_string(n) + " tokens at position " + std::to_string(n_past0) +
                            " (ending at position " + std::to_string(n_past0 + n) +
                            ") exceed the context size of " + std::to_string(n_ctx()) + " tokens (-c)");
  }

  logits.resize(static_cast<size_t>(all_logits ? n : 1) * hp_.n_vocab);
  for (int64_t done = 0; done < n;) {
    const int64_t n_chunk = std::min(n_batch_, n - done);
    const bool last = done + n_chunk == n;
    float* out = nullptr;
    if (all_logits) {
      out = logits.data() + done * hp_.n_vocab;
    } else if (last) {
      out = logits.data();
    }
    Status st = forward_batch(tokens.data() + done, n_chunk, n_past0 + done, all_logits, out);
    if (!st.is_ok()) {
      (void)kv_->truncate(n_past0);  // leave the context as it was
      return st;
    }
    done += n_chunk;
    if (options_.progress) options_.progress(done, n);
  }
  return Status::ok();
}

Status LlamaForward::forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, bool all_rows, float* logits) {
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_embd_q();
  const int64_t n_kv = hp_.n_embd_kv();
  const int64_t n_ff = hp_.n_ff;
  ThreadPool& pool = *pool_;

  for (int64_t t = 0; t < n; ++t) {
    const auto* row = static_cast<const uint8_t*>(w_.token_embd.data) + static_cast<size_t>(tokens[t]) * w_.token_embd.row_bytes;
    kernels::dequantize_row(w_.token_embd.type, row, x_.data() + t * n_embd, n_embd);
  }
  rope_.fill_tables(pos0, n, cos_.data(), sin_.data());

  for (int il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    rms_norm(x_.data(), L.attn_norm, n, n_embd, hp_.rms_eps, xn_.data());
    kernels::matmul(L.attn_q, xn_.data(), n, q_.data(), pool);
    kernels::matmul(L.attn_k, xn_.data(), n, k_.data(), pool);
    kernels::matmul(L.attn_v, xn_.data(), n, v_.data(), pool);
    add_bias(q_.data(), L.attn_q_bias, n, n_q);
    add_bias(k_.data(), L.attn_k_bias, n, n_kv);
    add_bias(v_.data(), L.attn_v_bias, n, n_kv);
    rope_.apply(q_.data(), n, hp_.n_head, cos_.data(), sin_.data());
    rope_.apply(k_.data(), n, hp_.n_head_kv, cos_.data(), sin_.data());

    LEOAM_RETURN_IF_ERROR(kv_->append(il, pos0, n, k_.data(), v_.data()));
    {
      LEOAM_ASSIGN_OR_RETURN(KvView view, kv_->view(il, pos0 + n));
      LEOAM_RETURN_IF_ERROR(attention(view, attn_params_, q_.data(), pos0, n, attn_.data(), pool));
    }
    kernels::matmul(L.attn_output, attn_.data(), n, proj_.data(), pool);
    add_into(x_.data(), proj_.data(), n * n_embd);

    rms_norm(x_.data(), L.ffn_norm, n, n_embd, hp_.rms_eps, xn_.data());
    kernels::matmul(L.ffn_gate, xn_.data(), n, gate_.data(), pool);
    kernels::matmul(L.ffn_up, xn_.data(), n, up_.data(), pool);
    for (int64_t i = 0; i < n * n_ff; ++i) {
      const float g = gate_[i];
      gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];
    }
    kernels::matmul(L.ffn_down, gate_.data(), n, proj_.data(), pool);
    add_into(x_.data(), proj_.data(), n * n_embd);
  }

  if (logits == nullptr) return Status::ok();
  const int64_t first = all_rows ? 0 : n - 1;
  const int64_t n_out = n - first;
  rms_norm(x_.data() + first * n_embd, w_.output_norm, n_out, n_embd, hp_.rms_eps, xn_.data());
  kernels::matmul(w_.output, xn_.data(), n_out, logits, pool);
  return Status::ok();
}

}  // namespace leoam
