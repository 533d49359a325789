#include "attention_options.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cli_common.h"
#include "model/model.h"

namespace leoam::cli {
namespace {

// "0=0.5,1=0.5" -> {0: 0.5, 1: 0.5}
Result<std::map<int, double>> parse_layer_budgets(const std::string& text) {
  std::map<int, double> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t eq = item.find('=');
    try {
      size_t used_layer = 0, used_budget = 0;
      if (eq == std::string::npos) throw std::invalid_argument("no '='");
      const int layer = std::stoi(item.substr(0, eq), &used_layer);
      const double budget = std::stod(item.substr(eq + 1), &used_budget);
      if (used_layer != eq || used_budget != item.size() - eq - 1) throw std::invalid_argument("trailing text");
      out[layer] = budget;
    } catch (const std::exception&) {
      return invalid_argument("--layer-budget: '" + item + "' is not LAYER=BUDGET (e.g. 0=0.5,1=0.5)");
    }
  }
  return out;
}

}  // namespace

void add_attention_options(CLI::App& cmd, AttentionCliOptions& o) {
  const std::string group = "Sparse attention";
  cmd.add_option("--policy", o.policy, std::string("which KV each decoded token attends to: ") + sparse::selection_policy_names())
      ->capture_default_str()
      ->check(CLI::IsMember(policy_names()))
      ->group(group);
  cmd.add_option("--budget", o.budget,
                 "tokens attended per layer and step, sink and recent window included: a fraction of the context "
                 "(<= 1) or a token count (> 1)")
      ->capture_default_str()
      ->check(positive<double>())
      ->group(group);
  cmd.add_option("--layer-budget", o.layer_budgets,
                 "per-layer budgets, LAYER=BUDGET,... (default for leoam and oracle with a fractional --budget: at "
                 "least 0.5 in the first n_layer/16 layers, rounded: LeoAM's first two of 32)")
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
  cmd.add_flag("--no-lka", o.no_lka,
               "leoam, quest: score disk chunks from their KV, read in full, instead of their abstracts (LKA)")
      ->group(group);
  cmd.add_option("--partial-ratio", o.partial_ratio,
                 "infinigen: the fraction of each head's columns in the partial query/key projection")
      ->capture_default_str()
      ->check(in_range(0.01, 1.0))
      ->group(group);
}

bool policy_needs_catalog(const AttentionCliOptions& o) { return sparse::selection_policy_needs_catalog(o.policy); }

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  std::istringstream in(sparse::selection_policy_names());
  for (std::string name; in >> name;) names.push_back(name);
  return names;
}

int default_chunk_tokens(const AttentionCliOptions& o, const KvCliOptions& kv_options, int64_t n_ctx) {
  // oracle ranks the chunks leoam's adaptive tree could split down to: what leoam could pick at best.
  const bool leoam_grain = o.policy == "oracle" || (o.policy == "leoam" && !o.no_adaptive);
  if (!leoam_grain) return o.policy == "quest" ? 16 : 64;  // Quest's pages are 16 tokens
  constexpr int kLeoamChunk = 8;       // LeoAM: chunks split down to 8 tokens
  constexpr int kChunksPerBudget = 16;
  constexpr int kFinestChunk = 2;
  const int64_t far = std::max<int64_t>(0, n_ctx - kv_options.n_sink - kv_options.n_recent);
  const double budget_tokens = o.budget <= 1.0 ? o.budget * static_cast<double>(far) : o.budget;
  int chunk = kLeoamChunk;
  while (chunk > kFinestChunk && chunk * kChunksPerBudget > budget_tokens) chunk /= 2;
  return chunk;
}

Result<std::unique_ptr<sparse::SparseAttention>> make_sparse_attention(const AttentionCliOptions& o,
                                                                       const KvCliOptions& kv_options,
                                                                       const Model& model, KvCache& kv) {
  if (o.policy == "full") return std::unique_ptr<sparse::SparseAttention>();
  sparse::SparseAttentionOptions s;
  s.policy = o.policy;
  s.budget = o.budget;
  if (!o.layer_budgets.empty()) {
    LEOAM_ASSIGN_OR_RETURN(s.layer_budgets, parse_layer_budgets(o.layer_budgets));
  } else if ((o.policy == "leoam" || o.policy == "oracle") && o.budget <= 1.0) {
    // LeoAM's defaults: the first two of Llama-2-7B's 32 layers keep half, or the global budget
    // when it is larger. The same share of depth elsewhere: n_layer / 16 layers, rounded (none
    // in a model of 7 layers or fewer, whose early layers are not the flat-attention layers the
    // rule is for).
    const double first = std::max(o.budget, 0.5);
    const int n_dense = static_cast<int>(std::lround(model.hparams().n_layer / 16.0));
    for (int layer = 0; layer < n_dense; ++layer) s.layer_budgets[layer] = first;
  }
  s.n_sink = kv_options.n_sink;
  s.n_recent = kv_options.n_recent;
  s.policy_options.group_combine = o.group_combine == "sum" ? sparse::GroupCombine::kSum : sparse::GroupCombine::kMax;
  s.policy_options.desert = !o.no_desert;
  s.policy_options.adaptive = !o.no_adaptive;
  s.policy_options.lka = !o.no_lka;
  s.policy_options.key_signs = !o.no_key_signs;
  s.policy_options.model = &model;
  s.policy_options.partial_ratio = o.partial_ratio;
  const ModelHparams& hp = model.hparams();
  sparse::AttentionShape shape;
  shape.n_layer = hp.n_layer;
  shape.n_head = hp.n_head;
  shape.n_head_kv = hp.n_head_kv;
  shape.head_dim = hp.head_dim;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  return sparse::SparseAttention::create(s, dynamic_cast<KvCatalog*>(&kv), shape);
}

}  // namespace leoam::cli
