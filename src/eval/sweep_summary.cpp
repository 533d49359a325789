#include "eval/sweep_summary.h"

#include <algorithm>
#include <cmath>

#include "eval/sweep.h"
#include "sparse/policy_registry.h"

namespace leoam::eval {
namespace {

using Json = nlohmann::ordered_json;

// The lines of `task` at this straddle_chunk grouped by policy@budget, in the order the labels
// first appear: add(row, line) folds each line into its row (a Row starts with its label and
// counts lines in n).
template <typename Row, typename Add>
std::vector<Row> rows_by_label(const std::vector<Json>& lines, const std::string& task, int64_t straddle_chunk,
                               Add add) {
  std::vector<Row> rows;
  for (const Json& j : lines) {
    if (j.value("task", "") != task || j.value("straddle_chunk", int64_t{0}) != straddle_chunk) continue;
    const std::string label = policy_label(j.value("policy", ""), j.value("budget", 1.0));
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.label == label; });
    if (it == rows.end()) it = rows.insert(rows.end(), Row{label});
    ++it->n;
    add(*it, j);
  }
  return rows;
}

}  // namespace

void CostSummary::add(const Json& j) {
  policy = j.value("policy", "");
  budget = j.value("budget", 1.0);
  ++n_lines;
  attended_sum += j.value("tokens_attended_pct", 100.0);
  if (!j.contains("kv_bytes_per_token")) return;
  ++n_with_bytes;
  for (const Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    bytes_sum[static_cast<int>(t)] += j.at("kv_bytes_per_token").value(tier_name(t), 0.0);
  }
}

double CostSummary::attended_pct() const { return n_lines > 0 ? attended_sum / n_lines : 0.0; }

std::optional<uint64_t> CostSummary::bytes_per_token(Tier tier) const {
  if (n_with_bytes == 0) return std::nullopt;
  return static_cast<uint64_t>(std::llround(bytes_sum[static_cast<int>(tier)] / n_with_bytes));
}

double PplRow::perplexity() const { return n_tokens > 0 ? std::exp(nll_sum / n_tokens) : 0.0; }

double PplRow::bits_per_byte() const { return n_bytes > 0 ? nll_sum / std::log(2.0) / n_bytes : 0.0; }

std::optional<double> PplDepth::vs_full_pct(const PplRow& row) const {
  const auto full = std::find_if(rows.begin(), rows.end(), [](const PplRow& r) { return sparse::is_dense_policy(r.label); });
  if (full == rows.end() || full->perplexity() <= 0.0) return std::nullopt;
  return 100.0 * (row.perplexity() / full->perplexity() - 1.0);
}

std::vector<ScoreRow> score_rows(const std::vector<Json>& lines, const std::string& task, int64_t straddle_chunk) {
  return rows_by_label<ScoreRow>(lines, task, straddle_chunk, [](ScoreRow& r, const Json& j) {
    r.score_sum += j.value("score", 0.0);
    r.cost.add(j);
  });
}

std::vector<PplDepth> ppl_rows(const std::vector<Json>& lines, const std::string& task) {
  std::vector<PplDepth> out;
  for (const Json& j : lines) {
    const double d = j.value("depth", 0.0);
    if (j.value("task", "") != task) continue;
    if (std::none_of(out.begin(), out.end(), [d](const PplDepth& p) { return p.depth == d; })) out.push_back({d, {}});
  }
  for (PplDepth& at : out) {
    std::vector<Json> at_depth;
    for (const Json& j : lines) {
      if (j.value("depth", 0.0) == at.depth) at_depth.push_back(j);
    }
    at.rows = rows_by_label<PplRow>(at_depth, task, /*straddle_chunk=*/0, [](PplRow& r, const Json& j) {
      r.nll_sum += j.value("nll_sum", 0.0);
      r.n_tokens += j.value("n_tokens", 0.0);
      r.n_bytes += j.value("n_bytes", 0.0);
      r.cost.add(j);
    });
  }
  return out;
}

std::vector<UnmatchedShare> unmatched_shares(const std::vector<const CostSummary*>& rows) {
  constexpr double kMaxGapPct = 1.0;
  std::vector<double> budgets;
  for (const CostSummary* r : rows) {
    if (!sparse::is_dense_policy(r->policy) && std::find(budgets.begin(), budgets.end(), r->budget) == budgets.end()) {
      budgets.push_back(r->budget);
    }
  }
  std::vector<UnmatchedShare> out;
  for (const double budget : budgets) {
    UnmatchedShare u{budget};
    for (const CostSummary* r : rows) {
      if (sparse::is_dense_policy(r->policy) || r->budget != budget) continue;
      if (u.lo == nullptr || r->attended_pct() < u.lo->attended_pct()) u.lo = r;
      if (u.hi == nullptr || r->attended_pct() > u.hi->attended_pct()) u.hi = r;
    }
    if (u.gap_pct() > kMaxGapPct) out.push_back(u);
  }
  return out;
}

}  // namespace leoam::eval
