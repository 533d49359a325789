#include "model/llama_forward.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <span>
#include <string>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kv/kv_dtype.h"
#include "kv/memory_kv_cache.h"
#include "core/trace.h"
#include "model/attention_selector.h"

namespace leoam {

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

// The FFN's first half for one token in one region: gate = Wgate x, up = Wup x and then
// gate = silu(gate) * up, each thread on the same rows of both, so the SwiGLU runs on rows just
// written (in cache) and needs no region of its own.
void ffn_gate_up_swiglu(const MatrixView& w_gate, const MatrixView& w_up, const float* x, float* gate, float* up,
                        ThreadPool& pool, ThreadPool& inline_pool) {
  const int64_t n_ff = w_gate.n_rows;
  pool.parallel_for(n_blocks(n_ff), 2 * kRowBlock * w_gate.n_cols, [&](int64_t b0, int64_t b1, int) {
    const int64_t r0 = b0 * kRowBlock;
    const int64_t r1 = std::min(b1 * kRowBlock, n_ff);
    kernels::matvec(row_slice(w_gate, r0, r1), x, gate + r0, inline_pool);
    kernels::matvec(row_slice(w_up, r0, r1), x, up + r0, inline_pool);
    kernels::swiglu(gate + r0, up + r0, r1 - r0, gate + r0);
  });
}

// fn(t) for each token row t in [0, n_rows), rows split across the pool when that pays.
template <typename Fn>
void for_each_row(ThreadPool& pool, int64_t n_rows, int64_t cost_per_row, const Fn& fn) {
  pool.parallel_for(n_rows, cost_per_row, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) fn(t);
  });
}

// Positions [pos, pos + n)'s keys and values, just appended to `layer`, to a selector that
// watches them (SelectorNeeds keys, values).
Status observe_appended(AttentionSelector* selector, int layer, int64_t pos, int64_t n, const float* k,
                        const float* v) {
  if (selector == nullptr) return Status::ok();
  const SelectorNeeds needs = selector->needs();
  if (needs.keys) LEOAM_RETURN_IF_ERROR(selector->observe_keys(layer, pos, n, k));
  if (needs.values) LEOAM_RETURN_IF_ERROR(selector->observe_values(layer, pos, n, v));
  return Status::ok();
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
  ctx->inline_pool_ = std::make_unique<ThreadPool>(1);
  ctx->kv_ = std::move(kv_cache);
  ctx->seq_ = {ctx->kv_.get(), options.selector};
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
                              std::to_string(seq_.kv->n_ctx()) + " tokens (-c)");
    }
    return invalid_argument(std::to_string(n) + " tokens at position " + std::to_string(n_past0) +
                            " (ending at position " + std::to_string(n_past0 + n) +
                            ") exceed the context size of " + std::to_string(seq_.kv->n_ctx()) + " tokens (-c)");
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
    if (!st.is_ok()) {
      (void)seq_.kv->truncate(n_past0);  // leave the context as it was
      if (seq_.selector != nullptr) seq_.selector->truncate(n_past0);
      return st;
    }
    if (options_.progress) options_.progress(done + n_chunk, n);
    if (!last && options_.should_stop && options_.should_stop()) {
      return cancelled("prefill stopped after " + std::to_string(done + n_chunk) + " of " + std::to_string(n) +
                       " tokens");
    }
  }
  return Status::ok();
}

