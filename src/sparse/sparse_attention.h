// SparseAttention: the AttentionSelector (model/attention_selector.h) that runs a selection policy
// per layer and decode step. For the query at position pos (it sees n = pos + 1 tokens):
//
//   sink   = [0, min(n_sink, n))                  always attended
//   recent = [max(sink end, n - n_recent), n)      always attended (the query's own token last)
//   far    = between them                          the policy picks up to the far budget
//
// The budget is of the far tokens (a fraction in (0, 1] or a whole count > 1; per layer:
// budget_schedule.h), at least one when there is one; a budget that covers them all selects all
// without asking the policy. Each far chunk picked raises its importance in the store by one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_catalog.h"
#include "model/attention_selector.h"
#include "sparse/selection_explainer.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {

struct SparseAttentionOptions {
  std::string policy = "full";
  double budget = 0.1;                  // of the far tokens: a fraction in (0, 1], or a whole count (> 1)
  std::map<int, double> layer_budgets;  // per-layer overrides, same units
  int n_sink = 4;
  int n_recent = 64;
  PolicyOptions policy_options;
  // RAM for what the policy keeps about the KV (memory()); 0: no limit. Past it, the call that
  // went past fails (kResourceExhausted).
  uint64_t memory_budget_bytes = 0;
  // With `out`: the policy's selections for positions `target` explained beside the oracle's at
  // the first n_steps decode steps (selection_explainer.h), appended to *out.
  struct Explain {
    TokenRange target;
    int64_t n_steps = 0;
    std::vector<LayerExplanation>* out = nullptr;
  } explain;
};

struct AttentionShape {
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;  // applied to q.k
  float softcap = 0.0f;  // > 0: scores capped as attention caps them (gemma2)
};

// Per layer: what the queries attended and saw, and what the policy scored.
struct LayerSparseStats {
  int64_t n_queries = 0;
  int64_t n_attended = 0;  // tokens attended, summed over queries
  int64_t n_visible = 0;   // tokens the queries could see, summed
  int64_t n_deserts = 0;
  int64_t n_chunks_scored = 0;
  int64_t n_splits = 0;  // leoam's adaptive chunks (IAKM)
  int64_t n_merges = 0;

  // The share of the visible tokens attended; 1 where no query saw any.
  double attended_share() const {
    return n_visible > 0 ? static_cast<double>(n_attended) / static_cast<double>(n_visible) : 1.0;
  }
};

class SparseAttention final : public AttentionSelector {
 public:
  // `catalog` (the chunked store) must outlive this; it may be null for policies that need no
  // abstracts (full, streaming). Fails for an unknown policy, a budget that is not a finite
  // fraction in (0, 1] or a whole count > 1, a layer budget for a layer the model lacks, or a
  // policy that needs a catalog without one.
  static Result<std::unique_ptr<SparseAttention>> create(const SparseAttentionOptions& options, KvCatalog* catalog,
                                                         const AttentionShape& shape);

  Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float* q, ThreadPool& pool) override;
  // The policy's forecast (SelectionPolicy::predict) for a query at pos over the n_stored
  // positions held: its far ranges; with keep, an eviction hint too (each far chunk in them counts
  // as picked once). Not a decode step: no stats, and the steps still count from the first
  // decoded position.
  Result<std::vector<TokenRange>> forecast(int layer, int64_t pos, int64_t n_stored, const float* q, ThreadPool& pool,
                                           bool keep) override;
  // The sink, the policy's forecast for the last row over the far tokens before pos0, and
  // everything from the far window's end on (the recent window and the rows themselves).
  Result<std::vector<TokenRange>> select_continuation(int layer, int64_t pos0, int64_t n, const float* q_last,
                                                      ThreadPool& pool) override;
  // The policy's (SelectionPolicy::needs and observe_*), passed through.
  SelectorNeeds needs() const override { return policy_->needs(); }
  Status observe_keys(int layer, int64_t pos0, int64_t n, const float* k) override;
  Status observe_stored(int layer, int64_t n_tokens) override;
  Status observe_layer_input(int layer, int64_t pos, const float* x) override;
  void observe_attention(int layer, int64_t pos, std::span<const TokenRange> ranges,
                         std::span<const float> mass) override {
    policy_->observe_attention(layer, pos, ranges, mass);
  }
  // A cut below a position the policy has seen (stored or decoded) starts the sequence over
  // (policy reset): its state (leoam's trees, h2o's scores) may hold keys of the positions that
  // were rolled back.
  void truncate(int64_t n_tokens) override;

  std::string_view policy_name() const { return policy_->name(); }
  const std::vector<LayerSparseStats>& stats() const { return stats_; }
  // What the policy holds about the KV (SelectionPolicy::memory): now, and the most at once so
  // far (kept across resets).
  PolicyMemory memory() const;
  // The per-layer stats summed over the layers.
  LayerSparseStats total() const;
  // "policy leoam, budget 10%: attended 9.8% of the visible tokens; deserts 12.0% of layer steps;
  // per layer: ..." (for --kv-stats).
  std::string stats_text() const;

 private:
  SparseAttention(const SparseAttentionOptions& options, KvCatalog* catalog, const AttentionShape& shape,
                  std::unique_ptr<SelectionPolicy> policy);
  // How a query that sees positions [0, n) cuts them (the header comment).
  struct Window {
    TokenRange sink, recent, far;
  };
  Window window(int64_t n) const;
  // The policy's query at position pos of `layer` over `far`, seeing n_tokens positions (step
  // counted from the first decode).
  SelectionQuery make_query(int layer, int64_t pos, int64_t n_tokens, const float* q, TokenRange far,
                            ThreadPool& pool) const;
  // The policy's prediction (SelectionPolicy::predict: nothing learned) for that query; nullopt
  // where there is nothing to choose: no far tokens, no store, a budget that holds all of far.
  Result<std::optional<Selection>> predict(int layer, int64_t pos, int64_t n_stored, const float* q, TokenRange far,
                                           ThreadPool& pool);
  // The far tokens the policy may pick, of n_far.
  int64_t far_budget(int layer, int64_t n_far) const;
  // Raises each picked far chunk's importance in the store by one (KvCatalog::raise_importance):
  // the times it has been picked, kept in the store's entry for the chunk, so chunks that keep
  // being chosen stay closer to compute (H2O's heavy hitters, at chunk grain).
  void hint_importance(int layer, std::span<const TokenRange> ranges, KvCatalog& catalog);
  // Notes the decode position; a position that goes back starts a new sequence (policy reset).
  void begin_position(int64_t pos);
  // Forgets the sequence: the policy's state, the positions seen.
  void reset_sequence();
  // Notes the memory held now in the peak; fails when it passes memory_budget_bytes.
  Status check_memory();

  SparseAttentionOptions options_;
  KvCatalog* catalog_;
  AttentionShape shape_;
  std::unique_ptr<SelectionPolicy> policy_;
  std::vector<LayerSparseStats> stats_;
  int64_t first_decode_pos_ = -1;  // the position of the first decoded token; steps count from it
  int64_t last_pos_ = -1;
  int64_t seen_end_ = 0;  // one past the last position the policy has seen, stored or decoded
  uint64_t peak_bytes_ = 0;  // memory()'s peak
};

}  // namespace leoam::sparse
