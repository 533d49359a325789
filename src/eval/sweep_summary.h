// What a sweep's tables show, from its result lines (sweep.h): per (policy, budget), in the order
// the labels first appear, the mean score or the pooled perplexity, and what the runs cost (the
// share of tokens attended, the KV read per decode step from each tier). A budget whose sparse
// policies attended shares far apart is flagged: their scores are not at matched costs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/tier.h"

namespace leoam::eval {

// The cost of a row's lines, averaged over them.
struct CostSummary {
  std::string policy;
  double budget = 1.0;
  int n_lines = 0;
  double attended_sum = 0.0;
  int n_with_bytes = 0;                         // lines with kv_bytes_per_token
  std::array<double, kNumTiers> bytes_sum{};  // per token, summed over those lines, by Tier

  void add(const nlohmann::ordered_json& line);
  double attended_pct() const;
  // The mean KV bytes a decode step read from `tier`; nullopt when no line has them (lines
  // written before kv_bytes_per_token existed).
  std::optional<uint64_t> bytes_per_token(Tier tier) const;
};

// A retrieval table's row.
struct ScoreRow {
  std::string label;  // policy_label()
  int n = 0;
  double score_sum = 0.0;
  CostSummary cost = {};

  double score_pct() const { return 100.0 * score_sum / n; }
};

// A ppl table's row: perplexity and bits per byte pool every window's tokens and bytes.
struct PplRow {
  std::string label;
  int n = 0;
  double nll_sum = 0.0;
  double n_tokens = 0.0;
  double n_bytes = 0.0;
  CostSummary cost = {};

  double perplexity() const;
  double bits_per_byte() const;
};

// A ppl table's rows at one prefilled share (depth): the same tokens scored.
struct PplDepth {
  double depth = 0.0;
  std::vector<PplRow> rows;

  // A row's perplexity over the dense policy's at this depth, minus 1, in percent; nullopt
  // without a dense row (or where its perplexity is 0).
  std::optional<double> vs_full_pct(const PplRow& row) const;
};

// The lines of `task` at this straddle_chunk, a row per policy@budget.
std::vector<ScoreRow> score_rows(const std::vector<nlohmann::ordered_json>& lines, const std::string& task,
                                 int64_t straddle_chunk);
// The ppl lines of `task`, a PplDepth per depth in the order they first appear.
std::vector<PplDepth> ppl_rows(const std::vector<nlohmann::ordered_json>& lines, const std::string& task);

// A budget at which the sparse policies attended shares more than 1 percentage point apart (a
// policy's chunk grain, or a schedule of its own, can make the same budget attend more).
struct UnmatchedShare {
  double budget = 0.0;
  const CostSummary* lo = nullptr;  // the policy that attended the least
  const CostSummary* hi = nullptr;  // the most
  double gap_pct() const { return hi->attended_pct() - lo->attended_pct(); }
};
// The budgets of `rows` whose sparse policies attended unmatched shares, in the order they first appear.
std::vector<UnmatchedShare> unmatched_shares(const std::vector<const CostSummary*>& rows);

}  // namespace leoam::eval
