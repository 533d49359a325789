// The policy factory. Each policy lives in its own <name>_policy.cpp, which defines its maker.
#include "sparse/selection_policy.h"

#include <string>

namespace leoam::sparse {

// Defined in full_policy.cpp, streaming_policy.cpp, h2o_policy.cpp, quest_policy.cpp,
// infinigen_policy.cpp, leoam_policy.cpp, oracle_policy.cpp.
std::unique_ptr<SelectionPolicy> make_full_policy();
std::unique_ptr<SelectionPolicy> make_streaming_policy();
std::unique_ptr<SelectionPolicy> make_h2o_policy(bool chunked);
std::unique_ptr<SelectionPolicy> make_quest_policy(const PolicyOptions& options);
Result<std::unique_ptr<SelectionPolicy>> make_infinigen_policy(const PolicyOptions& options);
std::unique_ptr<SelectionPolicy> make_leoam_policy(const PolicyOptions& options);
Result<std::unique_ptr<SelectionPolicy>> make_oracle_policy(const PolicyOptions& options);
// Defined in leoam_policy.cpp: the block size of its trees' boxes at `layer` and a far budget.
int leoam_block_tokens(const PolicyOptions& options, int layer, int store_chunk_tokens, int64_t budget_tokens,
                       int64_t far_tokens);

namespace {

class NoChunkCatalog final : public KvCatalog {
 public:
  int chunk_tokens() const override { return 1; }
  int catalog_kv_heads() const override { return 0; }
  int catalog_head_dim() const override { return 0; }
  int64_t n_chunks(int) const override { return 0; }
  Tier chunk_tier(int, int64_t) const override { return Tier::kDevice; }
  Status load_abstracts(int, int64_t, int64_t, float*, AbstractSource, uint32_t*) override {
    return unsupported("this KV store keeps no chunk abstracts; use the tiered store (--kv-dir)");
  }
  void raise_importance(ChunkKey, float) override {}
};

}  // namespace

KvCatalog& no_chunk_catalog() {
  static NoChunkCatalog catalog;  // stateless
  return catalog;
}

const char* selection_policy_names() { return "full streaming h2o h2o-chunked quest infinigen leoam oracle"; }

bool selection_policy_needs_catalog(std::string_view name) {
  return name == "quest" || name == "leoam" || name == "h2o-chunked" || name == "oracle";
}

bool selection_policy_scores_every_abstract(std::string_view name, bool adaptive) {
  return name == "leoam" && !adaptive;
}

int selection_policy_abstract_tokens(std::string_view name, const PolicyOptions& options, int layer, int chunk_tokens,
                                     int64_t budget_tokens, int64_t far_tokens) {
  if (name == "leoam" && options.adaptive) {
    return leoam_block_tokens(options, layer, chunk_tokens, budget_tokens, far_tokens);
  }
  return chunk_tokens;
}

Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(std::string_view name, const PolicyOptions& options) {
  if (name == "full") return make_full_policy();
  if (name == "streaming") return make_streaming_policy();
  if (name == "h2o") return make_h2o_policy(false);
  if (name == "h2o-chunked") return make_h2o_policy(true);
  if (name == "quest") return make_quest_policy(options);
  if (name == "infinigen") return make_infinigen_policy(options);
  if (name == "leoam") return make_leoam_policy(options);
  if (name == "oracle") return make_oracle_policy(options);
  return invalid_argument("selection policy '" + std::string(name) + "' is unknown; known policies: " +
                          selection_policy_names());
}

}  // namespace leoam::sparse
