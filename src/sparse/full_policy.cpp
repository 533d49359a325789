// full: every far token, whatever the budget (on a mostly-disk store, the FlexGen-like
// full-offload baseline). It reads no abstracts.
#include <memory>

#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

class FullPolicy final : public SelectionPolicy {
 public:
  std::string_view name() const override { return "full"; }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& /*catalog*/) override {
    Selection s;
    if (query.far.size() > 0) s.ranges.push_back(query.far);
    return s;
  }
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_full_policy() { return std::make_unique<FullPolicy>(); }

}  // namespace leoam::sparse
