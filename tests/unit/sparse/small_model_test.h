// A test fixture with a small synthetic GQA model (2 layers, 4 query heads over 2 KV heads of
// dim 16, 256 positions) written to a scratch directory and loaded, for the sparse attention
// tests that run the forward pass end to end.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.h"
#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "model/model.h"
#include "model/synthetic_model.h"

namespace leoam::sparse {

class SmallModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_vocab = 300;
    spec_.n_embd = 64;
    spec_.n_layer = 2;
    spec_.n_head = 4;
    spec_.n_head_kv = 2;
    spec_.n_ff = 128;
    spec_.n_ctx = 256;
    const std::string path = dir_.path() + "/m.gguf";
    ASSERT_TRUE(write_synthetic_model(spec_, path).is_ok());
    auto model = Model::load(path);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(model).value();
  }

  // n tokens drawn from the vocabulary by `rng`.
  std::vector<int32_t> random_tokens(size_t n, std::mt19937& rng) const {
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % spec_.n_vocab);
    return tokens;
  }

  // An in-memory store of the model's KV.
  std::unique_ptr<KvCache> memory_cache() const {
    MemoryKvCacheOptions m;
    m.shape = {spec_.n_layer, spec_.n_head_kv, 16, spec_.n_ctx};
    return std::move(MemoryKvCache::create(m)).value();
  }
  // A tiered store of the model's KV (16 channels a head) in chunks of 8, with a recent window of
  // 16, its disk tier in the scratch directory under `name`, the device holding its pinned
  // chunks and `spare` more.
  TieredKvCacheOptions tiered_options(const std::string& name, int64_t spare) const {
    TieredKvCacheOptions t;
    t.shape = {spec_.n_layer, spec_.n_head_kv, 16, spec_.n_ctx};
    t.chunk_tokens = 8;
    t.n_recent_tokens = 16;
    t.dir = dir_.path() + "/" + name;
    t.device_budget_bytes =
        TieredKvCache::min_device_budget_bytes(t) + spare * TieredKvCache::chunk_budget_bytes(t, Tier::kDevice);
    return t;
  }
  std::unique_ptr<TieredKvCache> tiered_store(const std::string& name, int64_t spare) const {
    return std::move(TieredKvCache::create(tiered_options(name, spare))).value();
  }

  SyntheticModelSpec spec_;
  testing_util::TempDir dir_;
  std::unique_ptr<Model> model_;
};

// Logits equal to float rounding: two stores whose chunks sit in different tiers hand attention
// the same positions in different batches (TieredKvCache::for_each_view_unordered: the ones in
// memory while the disk reads are in flight), and the batches merge in another order.
inline void expect_logits_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::abs(want[i]))) << "logit " << i;
  }
}

}  // namespace leoam::sparse
