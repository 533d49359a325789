#include "sparse/sparse_attention.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kv/kv_stats.h"  // human_bytes
#include "sparse/budget_schedule.h"
#include "sparse/policy_registry.h"

namespace leoam::sparse {
namespace {

// Appends r to sorted, disjoint `out`, merging it with the last range when they touch.
void append_merged(std::vector<TokenRange>& out, TokenRange r) {
  if (r.end <= r.begin) return;
  if (!out.empty() && out.back().end >= r.begin) {
    out.back().end = std::max(out.back().end, r.end);
  } else {
    out.push_back(r);
  }
}

}  // namespace

SparseAttention::SparseAttention(const SparseAttentionOptions& options, KvCatalog* catalog, const AttentionShape& shape,
                                 std::unique_ptr<SelectionPolicy> policy)
    : options_(options),
      catalog_(catalog),
      shape_(shape),
      policy_(std::move(policy)),
      stats_(static_cast<size_t>(shape.n_layer)) {}

Result<std::unique_ptr<SparseAttention>> SparseAttention::create(const SparseAttentionOptions& options,
                                                                 KvCatalog* catalog, const AttentionShape& shape) {
  LEOAM_ASSIGN_OR_RETURN(const PolicyInfo* info, find_policy(options.policy));
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<SelectionPolicy> policy, info->make(options.policy_options));
  if (options.explain.out != nullptr) {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<SelectionPolicy> oracle,
                           make_selection_policy("oracle", options.policy_options));
    policy = make_selection_explainer(std::move(policy), std::move(oracle), options.explain.target,
                                      options.explain.n_steps, options.explain.out);
  }
  if (const std::string why = budget_error(options.budget); !why.empty()) {
    return invalid_argument("the attention budget " + why);
  }
  for (const auto& [layer, budget] : options.layer_budgets) {
    if (layer < 0 || layer >= shape.n_layer) {
      return invalid_argument("layer budget for layer " + std::to_string(layer) + ": the model has " +
                              std::to_string(shape.n_layer) + " layers");
    }
    if (const std::string why = budget_error(budget); !why.empty()) {
      return invalid_argument("the budget of layer " + std::to_string(layer) + " " + why);
    }
  }
  if (options.n_sink < 0 || options.n_recent < 1) {
    return invalid_argument("the sink must not be negative and the recent window must hold at least the query");
  }
  if (catalog == nullptr && info->needs_catalog) {
    return invalid_argument("policy '" + options.policy + "' scores chunk abstracts: it needs the tiered KV store");
  }
  return std::unique_ptr<SparseAttention>(new SparseAttention(options, catalog, shape, std::move(policy)));
}

void SparseAttention::hint_importance(int layer, std::span<const TokenRange> ranges, KvCatalog& catalog) {
  const int64_t c = catalog.chunk_tokens();
  int64_t last = -1;
  for (const TokenRange& r : ranges) {
    for (int64_t i = std::max(r.begin / c, last + 1); i * c < r.end; ++i) {
      catalog.raise_importance({layer, i}, 1.0f);
      last = i;
    }
  }
}

SparseAttention::Window SparseAttention::window(int64_t n) const {
  Window w;
  w.sink = {0, std::min<int64_t>(options_.n_sink, n)};
  w.recent = {std::max(w.sink.end, n - options_.n_recent), n};
  w.far = {w.sink.end, w.recent.begin};
  return w;
}

int64_t SparseAttention::far_budget(int layer, int64_t n_far) const {
  const auto it = options_.layer_budgets.find(layer);
  return far_budget_tokens(it != options_.layer_budgets.end() ? it->second : options_.budget, n_far);
}

void SparseAttention::begin_position(int64_t pos) {
  if (pos < last_pos_) reset_sequence();  // a position that goes back: a new sequence
  if (first_decode_pos_ < 0) first_decode_pos_ = pos;
  last_pos_ = pos;
  seen_end_ = std::max(seen_end_, pos + 1);
}

void SparseAttention::reset_sequence() {
  first_decode_pos_ = -1;
  last_pos_ = -1;
  seen_end_ = 0;
  policy_->reset();
}

void SparseAttention::truncate(int64_t n_tokens) {
  if (n_tokens < seen_end_) reset_sequence();
}

PolicyMemory SparseAttention::memory() const {
  PolicyMemory m = policy_->memory();
  m.peak_bytes = std::max(m.peak_bytes, peak_bytes_);
  return m;
}

