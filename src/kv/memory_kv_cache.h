// MemoryKvCache: the plain in-memory KvCache. Each layer owns two buffers (K and V) preallocated
// for n_ctx positions, so a view is always one segment per layer:
//
//   layer L, K buffer (V alike):
//   +---------------------------+---------------------------+-- ... --+----------------------+
//   | pos 0: [n_kv_heads][hd]   | pos 1: [n_kv_heads][hd]   |         | pos n_ctx-1          |
//   +---------------------------+---------------------------+-- ... --+----------------------+
//   <---- row_stride_bytes ----> = n_kv_heads * head_dim * sizeof(dtype)
//
// F32 stores the rows as given; F16 rounds them to nearest even.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"

namespace leoam {

struct MemoryKvCacheOptions {
  KvCacheShape shape;
  KvDtype dtype = KvDtype::kF16;
};

class MemoryKvCache final : public KvCache {
 public:
  // Fails for a non-positive dimension, or when the buffers (2 * n_layer * n_ctx rows) cannot
  // be allocated or exceed the machine's physical memory.
  static Result<std::unique_ptr<MemoryKvCache>> create(const MemoryKvCacheOptions& options);

  // Bytes the buffers of `options` take.
  static uint64_t bytes_needed(const MemoryKvCacheOptions& options);

  const KvCacheShape& shape() const override { return shape_; }
  KvDtype dtype() const override { return dtype_; }
  int64_t n_tokens() const override;
  int64_t n_tokens(int layer) const override;
  Status append(int layer, int64_t pos0, int64_t n_tokens, const float* k, const float* v) override;
  Result<KvView> view(int layer, int64_t n_tokens_visible) override;
  void clear() override;
  Status truncate(int64_t n_tokens) override;

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

  MemoryKvCache(const MemoryKvCacheOptions& options);

  KvCacheShape shape_;
  KvDtype dtype_;
  size_t row_bytes_ = 0;
  std::vector<Buffer> k_;  // [n_layer] -> [n_ctx][n_kv_heads][head_dim] dtype
  std::vector<Buffer> v_;  // [n_layer], same layout
  std::vector<int64_t> n_tokens_;  // [n_layer] positions stored per layer
};

}  // namespace leoam
