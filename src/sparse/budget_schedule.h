// The per-layer budgets every sparse policy runs under, so that policies compared at one budget
// attend the same share of the far tokens in every layer (a budget counts far tokens only:
// sparse_attention.h). The default schedule of a fractional budget b: max(b, 0.5) in the first
// round(n_layer / 16) layers, b in the others. That is LeoAM's 50% in the first two of
// Llama-2-7B's 32 layers, whose attention is flat; a model of 7 layers or fewer has no such layer.
// A token-count budget (b > 1) is the same in every layer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace leoam::sparse {

// Empty when `budget` is a finite fraction in (0, 1] or a whole count > 1; else why not, as the
// end of a sentence that names it ("must be a positive finite number").
std::string budget_error(double budget);

// The far tokens a budget reads of n_far: a fraction's share rounded up, or the whole count, at
// most n_far. The one rule for the selection, the store's grain and the CLI's chunk.
int64_t far_budget_tokens(double budget, int64_t n_far);

// The first layers that keep at least half of the far tokens under a fractional budget.
int n_dense_layers(int n_layer);

// The default schedule's per-layer overrides of `budget` (SparseAttentionOptions::layer_budgets):
// {layer: max(budget, 0.5)} for the dense layers when budget <= 1, else empty.
std::map<int, double> default_layer_budgets(double budget, int n_layer);

}  // namespace leoam::sparse
