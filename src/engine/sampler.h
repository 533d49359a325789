// Sampler: picks the next token from a row of logits. The chain, in order (llama.cpp semantics
// where llama.cpp has the step), each step keeping at least one candidate:
//   1. repetition penalty over the last repeat_last_n accepted tokens: each distinct token's
//      logit is divided by the penalty when > 0, else multiplied by it (1 = off);
//   2. temperature <= 0: greedy argmax, ties to the lowest id; stop here;  3. top-k (ties: lower
//      id first; k <= 0 keeps all);  4. softmax of logit / temperature;  5. top-p: the smallest
//      prefix by probability whose mass is >= top_p;  6. min-p: p >= min_p * the largest p;
//   7. a draw from the renormalized distribution with std::mt19937_64 seeded by `seed`.
// The steps are free functions in leoam::sampling, so tests can pin their kept sets. The draw uses
// only mt19937_64's raw output, so a seed gives the same tokens with every standard library.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace leoam {

struct SamplerOptions {
  float temperature = 0.8f;    // <= 0: greedy
  int top_k = 40;              // <= 0: keep all
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  int repeat_last_n = 64;      // tokens of history the penalty looks at; 0: off
  uint64_t seed = 0;
};

// One candidate token during sampling.
struct TokenCandidate {
  int32_t id = 0;
  float logit = 0.0f;
  float p = 0.0f;  // probability; valid after sampling::softmax
};

namespace sampling {

// Step 1. Penalizes, in place, each distinct token of `recent` (ids outside logits are ignored).
void apply_repeat_penalty(std::span<float> logits, std::span<const int32_t> recent, float penalty);

// Step 2. Index of the largest logit, the lowest such index on ties. logits must be non-empty.
int32_t argmax(std::span<const float> logits);

// All tokens as candidates, in id order.
std::vector<TokenCandidate> make_candidates(std::span<const float> logits);

// Step 3. Sorts by descending logit (ties: lower id first) and keeps the first k (k <= 0: all).
void top_k(std::vector<TokenCandidate>& candidates, int k);

// Step 4. Sets p = softmax(logit / temperature); temperature must be > 0. Keeps the order.
void softmax(std::vector<TokenCandidate>& candidates, float temperature);

// Step 5. candidates sorted by descending p (as top_k leaves them). Keeps the smallest prefix
// whose probability mass reaches top_p (at least one), then renormalizes. top_p >= 1: no-op.
void top_p(std::vector<TokenCandidate>& candidates, float top_p);

// Step 6. Keeps candidates with p >= min_p * max p (at least one), then renormalizes.
// min_p <= 0: no-op. Keeps the order.
void min_p(std::vector<TokenCandidate>& candidates, float min_p);

// Step 7. Picks a candidate with probability proportional to p, using one output of `rng`.
int32_t draw(const std::vector<TokenCandidate>& candidates, std::mt19937_64& rng);

}  // namespace sampling

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // The next token for `logits` (one row, n_vocab long). Does not change the logits or history.
  int32_t sample(std::span<const float> logits);

  // Adds a token to the history that the repetition penalty looks at (prompt tokens included,
  // as llama.cpp does).
  void accept(int32_t token);

  // The random generator's state as text (std::mt19937_64's operator<<: decimal numbers
  // separated by spaces, the same with every locale). Greedy sampling never changes it.
  std::string rng_state() const;
  // Continues the random stream from a state that rng_state() returned, so that a session stopped
  // after some tokens and resumed later draws what an unbroken one would have drawn. Fails with
  // kInvalidArgument, changing nothing, when `state` does not parse as a whole.
  [[nodiscard]] Status restore_rng_state(std::string_view state);

  const SamplerOptions& options() const { return options_; }
  // The last repeat_last_n accepted tokens, oldest first.
  const std::deque<int32_t>& recent_tokens() const { return recent_; }

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<float> scratch_logits_;          // [n_vocab] penalized copy of the logits
  std::vector<TokenCandidate> candidates_;     // reused across calls
};

}  // namespace leoam