Status SparseAttention::check_memory() {
  const PolicyMemory m = memory();
  peak_bytes_ = m.peak_bytes;
  if (options_.memory_budget_bytes > 0 && m.peak_bytes > options_.memory_budget_bytes) {
    return resource_exhausted("policy '" + options_.policy + "' held " + human_bytes(m.peak_bytes) +
                              " about the KV (its trees, abstracts, scores or partial keys), past its budget of " +
                              human_bytes(options_.memory_budget_bytes) + "; raise the budget")
        .about(Setting::kKvMetaBudget);
  }
  return Status::ok();
}

Status SparseAttention::observe_keys(int layer, int64_t pos0, int64_t n, const float* k) {
  LEOAM_RETURN_IF_ERROR(policy_->observe_keys(layer, pos0, n, k));
  return check_memory();
}

Status SparseAttention::observe_stored(int layer, int64_t n_tokens) {
  if (layer < 0 || layer >= shape_.n_layer || n_tokens < 0) {
    return invalid_argument("sparse attention: bad layer or position");
  }
  if (n_tokens == 0) return Status::ok();
  // The far budget of a query at n_tokens - 1.
  KvCatalog& catalog = catalog_ != nullptr ? *catalog_ : no_chunk_catalog();
  seen_end_ = std::max(seen_end_, n_tokens);
  LEOAM_RETURN_IF_ERROR(
      policy_->observe_stored(layer, n_tokens, far_budget(layer, window(n_tokens).far.size()), catalog));
  return check_memory();
}

Status SparseAttention::observe_layer_input(int layer, int64_t pos, const float* x) {
  if (layer < 0 || layer >= shape_.n_layer || pos < 0) return invalid_argument("sparse attention: bad layer or position");
  begin_position(pos);
  LEOAM_RETURN_IF_ERROR(policy_->observe_layer_input(layer, pos, x));
  return check_memory();
}

SelectionQuery SparseAttention::make_query(int layer, int64_t pos, int64_t n_tokens, const float* q, TokenRange far,
                                           ThreadPool& pool) const {
  SelectionQuery query;
  query.layer = layer;
  query.step = first_decode_pos_ >= 0 ? pos - first_decode_pos_ : 0;
  query.n_tokens = n_tokens;
  query.q = q;
  query.n_head = shape_.n_head;
  query.n_head_kv = shape_.n_head_kv;
  query.head_dim = shape_.head_dim;
  query.scale = shape_.scale;
  query.softcap = shape_.softcap;
  query.far = far;
  query.budget_tokens = far_budget(layer, far.size());
  query.pool = &pool;
  return query;
}

Result<std::vector<TokenRange>> SparseAttention::forecast(int layer, int64_t pos, int64_t n_stored, const float* q,
                                                          ThreadPool& pool, bool keep) {
  if (layer < 0 || layer >= shape_.n_layer || pos < 0 || n_stored < pos || n_stored > pos + 1) {
    return invalid_argument("sparse attention: bad layer or position");
  }
  const TokenRange far = window(pos + 1).far;  // inside [0, pos): the recent window holds pos
  LEOAM_ASSIGN_OR_RETURN(std::optional<Selection> predicted, predict(layer, pos, n_stored, q, far, pool));
  if (!predicted) return std::vector<TokenRange>();
  if (keep) hint_importance(layer, predicted->ranges, *catalog_);
  LEOAM_RETURN_IF_ERROR(check_memory());
  return std::move(predicted->ranges);
}

Result<std::optional<Selection>> SparseAttention::predict(int layer, int64_t pos, int64_t n_stored, const float* q,
                                                          TokenRange far, ThreadPool& pool) {
  // Nothing to choose, no store to hint, or a budget that reads every far chunk alike.
  if (far.size() == 0 || catalog_ == nullptr) return std::optional<Selection>();
  const SelectionQuery query = make_query(layer, pos, n_stored, q, far, pool);
  if (query.budget_tokens >= far.size()) return std::optional<Selection>();
  return policy_->predict(query, *catalog_);
}