Status LlamaForward::eval_layered(std::span<const int32_t> tokens, std::span<const std::pair<int64_t, int64_t>> chunks,
                                  bool all_logits, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_past0 = seq_.kv->n_tokens();
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_embd_q();
  const float eps = hp_.rms_eps;
  const size_t kv_row_bytes = static_cast<size_t>(hp_.n_embd_kv()) * kv_dtype_size(seq_.kv->dtype());
  // What a segment row costs the working set: its residual stream and one layer's K and V; in a
  // segment that attends KV in the store, also its query, its attention output and attention's
  // merge scratch (a query and a log-sum-exp a head), so that the store is read once for all of
  // the segment's rows.
  const uint64_t row_bytes = static_cast<uint64_t>(n_embd) * sizeof(float) + 2 * kv_row_bytes;
  const uint64_t wide_row_bytes = row_bytes + (3 * static_cast<uint64_t>(n_q) + hp_.n_head) * sizeof(float);
  ThreadPool& pool = *pool_;
  AttentionSelector* selector = seq_.selector;
  const SelectorNeeds needs = selector != nullptr ? selector->needs() : SelectorNeeds{};
  const auto fail = [&](const Status& st) {
    (void)seq_.kv->truncate(n_past0);  // as the batch order does: the context as it was
    if (selector != nullptr) selector->truncate(n_past0);
    return st;
  };
  // The working set lives for the prompt only: decoding does not need it.
  struct Release {
    LlamaForward& f;
    ~Release() {
      std::vector<float>().swap(f.seg_x_);
      std::vector<uint8_t>().swap(f.seg_k_);
      std::vector<uint8_t>().swap(f.seg_v_);
      std::vector<float>().swap(f.seg_q_);
      std::vector<float>().swap(f.seg_attn_);
    }
  } release{*this};

  for (size_t c0 = 0; c0 < chunks.size();) {
    // A segment: whole batches, as many as the working set holds (one at least). One that attends
    // KV in the store reads it once for all its rows where the working set holds two batches of
    // them at the larger row cost; else batch by batch (each reading it), as a first segment.
    const bool reads_store = n_past0 + chunks[c0].first > 0 &&
                             options_.prefill_working_set_bytes / wide_row_bytes >= 2 * static_cast<uint64_t>(n_batch_);
    const int64_t segment_rows = std::max<int64_t>(
        n_batch_, static_cast<int64_t>(options_.prefill_working_set_bytes / (reads_store ? wide_row_bytes : row_bytes)));
    size_t c1 = c0 + 1;
    while (c1 < chunks.size() && chunks[c1].first + chunks[c1].second - chunks[c0].first <= segment_rows) ++c1;
    const int64_t s0 = chunks[c0].first;  // the segment: prompt tokens [s0, s1)
    const int64_t s1 = chunks[c1 - 1].first + chunks[c1 - 1].second;
    const auto len = static_cast<size_t>(s1 - s0);
    if (reads_store && seg_q_.empty()) {  // a first segment's longer buffers go: the budget holds one or the other
      std::vector<float>().swap(seg_x_);
      std::vector<uint8_t>().swap(seg_k_);
      std::vector<uint8_t>().swap(seg_v_);
    }
    seg_x_.resize(std::max(seg_x_.size(), len * n_embd));
    seg_k_.resize(std::max(seg_k_.size(), len * kv_row_bytes));
    seg_v_.resize(std::max(seg_v_.size(), len * kv_row_bytes));
    if (reads_store) {
      seg_q_.resize(std::max(seg_q_.size(), len * n_q));
      seg_attn_.resize(std::max(seg_attn_.size(), len * n_q));
    }
    // attention's merge scratch, held while a segment that reads the store attends
    const uint64_t merge_bytes = reads_store ? len * (n_q + hp_.n_head) * sizeof(float) : 0;
    prefill_stats_.working_set_bytes =
        std::max<uint64_t>(prefill_stats_.working_set_bytes,
                           (seg_x_.capacity() + seg_q_.capacity() + seg_attn_.capacity()) * sizeof(float) +
                               seg_k_.capacity() + seg_v_.capacity() + merge_bytes);
    embed(tokens.data() + s0, s1 - s0, seg_x_.data());

    for (int il = 0; il < hp_.n_layer; ++il) {
      const LayerWeights& L = w_.layers[il];
      const bool last_layer = il + 1 == hp_.n_layer;
      // The batch's queries, keys and values; its K and V into the store and the working set.
      const auto project = [&](int64_t t0, int64_t nt) -> Status {
        const int64_t pos = n_past0 + t0;
        float* x = seg_x_.data() + (t0 - s0) * n_embd;
        float* xn = xn_.data();
        // The residual stream holds layer il's input (the previous layer's FFN added): its norm.
        for_each_row(pool, nt, 4 * n_embd, [&](int64_t t) {
          kernels::rmsnorm(x + t * n_embd, L.attn_norm, n_embd, eps, xn + t * n_embd);
        });
        rope_.fill_tables(pos, nt, cos_.data(), sin_.data());
        project_qkv(L, xn, nt, pos);
        LEOAM_RETURN_IF_ERROR(seq_.kv->append(il, pos, nt, k_.data(), v_.data()));
        LEOAM_RETURN_IF_ERROR(observe_appended(selector, il, pos, nt, k_.data(), v_.data()));
        if (needs.stored) LEOAM_RETURN_IF_ERROR(selector->observe_stored(il, pos + nt));
        if (t0 + nt == n) LEOAM_RETURN_IF_ERROR(prefetch_last_row(il, pos, nt));
        const size_t row0 = static_cast<size_t>(t0 - s0);
        store_kv_values(seq_.kv->dtype(), k_.data(), nt * hp_.n_embd_kv(), seg_k_.data() + row0 * kv_row_bytes);
        store_kv_values(seq_.kv->dtype(), v_.data(), nt * hp_.n_embd_kv(), seg_v_.data() + row0 * kv_row_bytes);
        return Status::ok();
      };
      // The batch's attention output (in attn_) through the output projection and the FFN.
      const auto finish = [&](int64_t t0, int64_t nt) {
        float* x = seg_x_.data() + (t0 - s0) * n_embd;
        output_and_ffn(L, x, xn_.data(), nt);
        if (last_layer) {
          // The logits' rows: every row with all_logits, else the prompt's last.
          if (all_logits) {
            output_logits(x, nt, true, logits.data() + t0 * hp_.n_vocab);
          } else if (t0 + nt == n) {
            output_logits(x, nt, false, logits.data());
          }
        } else {
          const float* proj = proj_.data();
          for_each_row(pool, nt, n_embd, [&](int64_t t) { kernels::add(x + t * n_embd, proj + t * n_embd, n_embd); });
        }
      };
      if (!reads_store) {
        // Batch by batch: each attends the segment's rows so far, in the working set (and in a
        // working set too small for more, the positions before the segment in the store).
        for (size_t c = c0; c < c1; ++c) {
          const auto [t0, nt] = chunks[c];
          if (Status st = project(t0, nt); !st.is_ok()) return fail(st);
          const KvSegment seen{n_past0 + s0, t0 + nt - s0, seg_k_.data(), seg_v_.data(), seq_.kv->dtype(), kv_row_bytes};
          const KvView tail(hp_.n_head_kv, hp_.head_dim, {seen});
          if (Status st = attention(*seq_.kv, il, n_past0 + s0, tail, attn_params_, q_.data(), n_past0 + t0, nt,
                                    attn_.data(), pool);
              !st.is_ok()) {
            return fail(st);
          }
          finish(t0, nt);
        }
      } else {
        // Every batch's queries first, then one attention for the whole segment: the positions
        // before it are read from the store once, not once a batch.
        for (size_t c = c0; c < c1; ++c) {
          const auto [t0, nt] = chunks[c];
          if (Status st = project(t0, nt); !st.is_ok()) return fail(st);
          std::copy(q_.begin(), q_.begin() + nt * n_q, seg_q_.begin() + (t0 - s0) * n_q);
        }
        const KvSegment seen{n_past0 + s0, s1 - s0, seg_k_.data(), seg_v_.data(), seq_.kv->dtype(), kv_row_bytes};
        const KvView tail(hp_.n_head_kv, hp_.head_dim, {seen});
        if (Status st = attention(*seq_.kv, il, n_past0 + s0, tail, attn_params_, seg_q_.data(), n_past0 + s0, s1 - s0,
                                  seg_attn_.data(), pool);
            !st.is_ok()) {
          return fail(st);
        }
        for (size_t c = c0; c < c1; ++c) {
          const auto [t0, nt] = chunks[c];
          std::copy(seg_attn_.begin() + (t0 - s0) * n_q, seg_attn_.begin() + (t0 - s0 + nt) * n_q, attn_.begin());
          finish(t0, nt);
        }
      }
      if (options_.progress) {
        options_.progress(s0 + (s1 - s0) * (il + 1) / hp_.n_layer, n);
      }
      // A segment may be the whole prompt: a stop is heard between its layers, and the segment's
      // KV, in some layers only, goes.
      if (!last_layer && options_.should_stop && options_.should_stop()) {
        (void)seq_.kv->truncate(n_past0 + s0);
        if (selector != nullptr) selector->truncate(n_past0 + s0);
        return cancelled("prefill stopped after " + std::to_string(s0) + " of " + std::to_string(n) + " tokens");
      }
    }
    ++prefill_stats_.n_segments;
    prefill_stats_.n_layered_tokens += s1 - s0;
    if (s1 < n && options_.should_stop && options_.should_stop()) {
      return cancelled("prefill stopped after " + std::to_string(s1) + " of " + std::to_string(n) + " tokens");
    }
    c0 = c1;
  }
  return Status::ok();
}

