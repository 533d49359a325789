// oracle: the best a selection of whole chunks can do at a budget, as a reference for the other
// policies, not a policy to deploy. It keeps every post-RoPE key in f32, indexed by position (so a
// new sequence overwrites them and reset() need not clear them), and ranks by the exact attention
// mass: leoam's rule with exact scores. A chunk scores its best KV head's mass per far token (each
// KV head summing its query heads' softmax masses over the chunk's part in far), and the best
// chunks fill the budget (chunk_ranking.h). One set per layer, at the store's chunk grain. Each
// step costs one q.k per position and query head, whatever the budget; it reads no abstract and
// no KV. The rule and what it tells apart: docs/selection.md#oracle
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/model.h"
#include "sparse/chunk_ranking.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class OraclePolicy final : public SelectionPolicy {
 public:
  OraclePolicy(int n_layer, int64_t row) : row_(row), keys_(static_cast<size_t>(n_layer)) {}

  std::string_view name() const override { return "oracle"; }
  SelectorNeeds needs() const override { return {.keys = true}; }
  // Every key, kept between steps; a step's attention masses besides.
  PolicyMemory memory() const override {
    const uint64_t kept = kept_bytes();
    return {kept, std::max(peak_bytes_, kept)};
  }

  Status observe_keys(int layer, int64_t pos0, int64_t n, const float* k) override {
    if (layer < 0 || static_cast<size_t>(layer) >= keys_.size() || pos0 < 0 || n < 0) {
      return invalid_argument("oracle: keys for layer " + std::to_string(layer) + " at position " +
                              std::to_string(pos0) + ": the model has " + std::to_string(keys_.size()) + " layers");
    }
    std::vector<float>& keys = keys_[layer];
    if (static_cast<int64_t>(keys.size()) < (pos0 + n) * row_) grow_to(keys, static_cast<size_t>((pos0 + n) * row_));
    std::copy(k, k + n * row_, keys.begin() + pos0 * row_);
    return Status::ok();
  }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    Selection s;
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return s;
    const int64_t row = int64_t{query.n_head_kv} * query.head_dim;
    const size_t layer = static_cast<size_t>(query.layer);
    if (row != row_ || layer >= keys_.size()) {
      return invalid_argument("oracle: a query of layer " + std::to_string(query.layer) + " with " +
                              std::to_string(query.n_head_kv) + " kv heads of " + std::to_string(query.head_dim) +
                              " does not fit the model's " + std::to_string(keys_.size()) + " layers of " +
                              std::to_string(row_) + " key channels");
    }
    if (static_cast<int64_t>(keys_[layer].size()) < query.n_tokens * row) {
      return invalid_argument("oracle: layer " + std::to_string(query.layer) + " has keys for " +
                              std::to_string(keys_[layer].size() / row) + " positions, but the query sees " +
                              std::to_string(query.n_tokens) +
                              "; the forward pass must pass every key (SelectorNeeds.keys)");
    }
    const int chunk_tokens = catalog.chunk_tokens();
    const ChunkSpan far = chunks_overlapping(query.far, chunk_tokens);
    const int group = query.n_head / query.n_head_kv;
    // mass[kv head][chunk of far]: the summed attention mass of the kv head's query heads.
    std::vector<double> mass(static_cast<size_t>(query.n_head_kv * far.size()), 0.0);
    std::vector<float> p(static_cast<size_t>(query.n_tokens));
    const float* keys = keys_[layer].data();
    for (int h = 0; h < query.n_head; ++h) {
      const float* q = query.q + int64_t{h} * query.head_dim;
      const float* k0 = keys + int64_t{h / group} * query.head_dim;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < query.n_tokens; ++t) {
        const float* k = k0 + t * row;
        float dot = 0.0f;
        for (int c = 0; c < query.head_dim; ++c) dot += q[c] * k[c];
        p[t] = kernels::softcap(query.scale * dot, query.softcap);
        m = std::max(m, p[t]);
      }
      double total = 0.0;
      for (float& x : p) total += (x = std::exp(x - m));
      double* out = mass.data() + int64_t{h / group} * far.size();
      for (int64_t i = 0; i < far.size(); ++i) {
        const TokenRange part = chunk_part(far.i0 + i, query.far, chunk_tokens);
        double sum = 0.0;
        for (int64_t t = part.begin; t < part.end; ++t) sum += p[t];
        out[i] += sum / total;
      }
    }
    std::vector<float> scores(static_cast<size_t>(far.size()));
    peak_bytes_ = std::max(peak_bytes_, kept_bytes() + capacity_bytes(mass) + capacity_bytes(p) + capacity_bytes(scores));
    for (int64_t i = 0; i < far.size(); ++i) {
      const int64_t tokens = chunk_part(far.i0 + i, query.far, chunk_tokens).size();
      double best = 0.0;
      for (int g = 0; g < query.n_head_kv; ++g) best = std::max(best, mass[g * far.size() + i]);
      scores[i] = static_cast<float>(best / static_cast<double>(tokens));
      if (query.explain) {
        double all = 0.0;
        for (int g = 0; g < query.n_head_kv; ++g) all += mass[g * far.size() + i];
        s.ranking.push_back({chunk_part(far.i0 + i, query.far, chunk_tokens), scores[i],
                             static_cast<float>(all / query.n_head)});
      }
    }
    s.ranges = pick_top_chunks(scores, far, query.far, chunk_tokens, query.budget_tokens);
    return s;
  }

 private:
  uint64_t kept_bytes() const {
    uint64_t b = capacity_bytes(keys_);
    for (const std::vector<float>& k : keys_) b += capacity_bytes(k);
    return b;
  }

  int64_t row_;  // key channels a position: n_kv_heads * head_dim
  uint64_t peak_bytes_ = 0;  // the most held at once, a step's masses included
  std::vector<std::vector<float>> keys_;  // per layer: [positions][n_kv_heads][head_dim]
};

}  // namespace

Result<std::unique_ptr<SelectionPolicy>> make_oracle_policy(const PolicyOptions& options) {
  if (options.model == nullptr) {
    return invalid_argument("oracle: needs the model (PolicyOptions.model) for the shape of the keys it keeps");
  }
  const ModelHparams& hp = options.model->hparams();
  return std::unique_ptr<SelectionPolicy>(
      std::make_unique<OraclePolicy>(hp.n_layer, int64_t{hp.n_head_kv} * hp.head_dim));
}

}  // namespace leoam::sparse
