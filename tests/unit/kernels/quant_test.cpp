// Fast row kernels against the scalar references, and quantize -> dequantize round trips.
//
// dequantize_row: the fast path must equal ref::dequantize_row bit for bit.
// dot_row: |fast - ref| <= kDotRelTol * sum_i |w_i x_i| + kDotAbsTol, where w is the dequantized
// row. The fast paths accumulate in float (several lanes, per-block partial sums), the reference
// in double; 1e-5 is ~84 float ulps of the magnitude sum, far above the rounding of a few
// thousand float additions done in 8-32 parallel lanes, far below any layout or indexing bug.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels {
namespace {

constexpr double kDotRelTol = 1e-5;
constexpr double kDotAbsTol = 1e-6;

constexpr GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                                  GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

std::string ggml_name(GgmlType t) { return ggml_type_name(static_cast<uint32_t>(t)); }

// Element counts to test for a type: ragged block counts, and for the 1-element types lengths
// that leave every tail length of the 8- and 32-wide loops.
std::vector<int64_t> quant_lengths(GgmlType type) {
  const int64_t bs = ggml_block_size(type);
  if (bs == kQK_K) return {1 * bs, 2 * bs, 5 * bs};
  if (bs == 32) return {1 * bs, 3 * bs, 7 * bs, 33 * bs};
  return {1, 3, 7, 8, 31, 33, 100, 4096 + 3};
}

std::vector<float> normal_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// A row of random blocks: random quant bits, finite random scales.
std::vector<uint8_t> random_row(GgmlType type, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(ggml_row_size(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  auto set_f16 = [](void* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  switch (type) {
    case GgmlType::kF32: {
      const std::vector<float> f = normal_floats(n, rng);
      std::memcpy(row.data(), f.data(), row.size());
      break;
    }
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const std::vector<float> f = normal_floats(n, rng);
      quantize_row(type, f.data(), row.data(), n);
      break;
    }
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b) set_f16(row.data() + b * sizeof(BlockQ4_0), scale(rng));
      break;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) set_f16(row.data() + b * sizeof(BlockQ8_0), scale(rng));
      break;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        auto* blk = reinterpret_cast<BlockQ4_K*>(row.data() + b * sizeof(BlockQ4_K));
        set_f16(&blk->d, scale(rng));
        set_f16(&blk->dmin, scale(rng));
      }
      break;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        auto* blk = reinterpret_cast<BlockQ6_K*>(row.data() + b * sizeof(BlockQ6_K));
        set_f16(&blk->d, scale(rng));
      }
      break;
  }
  return row;
}

TEST(QuantKernels, FastDequantizeEqualsReferenceBitwise) {
  std::mt19937 rng(1234);
  for (GgmlType type : kAllTypes) {
    for (int64_t n : quant_lengths(type)) {
      SCOPED_TRACE(ggml_name(type) + " n=" + std::to_string(n));
      const std::vector<uint8_t> row = random_row(type, n, rng);
      std::vector<float> fast(static_cast<size_t>(n), -1.0f);
      std::vector<float> ref_out(static_cast<size_t>(n), -2.0f);
      dequantize_row(type, row.data(), fast.data(), n);
      ref::dequantize_row(type, row.data(), ref_out.data(), n);
      EXPECT_EQ(0, std::memcmp(fast.data(), ref_out.data(), fast.size() * sizeof(float)));
      // The reference must not be trivially zero either.
      EXPECT_TRUE(std::any_of(ref_out.begin(), ref_out.end(), [](float v) { return v != 0.0f; }));
    }
  }
}