void LlamaForward::project_qkv(const LayerWeights& L, const float* xn, int64_t n, int64_t pos0,
                               const int64_t* positions) {
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
    kernels::rope(q_.data(), q_shape, cos_.data(), sin_.data());
    kernels::rope(k_.data(), k_shape, cos_.data(), sin_.data());
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
    kernels::rope(q_.data() + t * n_q, q_shape, cos_.data() + t * n_pairs, sin_.data() + t * n_pairs);
    kernels::rope(k_.data() + t * n_kv, k_shape, cos_.data() + t * n_pairs, sin_.data() + t * n_pairs);
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
    const MatvecTask out_proj[] = {{&L.attn_output, attn_.data(), proj, nullptr}};
    fused_matvecs(out_proj, pool, *inline_pool_);
  } else {
    kernels::matmul(L.attn_output, attn_.data(), n, proj, pool);
  }
  for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
    kernels::add_rmsnorm(x + t * n_embd, proj + t * n_embd, L.ffn_norm, n_embd, hp_.rms_eps, xn + t * n_embd);
  });
}

void LlamaForward::ffn(const LayerWeights& L, const float* xn, int64_t n) {
  const int64_t n_ff = hp_.n_ff;
  ThreadPool& pool = *pool_;
  float* proj = proj_.data();
  if (n == 1) {
    ffn_gate_up_swiglu(L.ffn_gate, L.ffn_up, xn, gate_.data(), up_.data(), pool, *inline_pool_);
    const MatvecTask down[] = {{&L.ffn_down, gate_.data(), proj, nullptr}};
    fused_matvecs(down, pool, *inline_pool_);
  } else {
    kernels::matmul(L.ffn_gate, xn, n, gate_.data(), pool);
    kernels::matmul(L.ffn_up, xn, n, up_.data(), pool);
    for_each_row(pool, n, 16 * n_ff, [&](int64_t t) {
      kernels::swiglu(gate_.data() + t * n_ff, up_.data() + t * n_ff, n_ff, gate_.data() + t * n_ff);
    });
    kernels::matmul(L.ffn_down, gate_.data(), n, proj, pool);
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
    kernels::add_rmsnorm(x + t * n_embd, proj + t * n_embd, w_.output_norm, n_embd, hp_.rms_eps, xn + i * n_embd);
  });
  if (n_out == 1) {
    const MatvecTask out[] = {{&w_.output, xn, logits, nullptr}};
    fused_matvecs(out, pool, *inline_pool_);
  } else {
    kernels::matmul(w_.output, xn, n_out, logits, pool);
  }
}