Result<std::vector<TokenRange>> SparseAttention::select_continuation(int layer, int64_t pos0, int64_t n,
                                                                     const float* q_last, ThreadPool& pool) {
  if (layer < 0 || layer >= shape_.n_layer || pos0 < 0 || n < 1) {
    return invalid_argument("sparse attention: bad layer or positions");
  }
  const int64_t last = pos0 + n - 1;
  auto [sink, recent, far] = window(last + 1);
  far.end = std::max(far.begin, std::min(far.end, pos0));  // the rows themselves are not chosen from
  LEOAM_ASSIGN_OR_RETURN(std::optional<Selection> predicted, predict(layer, last, last + 1, q_last, far, pool));
  if (!predicted) return std::vector<TokenRange>();
  LEOAM_RETURN_IF_ERROR(check_memory());
  std::vector<TokenRange> ranges;
  append_merged(ranges, sink);
  for (const TokenRange& r : predicted->ranges) append_merged(ranges, r);
  append_merged(ranges, {far.end, last + 1});
  return ranges;
}

Result<std::vector<TokenRange>> SparseAttention::select(int layer, int64_t pos, const float* q,
                                                        ThreadPool& pool) {
  if (layer < 0 || layer >= shape_.n_layer || pos < 0) return invalid_argument("sparse attention: bad layer or position");
  begin_position(pos);

  const int64_t n = pos + 1;
  const auto [sink, recent, far] = window(n);

  Selection picked;
  if (far.size() > 0) {
    const SelectionQuery query = make_query(layer, pos, n, q, far, pool);
    if (query.budget_tokens >= far.size()) {
      picked.ranges.push_back(far);  // the budget covers everything: nothing to choose
    } else {
      KvCatalog& catalog = catalog_ != nullptr ? *catalog_ : no_chunk_catalog();
      LEOAM_ASSIGN_OR_RETURN(picked, policy_->select(query, catalog));
      hint_importance(layer, picked.ranges, catalog);
      LEOAM_RETURN_IF_ERROR(check_memory());
    }
  }

  std::vector<TokenRange> ranges;
  append_merged(ranges, sink);
  int64_t prev = far.begin;
  for (const TokenRange& r : picked.ranges) {
    if (r.begin < prev || r.end > far.end || r.begin >= r.end) {
      return internal_error("policy '" + options_.policy + "' returned the range [" + std::to_string(r.begin) + ", " +
                            std::to_string(r.end) + "), outside the far positions or out of order");
    }
    append_merged(ranges, r);
    prev = r.end;
  }
  append_merged(ranges, recent);

  LayerSparseStats& s = stats_[layer];
  s.n_queries += 1;
  s.n_visible += n;
  for (const TokenRange& r : ranges) s.n_attended += r.size();
  s.n_deserts += picked.desert ? 1 : 0;
  s.n_chunks_scored += picked.n_chunks_scored;
  s.n_splits += picked.n_splits;
  s.n_merges += picked.n_merges;
  return ranges;
}

LayerSparseStats SparseAttention::total() const {
  LayerSparseStats total;
  for (const LayerSparseStats& s : stats_) {
    total.n_queries += s.n_queries;
    total.n_attended += s.n_attended;
    total.n_visible += s.n_visible;
    total.n_deserts += s.n_deserts;
    total.n_chunks_scored += s.n_chunks_scored;
    total.n_splits += s.n_splits;
    total.n_merges += s.n_merges;
  }
  return total;
}

std::string SparseAttention::stats_text() const {
  const LayerSparseStats total = this->total();
  const auto pct = [](int64_t a, int64_t b) { return b > 0 ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  char line[256];
  std::snprintf(line, sizeof(line),
                "attention: policy %s: attended %lld tokens, %.1f%% of the visible ones, over %lld layer steps; "
                "deserts %lld (%.1f%% of layer steps); %lld chunk abstracts scored\n",
                options_.policy.c_str(), static_cast<long long>(total.n_attended), pct(total.n_attended, total.n_visible),
                static_cast<long long>(total.n_queries), static_cast<long long>(total.n_deserts),
                pct(total.n_deserts, total.n_queries), static_cast<long long>(total.n_chunks_scored));
  std::string out = line;
  if (total.n_splits + total.n_merges > 0) {
    std::snprintf(line, sizeof(line), "attention: adaptive chunks: %lld splits, %lld merges\n",
                  static_cast<long long>(total.n_splits), static_cast<long long>(total.n_merges));
    out += line;
  }
  for (size_t il = 0; il < stats_.size(); ++il) {
    const LayerSparseStats& s = stats_[il];
    if (s.n_queries == 0) continue;
    std::snprintf(line, sizeof(line), "attention: layer %2zu: attended %5.1f%%, deserts %5.1f%%\n", il,
                  pct(s.n_attended, s.n_visible), pct(s.n_deserts, s.n_queries));
    out += line;
  }
  return out;
}

}  // namespace leoam::sparse