TEST(QuantKernels, FastDotMatchesReference) {
  std::mt19937 rng(99);
  for (GgmlType type : kAllTypes) {
    for (int64_t n : quant_lengths(type)) {
      SCOPED_TRACE(ggml_name(type) + " n=" + std::to_string(n));
      for (int rep = 0; rep < 4; ++rep) {
        const std::vector<uint8_t> row = random_row(type, n, rng);
        const std::vector<float> x = normal_floats(n, rng);
        std::vector<float> w(static_cast<size_t>(n));
        ref::dequantize_row(type, row.data(), w.data(), n);
        double magnitude = 0.0;
        double exact = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          magnitude += std::fabs(static_cast<double>(w[i]) * x[i]);
          exact += static_cast<double>(w[i]) * x[i];
        }
        const float ref_dot = ref::dot_row(type, row.data(), x.data(), n);
        const float fast_dot = dot_row(type, row.data(), x.data(), n);
        const double tol = kDotRelTol * magnitude + kDotAbsTol;
        EXPECT_NEAR(ref_dot, exact, tol);
        EXPECT_NEAR(fast_dot, ref_dot, tol) << "magnitude " << magnitude;
      }
    }
  }
}

TEST(QuantKernels, DotIsLinearInX) {
  // A bug that reads x at the wrong offset still "looks" random; a unit vector pins each index.
  std::mt19937 rng(5);
  for (GgmlType type : kAllTypes) {
    const int64_t n = type == GgmlType::kQ4_K || type == GgmlType::kQ6_K ? 2 * kQK_K : 64;
    SCOPED_TRACE(ggml_name(type));
    const std::vector<uint8_t> row = random_row(type, n, rng);
    std::vector<float> w(static_cast<size_t>(n));
    ref::dequantize_row(type, row.data(), w.data(), n);
    std::vector<float> e(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      e[i] = 1.0f;
      // Exact except Q4_K, whose fused dot applies the min as a separate sum (one rounding more).
      ASSERT_NEAR(dot_row(type, row.data(), e.data(), n), w[i], std::fabs(w[i]) * 1e-6f) << "index " << i;
      e[i] = 0.0f;
    }
  }
}

// ---- quantize -> dequantize round trips ----

struct RoundTrip {
  std::vector<float> x;
  std::vector<uint8_t> bytes;
  std::vector<float> y;
};

RoundTrip round_trip(GgmlType type, std::vector<float> x) {
  RoundTrip r;
  const int64_t n = static_cast<int64_t>(x.size());
  r.x = std::move(x);
  r.bytes.resize(ggml_row_size(type, n));
  r.y.resize(static_cast<size_t>(n));
  quantize_row(type, r.x.data(), r.bytes.data(), n);
  dequantize_row(type, r.bytes.data(), r.y.data(), n);
  return r;
}

// Test inputs: gaussian, with a few large outliers, and with a constant offset (all-positive).
std::vector<std::vector<float>> round_trip_inputs(int64_t n, std::mt19937& rng) {
  std::vector<std::vector<float>> inputs;
  inputs.push_back(normal_floats(n, rng));
  std::vector<float> outliers = normal_floats(n, rng, 0.02f);
  for (int64_t i = 0; i < n; i += 37) outliers[i] = (i % 2 ? 3.0f : -5.0f);
  inputs.push_back(outliers);
  std::vector<float> offset = normal_floats(n, rng, 0.1f);
  for (float& f : offset) f += 1.0f;
  inputs.push_back(offset);
  return inputs;
}

TEST(QuantRoundTrip, F16AndBF16WithinHalfUlp) {
  std::mt19937 rng(7);
  for (const auto& x : round_trip_inputs(1024, rng)) {
    const RoundTrip h = round_trip(GgmlType::kF16, x);
    const RoundTrip b = round_trip(GgmlType::kBF16, x);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_LE(std::fabs(h.y[i] - x[i]), std::fabs(x[i]) * 0x1p-11f + 0x1p-25f);  // half ulp of f16
      EXPECT_LE(std::fabs(b.y[i] - x[i]), std::fabs(x[i]) * 0x1p-8f);              // half ulp of bf16
    }
  }
}

TEST(QuantRoundTrip, F32IsExact) {
  std::mt19937 rng(8);
  const RoundTrip r = round_trip(GgmlType::kF32, normal_floats(100, rng));
  EXPECT_EQ(r.x, r.y);
}

