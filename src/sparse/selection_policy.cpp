// The catalog of a store without chunks. The policies are made in policy_registry.cpp.
#include "sparse/selection_policy.h"

#include <string>

namespace leoam::sparse {

namespace {

class NoChunkCatalog final : public KvCatalog {
 public:
  int chunk_tokens() const override { return 1; }
  int catalog_kv_heads() const override { return 0; }
  int catalog_head_dim() const override { return 0; }
  int64_t n_chunks(int) const override { return 0; }
  Tier chunk_tier(int, int64_t) const override { return Tier::kDevice; }
  Status load_abstracts(int, int64_t, int64_t, float*, AbstractSource, uint32_t*) override {
    return unsupported("this KV store keeps no chunk abstracts; use the tiered store").about(Setting::kKvDir);
  }
  void raise_importance(ChunkKey, float) override {}
};

}  // namespace

KvCatalog& no_chunk_catalog() {
  static NoChunkCatalog catalog;  // stateless
  return catalog;
}

}  // namespace leoam::sparse
