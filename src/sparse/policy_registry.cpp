#include "sparse/policy_registry.h"

#include <utility>

namespace leoam::sparse {

// Defined in each <name>_policy.cpp.
std::unique_ptr<SelectionPolicy> make_full_policy();
std::unique_ptr<SelectionPolicy> make_streaming_policy();
std::unique_ptr<SelectionPolicy> make_h2o_policy(bool chunked);
std::unique_ptr<SelectionPolicy> make_quest_policy(const PolicyOptions& options);
Result<std::unique_ptr<SelectionPolicy>> make_infinigen_policy(const PolicyOptions& options);
std::unique_ptr<SelectionPolicy> make_leoam_policy(const PolicyOptions& options);
Result<std::unique_ptr<SelectionPolicy>> make_oracle_policy(const PolicyOptions& options);
// Defined in leoam_policy.cpp: the block size of its trees' boxes at `layer` and a far budget.
int leoam_block_tokens(const PolicyOptions& options, int layer, int store_chunk_tokens, int64_t budget_tokens,
                       int64_t n_tokens);

namespace {

using Made = Result<std::unique_ptr<SelectionPolicy>>;

constexpr int kLeoamChunk = 8;        // LeoAM: chunks split down to 8 tokens
constexpr int kQuestPage = 16;        // Quest's pages are 16 tokens
constexpr int kStoreChunk = 64;       // the store's chunk where a policy reads no finer
constexpr int kChunksPerBudget = 16;  // leoam's finest leaves: at least this many fit the budget
constexpr int kFinestChunk = 2;

int store_chunk(const PolicyOptions&, int64_t) { return kStoreChunk; }

// The chunks leoam's adaptive tree splits down to: 8 tokens, finer where fewer than
// kChunksPerBudget would fit the budget (10% of 512 tokens would otherwise be 5 chunks of 8, too
// coarse to choose well: docs/policies.md#budgets). The oracle ranks the same chunks: what leoam
// could pick at best. infinigen picks tokens, so the store's fine grain keeps what it reads near
// what it attends.
int leoam_grain(int64_t budget_tokens) {
  int chunk = kLeoamChunk;
  while (chunk > kFinestChunk && int64_t{chunk} * kChunksPerBudget > budget_tokens) chunk /= 2;
  return chunk;
}

const PolicyInfo kPolicies[] = {
    {.name = "full",
     .dense = true,
     .chunk_tokens = store_chunk,
     .make = [](const PolicyOptions&) -> Made { return make_full_policy(); }},
    {.name = "streaming",
     .chunk_tokens = store_chunk,
     .make = [](const PolicyOptions&) -> Made { return make_streaming_policy(); }},
    {.name = "h2o",
     .chunk_tokens = store_chunk,
     .make = [](const PolicyOptions&) -> Made { return make_h2o_policy(false); }},
    {.name = "h2o-chunked",
     .needs_catalog = true,
     .chunk_tokens = store_chunk,
     .make = [](const PolicyOptions&) -> Made { return make_h2o_policy(true); }},
    {.name = "quest",
     .needs_catalog = true,
     .chunk_tokens = [](const PolicyOptions&, int64_t) { return kQuestPage; },
     .make = [](const PolicyOptions& o) -> Made { return make_quest_policy(o); }},
    {.name = "infinigen",
     .chunk_tokens = [](const PolicyOptions&, int64_t) { return kLeoamChunk; },
     .make = make_infinigen_policy},
    {.name = "leoam",
     .needs_catalog = true,
     .chunk_tokens = [](const PolicyOptions& o, int64_t budget) { return o.adaptive ? leoam_grain(budget) : kStoreChunk; },
     .scores_every_abstract = [](const PolicyOptions& o) { return !o.adaptive; },
     .abstract_tokens =
         [](const PolicyOptions& o, int layer, int chunk_tokens, int64_t budget_tokens, int64_t n_tokens) {
           return o.adaptive ? leoam_block_tokens(o, layer, chunk_tokens, budget_tokens, n_tokens) : chunk_tokens;
         },
     .make = [](const PolicyOptions& o) -> Made { return make_leoam_policy(o); }},
    {.name = "oracle",
     .needs_catalog = true,
     .chunk_tokens = [](const PolicyOptions&, int64_t budget) { return leoam_grain(budget); },
     .make = make_oracle_policy},
};

}  // namespace

std::span<const PolicyInfo> policies() { return kPolicies; }

std::string policy_names() {
  std::string names;
  for (const PolicyInfo& p : kPolicies) names += (names.empty() ? "" : " ") + std::string(p.name);
  return names;
}

bool is_dense_policy(std::string_view name) {
  const Result<const PolicyInfo*> p = find_policy(name);
  return p.is_ok() && (*p)->dense;
}

Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(std::string_view name, const PolicyOptions& options) {
  LEOAM_ASSIGN_OR_RETURN(const PolicyInfo* p, find_policy(name));
  return p->make(options);
}

Result<const PolicyInfo*> find_policy(std::string_view name) {
  for (const PolicyInfo& p : kPolicies) {
    if (p.name == name) return &p;
  }
  return invalid_argument("selection policy '" + std::string(name) + "' is unknown; known policies: " +
                          policy_names());
}

}  // namespace leoam::sparse