void LlamaForward::embed(const int32_t* tokens, int64_t n, float* x) const {
  for (int64_t t = 0; t < n; ++t) {
    const auto* row = static_cast<const uint8_t*>(w_.token_embd.data) + static_cast<size_t>(tokens[t]) * w_.token_embd.row_bytes;
    kernels::dequantize_row(w_.token_embd.type, row, x + t * hp_.n_embd, hp_.n_embd);
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

Status LlamaForward::decode_batch(std::span<const BatchToken> batch, std::vector<float>& logits) {
  const auto n = static_cast<int64_t>(batch.size());
  if (n == 0) return invalid_argument("decode_batch: no sequences");
  if (n > n_batch_) {
    return invalid_argument("decode_batch: " + std::to_string(n) + " sequences, more than the batch size of " +
                            std::to_string(n_batch_));
  }
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const BatchToken& b = batch[i];
    LEOAM_RETURN_IF_ERROR(check_sequence(b.seq));
    for (int64_t j = 0; j < i; ++j) {
      if (batch[j].seq.kv == b.seq.kv) return invalid_argument("decode_batch: two rows share a KV store");
    }
    if (b.token < 0 || b.token >= hp_.n_vocab) {
      return invalid_argument("token id " + std::to_string(b.token) + " of sequence " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(hp_.n_vocab) + ")");
    }
    if (!b.seq.kv->can_append(1)) {
      return invalid_argument("sequence " + std::to_string(i) + " is full: its context holds " +
                              std::to_string(b.seq.kv->n_ctx()) + " tokens (-c)");
    }
    positions[i] = b.seq.kv->n_tokens();
    tokens[i] = b.token;
  }
  const Status st = decode_rows(batch, tokens, positions, logits);
  if (!st.is_ok()) {
    for (int64_t i = 0; i < n; ++i) {  // every sequence as it was
      (void)batch[i].seq.kv->truncate(positions[i]);
      if (batch[i].seq.selector != nullptr) batch[i].seq.selector->truncate(positions[i]);
    }
  }
  return st;
}

Status LlamaForward::decode_rows(std::span<const BatchToken> batch, std::span<const int32_t> tokens,
                                 std::span<const int64_t> positions, std::vector<float>& logits) {
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_embd_q();
  const int64_t n_kv = hp_.n_embd_kv();
  const int64_t n_pairs = hp_.rope.n_rot / 2;
  const float eps = hp_.rms_eps;
  ThreadPool& pool = *pool_;
  Trace* trace = options_.trace;
  const TraceSpan step_span(trace, "decode step", "decode", -1, positions[0]);
  float* x = x_.data();
  float* xn = xn_.data();
  embed(tokens.data(), n, x);
  selected_.resize(static_cast<size_t>(n));
  // With two rows or more a thread, the rows' selections and attention run side by side, a row
  // per pool thread at a time (select_and_attend_across_rows): within one row they keep 2 threads
  // poorly busy (docs/kv-store.md#batches).
  const bool across_rows = pool.n_threads() > 1 && n >= 2 * pool.n_threads();
  for (int64_t i = 0; i < n; ++i) rope_.fill_tables(positions[i], 1, cos_.data() + i * n_pairs, sin_.data() + i * n_pairs);
  for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
    kernels::rmsnorm(x + t * n_embd, w_.layers[0].attn_norm, n_embd, eps, xn + t * n_embd);
  });
  for (int il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = w_.layers[il];
    for (int64_t i = 0; i < n; ++i) {
      AttentionSelector* selector = batch[i].seq.selector;
      if (selector != nullptr && selector->needs().layer_inputs) {
        LEOAM_RETURN_IF_ERROR(selector->observe_layer_input(il, positions[i], x + i * n_embd));
      }
    }
    {
      const TraceSpan span(trace, "qkv", "compute", il, positions[0]);
      project_qkv(L, xn, n, positions[0], positions.data());
    }
    if (options_.decode_query_hook) {
      for (int64_t i = 0; i < n; ++i) options_.decode_query_hook(*batch[i].seq.kv, il, q_.data() + i * n_q);
    }
    // Each row's own sequence: its store and its selection (without a selector, every position),
    // whose disk reads go to the store's read-ahead (a no-op for a store without one: its gather
    // reads them); then each row's attention. So one sequence's reads overlap the selections and
    // attention of the rows after and before it, and the selections are those of rows decoded one
    // at a time.
    for (int64_t i = 0; i < n; ++i) {
      const DecodeSequence& seq = batch[i].seq;
      const int64_t pos = positions[i];
      const float* k = k_.data() + i * n_kv;
      LEOAM_RETURN_IF_ERROR(seq.kv->append(il, pos, 1, k, v_.data() + i * n_kv));
      LEOAM_RETURN_IF_ERROR(observe_appended(seq.selector, il, pos, 1, k, v_.data() + i * n_kv));
    }
    if (across_rows) {
      LEOAM_RETURN_IF_ERROR(select_and_attend_across_rows(batch, il, positions));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const DecodeSequence& seq = batch[i].seq;
        LEOAM_ASSIGN_OR_RETURN(selected_[i], select_row(seq, il, positions[i], q_.data() + i * n_q, *pool_, trace));
        if (n > 1) LEOAM_RETURN_IF_ERROR(seq.kv->read_ahead(il, selected_[i]));
      }
      for (int64_t i = 0; i < n; ++i) {
        const DecodeSequence& seq = batch[i].seq;
        const float* q = q_.data() + i * n_q;
        float* out = attn_.data() + i * n_q;
        LEOAM_RETURN_IF_ERROR(attend_selected(seq, il, positions[i], q, out, selected_[i], *pool_, key_mass_, trace));
      }
    }
    {
      const TraceSpan span(trace, "ffn", "compute", il, positions[0]);  // with the output projection
      output_and_ffn(L, x, xn, n);
    }
    if (il + 1 < hp_.n_layer) {
      const float* next_norm = w_.layers[il + 1].attn_norm;
      const float* proj = proj_.data();
      for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
        kernels::add_rmsnorm(x + t * n_embd, proj + t * n_embd, next_norm, n_embd, eps, xn + t * n_embd);
      });
    }
  }
  logits.resize(static_cast<size_t>(n) * hp_.n_vocab);
  output_logits(x, n, true, logits.data());
  return Status::ok();
}

