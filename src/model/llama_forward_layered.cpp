// LlamaForward's layered prefill (ForwardOptions::prefill_working_set_bytes, llama_forward.h): a
// prompt of several batches, layer by layer over segments of batches held in a working set.
// The order, and why: docs/model.md#the-forward-pass
#include "model/block_norm.h"
#include "model/llama_forward.h"

#include <algorithm>
#include <string>

#include "kernels/cpu/ops.h"
#include "kv/kv_dtype.h"
#include "model/llama_forward_steps.h"

namespace leoam {

using detail::for_each_row;
using detail::observe_appended;

Status LlamaForward::eval_layered(std::span<const int32_t> tokens, std::span<const std::pair<int64_t, int64_t>> chunks,
                                  bool all_logits, std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_past0 = seq_.kv->n_tokens();
  const int64_t n_embd = hp_.n_embd;
  const int64_t n_q = hp_.n_embd_q();
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
  const auto fail = [&](const Status& st) { return roll_back(seq_, n_past0, st); };  // as the batch order does
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
    embed(tokens.data() + s0, s1 - s0, n_past0 + s0, nullptr, seg_x_.data());

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
          block_norm(hp_, x + t * n_embd, L.attn_norm, L.attn_norm_b, xn + t * n_embd);
        });
        fill_rope_tables(pos, nt);
        project_qkv(il, xn, nt, pos);
        LEOAM_RETURN_IF_ERROR(seq_.kv->append(il, pos, nt, k_.data(), v_.data()));
        AttentionSelector* watching = watcher(selector, il);
        LEOAM_RETURN_IF_ERROR(observe_appended(watching, il, pos, nt, k_.data(), v_.data()));
        if (needs.stored && watching != nullptr) LEOAM_RETURN_IF_ERROR(watching->observe_stored(il, pos + nt));
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
      if (!reads_store || hp_.is_sliding(il)) {
        // Batch by batch: each attends the segment's rows so far, in the working set (and in a
        // working set too small for more, or a sliding layer's window, the positions before the
        // segment in the store); a sliding layer's store drops what the later batches' windows
        // do not reach as it goes, where one attention for the segment would need it all kept.
        for (size_t c = c0; c < c1; ++c) {
          const auto [t0, nt] = chunks[c];
          if (Status st = project(t0, nt); !st.is_ok()) return fail(st);
          const KvSegment seen{n_past0 + s0, t0 + nt - s0, seg_k_.data(), seg_v_.data(), seq_.kv->dtype(), kv_row_bytes};
          const KvView tail(hp_.n_head_kv, hp_.head_dim, {seen});
          if (Status st = attention(*seq_.kv, il, n_past0 + s0, tail, layer_params(il), q_.data(), n_past0 + t0, nt,
                                    attn_.data(), pool);
              !st.is_ok()) {
            return fail(st);
          }
          release_window(*seq_.kv, il, n_past0 + t0);
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
        if (Status st = attention(*seq_.kv, il, n_past0 + s0, tail, layer_params(il), seg_q_.data(), n_past0 + s0, s1 - s0,
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
        const std::string done = std::to_string(s0) + " of " + std::to_string(n) + " tokens";
        return roll_back(seq_, n_past0 + s0, cancelled("prefill stopped after " + done));
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

}  // namespace leoam
