#include "kv/memory_kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>


namespace leoam {

namespace {

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;  // unknown
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

}  // namespace

MemoryKvCache::MemoryKvCache(const MemoryKvCacheOptions& options)
    : shape_(options.shape), dtype_(options.dtype) {}

uint64_t MemoryKvCache::bytes_needed(const MemoryKvCacheOptions& options) {
  const KvCacheShape& s = options.shape;
  return 2ull * static_cast<uint64_t>(std::max(s.n_layer, 0)) * static_cast<uint64_t>(std::max<int64_t>(s.n_ctx, 0)) *
         static_cast<uint64_t>(std::max<int64_t>(s.row_elements(), 0)) * kv_dtype_size(options.dtype);
}

Result<std::unique_ptr<MemoryKvCache>> MemoryKvCache::create(const MemoryKvCacheOptions& options) {
  const KvCacheShape& s = options.shape;
  if (s.n_layer <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_ctx <= 0) {
    return invalid_argument("KV cache: every dimension must be positive (n_layer " + std::to_string(s.n_layer) +
                            ", n_kv_heads " + std::to_string(s.n_kv_heads) + ", head_dim " +
                            std::to_string(s.head_dim) + ", n_ctx " + std::to_string(s.n_ctx) + ")");
  }
  const uint64_t total = bytes_needed(options);
  const uint64_t phys = physical_memory_bytes();
  const auto mib = [](uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
  if (phys != 0 && total > phys) {
    return invalid_argument("KV cache for " + std::to_string(s.n_ctx) + " tokens needs " + mib(total) +
                            ", more than this machine's " + mib(phys) + " of memory; use a smaller context")
        .about(Setting::kContextSize);
  }
  std::unique_ptr<MemoryKvCache> cache(new MemoryKvCache(options));
  cache->row_bytes_ = static_cast<size_t>(s.row_elements()) * kv_dtype_size(options.dtype);
  const size_t layer_bytes = cache->row_bytes_ * static_cast<size_t>(s.n_ctx);
  cache->k_.reserve(s.n_layer);
  cache->v_.reserve(s.n_layer);
  for (int l = 0; l < s.n_layer; ++l) {
    // 64: cache-line alignment; pages are only touched when positions are appended.
    Buffer k(static_cast<uint8_t*>(std::aligned_alloc(64, (layer_bytes + 63) / 64 * 64)));
    Buffer v(static_cast<uint8_t*>(std::aligned_alloc(64, (layer_bytes + 63) / 64 * 64)));
    if (!k || !v) {
      return invalid_argument("KV cache for " + std::to_string(s.n_ctx) + " tokens needs " + mib(total) +
                              ", which could not be allocated; use a smaller context")
          .about(Setting::kContextSize);
    }
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  cache->n_tokens_.assign(s.n_layer, 0);
  return cache;
}

int64_t MemoryKvCache::n_tokens() const {
  return n_tokens_.empty() ? 0 : *std::min_element(n_tokens_.begin(), n_tokens_.end());
}

int64_t MemoryKvCache::n_tokens(int layer) const {
  if (layer < 0 || layer >= shape_.n_layer) return 0;
  return n_tokens_[layer];
}

Status MemoryKvCache::append(int layer, int64_t pos0, int64_t n_tokens, const float* k, const float* v) {
  if (layer < 0 || layer >= shape_.n_layer) {
    return invalid_argument("KV cache: layer " + std::to_string(layer) + " out of range [0, " +
                            std::to_string(shape_.n_layer) + ")");
  }
  if (pos0 != n_tokens_[layer]) {
    return invalid_argument("KV cache: layer " + std::to_string(layer) + " holds " +
                            std::to_string(n_tokens_[layer]) + " positions; cannot append at position " +
                            std::to_string(pos0));
  }
  if (n_tokens < 0 || pos0 + n_tokens > shape_.n_ctx) {
    return invalid_argument("KV cache: appending " + std::to_string(n_tokens) + " positions at " +
                            std::to_string(pos0) + " exceeds the context size of " +
                            std::to_string(shape_.n_ctx) + " tokens");
  }
  const int64_t n_row = shape_.row_elements();
  uint8_t* k_dst = k_[layer].get() + static_cast<size_t>(pos0) * row_bytes_;
  uint8_t* v_dst = v_[layer].get() + static_cast<size_t>(pos0) * row_bytes_;
  store_kv_values(dtype_, k, n_tokens * n_row, k_dst);  // rows are contiguous in both
  store_kv_values(dtype_, v, n_tokens * n_row, v_dst);
  n_tokens_[layer] += n_tokens;
  return Status::ok();
}

Result<KvView> MemoryKvCache::view(int layer, int64_t n_tokens_visible) {
  if (layer < 0 || layer >= shape_.n_layer) {
    return invalid_argument("KV cache: layer " + std::to_string(layer) + " out of range [0, " +
                            std::to_string(shape_.n_layer) + ")");
  }
  if (n_tokens_visible < 0 || n_tokens_visible > n_tokens_[layer]) {
    return invalid_argument("KV cache: view of " + std::to_string(n_tokens_visible) + " positions, but layer " +
                            std::to_string(layer) + " holds " + std::to_string(n_tokens_[layer]));
  }
  std::vector<KvSegment> segments;
  if (n_tokens_visible > 0) {
    KvSegment seg;
    seg.pos0 = 0;
    seg.n_tokens = n_tokens_visible;
    seg.k = k_[layer].get();
    seg.v = v_[layer].get();
    seg.dtype = dtype_;
    seg.row_stride_bytes = row_bytes_;
    segments.push_back(seg);
  }
  return KvView(shape_.n_kv_heads, shape_.head_dim, std::move(segments));
}

void MemoryKvCache::clear() { std::fill(n_tokens_.begin(), n_tokens_.end(), 0); }

Status MemoryKvCache::truncate(int64_t n_tokens) {
  if (n_tokens < 0) return invalid_argument("KV cache: cannot truncate to " + std::to_string(n_tokens) + " positions");
  for (int64_t& n : n_tokens_) n = std::min(n, n_tokens);
  return Status::ok();
}

}  // namespace leoam
