// leoam: LeoAM's GQA-aware chunk selection with attention-desert detection.
//
// Ranking: per KV head, the upper bounds of its query heads combine into one bound per chunk
// (PolicyOptions::group_combine: max, or sum, a bound on the group's summed q.k), normalized to
// the kv head's best chunk; a chunk scores its best rank over the kv heads, and the best chunks
// fill the budget (chunk_ranking.h).
//
// Desert detection, from abstracts alone: for query head h, with m = its largest upper bound over
// every chunk of [0, n_tokens),
//
//   near_lower = sum over chunks of (tokens in the near window) * exp(scale * (lower - m))
//   far_upper  = sum over chunks of (tokens in far)             * exp(scale * (upper - m))
//
// (near = [0, n_tokens) outside far: the sink and the recent window). far_upper bounds the far
// softmax mass from above and near_lower the near mass from below, both times exp(-scale * m) /
// the denominator, so far_upper < desert_mass * near_lower proves that far keys hold less than
// desert_mass of the near keys' mass. When that holds for every query head, the step reads no
// far KV. The check needs the abstracts of every chunk, not only the far ones: the selection
// then counts all of them in n_chunks_scored.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "sparse/chunk_ranking.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class LeoamPolicy final : public SelectionPolicy {
 public:
  explicit LeoamPolicy(const PolicyOptions& options) : options_(options) {}

  std::string_view name() const override { return "leoam"; }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    Selection s;
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return s;
    const int chunk_tokens = catalog.chunk_tokens();
    const ChunkSpan far = chunks_overlapping(query.far, chunk_tokens);
    const ChunkSpan loaded = options_.desert ? chunks_overlapping({0, query.n_tokens}, chunk_tokens) : far;
    LEOAM_ASSIGN_OR_RETURN(const SpanAbstracts abstracts, load_span(catalog, query.layer, loaded));
    s.n_chunks_scored = loaded.size();
    if (options_.desert && is_desert(query, abstracts, chunk_tokens)) {
      s.desert = true;
      return s;
    }
    const int group = query.n_head / query.n_head_kv;
    std::vector<float> bounds(static_cast<size_t>(far.size()));
    std::vector<float> scores(bounds.size(), -std::numeric_limits<float>::infinity());
    for (int g = 0; g < query.n_head_kv; ++g) {
      chunk_bounds(query.q, g * group, (g + 1) * group, g, abstracts.at(far.i0), far.size(), abstracts.layout,
                   options_.group_combine, bounds.data());
      fold_normalized(bounds, query.scale, scores);
    }
    s.ranges = pick_top_chunks(scores, far, query.far, chunk_tokens, query.budget_tokens);
    return s;
  }

 private:
  // True when, for every query head, the far chunks' bounded mass is below desert_mass of the
  // near window's (the header comment). `abstracts` spans every chunk of [0, n_tokens).
  bool is_desert(const SelectionQuery& query, const SpanAbstracts& abstracts, int chunk_tokens) const {
    const ChunkSpan all = abstracts.span;
    const int group = query.n_head / query.n_head_kv;
    std::vector<float> upper(static_cast<size_t>(all.size()));
    std::vector<float> lower(upper.size());
    for (int h = 0; h < query.n_head; ++h) {
      chunk_bounds(query.q, h, h + 1, h / group, abstracts.at(all.i0), all.size(), abstracts.layout,
                   GroupCombine::kMax, upper.data(), BoundSide::kUpper);
      chunk_bounds(query.q, h, h + 1, h / group, abstracts.at(all.i0), all.size(), abstracts.layout,
                   GroupCombine::kMax, lower.data(), BoundSide::kLower);
      const double m = *std::max_element(upper.begin(), upper.end());
      double near_lower = 0.0;
      double far_upper = 0.0;
      for (int64_t i = 0; i < all.size(); ++i) {
        const int64_t index = all.i0 + i;
        const int64_t n_far = chunk_part(index, query.far, chunk_tokens).size();
        const int64_t n_near = chunk_part(index, {0, query.n_tokens}, chunk_tokens).size() - n_far;
        near_lower += static_cast<double>(n_near) * std::exp(query.scale * (lower[i] - m));
        far_upper += static_cast<double>(n_far) * std::exp(query.scale * (upper[i] - m));
      }
      if (!(far_upper < options_.desert_mass * near_lower)) return false;
    }
    return true;
  }

  PolicyOptions options_;
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_leoam_policy(const PolicyOptions& options) {
  return std::make_unique<LeoamPolicy>(options);
}

}  // namespace leoam::sparse