TEST(QuantRoundTrip, Q8_0WithinHalfStep) {
  std::mt19937 rng(11);
  for (const auto& x : round_trip_inputs(32 * 40, rng)) {
    const RoundTrip r = round_trip(GgmlType::kQ8_0, x);
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(r.bytes.data());
    for (size_t b = 0; b < x.size() / 32; ++b) {
      const float d = f16_to_f32(blocks[b].d);
      ASSERT_GT(d, 0.0f);
      for (size_t j = 32 * b; j < 32 * b + 32; ++j) EXPECT_LE(std::fabs(r.y[j] - x[j]), 0.5f * d * (1 + 1e-5f));
    }
  }
}

TEST(QuantRoundTrip, Q4_0WithinOneStepAndHalfOnAverage) {
  std::mt19937 rng(12);
  for (const auto& x : round_trip_inputs(32 * 40, rng)) {
    const RoundTrip r = round_trip(GgmlType::kQ4_0, x);
    const auto* blocks = reinterpret_cast<const BlockQ4_0*>(r.bytes.data());
    for (size_t b = 0; b < x.size() / 32; ++b) {
      const float d = std::fabs(f16_to_f32(blocks[b].d));
      ASSERT_GT(d, 0.0f);
      double sq = 0.0;
      for (size_t j = 32 * b; j < 32 * b + 32; ++j) {
        const float err = std::fabs(r.y[j] - x[j]);
        // Only the side opposite the block's extreme can clamp (at +7 steps): err <= d there.
        EXPECT_LE(err, d * (1 + 1e-5f));
        sq += static_cast<double>(err) * err;
      }
      EXPECT_LE(std::sqrt(sq / 32), 0.5 * d);
    }
  }
}

TEST(QuantRoundTrip, Q4_KWithinOneStepOfWidestSubBlock) {
  std::mt19937 rng(13);
  for (const auto& x : round_trip_inputs(kQK_K * 6, rng)) {
    const RoundTrip r = round_trip(GgmlType::kQ4_K, x);
    for (size_t b = 0; b < x.size() / kQK_K; ++b) {
      float widest = 0.0f;  // max over sub-blocks of max(x) - min(0, min x)
      for (size_t s = 0; s < 8; ++s) {
        const auto first = x.begin() + static_cast<long>(kQK_K * b + 32 * s);
        const float lo = std::min(0.0f, *std::min_element(first, first + 32));
        widest = std::max(widest, *std::max_element(first, first + 32) - lo);
      }
      float max_err = 0.0f;
      for (size_t j = kQK_K * b; j < kQK_K * (b + 1); ++j) max_err = std::max(max_err, std::fabs(r.y[j] - x[j]));
      EXPECT_LE(max_err, widest / 15.0f) << "super-block " << b;
    }
  }
}

TEST(QuantRoundTrip, Q6_KWithinOneStepOfLargestSubBlock) {
  std::mt19937 rng(14);
  for (const auto& x : round_trip_inputs(kQK_K * 6, rng)) {
    const RoundTrip r = round_trip(GgmlType::kQ6_K, x);
    for (size_t b = 0; b < x.size() / kQK_K; ++b) {
      float amax = 0.0f;
      float max_err = 0.0f;
      for (size_t j = kQK_K * b; j < kQK_K * (b + 1); ++j) {
        amax = std::max(amax, std::fabs(x[j]));
        max_err = std::max(max_err, std::fabs(r.y[j] - x[j]));
      }
      EXPECT_LE(max_err, amax / 32.0f) << "super-block " << b;  // one step of the largest scale
    }
  }
}

TEST(QuantRoundTrip, ZerosStayZeros) {
  for (GgmlType type : kAllTypes) {
    SCOPED_TRACE(ggml_name(type));
    const RoundTrip r = round_trip(type, std::vector<float>(512, 0.0f));
    for (float v : r.y) EXPECT_EQ(v, 0.0f);
  }
}

TEST(QuantRoundTrip, RequantizingIsStable) {
  // Values that are already on a type's grid must survive a second round trip unchanged: the
  // quantizer picks the same scales from dequantized values (up to f16 rounding of the scale).
  std::mt19937 rng(15);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    SCOPED_TRACE(ggml_name(type));
    const RoundTrip once = round_trip(type, normal_floats(32 * 8, rng));
    const RoundTrip twice = round_trip(type, once.y);
    EXPECT_EQ(once.y, twice.y);
  }
}

}  // namespace
}  // namespace leoam::kernels
