// quest: Quest's query-aware chunk selection. Every query head ranks the far chunks by the upper
// bound of its kv head's abstracts, normalized to its own best chunk; a chunk scores its best
// rank over the heads, so a chunk that one head needs is kept even when the others prefer
// different chunks.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "sparse/chunk_ranking.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class QuestPolicy final : public SelectionPolicy {
 public:
  explicit QuestPolicy(const PolicyOptions& options)
      : source_(options.lka ? AbstractSource::kLka : AbstractSource::kKv) {}

  std::string_view name() const override { return "quest"; }
  // Nothing between steps; a step holds the far chunks' abstracts, read again each time.
  PolicyMemory memory() const override { return {0, peak_bytes_}; }

  // Quest keeps no state: its forecast is its selection.
  Result<std::optional<Selection>> predict(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_ASSIGN_OR_RETURN(Selection s, select(query, catalog));
    return std::optional<Selection>(std::move(s));
  }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    Selection s;
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return s;
    const ChunkSpan far = chunks_overlapping(query.far, catalog.chunk_tokens());
    LEOAM_ASSIGN_OR_RETURN(const SpanAbstracts abstracts, load_span(catalog, query.layer, far, source_));
    const int group = query.n_head / query.n_head_kv;
    std::vector<float> bounds(static_cast<size_t>(far.size()));
    std::vector<float> scores(bounds.size(), -std::numeric_limits<float>::infinity());
    for (int h = 0; h < query.n_head; ++h) {
      chunk_bounds(query.q + static_cast<int64_t>(h) * query.head_dim, h / group, abstracts.at(far.i0), far.size(),
                   abstracts.layout, bounds.data());
      fold_normalized(bounds, query.scale, scores);
    }
    s.ranges = pick_top_chunks(scores, far, query.far, catalog.chunk_tokens(), query.budget_tokens);
    s.n_chunks_scored = far.size();
    peak_bytes_ = std::max(peak_bytes_, capacity_bytes(abstracts.data) + capacity_bytes(bounds) + capacity_bytes(scores));
    return s;
  }

 private:
  AbstractSource source_;
  uint64_t peak_bytes_ = 0;
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_quest_policy(const PolicyOptions& options) {
  return std::make_unique<QuestPolicy>(options);
}

}  // namespace leoam::sparse
