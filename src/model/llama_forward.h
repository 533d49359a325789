// The CPU forward pass of the llama family (llama, qwen2/3, phi3, gemma2/3): pre-norm decoder
// blocks, RoPE'd grouped-query attention, a gated FFN; gemma's post-norms, caps and sliding layers
// (ModelHparams), whose window a decode step reads without its selector. Per batch: embed; per
// layer append K and V to the store and attend through it, then the FFN; logits of the last row or
// of all. With ForwardOptions::selector a decode step attends what the selector picks per layer.
// A prompt longer than n_batch runs in chunks of n_batch (a lone last token rebalanced); scratch
// is sized for n_batch at create(). With ForwardOptions::prefill_working_set_bytes a prompt of
// several batches runs layer by layer over segments, so each KV byte before a segment is read back
// at most once per later segment and layer. A decode step keeps its parallel regions few.
// The pass in formulas, and the layered prefill's order: docs/model.md#the-forward-pass
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/attention.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "model/pipeline_choice.h"
#include "model/rope.h"

namespace leoam {

class LlamaForward final : public ForwardContext {
 public:
  // kv_cache: the store to use, shaped {n_layer, n_head_kv, head_dim, n_ctx}; null makes a
  // MemoryKvCache of options.kv_dtype for options.n_ctx (0: the model's context_length).
  static Result<std::unique_ptr<LlamaForward>> create(const Model& model, const ForwardOptions& options,
                                                      std::unique_ptr<KvCache> kv_cache = nullptr);

  Status eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) override;
  Status eval_sequence(const DecodeSequence& seq, std::span<const int32_t> tokens, bool all_logits,
                       std::vector<float>& logits) override;
  // The batch's rows share the projections' and the FFN's matrix products (one read of the
  // weights for all); each row's RoPE, store, selection and attention are its own sequence's.
  Status decode_batch(std::span<const BatchToken> batch, std::vector<float>& logits) override;
  int64_t n_past() const override { return kv_->n_tokens(); }
  int64_t n_ctx() const override { return kv_->n_ctx(); }
  int32_t n_vocab() const override { return static_cast<int32_t>(hp_.n_vocab); }
  int n_threads() const override { return pool_->n_threads(); }
  // The store and the selector forget every position.
  void reset() override;

  const KvCache& kv_cache() const { return *kv_; }
  PrefillStats prefill_stats() const override { return prefill_stats_; }
  int64_t decode_positions_attended() const override { return decode_positions_attended_.load(); }

 private:
  LlamaForward(const Model& model, const ForwardOptions& options, Rope rope);

  // The sequence the eval paths below work on (seq_): the context's own, or a caller's for the
  // length of an eval_sequence.
  class SequenceScope {
   public:
    SequenceScope(LlamaForward& f, const DecodeSequence& seq) : f_(f) { f_.seq_ = seq; }
    ~SequenceScope() { f_.seq_ = {f_.kv_.get(), f_.options_.selector}; }
    SequenceScope(const SequenceScope&) = delete;
    SequenceScope& operator=(const SequenceScope&) = delete;

