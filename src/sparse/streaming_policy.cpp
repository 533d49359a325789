// streaming: StreamingLLM, the sink and a sliding window. The window is the recent window
// stretched back over the far budget: the budget_tokens far positions nearest the recent window
// (none at a budget that the sink and recent window use up; all of them at a full budget). It
// reads no abstracts.
#include <algorithm>
#include <memory>

#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class StreamingPolicy final : public SelectionPolicy {
 public:
  std::string_view name() const override { return "streaming"; }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& /*catalog*/) override {
    Selection s;
    const int64_t n = std::min(query.budget_tokens, query.far.size());
    if (n > 0) s.ranges.push_back({query.far.end - n, query.far.end});
    return s;
  }
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_streaming_policy() { return std::make_unique<StreamingPolicy>(); }

}  // namespace leoam::sparse
