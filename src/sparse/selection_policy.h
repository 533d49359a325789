// Selection policies: at each decode step, for each layer, which far-away KV the query attends
// to. A policy sees the query of every query head and the layer's chunk catalog (chunk ranges,
// tiers, abstracts; kv/kv_catalog.h), never file descriptors, and returns token ranges within a
// budget. SparseAttention (sparse_attention.h) adds the sink and the recent window, which are
// always attended, and the store gathers the result; attention is then exact over that set:
//
//   [0 .. n_sink) [ ...... far: the policy picks up to budget_tokens ...... ) [n - n_recent .. n)
//
// The policies are listed in policy_registry.h and described in docs/policies.md. Policies that
// learn from the forward pass say so in needs() (model/attention_selector.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange
#include "kv/kv_catalog.h"
#include "model/attention_selector.h"  // SelectorNeeds
#include "sparse/chunk_bound.h"
#include "sparse/policy_memory.h"

namespace leoam {
class Model;
class ThreadPool;
}

namespace leoam::sparse {

struct SelectionQuery {
  int layer = 0;
  int64_t step = 0;       // decode steps since the prompt: 0 for the first generated token
  int64_t n_tokens = 0;   // the query sees positions [0, n_tokens) of the layer
  const float* q = nullptr;  // [n_head][head_dim], post-RoPE
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;     // applied to q.k before the softmax
  float softcap = 0.0f;   // > 0: the scaled score s becomes softcap * tanh(s / softcap) (gemma2)
  TokenRange far;         // the positions the policy chooses from: between the sink and the recent window
  int64_t budget_tokens = 0;  // far tokens the policy may pick at most (whole chunks may round down)
  ThreadPool* pool = nullptr;  // threads the policy may run its loops on (idle during select); null: none
  bool explain = false;        // fill Selection::ranking (selection_explainer.h), where the policy ranks units
};

// A unit (chunk or leaf) a policy ranked, with its score: higher ranks first.
struct ScoredUnit {
  TokenRange range;  // its far tokens
  float score = 0.0f;
  float mass = 0.0f;  // the oracle's: the unit's exact attention mass, a mean over the query heads
};

struct Selection {
  std::vector<TokenRange> ranges;  // sorted, disjoint, inside query.far
  bool desert = false;             // the policy judged that no far token matters
  int64_t n_chunks_scored = 0;     // chunks whose bounds were computed: quest the far chunks, leoam
                                   // every chunk (or leaf) of [0, n_tokens)
  int64_t n_splits = 0;            // leoam's adaptive chunks split and merged after this selection
  int64_t n_merges = 0;
  std::vector<ScoredUnit> ranking;  // with SelectionQuery::explain: every far unit scored (leoam, oracle)
};

// How leoam combines the mass bounds of the query heads of one GQA group: the largest, or the
// summed mass (leoam_policy.cpp).
enum class GroupCombine : uint8_t { kMax, kSum };

struct PolicyOptions {
  GroupCombine group_combine = GroupCombine::kSum;  // leoam: how a GQA group's mass bounds combine
  bool desert = true;                               // leoam: detect attention deserts
  // A desert: for every query head, the far chunks' bounded attention mass is below this
  // fraction of the near window's lower-bounded mass.
  double desert_mass = 0.01;
  // leoam: the adaptive chunk tree (IAKM); without it, leoam ranks the store's chunks as they are.
  bool adaptive = true;
  // Chunk scoring from abstracts wherever they live (LKA). Without it, a disk chunk's abstract
  // is recomputed from its KV, read in full (KvCatalog::load_abstracts, AbstractSource::kKv):
  // the ablation that shows what LKA saves.
  bool lka = true;
  // leoam: tighten the chunk bounds with the abstracts' key sign sketch (sign_bound.h), where the
  // catalog has one; without it, the min/max box alone (as Quest scores).
  bool key_signs = true;
  // leoam: rank the fine layers' chunks by their rows' midpoint estimates (sign_bound.h), where
  // their boxes are a store chunk's, with signs; their upper bounds still decide deserts and
  // skew. Without it (the default), by the bounds.
  bool fine_midpoint = false;
  // leoam: in the fine layers, where their boxes are a store chunk's, with signs, a leaf's value
  // is its rows' summed bounded mass (the log-mean-exp of their bounds) instead of its best
  // row's bound (leoam_policy.cpp).
  bool row_mass = true;
  // infinigen: the model whose query projections it speculates with (required for infinigen);
  // oracle: the model whose keys it keeps (required).
  const Model* model = nullptr;
  // infinigen: the fraction of each head's columns kept in the partial projection.
  double partial_ratio = 0.3;
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Picks far ranges for one query. Fails on catalog errors (an abstract that cannot be read).
  virtual Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) = 0;
  // What select would pick for `query` (the prompt's last row: a forecast of the first decode
  // step), without learning from it: no later select picks differently for the call. nullopt
  // where the policy cannot say without side effects or without the decode's observations (the
  // default: h2o evicts as it selects, infinigen speculates from a decode step's layer input).
  virtual Result<std::optional<Selection>> predict(const SelectionQuery& /*query*/, KvCatalog& /*catalog*/) {
    return std::optional<Selection>();
  }

  // Learning from the forward pass (model/attention_selector.h): what the policy watches, and the
  // observations. A new sequence (a decode position that goes back, or the context cut below what
  // the policy has seen: AttentionSelector::truncate) calls reset() first.
  virtual SelectorNeeds needs() const { return {}; }
  virtual void reset() {}
  [[nodiscard]] virtual Status observe_keys(int /*layer*/, int64_t /*pos0*/, int64_t /*n*/, const float* /*k*/) {
    return Status::ok();
  }
  [[nodiscard]] virtual Status observe_layer_input(int /*layer*/, int64_t /*pos*/, const float* /*x*/) {
    return Status::ok();
  }
  virtual void observe_attention(int /*layer*/, int64_t /*pos*/, std::span<const TokenRange> /*ranges*/,
                                 std::span<const float> /*mass*/) {}
  // The store holds positions [0, n_tokens) of `layer` after a prompt batch (SelectorNeeds::stored);
  // budget_tokens is the far budget a query at position n_tokens - 1 would get.
  [[nodiscard]] virtual Status observe_stored(int /*layer*/, int64_t /*n_tokens*/, int64_t /*budget_tokens*/,
                                              KvCatalog& /*catalog*/) {
    return Status::ok();
  }

  // The bytes the policy holds about the KV (trees, abstracts and sign sketches read, scores,
  // partial keys): now, and the most at once so far, a step's working copies included. RAM the
  // policy memory budget covers (sparse_attention.h).
  virtual PolicyMemory memory() const { return {}; }
};

// The catalog of a store without chunks (the in-memory cache): none, and no abstracts to load;
// enough for the policies that read none (full, streaming, h2o, infinigen).
KvCatalog& no_chunk_catalog();

// The policy called `name` (policy_registry.h); fails, naming the known policies, for an unknown one.
Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(std::string_view name, const PolicyOptions& options);

}  // namespace leoam::sparse
