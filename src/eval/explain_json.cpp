#include "eval/explain_json.h"

#include <algorithm>
#include <array>
#include <map>

namespace leoam::eval {

using Json = nlohmann::ordered_json;

TokenRange answer_in_needle(const Sample& sample, const Tokenizer& tok) {
  const TokenRange needle{sample.needle_pos, sample.needle_pos + sample.needle_tokens};
  const std::vector<int32_t> answer = tok.tokenize(sample.answers.front(), /*add_bos=*/false, /*parse_special=*/false);
  const auto begin = sample.tokens.begin() + needle.begin;
  const auto end = sample.tokens.begin() + needle.end;
  const auto at = std::search(begin, end, answer.begin(), answer.end());
  if (answer.empty() || at == end) return needle;
  const int64_t p = at - sample.tokens.begin();
  return {p, p + static_cast<int64_t>(answer.size())};
}

Json explain_json(const std::vector<sparse::LayerExplanation>& explanations) {
  const auto rank = [](const sparse::TargetRank& r) {
    return Json{{"rank", r.rank}, {"tokens_ahead", r.tokens_ahead}, {"unit_tokens", r.unit_tokens}, {"picked", r.picked}};
  };
  Json out = Json::array();
  for (const sparse::LayerExplanation& e : explanations) {
    out.push_back(Json{{"step", e.step},       {"layer", e.layer},        {"budget_tokens", e.budget_tokens},
                       {"far_share", e.far_share}, {"mass", e.mass},      {"desert", e.desert},
                       {"policy", rank(e.policy)}, {"oracle", rank(e.oracle)}, {"cause", e.cause},
                       {"policy_lost", e.policy_lost}, {"oracle_lost", e.oracle_lost}});
  }
  return out;
}

Json explain_layers_json(const std::vector<sparse::LayerExplanation>& explanations) {
  std::map<int, std::array<double, 3>> sums;  // layer: policy, oracle, steps
  for (const sparse::LayerExplanation& e : explanations) {
    std::array<double, 3>& s = sums[e.layer];
    s[0] += e.policy_lost;
    s[1] += e.oracle_lost;
    s[2] += 1;
  }
  Json out = Json::array();
  for (const auto& [layer, s] : sums) {
    out.push_back(Json{{"layer", layer}, {"policy_lost", s[0] / s[2]}, {"oracle_lost", s[1] / s[2]}, {"steps", s[2]}});
  }
  return out;
}

}  // namespace leoam::eval
