// AttentionSelector: the seam through which sparse attention policies choose, per layer and decode
// step, which positions a query attends to. The forward pass asks it once per layer when it
// decodes one token; without a selector (or in prefill) attention covers every position.
// A selector may also watch the forward pass, for the policies that learn from it (needs()).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange

namespace leoam {

class ThreadPool;

// What a selector watches of the forward pass.
struct SelectorNeeds {
  // Every batch of keys the store receives, prefill included (InfiniGen's partial key cache).
  bool keys = false;
  // The same for the values (a fidelity probe's reference attention).
  bool values = false;
  // The residual stream entering each layer of a decode step, before the layer's selection
  // (InfiniGen speculates the next layer's query from it).
  bool layer_inputs = false;
  // After each decode attention, how much softmax mass each attended position got, summed over
  // the query heads (H2O's accumulated attention).
  bool attention_mass = false;
  // After each prompt batch is appended to a layer, how many positions the store holds: leoam
  // builds its chunk trees from the abstracts as the KV is written, while they are still in
  // memory, not by reading them back at the first step.
  bool stored = false;
};

class AttentionSelector {
 public:
  virtual ~AttentionSelector() = default;
  // The positions of `layer` that the query at position `pos` attends to: sorted, disjoint ranges
  // inside [0, pos], always including pos itself. q: [n_head][head_dim], post-RoPE. pool: the
  // forward pass's threads, idle during the call, for the selector's own parallel loops.
  virtual Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float* q, ThreadPool& pool) = 0;

  virtual SelectorNeeds needs() const { return {}; }
  // The post-RoPE keys appended to `layer` at positions [pos0, pos0 + n): [n][n_head_kv][head_dim].
  [[nodiscard]] virtual Status observe_keys(int /*layer*/, int64_t /*pos0*/, int64_t /*n*/, const float* /*k*/) {
    return Status::ok();
  }
  // The values appended with them, in the same layout; called after observe_keys.
  [[nodiscard]] virtual Status observe_values(int /*layer*/, int64_t /*pos0*/, int64_t /*n*/, const float* /*v*/) {
    return Status::ok();
  }
  // The store now holds positions [0, n_tokens) of `layer`: called after each append of a prompt
  // batch (not of a decoded token, which select() sees).
  [[nodiscard]] virtual Status observe_stored(int /*layer*/, int64_t /*n_tokens*/) { return Status::ok(); }
  // The positions of `layer` that the selector expects a query at position `pos` to read
  // (q: [n_head][head_dim], as select gets it), when the layer holds n_stored positions (pos + 1
  // or pos: the query's own KV may not be stored yet), so that the store can bring them close to
  // compute ahead of the read. Empty when it cannot tell. Two uses:
  //   keep   the prompt's last query, once the prompt's KV of the layer is stored: a forecast of
  //          the first decode step, whose picks the store should keep (they become more important
  //          in its eviction order) until then, past the prompt's later layers;
  //   !keep  a decode step's query speculated one layer ahead (the decode pipeline): what the
  //          store keeps must not change, so that a pipelined decode computes exactly as an
  //          unpipelined one.
  // Either way the selector must not learn from the call in a way that changes a later select.
  virtual Result<std::vector<TokenRange>> forecast(int /*layer*/, int64_t /*pos*/, int64_t /*n_stored*/,
                                                   const float* /*q*/, ThreadPool& /*pool*/, bool /*keep*/) {
    return std::vector<TokenRange>();
  }
  // The positions that the rows [pos0, pos0 + n) of a prompt continuing a stored past (pos0 > 0)
  // attend when they need not see all of it (ForwardOptions::sparse_continuation): chosen once for
  // every row from the last row's query (q_last: [n_head][head_dim]), as select() would choose for
  // it, and holding [pos0, pos0 + n) whole. Sorted, disjoint, inside [0, pos0 + n). Empty: every
  // position (the default, and where the selector cannot choose). Must not learn from the call.
  virtual Result<std::vector<TokenRange>> select_continuation(int /*layer*/, int64_t /*pos0*/, int64_t /*n*/,
                                                              const float* /*q_last*/, ThreadPool& /*pool*/) {
    return std::vector<TokenRange>();
  }
  // The residual stream entering `layer` for the decoded token at `pos`: [n_embd], before the
  // layer's attention norm. Called before select(layer, pos, ...).
  [[nodiscard]] virtual Status observe_layer_input(int /*layer*/, int64_t /*pos*/, const float* /*x*/) {
    return Status::ok();
  }
  // After the decode attention of `layer` at `pos` over `ranges` (what select returned):
  // mass[i] = the softmax probability of the i-th attended position (ranges in order), summed
  // over the query heads; so the mass sums to n_head.
  virtual void observe_attention(int /*layer*/, int64_t /*pos*/, std::span<const TokenRange> /*ranges*/,
                                 std::span<const float> /*mass*/) {}
  // The context was cut back to positions [0, n_tokens) (a failed batch rolled back): forget what
  // was learned from the positions past it.
  virtual void truncate(int64_t /*n_tokens*/) {}
};

}  // namespace leoam
