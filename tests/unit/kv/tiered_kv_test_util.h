// Helpers of the TieredKvCache tests (tiered_kv_cache_*_test.cpp): a small store's options, a
// twin that appends the same rows to it and to an in-memory cache, the rows a store serves, and
// chunk abstracts recomputed from them or checked against them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "kv_test_util.h"

namespace leoam::testing_util {

inline constexpr int kLayers = 2;
inline constexpr int kHeads = 2;
inline constexpr int kHeadDim = 8;
inline constexpr int kChunk = 8;
inline constexpr int64_t kCtx = 2048;

inline TieredKvCacheOptions small_options(const std::string& dir, KvCodec codec = KvCodec::kNone) {
  TieredKvCacheOptions o;
  o.host_codec = codec;
  o.shape = {kLayers, kHeads, kHeadDim, kCtx};
  o.chunk_tokens = kChunk;
  o.dir = dir;
  o.session = "test";
  o.n_sink_tokens = 4;
  o.n_recent_tokens = 8;
  // A chunk costs its tier's budget its KV, and with a codec its abstract (keeps_abstracts).
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 2 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  o.host_budget_bytes = 3 * TieredKvCache::chunk_budget_bytes(o, Tier::kHost);  // three chunks
  o.gather_batch_bytes = 5 * kDirectIoAlignment;                 // five chunks a batch: many batches
  return o;
}

// The same appends go to a tiered store and an in-memory F16 cache.
class Twin {
 public:
  explicit Twin(const TieredKvCacheOptions& options, uint32_t seed = 1) : rng_(seed) {
    auto tiered = TieredKvCache::create(options);
    EXPECT_TRUE(tiered.is_ok()) << tiered.status().message();
    if (tiered.is_ok()) tiered_ = std::move(*tiered);
    MemoryKvCacheOptions m;
    m.shape = options.shape;
    m.dtype = options.dtype;
    memory_ = MemoryKvCache::create(m).value();
  }

  Status append(int64_t n) {
    const int64_t pos0 = tiered_->n_tokens();
    for (int il = 0; il < kLayers; ++il) {
      const auto k = random_rows(rng_, n, kHeads * kHeadDim);
      const auto v = random_rows(rng_, n, kHeads * kHeadDim);
      LEOAM_RETURN_IF_ERROR(tiered_->append(il, pos0, n, k.data(), v.data()));
      EXPECT_TRUE(memory_->append(il, pos0, n, k.data(), v.data()).is_ok());
    }
    return Status::ok();
  }

  TieredKvCache& tiered() { return *tiered_; }
  MemoryKvCache& memory() { return *memory_; }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  std::unique_ptr<TieredKvCache> tiered_;
  std::unique_ptr<MemoryKvCache> memory_;
};

// Position -> (K row bytes, V row bytes) of every position `ranges` visit, read via for_each_view
// (in order), or for_each_view_unordered (each position once, in any order).
using Rows = std::map<int64_t, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>>;

inline Result<Rows> read_rows(KvCache& kv, int layer, std::span<const TokenRange> ranges, bool unordered = false) {
  Rows rows;
  int64_t last = -1;
  const KvCache::ViewVisitor visit = [&](const KvView& view) {
    for (const KvSegment& s : view.segments()) {
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        const int64_t pos = s.pos0 + t;
        if (unordered ? rows.count(pos) != 0 : pos <= last) return internal_error("positions out of order or twice");
        last = pos;
        const auto* k = static_cast<const uint8_t*>(s.k_row(t));
        const auto* v = static_cast<const uint8_t*>(s.v_row(t));
        const size_t n = s.row_stride_bytes;
        rows[pos] = {std::vector<uint8_t>(k, k + n), std::vector<uint8_t>(v, v + n)};
      }
    }
    return Status::ok();
  };
  const Status st = unordered ? kv.for_each_view_unordered(layer, ranges, visit) : kv.for_each_view(layer, ranges, visit);
  if (!st.is_ok()) return st;
  return rows;
}

inline void expect_same_rows(Twin& twin, int layer, std::span<const TokenRange> ranges) {
  auto got = read_rows(twin.tiered(), layer, ranges);
  auto want = read_rows(twin.memory(), layer, ranges);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (const auto& [pos, kv] : *want) {
    ASSERT_TRUE(got->count(pos)) << "position " << pos << " missing";
    EXPECT_EQ(got->at(pos), kv) << "layer " << layer << " position " << pos;
  }
}

