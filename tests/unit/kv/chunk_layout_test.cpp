#include "kv/chunk_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"

namespace leoam {
namespace {

ChunkGeometry geometry(KvDtype dtype) {
  ChunkGeometry g;
  g.n_kv_heads = 3;
  g.head_dim = 8;
  g.chunk_tokens = 16;
  g.dtype = dtype;
  return g;
}

// A chunk with every K and V row random (V rows larger, so a K abstract that read V would show).
std::vector<uint8_t> random_chunk(const ChunkGeometry& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<uint8_t> chunk(g.chunk_bytes());
  const int64_t n_values = 2 * g.chunk_tokens * g.row_elements();
  const int64_t n_k_values = g.chunk_tokens * g.row_elements();
  for (int64_t i = 0; i < n_values; ++i) {
    const float x = dist(rng) * (i < n_k_values ? 1.0f : 100.0f);
    if (g.dtype == KvDtype::kF32) {
      std::memcpy(chunk.data() + i * 4, &x, 4);
    } else {
      const uint16_t h = f32_to_f16(x);
      std::memcpy(chunk.data() + i * 2, &h, 2);
    }
  }
  return chunk;
}

// K value of row t, element e, as stored.
float stored_key(const ChunkGeometry& g, const std::vector<uint8_t>& chunk, int64_t t, int64_t e) {
  const size_t off = static_cast<size_t>(t) * g.row_bytes() + static_cast<size_t>(e) * kv_dtype_size(g.dtype);
  if (g.dtype == KvDtype::kF32) {
    float x;
    std::memcpy(&x, chunk.data() + off, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, chunk.data() + off, 2);
  return f16_to_f32(h);
}

// The abstract from its definition (chunk_layout.h): the box, then each row's sign words.
std::vector<float> brute_force_abstract(const ChunkGeometry& g, const std::vector<uint8_t>& chunk, int64_t t0,
                                        int64_t t1) {
  const int64_t n = g.row_elements();
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()), 0.0f);
  std::vector<uint32_t> signs(static_cast<size_t>(g.sign_words()), 0u);
  for (int64_t e = 0; e < n; ++e) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int64_t t = t0; t < t1; ++t) {
      const float k = stored_key(g, chunk, t, e);
      if (k < lo) lo = k;
      if (k > hi) hi = k;
      const int64_t c = e % g.head_dim;
      if (std::signbit(k)) signs[t * g.sign_words_per_row() + (e / g.head_dim) * g.sign_words_per_head() + c / 32] |= 1u << (c % 32);
    }
    a[e] = lo;
    a[n + e] = hi;
  }
  std::memcpy(a.data() + g.box_floats(), signs.data(), signs.size() * sizeof(uint32_t));
  return a;
}

std::vector<float> abstract_of(const ChunkGeometry& g, const std::vector<uint8_t>& chunk, int64_t t0, int64_t t1) {
  std::vector<float> a(g.abstract_floats());
  reset_abstract(g, a.data());
  update_abstract(g, chunk.data(), t0, t1, a.data());
  return a;
}

class ChunkLayoutTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(ChunkLayoutTest, GeometrySizes) {
  const ChunkGeometry g = geometry(GetParam());
  const size_t elem = GetParam() == KvDtype::kF32 ? 4 : 2;
  EXPECT_EQ(g.row_elements(), 24);
  EXPECT_EQ(g.row_bytes(), 24 * elem);
  EXPECT_EQ(g.k_bytes(), 16 * 24 * elem);
  EXPECT_EQ(g.chunk_bytes(), 2 * 16 * 24 * elem);
  EXPECT_EQ(g.box_floats(), 48);
  EXPECT_EQ(g.sign_words_per_head(), 1);
  EXPECT_EQ(g.sign_words(), 16 * 3);
  EXPECT_EQ(g.abstract_floats(), 48 + 16 * 3);
  EXPECT_EQ(g.abstract_bytes(), (48 + 16 * 3) * sizeof(float));
  ChunkGeometry wide = g;
  wide.head_dim = 33;  // a second word a head, one bit of it used
  EXPECT_EQ(wide.sign_words_per_head(), 2);
  EXPECT_EQ(wide.sign_words(), 16 * 3 * 2);
}

TEST_P(ChunkLayoutTest, EmptyAbstractIsPlusInfMinusInf) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 1);
  std::vector<float> a(g.abstract_floats(), 0.0f);
  reset_abstract(g, a.data());
  for (int64_t e = 0; e < g.row_elements(); ++e) {
    EXPECT_EQ(a[e], std::numeric_limits<float>::infinity()) << e;
    EXPECT_EQ(a[g.row_elements() + e], -std::numeric_limits<float>::infinity()) << e;
  }
  // An empty range of rows leaves it empty.
  const std::vector<float> before = a;
  update_abstract(g, chunk.data(), 5, 5, a.data());
  EXPECT_TRUE(abstracts_equal(g, a.data(), before.data()));
}

TEST_P(ChunkLayoutTest, MatchesBruteForceForFullAndPartialRanges) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 2);
  const int64_t ranges[][2] = {{0, 16}, {0, 1}, {0, 5}, {3, 11}, {15, 16}};
  for (const auto& r : ranges) {
    const auto got = abstract_of(g, chunk, r[0], r[1]);
    const auto want = brute_force_abstract(g, chunk, r[0], r[1]);
    EXPECT_TRUE(abstracts_equal(g, got.data(), want.data())) << "rows [" << r[0] << ", " << r[1] << ")";
    // The V rows are 100x larger: a K abstract never reaches them.
    for (int64_t e = 0; e < g.box_floats(); ++e) EXPECT_LT(std::fabs(got[e]), 40.0f);
  }
}

