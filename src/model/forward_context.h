// The state of one sequence being evaluated by a model: its KV cache, scratch buffers and
// position. eval() runs a batch of tokens (a whole prompt in one call, or one token when
// decoding) through the forward pass and returns logits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_dtype.h"  // KvDtype

namespace leoam {

class Trace;

class AttentionSelector;
class Model;
class KvCache;

struct ForwardOptions {
  int n_ctx = 0;        // context length in tokens; 0 = the model's training context
  int n_threads = 0;    // 0 = ThreadPool::default_thread_count()
  int n_batch = 512;    // prompt tokens per forward chunk during prefill
  KvDtype kv_dtype = KvDtype::kF16;
  // Called after each prefill chunk with (tokens done, tokens total); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
  // Polled after each prefill chunk but the last (in the layered prefill: after each layer of a
  // segment, and after each segment but the last); true stops eval there (see eval). May be empty.
  std::function<bool()> should_stop;
  // Chooses the positions each decoded token attends to, per layer (sparse attention); null:
  // every position. Not owned; must outlive the context.
  AttentionSelector* selector = nullptr;
  // The layered prefill's working set; 0: a prompt runs batch by batch through every layer. With
  // a working set, a prompt of more than one batch runs layer by layer, in segments of as many
  // batches as the working set holds, one at the least (the residual stream of the segment's rows
  // and one layer's KV of them; prefill_stats() says what it held): each layer's prompt KV is
  // appended to the store and attended from the working set, so a store that keeps its KV on
  // disk never reads the prompt's back. A segment attends
  // to the positions before it through the store. Logits are those of the batch order (bit for
  // bit where the segment starts at position 0, as over an in-memory cache).
  uint64_t prefill_working_set_bytes = 0;
  // The decode pipeline (LeoAM's DTP): while a decode step computes layer l, the selector's
  // forecast for layer l + 1 (its query speculated from layer l's input through layer l + 1's
  // attention norm and query projection, as InfiniGen does) has the store read that layer's
  // chunks ahead (KvCache::read_ahead). Layer l + 1 still selects with its own query, so the
  // tokens are those of an unpipelined decode; what the forecast missed is read then. Without a
  // selector (full attention) there is nothing to forecast: layer l + 1's whole past is read
  // ahead while layer l attends and computes, FlexGen's schedule.
  bool pipeline = false;
  // With pipeline: each decode step runs pipelined or not as PipelineChoice picks from the step
  // times measured (`--pipeline auto`): the pipeline where it pays, not where it costs.
  bool pipeline_auto = false;
  // A prompt batch that continues a stored past (a prompt after a cached prefix, a question about
  // a document) attends, in every layer, what the selector picks for its last row
  // (AttentionSelector::select_continuation) and its own rows, not every stored position: it
  // reads the past selectively, as decode does, and its logits are no longer those of a dense
  // prefill. A prompt of more than one batch with a working set (the layered prefill) stays dense.
  bool sparse_continuation = false;
  // A benchmark's synthetic query stream (`bench kv --workload moving`, moving_targets.h): called
  // for each decoded row and layer with the row's store and its query as attention takes it
  // ([n_head][head_dim], post-RoPE and scaled), before the layer's selection, which it may
  // change; the decode pipeline's speculated query of the next layer passes through it too.
  // Empty in every real run.
  std::function<void(const KvCache& kv, int layer, float* q)> decode_query_hook;
  // Where the decode steps' per-layer spans go (core/trace.h); null: none. Not owned.
  Trace* trace = nullptr;
};

// What the layered prefill did (ForwardOptions::prefill_working_set_bytes), for the reports.
struct PrefillStats {
  uint64_t working_set_bytes = 0;  // the most its buffers held at once
  int64_t n_segments = 0;          // segments run, over every eval
  int64_t n_layered_tokens = 0;    // prompt tokens that ran layer by layer
};

// A sequence of the caller's: its own KV store (shaped as the context's: see create) and its own
// selector (null: every position attended). The context's own store and options.selector are one.
struct DecodeSequence {
  KvCache* kv = nullptr;
  AttentionSelector* selector = nullptr;
};

// One row of a batched decode step: `token` appended to `seq` at position seq.kv->n_tokens().
struct BatchToken {
  int32_t token = 0;
  DecodeSequence seq;
};

class ForwardContext {
 public:
  // `model` must outlive the context. Fails when n_ctx exceeds what memory allows.
  static Result<std::unique_ptr<ForwardContext>> create(const Model& model, const ForwardOptions& options);
  // The same over a KV store of the caller's choosing, shaped {n_layer, n_head_kv, head_dim,
  // n_ctx} (see kv/kv_cache.h); its n_ctx is the context size, options.n_ctx and kv_dtype are unused.
  static Result<std::unique_ptr<ForwardContext>> create(const Model& model, const ForwardOptions& options,
                                                        std::unique_ptr<KvCache> kv_cache);
  virtual ~ForwardContext() = default;

  // Evaluates `tokens` at positions [n_past(), n_past() + tokens.size()) and appends their KV.
  // logits is resized to tokens.size() * n_vocab when all_logits, else to n_vocab (the last
  // position's). Fails, changing nothing, when a token id is out of range or the tokens do not
  // fit in the context ("... exceeds the context size of N tokens", Setting::kContextSize). When options.should_stop
  // says true between two prefill chunks (layered: segments, or layers of a segment, whose KV then
  // goes), fails with kCancelled and keeps the KV of the chunks (segments) done: n_past() says how
  // far it got, and the logits are unset. A failure (or stop) that cannot go back so far because a
  // sliding-window layer's store dropped what that needs empties the context, and says so.
  virtual Status eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) = 0;
  // The same into a sequence of the caller's instead of the context's own store (a prompt of one
  // of the sequences a batched decode then steps together).
  // (A context that keeps one sequence only, as a test's fake, says so: kUnsupported; so does
  // decode_batch.)
  virtual Status eval_sequence(const DecodeSequence& /*seq*/, std::span<const int32_t> /*tokens*/,
                               bool /*all_logits*/, std::vector<float>& /*logits*/) {
    return unsupported("this forward pass keeps one sequence");
  }
  // One decode step of several sequences in one pass over the weights: row i evaluates
  // batch[i].token at the next position of its sequence, attending to that sequence's KV through
  // its selector. logits is resized to [batch.size()][n_vocab]. Every sequence's store must
  // differ, and batch.size() be at most the context's batch size (ForwardOptions::n_batch).
  // Fails, changing no sequence, on a bad token, a full context or a bad batch; on an error in
  // the middle, every sequence is cut back to where it was.
  virtual Status decode_batch(std::span<const BatchToken> /*batch*/, std::vector<float>& /*logits*/) {
    return unsupported("this forward pass decodes one sequence at a time");
  }

  virtual int64_t n_past() const = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int32_t n_vocab() const = 0;
  virtual int n_threads() const = 0;
  virtual PrefillStats prefill_stats() const { return {}; }
  // The key positions that decode rows have attended so far, summed over rows and layers (every
  // visible one without a selector): measured where attention runs, whatever the policy.
  virtual int64_t decode_positions_attended() const { return 0; }
  // Forgets every position: the next eval starts at position 0.
  virtual void reset() = 0;
};

}  // namespace leoam
