// One run of an evaluation sweep (sweep.h): a sample under one (policy, budget) through a fresh
// Session (its own store, the tiered store for every policy, dense included, so that the bytes
// read compare; its own selector and forward context), greedy generation scored against the
// answers, or for ppl the window's tokens decoded and scored one by one; and the run's result
// line. Its fields: docs/evaluation.md#the-lines-of---out
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/sweep.h"
#include "leoam/session.h"

namespace leoam::eval {

struct SampleRunOptions {
  std::string task;             // SweepOptions::task
  int64_t straddle_chunk = 0;   // recorded in the line when > 0
  bool explain = false;         // the exact-mass oracle beside a sparse policy, its records in the line
  // What every run shares: the store (each run in a directory of its own under kv.dir, removed
  // after it), the attention (each run sets the policy and budget) and the forward pass's
  // threads, batch and should_stop (each run sets n_ctx: the prompt and its answer).
  SessionOptions session;
};

// The result line of `spec` under `run`; run_index names its store's directory ("run-N"). Fails
// cancelled when session.forward.should_stop says so, and where the session or a step fails.
Result<nlohmann::ordered_json> run_sample(const Model& model, const Tokenizer& tok, const SampleRunOptions& options,
                                          const SampleSpec& spec, const EvalRun& run, int run_index);

}  // namespace leoam::eval
