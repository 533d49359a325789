// The sparse attention flags of the subcommands that run a model: --policy, --budget,
// --layer-budget, --group-combine, --no-desert, --no-adaptive, --no-key-signs, --no-lka, --partial-ratio. The sink and recent window are --kv-sink and
// --kv-recent (kv_options.h): what the store pins on the device is what every query attends to.
#pragma once

#include <memory>
#include <string>

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
  std::string layer_budgets;  // "0=0.5,1=0.5"; empty: the policy's default
  std::string group_combine = "sum";
  bool no_desert = false;
  bool no_adaptive = false;
  bool no_lka = false;
  bool no_key_signs = false;
  double partial_ratio = 0.3;
};

void add_attention_options(CLI::App& cmd, AttentionCliOptions& options);

// Whether the policy scores chunk abstracts (and so needs the tiered store).
bool policy_needs_catalog(const AttentionCliOptions& options);

// The store's chunk size when --kv-chunk is not given: 8 for leoam's adaptive chunk tree (its
// leaves split down to one store chunk), 16 for quest (its page size), else 64.
int default_chunk_tokens(const AttentionCliOptions& options);

// The selector for `kv`, or nullptr for --policy full (attention over every position, no
// selection cost). Fails on a bad --layer-budget or a policy the store cannot serve.
Result<std::unique_ptr<sparse::SparseAttention>> make_sparse_attention(const AttentionCliOptions& options,
                                                                       const KvCliOptions& kv_options,
                                                                       const Model& model, KvCache& kv);

}  // namespace leoam::cli
