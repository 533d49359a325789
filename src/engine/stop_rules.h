// When a sequence stops decoding: the rules the single-sequence generator, the batch generator
// and the scheduler all apply, so that they stop alike. Before a token is sampled, it stops when
// n_predict tokens are out or the context is full; after one, when it ended the generation or
// was the last asked for (that token needs no decode step).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

namespace leoam {

enum class StopReason : uint8_t {
  kEndOfGeneration,  // sampled an EOG token
  kMaxTokens,        // generated n_predict tokens
  kContextFull,      // no room left in the context for another token
  kInterrupted,      // the caller asked to stop
};

struct StopRules {
  int64_t n_predict = -1;  // tokens to generate; negative: until the context is full or an EOG token

  // Why no token may be sampled after n_generated, with n_past of n_ctx positions held; none
  // when one may.
  std::optional<StopReason> before_sample(int64_t n_generated, int64_t n_past, int64_t n_ctx) const {
    if (n_predict >= 0 && n_generated >= n_predict) return StopReason::kMaxTokens;
    if (n_past >= n_ctx) return StopReason::kContextFull;
    return std::nullopt;
  }

  // Why the sequence stops after sampling its n_generated-th token (`eog`: an end-of-generation
  // token); none when it goes on to a decode step.
  std::optional<StopReason> after_token(bool eog, int64_t n_generated) const {
    if (eog) return StopReason::kEndOfGeneration;
    if (n_predict >= 0 && n_generated >= n_predict) return StopReason::kMaxTokens;
    return std::nullopt;
  }

  // The tokens a sequence may still sample after the one it samples next, with n_generated
  // sampled and n_past of n_ctx positions held now.
  int64_t tokens_left(int64_t n_generated, int64_t n_past, int64_t n_ctx) const {
    int64_t left = n_ctx - n_past - 1;
    if (n_predict >= 0) left = std::min(left, n_predict - n_generated - 1);
    return left;
  }
};

}  // namespace leoam
