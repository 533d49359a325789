#include "kv/memory_kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/fp16.h"

namespace leoam {
namespace {

MemoryKvCacheOptions small_options(KvDtype dtype) {
  MemoryKvCacheOptions o;
  o.shape.n_layer = 2;
  o.shape.n_kv_heads = 3;
  o.shape.head_dim = 4;
  o.shape.n_ctx = 8;
  o.dtype = dtype;
  return o;
}

// rows [n][3][4] whose values encode (position, element).
std::vector<float> rows(int64_t pos0, int64_t n, float sign) {
  std::vector<float> v;
  for (int64_t t = 0; t < n; ++t) {
    for (int e = 0; e < 12; ++e) v.push_back(sign * (static_cast<float>(pos0 + t) + 0.125f * e));
  }
  return v;
}

float read(KvDtype dtype, const void* row, int e) {
  if (dtype == KvDtype::kF32) return static_cast<const float*>(row)[e];
  return f16_to_f32(static_cast<const uint16_t*>(row)[e]);
}

class MemoryKvCacheTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(MemoryKvCacheTest, AppendThenViewGivesTheRowsBack) {
  const KvDtype dtype = GetParam();
  auto cache = MemoryKvCache::create(small_options(dtype));
  ASSERT_TRUE(cache.is_ok()) << cache.status().message();
  KvCache& kv = **cache;
  EXPECT_EQ(kv.n_tokens(), 0);
  for (int layer = 0; layer < 2; ++layer) {
    auto k = rows(0, 3, 1.0f), v = rows(0, 3, -1.0f);
    ASSERT_TRUE(kv.append(layer, 0, 3, k.data(), v.data()).is_ok());
  }
  for (int layer = 0; layer < 2; ++layer) {
    auto k = rows(3, 2, 1.0f), v = rows(3, 2, -1.0f);
    ASSERT_TRUE(kv.append(layer, 3, 2, k.data(), v.data()).is_ok());
  }
  EXPECT_EQ(kv.n_tokens(), 5);

