// KvCache: where the forward pass keeps the keys and values of past positions, per layer, and how
// attention reads them back; the seam between the model and the KV store. The model appends
// post-RoPE K/V rows and reads them as a KvView: segments of consecutive positions, in increasing
// order and not overlapping, each contiguous in one dtype with a fixed row stride. Attention visits
// every segment and assumes neither a single one nor adjacency in memory, so a store may keep one
// buffer (MemoryKvCache) or chunks over device, host and disk tiers (TieredKvCache); model code
// does not depend on which. Not thread-safe: one thread drives a cache; attention may read one
// view from many threads. A view drawn: docs/kv-store.md#the-kvcache-seam
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/kv_dtype.h"
#include "kv/kv_stats.h"

namespace leoam {

class KeptKvFiles;
class KvCatalog;

// Positions [begin, end) of one layer.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  bool operator==(const TokenRange&) const = default;
};

struct KvCacheShape {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t n_ctx = 0;  // positions the cache can hold

  int64_t row_elements() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
};

// A run of consecutive positions [pos0, pos0 + n_tokens) stored contiguously.
struct KvSegment {
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  const void* k = nullptr;      // [n_tokens] rows of [n_kv_heads][head_dim] `dtype`
  const void* v = nullptr;      // same layout as k
  KvDtype dtype = KvDtype::kF16;
  size_t row_stride_bytes = 0;  // from one position's row to the next (k and v alike)

  const void* k_row(int64_t t) const { return static_cast<const char*>(k) + t * row_stride_bytes; }
  const void* v_row(int64_t t) const { return static_cast<const char*>(v) + t * row_stride_bytes; }
};

// Whatever keeps a view's storage alive (a tiered store's copy of what it gathered); released
// with the view.
class KvViewResources {
 public:
  virtual ~KvViewResources() = default;
};

// The visible KV of one layer, as segments. Move-only: it may own its storage.
class KvView {
 public:
  KvView() = default;
  KvView(int n_kv_heads, int head_dim, std::vector<KvSegment> segments,
         std::unique_ptr<KvViewResources> resources = nullptr)
      : n_kv_heads_(n_kv_heads), head_dim_(head_dim), segments_(std::move(segments)),
        resources_(std::move(resources)) {}
  KvView(KvView&&) noexcept = default;
  KvView& operator=(KvView&&) noexcept = default;
  KvView(const KvView&) = delete;
  KvView& operator=(const KvView&) = delete;

  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  std::span<const KvSegment> segments() const { return segments_; }
  // Sum of the segments' n_tokens.
  int64_t n_tokens() const {
    int64_t n = 0;
    for (const KvSegment& s : segments_) n += s.n_tokens;
    return n;
  }

 private:
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  std::vector<KvSegment> segments_;
  std::unique_ptr<KvViewResources> resources_;
};

class KvCache {
 public:
  virtual ~KvCache() = default;

  virtual const KvCacheShape& shape() const = 0;
  virtual KvDtype dtype() const = 0;
  int64_t n_ctx() const { return shape().n_ctx; }

  // Positions complete in every layer (the minimum over layers). The forward pass appends layer
  // 0, 1, ... for each batch, so between batches all layers hold the same count.
  virtual int64_t n_tokens() const = 0;
  // Positions stored in `layer`.
  virtual int64_t n_tokens(int layer) const = 0;

  // True when n_tokens more positions fit.
  bool can_append(int64_t n_tokens_more) const { return n_tokens_more >= 0 && n_tokens() + n_tokens_more <= n_ctx(); }

  // Stores positions [pos0, pos0 + n_tokens) of `layer`: append-only, in order per layer.
  // k, v: [n_tokens][n_kv_heads][head_dim] f32, post-RoPE. Fails, changing nothing, on a bad
  // layer, a pos0 other than n_tokens(layer), or a batch that does not fit.
  [[nodiscard]] virtual Status append(int layer, int64_t pos0, int64_t n_tokens, const float* k, const float* v) = 0;

  // The first n_tokens_visible positions of `layer` (n_tokens_visible <= n_tokens(layer)). Its
  // pointers stay valid until the view is destroyed or the next append, truncate or clear,
  // whichever comes first. May need I/O (a tiered store reads what is on disk), hence non-const
  // and fallible.
  virtual Result<KvView> view(int layer, int64_t n_tokens_visible) = 0;

  // How attention reads a large or sparse set of positions with bounded memory: calls fn with
  // views that, in order, cover exactly the positions of `ranges` of `layer` (sorted, disjoint,
  // inside [0, n_tokens(layer))); each view is valid only during its call. An error from fn
  // stops the walk and is returned.
  // Empty ranges (begin == end) are allowed and skipped; ranges holding no position call fn
  // not at all, so a caller must handle zero calls.
  // The default takes one view of the whole layer and cuts its segments to the ranges; a store
  // whose KV does not all sit in memory overrides it to read in batches.
  using ViewVisitor = std::function<Status(const KvView& view)>;
  [[nodiscard]] virtual Status for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn);
  // for_each_view for a visitor that takes the positions in any order (attention, whose batches
  // merge in any order): the views cover each position of `ranges` once, in an order the store
  // picks, so that a store with KV on disk can hand over what it holds while its reads are in
  // flight. The default is for_each_view.
  [[nodiscard]] virtual Status for_each_view_unordered(int layer, std::span<const TokenRange> ranges,
                                                       const ViewVisitor& fn) {
    return for_each_view(layer, ranges, fn);
  }

  // Brings the positions of `ranges` of `layer` (as for_each_view takes them) close to compute,
  // where a read of them would leave them, ahead of that read; a store that holds its KV in
  // memory has nothing to do (the default).
  [[nodiscard]] virtual Status prefetch(int /*layer*/, std::span<const TokenRange> /*ranges*/) { return Status::ok(); }

  // Starts reading, in the background, what of `ranges` of `layer` is not in memory, for the
  // layer's next for_each_view, and returns at once; a store that does not read ahead does
  // nothing (the default). Only where the KV lives may change, never what a view holds.
  [[nodiscard]] virtual Status read_ahead(int /*layer*/, std::span<const TokenRange> /*ranges*/) {
    return Status::ok();
  }

  // Takes the first positions of every layer, in place, from a kept session's files that many
  // stores share (kv_session.h: open_kv_session_tier), instead of a copy: an empty store that
  // reads its disk chunks so (TieredKvCache) returns the positions it took, a whole number of
  // chunks, and the caller appends the rest; any other returns 0, unchanged (the default).
  virtual Result<int64_t> share_prefix(std::shared_ptr<const KeptKvFiles> /*files*/, int64_t /*n_positions*/) {
    return int64_t{0};
  }

  // No query will read positions before `pos` of `layer` again (a sliding-window layer's past
  // its window): a store may drop them, after which a truncate that needs them back fails. The
  // default keeps them.
  virtual void release_before(int /*layer*/, int64_t /*pos*/) {}

  // The tiers' traffic and residency (KvStats::tiered); a store without tiers reports that alone
  // (the default: MemoryKvCache, whose one buffer holds the whole context from the start).
  virtual KvStats stats() const { return {}; }
  // The chunk abstracts the selection policies score (kv_catalog.h); null for a store that keeps
  // none (the default).
  virtual KvCatalog* catalog() { return nullptr; }

  // Forgets every position of every layer.
  virtual void clear() = 0;
  // Keeps positions [0, n_tokens) of every layer (layers holding fewer are left as they are).
  [[nodiscard]] virtual Status truncate(int64_t n_tokens) = 0;
};

}  // namespace leoam
