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
#include "kv_options.h"
#include "leoam/session.h"

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

// The known policy names (sparse::policies()), for --policy's check.
std::vector<std::string> policy_names();

// The attention the flags describe for a model of n_layer layers (leoam/session.h). Fails, naming
// the flag, on a bad --budget, or a --layer-budget that does not parse, names a layer the model
// lacks, or holds a bad budget.
Result<AttentionOptions> attention_options(const AttentionCliOptions& options, int n_layer);
// The one line that tables print to say how every policy's budget applies, e.g. "budget rule:
// every sparse policy attends the sink (4 tokens), the recent window (64) and, of the far tokens
// between them, the budget B, ...; a fraction B is max(B, 0.5) in the first round(n_layer/16) layers (layers 0-1
// of 32 here)".
std::string budget_rule_text(const AttentionCliOptions& options, const KvCliOptions& kv_options, int n_layer);

}  // namespace leoam::cli
