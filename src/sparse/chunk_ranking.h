// What the chunk-ranking policies (quest, leoam) share: which chunks a token range covers, loading
// the abstracts of a chunk span in one catalog call, normalizing bounds into log-mass scores, and
// picking the best chunks within a token budget.
//
//   chunk      [i*C ..... (i+1)*C)
//   far             [begin ................................ end)
//   span       | i0 |      ...      |      ...      | i1 - 1 |      chunks [i0, i1) overlap far;
//                 ^ partly in far                      ^       an edge chunk counts only its
//                                                              tokens inside far
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange
#include "kv/kv_catalog.h"
#include "sparse/chunk_bound.h"
#include "sparse/selection_policy.h"
#include "sparse/sign_bound.h"

namespace leoam::sparse {

// Chunks [i0, i1) of a layer.
struct ChunkSpan {
  int64_t i0 = 0;
  int64_t i1 = 0;

  int64_t size() const { return i1 - i0; }
};

// The chunks whose positions overlap `range` (empty for an empty range).
ChunkSpan chunks_overlapping(TokenRange range, int chunk_tokens);

// The positions of chunk `index` inside `range` (possibly empty).
TokenRange chunk_part(int64_t index, TokenRange range, int chunk_tokens);

// Invalid argument when the query does not fit the catalog: head counts or head_dim differ,
// n_head is not a multiple of n_head_kv, far is not inside [0, n_tokens), or the layer holds
// fewer chunks than [0, n_tokens) needs.
Status check_query(const SelectionQuery& query, const KvCatalog& catalog);

// The abstracts of a chunk span, as load_abstracts lays them out, and where chunk_bounds finds them.
struct SpanAbstracts {
  ChunkSpan span;
  BoundLayout layout;
  std::vector<float> data;  // [span.size()][2][n_kv_heads][head_dim]
  int chunk_tokens = 0;
  std::vector<uint32_t> sign_words;  // with key signs: [span positions][n_kv_heads][sign_words_per_head]

  // The abstracts of chunk `index` onwards (span.i0 <= index < span.i1).
  const float* at(int64_t index) const { return data.data() + (index - span.i0) * layout.chunk_stride; }
  // Where sign_bounds finds the key signs (words null without them).
  SignSketch signs() const {
    return SignSketch::of(sign_words.empty() ? nullptr : sign_words.data(), span.i0 * chunk_tokens, layout.n_kv_heads,
                          layout.head_dim);
  }
};

// One load_abstracts call over the whole span; with key_signs (the catalog must has_key_signs())
// the key sign sketch too.
Result<SpanAbstracts> load_span(KvCatalog& catalog, int layer, ChunkSpan span, AbstractSource source,
                                bool key_signs = false);

// scores[i] = max(scores[i], (bounds[i] - max_j bounds[j]) * scale): a head's bounds become log
// attention-mass upper bounds relative to its best chunk, folded into the chunk scores by max.
void fold_normalized(std::span<const float> bounds, float scale, std::span<float> scores);

// The chunks of `span` (scores[i] for chunk span.i0 + i) in decreasing score, ties to the lower
// index, taken while the far tokens they hold stay within budget_tokens; the ranking stops at the
// first chunk that does not fit, so a selection is always a prefix of the ranking. The best chunk
// is taken even when it alone holds more than the budget (a budget below one chunk would
// otherwise select nothing: the selection's grain is the chunk). Returns the
// chunks' parts inside `far`, sorted, with adjacent parts merged.
std::vector<TokenRange> pick_top_chunks(std::span<const float> scores, ChunkSpan span, TokenRange far,
                                        int chunk_tokens, int64_t budget_tokens);

// pick_top_chunks over chunks of any size (an adaptive chunk tree's leaves, chunk_tree.h):
// units[i] (sorted, disjoint, each overlapping far) scores scores[i]; the same ranking, budget and
// stop rule, each unit counting only its tokens inside far. The best unit is taken over the
// budget only when it is no larger than unsplittable_tokens (a larger one selects nothing: the
// tree splits it, until it fits or cannot split).
struct RangePick {
  std::vector<int64_t> picked;     // indices into units, ascending
  std::vector<TokenRange> ranges;  // their parts inside far, sorted, adjacent parts merged
};
RangePick pick_top_ranges(std::span<const float> scores, std::span<const TokenRange> units, TokenRange far,
                          int64_t budget_tokens, int64_t unsplittable_tokens);

}  // namespace leoam::sparse