TEST_P(ChunkLayoutTest, UpdateInPiecesEqualsUpdateAtOnce) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 3);
  const auto at_once = abstract_of(g, chunk, 0, 13);
  std::vector<float> pieces(g.abstract_floats());
  reset_abstract(g, pieces.data());
  const int64_t cuts[] = {0, 1, 4, 4, 9, 13};
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    update_abstract(g, chunk.data(), cuts[i], cuts[i + 1], pieces.data());
  }
  EXPECT_TRUE(abstracts_equal(g, pieces.data(), at_once.data()));
}

TEST_P(ChunkLayoutTest, EveryStoredKeyLiesWithinTheAbstract) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 4);
  const int64_t fill = 11;
  const auto a = abstract_of(g, chunk, 0, fill);
  const int64_t n = g.row_elements();
  for (int64_t t = 0; t < fill; ++t) {
    for (int64_t e = 0; e < n; ++e) {
      const float k = stored_key(g, chunk, t, e);
      EXPECT_LE(a[e], k) << "t " << t << " e " << e;
      EXPECT_LE(k, a[n + e]) << "t " << t << " e " << e;
    }
  }
}

TEST_P(ChunkLayoutTest, AbstractBoundsEveryQueryKeyDotProduct) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 5);
  const int64_t fill = 9;
  const auto a = abstract_of(g, chunk, 0, fill);
  const int64_t n = g.row_elements();
  std::mt19937 rng(6);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> q(g.head_dim);
    for (float& x : q) x = dist(rng);
    for (int h = 0; h < g.n_kv_heads; ++h) {
      // Double: products of two floats are exact and rounding is monotone, so the summed bound
      // stays >= the summed dot product.
      double bound = 0.0;
      for (int c = 0; c < g.head_dim; ++c) {
        const int64_t e = static_cast<int64_t>(h) * g.head_dim + c;
        bound += std::max(static_cast<double>(q[c]) * a[e], static_cast<double>(q[c]) * a[n + e]);
      }
      for (int64_t t = 0; t < fill; ++t) {
        double dot = 0.0;
        for (int c = 0; c < g.head_dim; ++c) {
          dot += static_cast<double>(q[c]) * stored_key(g, chunk, t, static_cast<int64_t>(h) * g.head_dim + c);
        }
        EXPECT_GE(bound, dot) << "trial " << trial << " head " << h << " row " << t;
      }
    }
  }
}

TEST_P(ChunkLayoutTest, SignsAreTheStoredKeysSignBits) {
  ChunkGeometry g = geometry(GetParam());
  std::vector<uint8_t> chunk(g.chunk_bytes(), 0);
  // Row 2: channel 0 of head 1 is -0 (a sign bit on a zero), channel 5 of head 2 is -3, channel 7
  // of head 0 is -1e-9 (f16 rounds it to -0: still signed). Every other key is +0 or positive.
  const auto set = [&](int64_t t, int64_t e, float x) {
    if (g.dtype == KvDtype::kF32) {
      std::memcpy(chunk.data() + t * g.row_bytes() + e * 4, &x, 4);
    } else {
      const uint16_t h = f32_to_f16(x);
      std::memcpy(chunk.data() + t * g.row_bytes() + e * 2, &h, 2);
    }
  };
  set(2, 8 + 0, -0.0f);
  set(2, 16 + 5, -3.0f);
  set(2, 7, -1e-9f);
  set(3, 4, 2.0f);
  const auto a = abstract_of(g, chunk, 0, 4);
  std::vector<uint32_t> signs(static_cast<size_t>(g.sign_words()));
  abstract_signs(g, a.data(), signs.data());
  const int64_t row2 = 2 * g.sign_words_per_row();
  EXPECT_EQ(signs[row2 + 0], 1u << 7);
  EXPECT_EQ(signs[row2 + 1], 1u << 0);
  EXPECT_EQ(signs[row2 + 2], 1u << 5);
  for (size_t w = 0; w < signs.size(); ++w) {
    if (w < static_cast<size_t>(row2) || w >= static_cast<size_t>(row2 + 3)) {
      EXPECT_EQ(signs[w], 0u) << w;
    }
  }
  // Rows past the fill keep no sign, and a reset clears them all.
  std::vector<float> again = a;
  reset_abstract(g, again.data());
  abstract_signs(g, again.data(), signs.data());
  EXPECT_TRUE(std::all_of(signs.begin(), signs.end(), [](uint32_t w) { return w == 0; }));
}

TEST_P(ChunkLayoutTest, AbstractsEqualSeesOneDifferentElement) {
  const ChunkGeometry g = geometry(GetParam());
  const auto chunk = random_chunk(g, 7);
  const auto a = abstract_of(g, chunk, 0, 16);
  for (int64_t i : {int64_t{0}, g.row_elements() - 1, g.row_elements(), g.abstract_floats() - 1}) {
    auto b = a;
    b[i] = std::nextafter(b[i], 1e9f);
    EXPECT_FALSE(abstracts_equal(g, a.data(), b.data())) << i;
  }
  std::vector<float> e1(g.abstract_floats()), e2(g.abstract_floats());
  reset_abstract(g, e1.data());
  reset_abstract(g, e2.data());
  EXPECT_TRUE(abstracts_equal(g, e1.data(), e2.data()));
  EXPECT_FALSE(abstracts_equal(g, e1.data(), a.data()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ChunkLayoutTest, ::testing::Values(KvDtype::kF16, KvDtype::kF32),
                         [](const auto& info) { return std::string(kv_dtype_name(info.param)); });

}  // namespace
}  // namespace leoam
