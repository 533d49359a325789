// infinigen: the InfiniGen baseline (Lee et al., OSDI'24), budget-based so that it compares with
// the other policies. While layer i runs, it speculates which tokens layer i+1 will attend to: a
// partial query projection of layer i+1 (a few columns of each head: partial_projection.h)
// applied to layer i's input, scored against a partial key cache (the same columns of every key).
// A far token scores its best query head's score, less that head's max; the budget_tokens best
// are kept (ties to the lower position), as merged ranges. InfiniGen keeps the tokens within a
// threshold of each head's max instead; a fixed budget makes it comparable here. It forecasts
// nothing for the decode pipeline (no predict()): the speculated set is read when layer i+1
// gathers it. Partial key cache memory: docs/selection.md#infinigen
#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "sparse/partial_projection.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class InfinigenPolicy final : public SelectionPolicy {
 public:
  explicit InfinigenPolicy(PartialProjection projection)
      : proj_(std::move(projection)),
        keys_(static_cast<size_t>(proj_.n_layer())),
        spec_(static_cast<size_t>(proj_.n_layer())),
        spec_pos_(static_cast<size_t>(proj_.n_layer()), -1) {
    for (int il = 0; il < proj_.n_layer(); ++il) spec_[il].resize(static_cast<size_t>(proj_.n_sel(il)));
  }

  std::string_view name() const override { return "infinigen"; }
  SelectorNeeds needs() const override { return {.keys = true, .layer_inputs = true}; }

  void reset() override { std::fill(spec_pos_.begin(), spec_pos_.end(), -1); }

  // The partial keys and speculated queries, kept between steps; a step's token scores besides.
  PolicyMemory memory() const override {
    const uint64_t kept = kept_bytes();
    return {kept, std::max(peak_bytes_, kept)};
  }

  // (Re)writes the partial keys of positions [pos0, pos0 + n) of `layer`: the cache is indexed
  // by position, so a new sequence overwrites it and reset() need not clear it.
  Status observe_keys(int layer, int64_t pos0, int64_t n, const float* k) override {
    if (layer < 0 || layer >= proj_.n_layer() || pos0 < 0 || n < 0) {
      return invalid_argument("infinigen: keys for layer " + std::to_string(layer) + " at position " +
                              std::to_string(pos0) + ": the model has " + std::to_string(proj_.n_layer()) + " layers");
    }
    const int64_t row = proj_.n_kv_sel(layer);
    const int64_t stride = int64_t{proj_.n_head_kv()} * proj_.head_dim();
    std::vector<float>& keys = keys_[layer];
    if (static_cast<int64_t>(keys.size()) < (pos0 + n) * row) grow_to(keys, static_cast<size_t>((pos0 + n) * row));
    for (int64_t t = 0; t < n; ++t) proj_.gather_key(layer, k + t * stride, keys.data() + (pos0 + t) * row);
    return Status::ok();
  }

  // Speculates the partial query of layer + 1 from x (layer 0's input also speculates layer 0:
  // nothing runs before it).
  Status observe_layer_input(int layer, int64_t pos, const float* x) override {
    if (layer < 0 || layer >= proj_.n_layer() || pos < 0) {
      return invalid_argument("infinigen: layer input for layer " + std::to_string(layer) + ": the model has " +
                              std::to_string(proj_.n_layer()) + " layers");
    }
    if (layer == 0) speculate(0, pos, x);
    if (layer + 1 < proj_.n_layer()) speculate(layer + 1, pos, x);
    return Status::ok();
  }

  // Scores the far tokens with the speculation made for this layer at this position; without one
  // (no layer inputs observed) it falls back to the true query restricted to the columns.
  Result<Selection> select(const SelectionQuery& query, KvCatalog& /*catalog*/) override {
    LEOAM_RETURN_IF_ERROR(check_query(query));
    Selection s;
    const int64_t n_far = query.far.size();
    if (n_far <= 0 || query.budget_tokens <= 0) return s;
    const int L = query.layer;
    const int64_t pos = query.n_tokens - 1;

    const float* q = spec_[L].data();
    if (spec_pos_[L] != pos) {  // no speculation for this step: the true query's columns
      proj_.gather_query(L, query.q, spec_[L].data());
    }

    // scores[h][t - far.begin] = scale * q_partial_h . k_partial_t, then minus the head's max.
    const std::span<const int> q_begin = proj_.q_begin(L);
    const std::span<const int> slot = proj_.key_slot(L);
    const int64_t row = proj_.n_kv_sel(L);
    const float* keys = keys_[L].data();
    std::vector<float> best(static_cast<size_t>(n_far), -std::numeric_limits<float>::infinity());
    std::vector<float> head(static_cast<size_t>(n_far));
    for (int h = 0; h < query.n_head; ++h) {
      float head_max = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < n_far; ++t) {
        const float* k = keys + (query.far.begin + t) * row;
        float dot = 0.0f;
        for (int i = q_begin[h]; i < q_begin[h + 1]; ++i) dot += q[i] * k[slot[i]];
        head[t] = query.scale * dot;
        head_max = std::max(head_max, head[t]);
      }
      for (int64_t t = 0; t < n_far; ++t) best[t] = std::max(best[t], head[t] - head_max);
    }

    const int64_t n_keep = std::min(query.budget_tokens, n_far);
    std::vector<int64_t> order(static_cast<size_t>(n_far));
    std::iota(order.begin(), order.end(), 0);
    const auto better = [&](int64_t a, int64_t b) { return best[a] > best[b] || (best[a] == best[b] && a < b); };
    std::nth_element(order.begin(), order.begin() + (n_keep - 1), order.end(), better);
    order.resize(static_cast<size_t>(n_keep));
    peak_bytes_ = std::max(peak_bytes_, kept_bytes() + capacity_bytes(best) + capacity_bytes(head) + capacity_bytes(order));
    std::sort(order.begin(), order.end());
    for (int64_t t : order) {
      const int64_t p = query.far.begin + t;
      if (!s.ranges.empty() && s.ranges.back().end == p) {
        s.ranges.back().end = p + 1;
      } else {
        s.ranges.push_back({p, p + 1});
      }
    }
    s.n_chunks_scored = n_far;
    return s;
  }

 private:
  void speculate(int layer, int64_t pos, const float* x) {
    proj_.project_query(layer, pos, x, spec_[layer].data());
    spec_pos_[layer] = pos;
  }

  Status check_query(const SelectionQuery& q) const {
    if (q.layer < 0 || q.layer >= proj_.n_layer() || q.n_head != proj_.n_head() || q.n_head_kv != proj_.n_head_kv() ||
        q.head_dim != proj_.head_dim()) {
      return invalid_argument("infinigen: a query of layer " + std::to_string(q.layer) + " with " +
                              std::to_string(q.n_head) + "/" + std::to_string(q.n_head_kv) + " heads of " +
                              std::to_string(q.head_dim) + ", but its model has " + std::to_string(proj_.n_layer()) +
                              " layers of " + std::to_string(proj_.n_head()) + "/" +
                              std::to_string(proj_.n_head_kv()) + " heads of " + std::to_string(proj_.head_dim()));
    }
    if (q.far.begin < 0 || q.far.end > q.n_tokens) {
      return invalid_argument("infinigen: far positions outside [0, n_tokens)");
    }
    const int64_t n_stored = static_cast<int64_t>(keys_[q.layer].size()) / std::max(1, proj_.n_kv_sel(q.layer));
    if (q.far.end > n_stored) {
      return invalid_argument("infinigen: layer " + std::to_string(q.layer) + " has partial keys for " +
                              std::to_string(n_stored) + " positions, but the query scores positions up to " +
                              std::to_string(q.far.end) + "; the forward pass must pass every key (SelectorNeeds.keys)");
    }
    return Status::ok();
  }

  uint64_t kept_bytes() const {
    uint64_t b = capacity_bytes(keys_) + capacity_bytes(spec_) + capacity_bytes(spec_pos_);
    for (const std::vector<float>& k : keys_) b += capacity_bytes(k);
    for (const std::vector<float>& q : spec_) b += capacity_bytes(q);
    return b;
  }

  PartialProjection proj_;
  uint64_t peak_bytes_ = 0;  // the most held at once, a step's scores included
  std::vector<std::vector<float>> keys_;  // [layer][position][n_kv_sel(layer)] partial keys, f32
  std::vector<std::vector<float>> spec_;  // [layer][n_sel(layer)] the speculated partial query
  std::vector<int64_t> spec_pos_;         // [layer] the position spec_ was made for; -1: none
};

}  // namespace

Result<std::unique_ptr<SelectionPolicy>> make_infinigen_policy(const PolicyOptions& options) {
  if (options.model == nullptr) {
    return invalid_argument("infinigen: needs the model (PolicyOptions.model) to speculate queries with its weights");
  }
  LEOAM_ASSIGN_OR_RETURN(PartialProjection projection, PartialProjection::create(*options.model, options.partial_ratio));
  return std::unique_ptr<SelectionPolicy>(std::make_unique<InfinigenPolicy>(std::move(projection)));
}

}  // namespace leoam::sparse