  auto view = kv.view(1, 4);
  ASSERT_TRUE(view.is_ok()) << view.status().message();
  EXPECT_EQ(view->n_tokens(), 4);
  EXPECT_EQ(view->n_kv_heads(), 3);
  EXPECT_EQ(view->head_dim(), 4);
  ASSERT_EQ(view->segments().size(), 1u);
  const KvSegment& seg = view->segments()[0];
  EXPECT_EQ(seg.pos0, 0);
  EXPECT_EQ(seg.n_tokens, 4);
  EXPECT_EQ(seg.dtype, dtype);
  EXPECT_EQ(seg.row_stride_bytes, 12 * kv_dtype_size(dtype));
  for (int t = 0; t < 4; ++t) {
    for (int e = 0; e < 12; ++e) {
      EXPECT_EQ(read(dtype, seg.k_row(t), e), t + 0.125f * e);  // exact in f16 too
      EXPECT_EQ(read(dtype, seg.v_row(t), e), -(t + 0.125f * e));
    }
  }
}

TEST_P(MemoryKvCacheTest, CountsArePerLayerUntilEveryLayerHasAppended) {
  auto cache = MemoryKvCache::create(small_options(GetParam()));
  ASSERT_TRUE(cache.is_ok());
  KvCache& kv = **cache;
  auto k = rows(0, 2, 1.0f);
  ASSERT_TRUE(kv.append(0, 0, 2, k.data(), k.data()).is_ok());
  EXPECT_EQ(kv.n_tokens(0), 2);
  EXPECT_EQ(kv.n_tokens(1), 0);
  EXPECT_EQ(kv.n_tokens(), 0);
  EXPECT_FALSE(kv.view(1, 1).is_ok());
  auto empty = kv.view(1, 0);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->segments().empty());
  ASSERT_TRUE(kv.append(1, 0, 2, k.data(), k.data()).is_ok());
  EXPECT_EQ(kv.n_tokens(), 2);
}

TEST_P(MemoryKvCacheTest, RejectsOutOfOrderOverflowAndBadLayerWithoutChange) {
  auto cache = MemoryKvCache::create(small_options(GetParam()));
  ASSERT_TRUE(cache.is_ok());
  KvCache& kv = **cache;
  auto k = rows(0, 9, 1.0f);
  Status st = kv.append(0, 1, 1, k.data(), k.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot append at position 1"), std::string::npos) << st.message();
  st = kv.append(0, 0, 9, k.data(), k.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("exceeds the context size of 8 tokens"), std::string::npos) << st.message();
  EXPECT_FALSE(kv.append(2, 0, 1, k.data(), k.data()).is_ok());
  EXPECT_FALSE(kv.append(-1, 0, 1, k.data(), k.data()).is_ok());
  EXPECT_EQ(kv.n_tokens(0), 0);
  EXPECT_TRUE(kv.can_append(8));
  EXPECT_FALSE(kv.can_append(9));
}

TEST_P(MemoryKvCacheTest, TruncateAndClear) {
  auto cache = MemoryKvCache::create(small_options(GetParam()));
  ASSERT_TRUE(cache.is_ok());
  KvCache& kv = **cache;
  for (int layer = 0; layer < 2; ++layer) {
    auto k = rows(0, 6, 1.0f);
    ASSERT_TRUE(kv.append(layer, 0, 6, k.data(), k.data()).is_ok());
  }
  ASSERT_TRUE(kv.truncate(4).is_ok());
  EXPECT_EQ(kv.n_tokens(), 4);
  EXPECT_FALSE(kv.view(0, 5).is_ok());
  // Appending after a truncate overwrites position 4.
  for (int layer = 0; layer < 2; ++layer) {
    auto k = rows(40, 1, 1.0f);
    ASSERT_TRUE(kv.append(layer, 4, 1, k.data(), k.data()).is_ok());
  }
  auto view = kv.view(0, 5);
  ASSERT_TRUE(view.is_ok());
  EXPECT_EQ(read(GetParam(), view->segments()[0].k_row(4), 0), 40.0f);
  ASSERT_TRUE(kv.truncate(100).is_ok());
  EXPECT_EQ(kv.n_tokens(), 5);
  EXPECT_FALSE(kv.truncate(-1).is_ok());
  kv.clear();
  EXPECT_EQ(kv.n_tokens(), 0);
  EXPECT_EQ(kv.n_tokens(1), 0);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MemoryKvCacheTest, ::testing::Values(KvDtype::kF32, KvDtype::kF16),
                         [](const auto& info) { return std::string(kv_dtype_name(info.param)); });

TEST(MemoryKvCache, F16RoundsToNearest) {
  auto cache = MemoryKvCache::create(small_options(KvDtype::kF16));
  ASSERT_TRUE(cache.is_ok());
  std::vector<float> k(12, 1.0f + 1.0f / 4096.0f);  // halfway between two f16 values: rounds to even (1.0)
  k[1] = 0.1f;
  for (int layer = 0; layer < 2; ++layer) ASSERT_TRUE((*cache)->append(layer, 0, 1, k.data(), k.data()).is_ok());
  auto view = (*cache)->view(0, 1);
  ASSERT_TRUE(view.is_ok());
  EXPECT_EQ(read(KvDtype::kF16, view->segments()[0].k_row(0), 0), 1.0f);
  EXPECT_NEAR(read(KvDtype::kF16, view->segments()[0].k_row(0), 1), 0.1f, 1e-4f);
}

TEST(MemoryKvCache, RejectsBadShapesAndImpossibleSizes) {
  MemoryKvCacheOptions o = small_options(KvDtype::kF16);
  o.shape.n_ctx = 0;
  EXPECT_EQ(MemoryKvCache::create(o).status().code(), StatusCode::kInvalidArgument);
  o = small_options(KvDtype::kF16);
  o.shape.head_dim = -1;
  EXPECT_FALSE(MemoryKvCache::create(o).is_ok());
  // 2^40 positions: far beyond any machine's memory; must fail cleanly, not crash.
  o = small_options(KvDtype::kF32);
  o.shape.n_ctx = int64_t{1} << 40;
  auto r = MemoryKvCache::create(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("use a smaller context"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().setting(), Setting::kContextSize);
  EXPECT_EQ(MemoryKvCache::bytes_needed(small_options(KvDtype::kF16)), 2u * 2 * 8 * 12 * 2);
}

}  // namespace
}  // namespace leoam
