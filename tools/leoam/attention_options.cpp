#include "attention_options.h"

#include <algorithm>
#include <sstream>

#include "cli_common.h"
#include "sparse/budget_schedule.h"
#include "sparse/policy_registry.h"

namespace leoam::cli {
namespace {

// The budget's units and the default schedule (sparse/budget_schedule.h), as --help and the
// budget rule line say them.
constexpr const char* kBudgetUnits = "the budget B, a fraction of them (B <= 1) or a whole count (B > 1)";
constexpr const char* kDenseRule = "max(B, 0.5) in the first round(n_layer/16) layers";

// "0=0.5,1=0.5" -> {0: 0.5, 1: 0.5}, each layer in [0, n_layer) and each budget valid
// (sparse::budget_error).
Result<std::map<int, double>> parse_layer_budgets(const std::string& text, int n_layer) {
  std::map<int, double> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    int layer = 0;
    double budget = 0.0;
    try {
      size_t used_layer = 0, used_budget = 0;
      if (eq == std::string::npos) throw std::invalid_argument("no '='");
      layer = std::stoi(item.substr(0, eq), &used_layer);
      budget = std::stod(item.substr(eq + 1), &used_budget);
      if (used_layer != eq || used_budget != item.size() - eq - 1) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      return invalid_argument("--layer-budget: '" + item + "' is not LAYER=BUDGET (e.g. 0=0.5,1=0.5)");
    }
    if (layer < 0 || layer >= n_layer) {
      return invalid_argument("--layer-budget: '" + item + "': the model has layers 0 to " +
                              std::to_string(n_layer - 1));
    }
    if (const std::string why = sparse::budget_error(budget); !why.empty()) {
      return invalid_argument("--layer-budget: '" + item + "': the budget " + why);
    }
    out[layer] = budget;
  }
  return out;
}

}  // namespace

void add_attention_options(CLI::App& cmd, AttentionCliOptions& o) {
  const std::string group = "Sparse attention";
  cmd.add_option("--policy", o.policy, std::string("which KV each decoded token attends to: ") + sparse::policy_names())
      ->capture_default_str()
      ->check(CLI::IsMember(policy_names()))
      ->group(group);
  cmd.add_option("--budget", o.budget,
                 std::string("far tokens attended per layer and step: ") + kBudgetUnits +
                     "; quest, leoam and oracle take whole chunks, at least the best one")
      ->capture_default_str()
      ->check(positive<double>())
      ->group(group);
  cmd.add_option("--layer-budget", o.layer_budgets,
                 std::string("per-layer budgets for every policy, LAYER=BUDGET,... in --budget's units (default "
                             "with a fractional --budget B: ") +
                     kDenseRule + ")")
      ->group(group);
  cmd.add_option("--group-combine", o.group_combine, "leoam: how a GQA group's chunk bounds combine: max or sum")
      ->capture_default_str()
      ->check(CLI::IsMember({"max", "sum"}))
      ->group(group);
  cmd.add_flag("--no-desert", o.no_desert, "leoam: do not skip far KV in attention deserts")->group(group);
  cmd.add_flag("--no-adaptive", o.no_adaptive,
               "leoam: rank the store's fixed chunks instead of an adaptive chunk tree (IAKM)")
      ->group(group);
  cmd.add_flag("--no-key-signs", o.no_key_signs,
               "leoam: rank chunks by their min/max box alone, without the key sign sketch of the abstracts")
      ->group(group);
  cmd.add_flag("--no-row-mass", o.no_row_mass,
               "leoam: score the first two layers' chunks by their best row's bound instead of their rows' summed "
               "mass bound (docs/policies.md)")
      ->group(group);
  cmd.add_flag("--fine-midpoint", o.fine_midpoint,
               "leoam: rank the first two layers' chunks by their keys' midpoint estimates instead of their upper "
               "bounds: lower perplexity, fewer needles found (docs/policies.md)")
      ->group(group);
  cmd.add_flag("--no-lka", o.no_lka,
               "leoam, quest: score disk chunks from their KV, read in full, instead of their abstracts (LKA)")
      ->group(group);
  cmd.add_option("--partial-ratio", o.partial_ratio,
                 "infinigen: the fraction of each head's columns in the partial query/key projection")
      ->capture_default_str()
      ->check(in_range(0.01, 1.0))
      ->group(group);
}

namespace {

// The policy's options as the flags set them (PolicyOptions::model apart).
sparse::PolicyOptions policy_options(const AttentionCliOptions& o) {
  sparse::PolicyOptions p;
  p.group_combine = o.group_combine == "sum" ? sparse::GroupCombine::kSum : sparse::GroupCombine::kMax;
  p.desert = !o.no_desert;
  p.adaptive = !o.no_adaptive;
  p.lka = !o.no_lka;
  p.key_signs = !o.no_key_signs;
  p.fine_midpoint = o.fine_midpoint;
  p.row_mass = !o.no_row_mass;
  p.partial_ratio = o.partial_ratio;
  return p;
}

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const sparse::PolicyInfo& p : sparse::policies()) names.emplace_back(p.name);
  return names;
}

Result<AttentionOptions> attention_options(const AttentionCliOptions& o, int n_layer) {
  if (const std::string why = sparse::budget_error(o.budget); !why.empty()) {
    std::ostringstream flag;
    flag << "--budget " << o.budget << ": ";  // %g: "--budget inf: "
    return invalid_argument(flag.str() + why);
  }
  AttentionOptions a;
  a.policy = o.policy;
  a.budget = o.budget;
  if (!o.layer_budgets.empty()) {
    LEOAM_ASSIGN_OR_RETURN(a.layer_budgets, parse_layer_budgets(o.layer_budgets, n_layer));
  }
  a.policy_options = policy_options(o);
  return a;
}

std::string budget_rule_text(const AttentionCliOptions& o, const KvCliOptions& kv_options, int n_layer) {
  std::string out = "budget rule: every sparse policy attends the sink (" + std::to_string(kv_options.n_sink) +
                    " tokens), the recent window (" + std::to_string(kv_options.n_recent) +
                    ") and, of the far tokens between them, " + kBudgetUnits + "; ";
  if (!o.layer_budgets.empty()) return out + "--layer-budget " + o.layer_budgets + " in every policy";
  const int n_dense = sparse::n_dense_layers(n_layer);
  const std::string dense = n_dense == 0   ? std::string("none")
                            : n_dense == 1 ? std::string("layer 0")
                                           : "layers 0-" + std::to_string(n_dense - 1);
  return out + "a fraction B is " + kDenseRule + " (" + dense + " of " + std::to_string(n_layer) + " here)";
}

}  // namespace leoam::cli
