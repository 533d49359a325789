// The sparse attention flags of the subcommands that run a model: --policy, --budget,
// --layer-budget, --group-combine, --no-desert, --no-adaptive, --no-key-signs, --no-lka, --partial-ratio. The sink and recent window are --kv-sink and
// --kv-recent (kv_options.h): what the store pins on the device is what every query attends to.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv_options.h"
#include "sparse/sparse_attention.h"

namespace leoam {
class Model;
}

namespace leoam::cli {

struct AttentionCliOptions {
  std::string policy = "full";
  double budget = 0.1;
  std::string layer_budgets;  // "0=0.5,1=0.5"; empty: --budget's default schedule, alike for every policy
  std::string group_combine = "sum";
  bool no_desert = false;
  bool no_adaptive = false;
  bool no_lka = false;
  bool no_key_signs = false;
  bool no_row_mass = false;
  bool fine_midpoint = false;
  double partial_ratio = 0.3;
};

void add_attention_options(CLI::App& cmd, AttentionCliOptions& options);

// What the policy needs of the KV store (sparse/policy_registry.h): chunks, when it scores chunk
// abstracts (the tiered store); resident abstracts kept, when it scores every far chunk at every
// step; the grain of the disk abstract records.
KvStoreNeeds kv_store_needs(const AttentionCliOptions& options);
// The known policy names (sparse::policies()), for --policy's check.
std::vector<std::string> policy_names();

// The per-layer budgets (SparseAttentionOptions::layer_budgets) of every sparse policy alike:
// --layer-budget as given, else the default schedule of --budget (sparse/budget_schedule.h).
// Fails on a --layer-budget that does not parse, names a layer the model lacks, or holds a bad
// budget.
Result<std::map<int, double>> layer_budgets(const AttentionCliOptions& options, int n_layer);
// The one line that tables print to say how every policy's budget applies, e.g. "budget rule:
// every sparse policy attends the sink (4 tokens), the recent window (64) and, of the far tokens
// between them, the budget B, ...; a fraction B is max(B, 0.5) in the first round(n_layer/16) layers (layers 0-1
// of 32 here)".
std::string budget_rule_text(const AttentionCliOptions& options, const KvCliOptions& kv_options, int n_layer);

// The store's chunk size when --kv-chunk is not given, for a context of n_ctx tokens: the
// policy's (sparse::PolicyInfo::chunk_tokens) at its far budget over n_ctx outside the sink and
// the recent window.
int default_chunk_tokens(const AttentionCliOptions& options, const KvCliOptions& kv_options, int64_t n_ctx);

// The selector for `kv`, or nullptr for --policy full (attention over every position, no
// selection cost), its selections explained where `explain` says (eval --explain). Fails on a bad
// --budget or --layer-budget, or a policy the store cannot serve.
Result<std::unique_ptr<sparse::SparseAttention>> make_sparse_attention(
    const AttentionCliOptions& options, const KvCliOptions& kv_options, const Model& model, KvCache& kv,
    const sparse::SparseAttentionOptions::Explain& explain = {});

}  // namespace leoam::cli
