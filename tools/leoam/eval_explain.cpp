#include "eval_explain.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>

namespace leoam::cli {

using Json = nlohmann::ordered_json;

TokenRange answer_in_needle(const eval::Sample& sample, const Tokenizer& tok) {
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

std::string explain_block(const Json& j) {
  std::string out;
  char buf[320];
  for (const Json& e : j.value("explain", Json::array())) {
    if (e.value("far_share", 0.0) <= 0.0) continue;
    const auto rank = [](const Json& r) {
      char b[128];
      std::snprintf(b, sizeof(b), "picked %.0f%% (rank %lld, %lld tokens ahead, unit %lld)", 100.0 * r.value("picked", 0.0),
                    static_cast<long long>(r.value("rank", int64_t{-1})),
                    static_cast<long long>(r.value("tokens_ahead", int64_t{0})),
                    static_cast<long long>(r.value("unit_tokens", int64_t{0})));
      return std::string(b);
    };
    const std::string cause = e.value("cause", "");
    std::snprintf(buf, sizeof(buf), "  step %lld layer %d: mass %.3g%s; policy %s; oracle %s; budget %lld%s\n",
                  static_cast<long long>(e.value("step", int64_t{0})), e.value("layer", 0), e.value("mass", 0.0),
                  e.value("desert", false) ? ", desert" : "", rank(e.at("policy")).c_str(), rank(e.at("oracle")).c_str(),
                  static_cast<long long>(e.value("budget_tokens", int64_t{0})), cause.empty() ? "" : (": " + cause).c_str());
    out += buf;
  }
  if (!out.empty()) out = "explain (the answer in the needle, where far, at the steps that write it):\n" + out + "\n";
  std::string layers;
  for (const Json& l : j.value("explain_layers", Json::array())) {
    std::snprintf(buf, sizeof(buf), "  layer %d: far mass left out: policy %.4f, oracle %.4f (mean of %.0f steps)\n",
                  l.value("layer", 0), l.value("policy_lost", 0.0), l.value("oracle_lost", 0.0), l.value("steps", 0.0));
    layers += buf;
  }
  return layers.empty() ? out : out + "explain:\n" + layers + "\n";
}

}  // namespace leoam::cli
