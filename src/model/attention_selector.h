// AttentionSelector: the seam through which sparse attention policies choose, per layer and decode
// step, which positions a query attends to. The forward pass asks it once per layer when it
// decodes one token; without a selector (or in prefill) attention covers every position.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange

namespace leoam {

class AttentionSelector {
 public:
  virtual ~AttentionSelector() = default;
  // The positions of `layer` that the query at position `pos` attends to: sorted, disjoint ranges
  // inside [0, pos], always including pos itself. q: [n_head][head_dim], post-RoPE.
  virtual Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float* q) = 0;
};

}  // namespace leoam