Status LlamaForward::attend(const DecodeSequence& seq, int layer, int64_t pos, int64_t n, const float* q, float* out,
                            Trace* trace) {
  ThreadPool& pool = *pool_;
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

Status LlamaForward::select_and_attend_across_rows(std::span<const BatchToken> batch, int layer,
                                                   std::span<const int64_t> positions) {
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t n_q = hp_.n_embd_q();
  ThreadPool& pool = *pool_;
  Trace* trace = options_.trace;
  std::vector<Status> status(static_cast<size_t>(n));
  // Each pool thread takes the next row not yet taken, so that a slow row does not hold up a
  // thread's fixed share. The rows' own spans stay out of the trace: the phases' spans, on this
  // thread, are the step's time (a row's disk reads and waits on other threads count in them).
  const auto each_row = [&](const auto& row) {
    std::atomic<int64_t> next{0};
    pool.parallel_for(pool.n_threads(), [&](int64_t, int64_t, int range) {
      for (int64_t i = next++; i < n; i = next++) status[i] = row(i, range);
    });
    for (Status& st : status) LEOAM_RETURN_IF_ERROR(st);
    return Status::ok();
  };
  {
    const TraceSpan span(trace, "select", "selection", layer, positions[0]);
    LEOAM_RETURN_IF_ERROR(each_row([&](int64_t i, int) -> Status {
      const DecodeSequence& seq = batch[i].seq;
      LEOAM_ASSIGN_OR_RETURN(selected_[i], select_row(seq, layer, positions[i], q_.data() + i * n_q, *inline_pool_,
                                                      nullptr));
      return seq.kv->read_ahead(layer, selected_[i]);
    }));
  }
  const TraceSpan span(trace, "attention", "attention", layer, positions[0]);
  row_mass_.resize(static_cast<size_t>(pool.n_threads()));
  return each_row([&](int64_t i, int range) {
    return attend_selected(batch[i].seq, layer, positions[i], q_.data() + i * n_q, attn_.data() + i * n_q, selected_[i],
                           *inline_pool_, row_mass_[range], nullptr);
  });
}

Result<std::vector<TokenRange>> LlamaForward::select_row(const DecodeSequence& seq, int layer, int64_t pos,
                                                         const float* q, ThreadPool& pool, Trace* trace) {
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
  if (seq.selector == nullptr || !seq.selector->needs().attention_mass) {
    return attention(*seq.kv, layer, ranges, attn_params_, q, pos, 1, out, pool);
  }
  key_mass.resize(static_cast<size_t>(n_keys));
  LEOAM_RETURN_IF_ERROR(attention(*seq.kv, layer, ranges, attn_params_, q, pos, 1, out, pool, key_mass));
  seq.selector->observe_attention(layer, pos, ranges, key_mass);
  return Status::ok();
}

Status LlamaForward::read_ahead_next(int layer, const float* x, int64_t pos) {
  const LayerWeights& next = w_.layers[layer + 1];
  spec_xn_.resize(static_cast<size_t>(hp_.n_embd));
  spec_q_.resize(static_cast<size_t>(hp_.n_embd_q()));
  kernels::rmsnorm(x, next.attn_norm, hp_.n_embd, hp_.rms_eps, spec_xn_.data());
  const MatvecTask q[] = {{&next.attn_q, spec_xn_.data(), spec_q_.data(), next.attn_q_bias}};
  fused_matvecs(q, *pool_, *inline_pool_);
  kernels::rope(spec_q_.data(), rope_.shape(hp_.n_head), cos_.data(), sin_.data());
  scale_query(spec_q_.data(), hp_.n_embd_q(), hp_.query_scale(pos));
  if (options_.decode_query_hook) options_.decode_query_hook(*seq_.kv, layer + 1, spec_q_.data());
  // The step's own KV of layer + 1 is not stored yet: the forecast chooses among [0, pos).
  LEOAM_ASSIGN_OR_RETURN(const std::vector<TokenRange> ranges,
                         seq_.selector->forecast(layer + 1, pos, pos, spec_q_.data(), *pool_, false));
  return seq_.kv->read_ahead(layer + 1, ranges);
}

Status LlamaForward::prefetch_last_row(int layer, int64_t pos0, int64_t n) {
  if (seq_.selector == nullptr) return Status::ok();
  const float* q = q_.data() + (n - 1) * hp_.n_embd_q();
  const int64_t pos = pos0 + n - 1;
  LEOAM_ASSIGN_OR_RETURN(const std::vector<TokenRange> ranges,
                         seq_.selector->forecast(layer, pos, pos + 1, q, *pool_, true));
  return seq_.kv->prefetch(layer, ranges);
}

Status LlamaForward::forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, bool all_rows, float* logits,
                                   bool prompt_end) {
  const int64_t n_embd = hp_.n_embd;
  const float eps = hp_.rms_eps;
  const bool decode = n == 1;
  ThreadPool& pool = *pool_;
  float* x = x_.data();
  float* xn = xn_.data();
  float* proj = proj_.data();

  embed(tokens, n, x);
  rope_.fill_tables(pos0, n, cos_.data(), sin_.data());
  const int64_t norm_cost = 4 * n_embd;

  // The attention norm of layer 0; every later norm is fused with the residual add before it.
  for_each_row(pool, n, norm_cost, [&](int64_t t) {
    kernels::rmsnorm(x + t * n_embd, w_.layers[0].attn_norm, n_embd, eps, xn + t * n_embd);
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
      project_qkv(L, xn, n, pos0);
      LEOAM_RETURN_IF_ERROR(seq_.kv->append(il, pos0, n, k_.data(), v_.data()));
    }
    if (decode && options_.decode_query_hook) options_.decode_query_hook(*seq_.kv, il, q_.data());
    LEOAM_RETURN_IF_ERROR(observe_appended(selector, il, pos0, n, k_.data(), v_.data()));
    if (!decode && needs.stored) LEOAM_RETURN_IF_ERROR(selector->observe_stored(il, pos0 + n));
    if (prompt_end) LEOAM_RETURN_IF_ERROR(prefetch_last_row(il, pos0, n));
    if (read_all_ahead && il + 1 < hp_.n_layer) {
      // The step's own KV of layer + 1 is not stored yet: its past is [0, pos0).
      const TokenRange past{0, pos0};
      LEOAM_RETURN_IF_ERROR(seq_.kv->read_ahead(il + 1, {&past, 1}));
    }
    LEOAM_RETURN_IF_ERROR(attend(seq_, il, pos0, n, q_.data(), attn_.data(), trace));
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
      const float* next_norm = w_.layers[il + 1].attn_norm;
      for_each_row(pool, n, norm_cost, [&](int64_t t) {
        kernels::add_rmsnorm(x + t * n_embd, proj + t * n_embd, next_norm, n_embd, eps, xn + t * n_embd);
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
