// The selection policies in one table: each one's name, what it needs of the KV store, the chunk
// it reads best at a budget, the grain of its disk abstracts, and its maker. The CLI, the engine
// and the store ask this table; no caller compares policy names. The policies: docs/policies.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {

struct PolicyInfo {
  std::string_view name;
  // Attends every position: no selector and no chunk catalog (full). Runs as dense attention.
  bool dense = false;
  // Works on the store's chunks (their abstracts or their grain): needs the tiered store.
  bool needs_catalog = false;
  // The store's chunk, in tokens, that the policy reads best at a far budget of budget_tokens.
  int (*chunk_tokens)(const PolicyOptions& options, int64_t budget_tokens) = nullptr;
  // Whether it scores every far chunk's abstract at every step from the store (leoam without its
  // trees), not once into state of its own: the store keeps the device and host chunks'
  // abstracts (TieredKvCacheOptions::keep_abstracts).
  bool (*scores_every_abstract)(const PolicyOptions& options) = [](const PolicyOptions&) { return false; };
  // The positions one disk abstract record of `layer` covers (TieredKvCacheOptions::
  // abstract_tokens) for a store of chunk_tokens chunks, a context of n_tokens and a far budget
  // of budget_tokens: leoam's trees (as they are at that context) keep a box per block and read their chunks' abstracts only to union
  // them into blocks, so a record per block loses them nothing. Every other policy: a chunk.
  int (*abstract_tokens)(const PolicyOptions& options, int layer, int chunk_tokens, int64_t budget_tokens,
                         int64_t n_tokens) = [](const PolicyOptions&, int, int chunk_tokens, int64_t, int64_t) {
    return chunk_tokens;
  };
  Result<std::unique_ptr<SelectionPolicy>> (*make)(const PolicyOptions& options) = nullptr;
};

// Every policy, in the order --help lists them.
std::span<const PolicyInfo> policies();

// The policy called `name`; fails naming the known ones.
Result<const PolicyInfo*> find_policy(std::string_view name);

// The known names, space-separated: "full streaming h2o ...".
std::string policy_names();

// Whether `name` is a known policy that attends every position (PolicyInfo::dense): the
// reference the others are measured against.
bool is_dense_policy(std::string_view name);

}  // namespace leoam::sparse
