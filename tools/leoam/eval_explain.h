// `leoam eval --explain --show`: a result line's explainer records (eval/explain_json.h) as text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace leoam::cli {

// --show's text for a line's records, "" when it has none: a line per step and layer whose target
// is (partly) far, e.g.
//   step 2 layer 1: mass 0.497; policy picked 0% (rank 41, 896 tokens ahead, unit 64); oracle
//   picked 100% (rank 1, 0 tokens ahead, unit 8); budget 808: coarse
// and for ppl a line per layer; before them, with "answer_probs", one line:
//   answer's tokens, each one's probability, to the first wrong: " " 0.998 "6" 0.412 (wrote "7" 0.571)
std::string explain_block(const nlohmann::ordered_json& line);

}  // namespace leoam::cli