   private:
    LlamaForward& f_;
  };
  // Fails unless seq's store has the model's KV shape.
  Status check_sequence(const DecodeSequence& seq) const;
  // After `error` in a batch that began at n positions, the sequence cut back to them. Where its
  // store cannot (a sliding-window layer dropped what a query at n reads), the sequence is
  // emptied instead, and the error returned says so.
  Status roll_back(const DecodeSequence& seq, int64_t n, const Status& error);
  // The selector that watches `layer`'s keys, values and stores: none for a sliding layer, which
  // reads its window whatever the selector would pick.
  AttentionSelector* watcher(AttentionSelector* selector, int layer) const {
    return hp_.is_sliding(layer) ? nullptr : selector;
  }
  // Once the queries from `pos` on are the only ones left to attend `layer`: a sliding layer's
  // store may drop what their windows do not reach.
  void release_window(KvCache& kv, int layer, int64_t pos) const {
    if (hp_.is_sliding(layer)) kv.release_before(layer, pos - hp_.window(layer) + 1);
  }
  // Attention of the n query rows q at positions [pos, pos + n) of `layer` over seq's store into
  // out: a decode row (n == 1) through seq's selector (which watches the attention mass when it
  // asks), else every visible position. Its spans go to `trace` (may be null).
  Status attend(const DecodeSequence& seq, int layer, int64_t pos, int64_t n, const float* q, float* out, Trace* trace);
  // attend's two halves for a decode row: the positions its selector picks on `pool` (without
  // one, every visible position), then the attention over them.
  Result<std::vector<TokenRange>> select_row(const DecodeSequence& seq, int layer, int64_t pos, const float* q,
                                             ThreadPool& pool, Trace* trace);
  // (over `pool`, the attention mass into key_mass when the selector watches it).
  Status attend_selected(const DecodeSequence& seq, int layer, int64_t pos, const float* q, float* out,
                         std::span<const TokenRange> ranges, ThreadPool& pool, std::vector<float>& key_mass,
                         Trace* trace);
  // decode_rows' selection and attention of one layer with the rows side by side: each pool
  // thread takes whole rows, one at a time, and runs each single-threaded (inline_pool_). The
  // selections and the attention are those of the rows decoded alone (a row without a selector
  // attends every position), each row's reads handed to its store's read-ahead.
  Status select_and_attend_across_rows(std::span<const BatchToken> batch, int layer, std::span<const int64_t> positions);
  // decode_batch's step, its rows checked: tokens and positions per row.
  Status decode_rows(std::span<const BatchToken> batch, std::span<const int32_t> tokens,
                     std::span<const int64_t> positions, std::vector<float>& logits);
  // Runs tokens[0, n) at positions [pos0, pos0 + n). Writes the logits of every row to
  // logits ([n][n_vocab]) when all_rows, else the last row's ([n_vocab]); none when logits is null.
  // prompt_end: the batch ends a prompt (n > 1): prefetch_last_row per layer.
  Status forward_batch(const int32_t* tokens, int64_t n, int64_t pos0, bool all_rows, float* logits,
                       bool prompt_end);
  // The decode pipeline (ForwardOptions::pipeline) in layer `layer` of the step at pos, between
  // its attention and its FFN, x the residual stream with the attention added: layer + 1's query
  // speculated from x, the selector's forecast with it, and the store's read-ahead of what it
  // picks, which the FFN's compute then hides.
  Status read_ahead_next(int layer, const float* x, int64_t pos);
  // The prompt's last row (the last of the n in q_, at positions [pos0, pos0 + n)): the store
  // prefetches what the selector forecasts the first decode step will read at `layer`.
  Status prefetch_last_row(int layer, int64_t pos0, int64_t n);
  // A prompt layer by layer (options_.prefill_working_set_bytes, docs/model.md); `chunks`
  // are the batches eval cut it into, as (first token, tokens).
  Status eval_layered(std::span<const int32_t> tokens, std::span<const std::pair<int64_t, int64_t>> chunks,
                      bool all_logits, std::vector<float>& logits);
  // The steps of a layer that both orders share, on n rows at positions [pos0, pos0 + n) (or,
  // given, positions[0, n): a batch of sequences): q_, k_, v_ = xn's projections, RoPE'd (cos_ and
  // sin_ filled for them), the queries scaled;
  void project_qkv(int layer, const float* xn, int64_t n, int64_t pos0, const int64_t* positions = nullptr);
  // The RoPE tables of n rows at positions [pos0, pos0 + n), from table row `row0` on: the
  // global layers' and, where theirs differ (gemma3), the sliding layers'.
  void fill_rope_tables(int64_t pos0, int64_t n, int64_t row0 = 0);
  const float* rope_cos(int layer) const { return hp_.is_sliding(layer) && rope_swa_ ? cos_swa_.data() : cos_.data(); }
  const float* rope_sin(int layer) const { return hp_.is_sliding(layer) && rope_swa_ ? sin_swa_.data() : sin_.data(); }
  // The attention parameters of `layer`: its window, if it slides.
  AttentionParams layer_params(int layer) const {
    AttentionParams p = attn_params_;
    p.window = hp_.window(layer);
    return p;
  }
  // The positions n query rows from pos read in `layer`: all before them, or in a sliding layer
  // the first row's window on (each later row's starts later; attention masks the rest).
  TokenRange window_range(int layer, int64_t pos, int64_t n) const {
    const int64_t window = hp_.window(layer);
    return {window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, pos + n};
  }
  // x += attn_ Wo^T, xn = ffn_norm(x), proj_ = the FFN of xn (the caller adds proj_ to x);
  void output_and_ffn(const LayerWeights& L, float* x, float* xn, int64_t n);
  // Its two halves: x += attn_ Wo^T and xn = ffn_norm(x); then proj_ = the FFN of xn.
  void attention_output(const LayerWeights& L, float* x, float* xn, int64_t n);
  void ffn(const LayerWeights& L, const float* xn, int64_t n);
  // ffn's ungated form (opt): proj_ = relu(xn Wup^T + b_up) Wdown^T + b_down.
  void ffn_relu(const LayerWeights& L, const float* xn, int64_t n);
  // logits of the last row (all rows when all_rows) after the last layer: x += proj_, then the
  // output norm and projection.
  void output_logits(float* x, int64_t n, bool all_rows, float* logits);
  // x[n][n_embd] = the token embeddings, plus the learned position embeddings where the model has
  // them (opt) of positions [pos0, pos0 + n), or positions[0, n) when given.
  void embed(const int32_t* tokens, int64_t n, int64_t pos0, const int64_t* positions, float* x) const;

