// LlamaForward's batched decode (decode_batch, llama_forward.h): one token of each of several
// sequences in a step, the rows' selections and attention run one row after another or, with two
// rows or more a thread, side by side on the pool's threads.
#include "model/block_norm.h"
#include "model/llama_forward.h"

#include <atomic>
#include <string>
#include <vector>

#include "core/trace.h"
#include "kernels/cpu/ops.h"
#include "model/llama_forward_steps.h"

namespace leoam {

using detail::for_each_row;
using detail::observe_appended;

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
                              std::to_string(b.seq.kv->n_ctx()) + " tokens")
          .about(Setting::kContextSize);
    }
    positions[i] = b.seq.kv->n_tokens();
    tokens[i] = b.token;
  }
  Status st = decode_rows(batch, tokens, positions, logits);
  if (!st.is_ok()) {
    for (int64_t i = 0; i < n; ++i) st = roll_back(batch[i].seq, positions[i], st);  // every sequence as it was
  }
  return st;
}

Status LlamaForward::decode_rows(std::span<const BatchToken> batch, std::span<const int32_t> tokens,
                                 std::span<const int64_t> positions, std::vector<float>& logits) {
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_embd_q();
  const int64_t n_kv = hp_.n_embd_kv();
  ThreadPool& pool = *pool_;
  Trace* trace = options_.trace;
  const TraceSpan step_span(trace, "decode step", "decode", -1, positions[0]);
  float* x = x_.data();
  float* xn = xn_.data();
  embed(tokens.data(), n, 0, positions.data(), x);
  selected_.resize(static_cast<size_t>(n));
  // With two rows or more a thread, the rows' selections and attention run side by side, a row
  // per pool thread at a time (select_and_attend_across_rows): within one row they keep 2 threads
  // poorly busy (docs/kv-store.md#batches).
  const bool across_rows = pool.n_threads() > 1 && n >= 2 * pool.n_threads();
  for (int64_t i = 0; i < n; ++i) fill_rope_tables(positions[i], 1, i);
  for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
    block_norm(hp_, x + t * n_embd, w_.layers[0].attn_norm, w_.layers[0].attn_norm_b, xn + t * n_embd);
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
      project_qkv(il, xn, n, positions[0], positions.data());
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
      LEOAM_RETURN_IF_ERROR(observe_appended(watcher(seq.selector, il), il, pos, 1, k, v_.data() + i * n_kv));
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
    for (int64_t i = 0; i < n; ++i) release_window(*batch[i].seq.kv, il, positions[i]);
    {
      const TraceSpan span(trace, "ffn", "compute", il, positions[0]);  // with the output projection
      output_and_ffn(L, x, xn, n);
    }
    if (il + 1 < hp_.n_layer) {
      const LayerWeights& next = w_.layers[il + 1];
      const float* proj = proj_.data();
      for_each_row(pool, n, 4 * n_embd, [&](int64_t t) {
        add_block_norm(hp_, x + t * n_embd, proj + t * n_embd, next.attn_norm, next.attn_norm_b, xn + t * n_embd);
      });
    }
  }
  logits.resize(static_cast<size_t>(n) * hp_.n_vocab);
  output_logits(x, n, true, logits.data());
  return Status::ok();
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

}  // namespace leoam
