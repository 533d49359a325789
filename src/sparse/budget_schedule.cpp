#include "sparse/budget_schedule.h"

#include <algorithm>
#include <cmath>

namespace leoam::sparse {

std::string budget_error(double budget) {
  if (!std::isfinite(budget) || budget <= 0) return "must be a positive finite number";
  if (budget > 1 && budget != std::floor(budget)) return "is above 1, a count of far tokens: it must be whole";
  return "";
}

int64_t far_budget_tokens(double budget, int64_t n_far) {
  const double tokens = budget <= 1.0 ? std::ceil(budget * static_cast<double>(n_far)) : budget;
  return static_cast<int64_t>(std::min(tokens, static_cast<double>(n_far)));  // min first: no overflow
}

int n_dense_layers(int n_layer) { return static_cast<int>(std::lround(n_layer / 16.0)); }

std::map<int, double> default_layer_budgets(double budget, int n_layer) {
  std::map<int, double> out;
  if (budget > 1.0) return out;
  constexpr double kDenseBudget = 0.5;  // LeoAM: half of the tokens in the first layers
  for (int layer = 0; layer < n_dense_layers(n_layer); ++layer) out[layer] = std::max(budget, kDenseBudget);
  return out;
}

}  // namespace leoam::sparse
