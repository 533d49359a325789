// Why a selection missed: a diagnostic wrapper around a policy (leoam's `eval --explain`). At each
// select it runs the policy as it is (its picks are the ones attended) and, beside it, the oracle
// (exact attention mass, oracle_policy.cpp) on the same query, and records for a target range of
// positions (a needle): how much of it each picked, where its best unit ranked under each one's
// scores, and its exact attention mass. A miss (a target holding 1% of the layer's attention or
// more that the policy did not pick whole) gets a cause (LayerExplanation::cause). With no target
// (an empty range) only the mass each one leaves out is recorded (eval's ppl). The oracle's keys
// and work are the diagnostic's, not the policy's: memory() is the policy's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparse/selection_policy.h"

namespace leoam::sparse {

// Where the target's best unit stands in one selector's ranking of the far units.
struct TargetRank {
  int64_t rank = -1;          // 1-based, by score; -1: no far unit overlaps the target
  int64_t tokens_ahead = 0;   // far tokens in the units ranked above it
  int64_t unit_tokens = 0;    // the far tokens of that unit
  double picked = 0.0;        // the share of the target's far tokens the selector picked
};

struct LayerExplanation {
  int64_t step = 0;
  int layer = 0;
  int64_t budget_tokens = 0;
  double far_share = 0.0;     // the share of the target inside far (the rest is always attended)
  double mass = 0.0;          // the exact attention mass of the store chunks that hold it (the
                              // oracle's: the mean over its best KV head's query heads)
  bool desert = false;
  TargetRank policy, oracle;
  // The layer's far attention mass (exact, a mean over the query heads) outside each one's picks:
  // what the selection costs the layer, target or not.
  double policy_lost = 0.0, oracle_lost = 0.0;
  // "" (picked, or not needed), or why a miss was missed:
  //   budget   the oracle misses it too: at this budget no ranking of whole chunks reaches it
  //   coarse   the oracle picks it, and the policy's unit holding it is larger than a store
  //            chunk: its score is spread over tokens the needle does not hold (too coarse a tree)
  //   bound    the oracle picks it, and the policy's own unit is a store chunk: its upper bound
  //            ranked it below the units that filled the budget (the box or signs were loose)
  //   desert   the policy judged that no far token mattered
  std::string cause;
};

// Wraps `policy`; `oracle` is a fresh oracle policy of the same model (make_selection_policy).
// Explains the steps [0, n_steps) for positions `target`, into `out` (owned by the caller).
std::unique_ptr<SelectionPolicy> make_selection_explainer(std::unique_ptr<SelectionPolicy> policy,
                                                          std::unique_ptr<SelectionPolicy> oracle, TokenRange target,
                                                          int64_t n_steps, std::vector<LayerExplanation>* out);

}  // namespace leoam::sparse
