// The policy factory. Each policy lives in its own <name>_policy.cpp, which defines its maker.
#include "sparse/selection_policy.h"

#include <string>

namespace leoam::sparse {

// Defined in full_policy.cpp, streaming_policy.cpp, quest_policy.cpp, leoam_policy.cpp.
std::unique_ptr<SelectionPolicy> make_full_policy();
std::unique_ptr<SelectionPolicy> make_streaming_policy();
std::unique_ptr<SelectionPolicy> make_quest_policy();
std::unique_ptr<SelectionPolicy> make_leoam_policy(const PolicyOptions& options);

const char* selection_policy_names() { return "full streaming quest leoam"; }

Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(std::string_view name, const PolicyOptions& options) {
  if (name == "full") return make_full_policy();
  if (name == "streaming") return make_streaming_policy();
  if (name == "quest") return make_quest_policy();
  if (name == "leoam") return make_leoam_policy(options);
  return invalid_argument("selection policy '" + std::string(name) + "' is unknown; known policies: " +
                          selection_policy_names());
}

}  // namespace leoam::sparse
