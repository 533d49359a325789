// A sweep's --explain records (sparse/selection_explainer.h) as its result lines' JSON: the
// explainer's target for a retrieval sample, and its records per step and layer (or, for ppl, per
// layer).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "eval/task.h"
#include "kv/kv_cache.h"
#include "sparse/selection_explainer.h"
#include "tokenizer/tokenizer.h"

namespace leoam::eval {

// The target of a retrieval sample: the first answer's tokens where they first occur in the
// first needle (what a retrieval head copies from), else the whole needle.
TokenRange answer_in_needle(const Sample& sample, const Tokenizer& tok);

// A retrieval line's "explain": one record per decode step and layer.
nlohmann::ordered_json explain_json(const std::vector<sparse::LayerExplanation>& explanations);
// A ppl line's "explain_layers": per layer, the mean over the decode steps of the far attention
// mass the policy's picks and the oracle's leave out.
nlohmann::ordered_json explain_layers_json(const std::vector<sparse::LayerExplanation>& explanations);

}  // namespace leoam::eval
