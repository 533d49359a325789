// `leoam eval --explain`: the selection explainer's records (sparse/selection_explainer.h) as
// --out's JSON and --show's text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/task.h"
#include "kv/kv_cache.h"
#include "sparse/selection_explainer.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {

// The target of a retrieval sample: the first answer's tokens where they first occur in the
// first needle (what a retrieval head copies from), else the whole needle.
TokenRange answer_in_needle(const eval::Sample& sample, const Tokenizer& tok);

// A retrieval line's "explain": one record per decode step and layer.
nlohmann::ordered_json explain_json(const std::vector<sparse::LayerExplanation>& explanations);
// A ppl line's "explain_layers": per layer, the mean over the decode steps of the far attention
// mass the policy's picks and the oracle's leave out.
nlohmann::ordered_json explain_layers_json(const std::vector<sparse::LayerExplanation>& explanations);

// --show's text for a line's records, "" when it has none: a line per step and layer whose target
// is (partly) far, e.g.
//   step 2 layer 1: mass 0.497; policy picked 0% (rank 41, 896 tokens ahead, unit 64); oracle
//   picked 100% (rank 1, 0 tokens ahead, unit 8); budget 808: coarse
// and for ppl a line per layer.
std::string explain_block(const nlohmann::ordered_json& line);

}  // namespace leoam::cli
