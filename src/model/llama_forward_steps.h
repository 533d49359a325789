// Internal to the llama forward pass (llama_forward.cpp, llama_forward_layered.cpp,
// llama_forward_batch.cpp): the row loop and the selector feed that its paths share.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/attention_selector.h"

namespace leoam::detail {

// fn(t) for each token row t in [0, n_rows), rows split across the pool when that pays.
template <typename Fn>
void for_each_row(ThreadPool& pool, int64_t n_rows, int64_t cost_per_row, const Fn& fn) {
  pool.parallel_for(n_rows, cost_per_row, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) fn(t);
  });
}

// Positions [pos, pos + n)'s keys and values, just appended to `layer`, to a selector that
// watches them (SelectorNeeds keys, values).
inline Status observe_appended(AttentionSelector* selector, int layer, int64_t pos, int64_t n,
                               const float* k, const float* v) {
  if (selector == nullptr) return Status::ok();
  const SelectorNeeds needs = selector->needs();
  if (needs.keys) LEOAM_RETURN_IF_ERROR(selector->observe_keys(layer, pos, n, k));
  if (needs.values) LEOAM_RETURN_IF_ERROR(selector->observe_values(layer, pos, n, v));
  return Status::ok();
}

}  // namespace leoam::detail