// The abstract recomputed from the chunk's rows as the store serves them.
inline std::vector<float> recomputed_abstract(TieredKvCache& kv, ChunkKey key) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, std::min(p0 + g.chunk_tokens, kv.n_tokens(key.layer))};
  std::vector<uint8_t> chunk(g.chunk_bytes());
  auto rows = read_rows(kv, key.layer, {&r, 1});
  EXPECT_TRUE(rows.is_ok());
  for (const auto& [pos, row] : *rows) std::memcpy(chunk.data() + (pos - p0) * g.row_bytes(), row.first.data(), g.row_bytes());
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()));
  reset_abstract(g, a.data());
  update_abstract(g, chunk.data(), 0, r.end - r.begin, a.data());
  return a;
}

// A whole abstract (chunk_layout.h) from the box and the sign words the catalog gives apart.
inline std::vector<float> joined_abstract(const ChunkGeometry& g, const float* box, const uint32_t* signs) {
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()));
  std::memcpy(a.data(), box, static_cast<size_t>(g.box_floats()) * sizeof(float));
  std::memcpy(a.data() + g.box_floats(), signs, static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
  return a;
}

// "" when `abstract` (box and signs, chunk_layout.h) bounds every key of chunk `key` as the store
// serves it now: each channel within [min, max], and <= 0 where its sign bit is set, >= 0 where
// not; else the first key that breaks it.
inline std::string check_bounds(TieredKvCache& kv, ChunkKey key, const float* abstract) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, std::min(p0 + g.chunk_tokens, kv.n_tokens(key.layer))};
  auto rows = read_rows(kv, key.layer, {&r, 1});
  if (!rows.is_ok()) return rows.status().message();
  const int64_t n = g.row_elements();
  const int wph = g.sign_words_per_head();
  for (const auto& [pos, row] : *rows) {
    const int64_t t = pos - p0;
    const auto* k = reinterpret_cast<const uint16_t*>(row.first.data());
    for (int64_t i = 0; i < n; ++i) {
      const float x = f16_to_f32(k[i]);
      uint32_t word;
      const int64_t h = i / g.head_dim, c = i % g.head_dim;
      std::memcpy(&word, abstract + g.box_floats() + t * g.sign_words_per_row() + h * wph + c / 32, sizeof(word));
      const bool negative = (word >> (c % 32)) & 1u;
      if (x < abstract[i] || x > abstract[n + i] || (negative && x > 0.0f) || (!negative && x < 0.0f))
        return "layer " + std::to_string(key.layer) + " position " + std::to_string(pos) + " channel " +
               std::to_string(i) + ": key " + std::to_string(x) + " outside [" + std::to_string(abstract[i]) + ", " +
               std::to_string(abstract[n + i]) + "] with sign bit " + std::to_string(negative) + ", on the " +
               tier_name(kv.chunk_tier(key.layer, key.index));
    }
  }
  return "";
}

// The abstracts of chunks [0, n_chunks) of `layer` that the catalog serves, joined (LKA).
inline std::vector<std::vector<float>> served_abstracts(TieredKvCache& kv, int layer) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t n = kv.n_chunks(layer);
  std::vector<float> boxes(static_cast<size_t>(n * g.box_floats()));
  std::vector<uint32_t> signs(static_cast<size_t>(n * g.sign_words()));
  EXPECT_TRUE(kv.load_abstracts(layer, 0, n, boxes.data(), AbstractSource::kLka, signs.data()).is_ok());
  std::vector<std::vector<float>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(joined_abstract(g, boxes.data() + i * g.box_floats(), signs.data() + i * g.sign_words()));
  return out;
}

// The disk chunks of a layer's ranges in order (what a read-ahead of them stages).
inline std::vector<int64_t> disk_chunks_of(TieredKvCache& kv, int layer, std::span<const TokenRange> ranges) {
  std::vector<int64_t> out;
  for (const TokenRange& r : ranges) {
    for (int64_t i = r.begin / kChunk; i * kChunk < r.end; ++i) {
      if (kv.residency().find({layer, i})->tier == Tier::kDisk) out.push_back(i);
    }
  }
  return out;
}

}  // namespace leoam::testing_util
