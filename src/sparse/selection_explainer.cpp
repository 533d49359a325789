#include "sparse/selection_explainer.h"

#include <algorithm>
#include <utility>

namespace leoam::sparse {
namespace {

// A target holding less of the layer's attention than this is not needed there: leaving it out
// is no miss (the layer does not look at it, whatever the policy picks).
constexpr double kNeededMass = 0.01;

int64_t overlap(TokenRange a, TokenRange b) {
  return std::max<int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

// The oracle units' mass outside `picks`, each unit's spread evenly over its tokens.
double lost_mass(const std::vector<ScoredUnit>& units, const std::vector<TokenRange>& picks) {
  double lost = 0.0;
  for (const ScoredUnit& u : units) {
    int64_t picked = 0;
    for (const TokenRange& p : picks) picked += overlap(u.range, p);
    lost += static_cast<double>(u.mass) * static_cast<double>(u.range.size() - picked) /
            static_cast<double>(std::max<int64_t>(u.range.size(), 1));
  }
  return lost;
}

TargetRank rank_target(const Selection& s, TokenRange target) {
  TargetRank r;
  int64_t n_target = 0;
  const ScoredUnit* best = nullptr;
  for (const ScoredUnit& u : s.ranking) {
    const int64_t o = overlap(u.range, target);
    n_target += o;
    if (o > 0 && (best == nullptr || u.score > best->score)) best = &u;
  }
  if (best == nullptr) return r;
  r.rank = 1;
  r.unit_tokens = best->range.size();
  for (const ScoredUnit& u : s.ranking) {
    if (u.score > best->score) {
      ++r.rank;
      r.tokens_ahead += u.range.size();
    }
  }
  int64_t picked = 0;
  for (const TokenRange& p : s.ranges) picked += overlap(p, target);
  r.picked = static_cast<double>(picked) / static_cast<double>(n_target);
  return r;
}

class SelectionExplainer final : public SelectionPolicy {
 public:
  SelectionExplainer(std::unique_ptr<SelectionPolicy> policy, std::unique_ptr<SelectionPolicy> oracle,
                     TokenRange target, int64_t n_steps, std::vector<LayerExplanation>* out)
      : policy_(std::move(policy)), oracle_(std::move(oracle)), target_(target), n_steps_(n_steps), out_(out) {}

  std::string_view name() const override { return policy_->name(); }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    if (query.step >= n_steps_) return policy_->select(query, catalog);
    SelectionQuery q = query;
    q.explain = true;
    LEOAM_ASSIGN_OR_RETURN(Selection s, policy_->select(q, catalog));
    LEOAM_ASSIGN_OR_RETURN(const Selection o, oracle_->select(q, catalog));
    LayerExplanation e;
    e.step = query.step;
    e.layer = query.layer;
    e.budget_tokens = query.budget_tokens;
    e.far_share = target_.size() > 0
                      ? static_cast<double>(overlap(target_, query.far)) / static_cast<double>(target_.size())
                      : 0.0;
    e.desert = s.desert;
    e.policy = rank_target(s, target_);
    e.oracle = rank_target(o, target_);
    for (const ScoredUnit& u : o.ranking) {
      if (overlap(u.range, target_) > 0) e.mass += static_cast<double>(u.score) * static_cast<double>(u.range.size());
    }
    e.mass /= static_cast<double>(query.n_head / std::max(query.n_head_kv, 1));  // a mean over the group
    e.policy_lost = lost_mass(o.ranking, s.desert ? std::vector<TokenRange>{} : s.ranges);
    e.oracle_lost = lost_mass(o.ranking, o.ranges);
    if (e.far_share > 0 && e.mass >= kNeededMass && (s.desert || e.policy.picked < 1.0)) {
      if (s.desert) {
        e.cause = "desert";
      } else if (e.oracle.picked <= e.policy.picked) {
        e.cause = "budget";
      } else {
        e.cause = e.policy.unit_tokens > e.oracle.unit_tokens ? "coarse" : "bound";
      }
    }
    out_->push_back(e);
    s.ranking.clear();
    return s;
  }

  Result<std::optional<Selection>> predict(const SelectionQuery& query, KvCatalog& catalog) override {
    return policy_->predict(query, catalog);
  }
  SelectorNeeds needs() const override {
    SelectorNeeds n = policy_->needs();
    n.keys = true;  // the oracle's
    return n;
  }
  void reset() override {
    policy_->reset();
    oracle_->reset();
  }
  Status observe_keys(int layer, int64_t pos0, int64_t n, const float* k) override {
    LEOAM_RETURN_IF_ERROR(oracle_->observe_keys(layer, pos0, n, k));
    return policy_->needs().keys ? policy_->observe_keys(layer, pos0, n, k) : Status::ok();
  }
  Status observe_layer_input(int layer, int64_t pos, const float* x) override {
    return policy_->observe_layer_input(layer, pos, x);
  }
  void observe_attention(int layer, int64_t pos, std::span<const TokenRange> ranges,
                         std::span<const float> mass) override {
    policy_->observe_attention(layer, pos, ranges, mass);
  }
  Status observe_stored(int layer, int64_t n_tokens, int64_t budget_tokens, KvCatalog& catalog) override {
    return policy_->observe_stored(layer, n_tokens, budget_tokens, catalog);
  }
  PolicyMemory memory() const override { return policy_->memory(); }

 private:
  std::unique_ptr<SelectionPolicy> policy_;
  std::unique_ptr<SelectionPolicy> oracle_;
  TokenRange target_;
  int64_t n_steps_;
  std::vector<LayerExplanation>* out_;
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_selection_explainer(std::unique_ptr<SelectionPolicy> policy,
                                                          std::unique_ptr<SelectionPolicy> oracle, TokenRange target,
                                                          int64_t n_steps, std::vector<LayerExplanation>* out) {
  return std::make_unique<SelectionExplainer>(std::move(policy), std::move(oracle), target, n_steps, out);
}

}  // namespace leoam::sparse
