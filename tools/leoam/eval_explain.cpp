#include "eval_explain.h"

#include <cstdio>

namespace leoam::cli {

using Json = nlohmann::ordered_json;

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
  std::string probs;
  for (const Json& a : j.value("answer_probs", Json::array())) {
    const Json expected = a.value("expected", ""), written = a.value("written", "");
    std::snprintf(buf, sizeof(buf), " %s %.3f", expected.dump().c_str(), a.value("p_expected", 0.0));
    probs += buf;
    if (written != expected) {
      std::snprintf(buf, sizeof(buf), " (wrote %s %.3f)", written.dump().c_str(), a.value("p_written", 0.0));
      probs += buf;
    }
  }
  if (!probs.empty()) out = "answer's tokens, each one's probability, to the first wrong:" + probs + "\n" + out;
  std::string layers;
  for (const Json& l : j.value("explain_layers", Json::array())) {
    std::snprintf(buf, sizeof(buf), "  layer %d: far mass left out: policy %.4f, oracle %.4f (mean of %.0f steps)\n",
                  l.value("layer", 0), l.value("policy_lost", 0.0), l.value("oracle_lost", 0.0), l.value("steps", 0.0));
    layers += buf;
  }
  return layers.empty() ? out : out + "explain:\n" + layers + "\n";
}

}  // namespace leoam::cli