  const ModelHparams& hp_;
  const ModelWeights& w_;
  ForwardOptions options_;
  Rope rope_;
  std::optional<Rope> rope_swa_;  // the sliding layers' RoPE where it is not rope_'s
  AttentionParams attn_params_;
  std::unique_ptr<ThreadPool> pool_;
  // One thread, so it runs every loop inline: the kernels called inside a fused region of pool_
  // get this one, and the region's threads share it.
  std::unique_ptr<ThreadPool> inline_pool_;
  std::unique_ptr<KvCache> kv_;
  DecodeSequence seq_;  // what eval works on: {kv_, options_.selector} but inside an eval_sequence
  int64_t n_batch_ = 0;

  // Scratch, sized for n_batch_ tokens.
  std::vector<float> x_;       // [n_batch][n_embd] residual stream
  std::vector<float> xn_;      // [n_batch][n_embd] normalized
  std::vector<float> q_;       // [n_batch][n_head][head_dim]
  std::vector<float> k_;       // [n_batch][n_head_kv][head_dim]
  std::vector<float> v_;       // [n_batch][n_head_kv][head_dim]
  std::vector<float> attn_;    // [n_batch][n_head][head_dim]
  std::vector<float> proj_;    // [n_batch][n_embd] output of attn_output / ffn_down
  std::vector<float> gate_;    // [n_batch][n_ff]
  std::vector<float> up_;      // [n_batch][n_ff]
  std::vector<float> cos_;     // [n_batch][n_rot/2]
  std::vector<float> sin_;     // [n_batch][n_rot/2]
  std::vector<float> cos_swa_;  // [n_batch][n_rot/2] rope_swa_'s tables, when there is one
  std::vector<float> sin_swa_;
  std::vector<float> key_mass_;  // [positions attended] for a selector that watches attention mass
  std::vector<std::vector<float>> row_mass_;  // [pool thread]: key_mass_ of rows attended side by side
  std::vector<std::vector<TokenRange>> selected_;  // [row]: a batched decode step's selections in one layer
  std::vector<float> spec_xn_;   // [n_embd] the pipeline's speculation: the next layer's norm of x
  std::vector<float> spec_q_;    // [n_head][head_dim] and its query
  // The layered prefill's working set, sized per prompt: the residual stream of a segment's rows
  // and one layer's K and V of them, in the store's dtype; in a segment that attends KV in the
  // store, also their queries and attention outputs.
  std::vector<float> seg_x_;     // [segment][n_embd]
  std::vector<uint8_t> seg_k_;   // [segment][n_head_kv][head_dim]
  std::vector<uint8_t> seg_v_;
  std::vector<float> seg_q_;     // [segment][n_head][head_dim]
  std::vector<float> seg_attn_;  // [segment][n_head][head_dim]
  PrefillStats prefill_stats_;
  std::atomic<int64_t> decode_positions_attended_{0};  // rows attend side by side on pool threads
  PipelineChoice pipeline_choice_;  // options_.pipeline_auto: which decode steps run pipelined
};

}  // namespace leoam
