// The chunk bound kernel: a hand-computed case; the dispatched paths (scalar, and AVX2 where the
// CPU has it; forced with set_cpu_path_cap) against the double reference over head_dims with and
// without an 8-channel tail, kv head offsets and both sides; and the property that
// makes the bound sound: over f16-stored random keys and abstracts built by update_abstract, the
// upper bound is at least, and the lower bound at most, every q.k of the chunk. split_query's
// parts.
#include "sparse/chunk_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../cpu_path_test.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kv/chunk_layout.h"

namespace leoam::sparse {
namespace {

// 1e-5: the relative tolerance the float paths are held to, relative to the bound's magnitude
// sum_c |q_c| * max(|min_c|, |max_c|) (a bound near zero after cancellation has no better
// relative accuracy in float).
constexpr double kRelTol = 1e-5;

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Random abstracts: per channel, min <= max, both from a normal distribution.
std::vector<float> random_abstracts(int64_t n_chunks, const BoundLayout& layout, std::mt19937& rng) {
  std::vector<float> a = random_floats(static_cast<size_t>(n_chunks * layout.chunk_stride), rng, 2.0f);
  const int64_t row = static_cast<int64_t>(layout.n_kv_heads) * layout.head_dim;
  for (int64_t i = 0; i < n_chunks; ++i) {
    float* mn = a.data() + i * layout.chunk_stride;
    for (int64_t c = 0; c < row; ++c) {
      if (mn[c] > mn[c + row]) std::swap(mn[c], mn[c + row]);
    }
  }
  return a;
}

// sum over channels of |q_c| * max(|min_c|, |max_c|) for chunk i, q one query row.
double magnitude(const float* q, int kv_head, const float* abstracts, int64_t i, const BoundLayout& layout) {
  const float* mn = abstracts + i * layout.chunk_stride + static_cast<int64_t>(kv_head) * layout.head_dim;
  const float* mx = mn + static_cast<int64_t>(layout.n_kv_heads) * layout.head_dim;
  double m = 0.0;
  for (int c = 0; c < layout.head_dim; ++c) m += std::fabs(q[c]) * std::max(std::fabs(mn[c]), std::fabs(mx[c]));
  return m;
}

// Each test runs once per path: the dispatched chunk_bounds then takes that path.
class ChunkBound : public testing_util::CpuPathTest {};

TEST_P(ChunkBound, HandComputedBounds) {
  // One head, head_dim 2, one chunk: q = (1, -2), min = (-1, 0), max = (3, 1).
  //   upper = max(-1, 3) + max(0, -2) = 3;  lower = min(-1, 3) + min(0, -2) = -3.
  const float q[] = {1.0f, -2.0f};
  const float abstracts[] = {-1.0f, 0.0f, 3.0f, 1.0f};
  const BoundLayout layout{1, 2, 4};
  float b = 0.0f;
  chunk_bounds(q, 0, abstracts, 1, layout, &b, BoundSide::kUpper);
  EXPECT_EQ(b, 3.0f);
  chunk_bounds(q, 0, abstracts, 1, layout, &b, BoundSide::kLower);
  EXPECT_EQ(b, -3.0f);
}

TEST_P(ChunkBound, MatchesReference) {
  std::mt19937 rng(7);
  constexpr int64_t kChunks = 37;
  for (int head_dim : {8, 12, 64, 128, 3}) {
    const int n_kv_heads = 2;
    const BoundLayout layout{n_kv_heads, head_dim, 2 * static_cast<int64_t>(n_kv_heads) * head_dim};
    const std::vector<float> q = random_floats(static_cast<size_t>(head_dim), rng);
    const std::vector<float> abstracts = random_abstracts(kChunks, layout, rng);
    for (BoundSide side : {BoundSide::kUpper, BoundSide::kLower}) {
      const int kv = 1;  // the second kv head, so that the kv-head offset matters
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " side " + std::to_string(static_cast<int>(side)));
      std::vector<float> got(kChunks), want(kChunks);
      chunk_bounds(q.data(), kv, abstracts.data(), kChunks, layout, got.data(), side);
      ref::chunk_bounds(q.data(), kv, abstracts.data(), kChunks, layout, want.data(), side);
      for (int64_t i = 0; i < kChunks; ++i) {
        const double tol = kRelTol * magnitude(q.data(), kv, abstracts.data(), i, layout);
        ASSERT_NEAR(got[i], want[i], tol) << "chunk " << i;
      }
    }
  }
}

// The property: chunks of random keys stored as f16, their abstract built the way the store
// builds it, and q.k over the same stored keys in double.
TEST_P(ChunkBound, BoundsEveryStoredKey) {
  std::mt19937 rng(11);
  constexpr int kKvHeads = 2;
  constexpr int kGroup = 3;
  constexpr int kHeads = kKvHeads * kGroup;
  constexpr int kChunks = 6;
  for (int head_dim : {12, 64}) {
    for (int chunk_tokens : {1, 2, 8, 16, 64, 512}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " chunk_tokens " + std::to_string(chunk_tokens));
      const ChunkGeometry g{kKvHeads, head_dim, chunk_tokens, KvDtype::kF16};
      const BoundLayout layout{kKvHeads, head_dim, g.abstract_floats()};
      // keys[i][t][kv][c] as stored (f16), and the chunks' abstracts.
      std::vector<float> keys(static_cast<size_t>(kChunks) * chunk_tokens * g.row_elements());
      std::vector<float> abstracts(static_cast<size_t>(kChunks * g.abstract_floats()));
      std::vector<uint16_t> chunk(g.chunk_bytes() / sizeof(uint16_t));
      std::normal_distribution<float> key_dist(0.0f, 1.0f);
      for (int i = 0; i < kChunks; ++i) {
        // Scales per chunk (0.01 .. 100) so that the bound's relative slack is tested at every size.
        const float key_scale = std::pow(10.0f, static_cast<float>(i % 5) - 2.0f);
        for (int64_t e = 0; e < chunk_tokens * g.row_elements(); ++e) {
          chunk[static_cast<size_t>(e)] = f32_to_f16(key_dist(rng) * key_scale);
          keys[static_cast<size_t>(i * chunk_tokens * g.row_elements() + e)] = f16_to_f32(chunk[static_cast<size_t>(e)]);
        }
        float* a = abstracts.data() + i * g.abstract_floats();
        reset_abstract(g, a);
        update_abstract(g, chunk.data(), 0, chunk_tokens, a);
      }
      const std::vector<float> q = random_floats(static_cast<size_t>(kHeads) * head_dim, rng);
      // q.k in double: dots[i][t][h].
      auto dot = [&](int i, int t, int h) {
        const int kv = h / kGroup;
        const float* k = keys.data() + (static_cast<int64_t>(i) * chunk_tokens + t) * g.row_elements() +
                         static_cast<int64_t>(kv) * head_dim;
        double s = 0.0;
        for (int c = 0; c < head_dim; ++c) s += static_cast<double>(q[h * head_dim + c]) * k[c];
        return s;
      };
      std::vector<float> upper(kChunks), lower(kChunks);
      for (int h = 0; h < kHeads; ++h) {
        const int kv = h / kGroup;
        const float* qh = q.data() + h * head_dim;
        chunk_bounds(qh, kv, abstracts.data(), kChunks, layout, upper.data(), BoundSide::kUpper);
        chunk_bounds(qh, kv, abstracts.data(), kChunks, layout, lower.data(), BoundSide::kLower);
        for (int i = 0; i < kChunks; ++i) {
          const double slack = kRelTol * magnitude(qh, kv, abstracts.data(), i, layout);
          double max_dot = -std::numeric_limits<double>::infinity();
          double min_dot = std::numeric_limits<double>::infinity();
          for (int t = 0; t < chunk_tokens; ++t) {
            max_dot = std::max(max_dot, dot(i, t, h));
            min_dot = std::min(min_dot, dot(i, t, h));
          }
          ASSERT_GE(upper[i] + slack, max_dot) << "head " << h << " chunk " << i;
          ASSERT_LE(lower[i] - slack, min_dot) << "head " << h << " chunk " << i;
          ASSERT_LE(lower[i], upper[i]);
          if (chunk_tokens == 1) {  // min = max = the key: both bounds are q.k itself
            ASSERT_NEAR(upper[i], max_dot, slack);
            ASSERT_NEAR(lower[i], max_dot, slack);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ChunkBound, testing_util::kCpuPaths, testing_util::cpu_path_name);

TEST(SplitQuery, PartsAreSignedAndSumToTheQuery) {
  const std::vector<float> q = {1.5f, -2.0f, 0.0f, -0.0f, 3e-8f, -7.25f};
  const QueryParts parts = split_query(q.data(), static_cast<int>(q.size()));
  ASSERT_EQ(parts.pos.size(), q.size());
  ASSERT_EQ(parts.neg.size(), q.size());
  for (size_t c = 0; c < q.size(); ++c) {
    EXPECT_GE(parts.pos[c], 0.0f) << c;
    EXPECT_LE(parts.neg[c], 0.0f) << c;
    EXPECT_TRUE(parts.pos[c] == 0.0f || parts.neg[c] == 0.0f) << c;
    EXPECT_EQ(parts.pos[c] + parts.neg[c], q[c]) << c;
  }
}

}  // namespace
}  // namespace leoam::sparse
