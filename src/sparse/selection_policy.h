// Selection policies: at each decode step, for each layer, which far-away KV the query attends to.
// A policy sees the query of every query head and the chunk catalog of the layer (chunk ranges,
// tiers, abstracts; kv/kv_catalog.h), never file descriptors, and returns token ranges within a
// budget. SparseAttention (sparse_attention.h) adds the sink and the recent window, which are
// always attended, and the store gathers the result; attention is then exact over that set.
//
//   positions  [0 ........ n_sink) [ .......... far ............ ) [n - n_recent ..... n)
//              sink: always          the policy picks up to          recent: always
//                                    budget_tokens of these
//
// Policies (make_selection_policy):
//   full       every far token (on a mostly-disk store: the FlexGen-like full-offload baseline)
//   streaming  none (StreamingLLM: sink + recent window only)
//   quest      Quest: chunks ranked by the bound of chunk_bound.h, per query head; a chunk's
//              score is its best rank-normalized bound over all query heads; top chunks until the
//              budget is filled (the ranking stops at the first chunk that does not fit, and an
//              edge chunk partly outside far counts only its far tokens; chunk_ranking.h)
//   leoam      the same ranking, GQA-aware (per KV head, the bounds of its query heads combined by
//              max or sum), with attention-desert detection (no far KV when the far chunks'
//              bounded mass is negligible next to the near window's)
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange
#include "kv/kv_catalog.h"
#include "sparse/chunk_bound.h"

namespace leoam::sparse {

struct SelectionQuery {
  int layer = 0;
  int64_t step = 0;       // decode steps since the prompt: 0 for the first generated token
  int64_t n_tokens = 0;   // the query sees positions [0, n_tokens) of the layer
  const float* q = nullptr;  // [n_head][head_dim], post-RoPE
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;     // applied to q.k before the softmax
  TokenRange far;         // the positions the policy chooses from: between the sink and the recent window
  int64_t budget_tokens = 0;  // far tokens the policy may pick at most (whole chunks may round down)
};

struct Selection {
  std::vector<TokenRange> ranges;  // sorted, disjoint, inside query.far
  bool desert = false;             // the policy judged that no far token matters
  int64_t n_chunks_scored = 0;     // chunks whose bounds were computed: the far chunks, or with
                                   // leoam's desert check every chunk of [0, n_tokens)
};

struct PolicyOptions {
  GroupCombine group_combine = GroupCombine::kMax;  // leoam: how a GQA group's bounds combine
  bool desert = true;                               // leoam: detect attention deserts
  // A desert: for every query head, the far chunks' bounded attention mass is below this
  // fraction of the near window's lower-bounded mass.
  double desert_mass = 0.01;
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Picks far ranges for one query. Fails on catalog errors (an abstract that cannot be read).
  virtual Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) = 0;
};

// "full streaming quest leoam"
const char* selection_policy_names();
// Fails, naming the known policies, for an unknown name.
Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(std::string_view name, const PolicyOptions& options);

}  // namespace leoam::sparse
