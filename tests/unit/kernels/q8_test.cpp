// 8-bit activations and integer dots (q8_activation.h, dot_q8.h) on every path this CPU has,
// forced with set_cpu_path_cap; the AVX-512 path is skipped with a message where the CPU lacks it.
//
// - quantize_activation: every path writes the same bytes as ref::quantize_activation.
// - dot_row_q8: each block's integer sum is exact on every path; only the f32 accumulation of the
//   scaled block sums differs from the reference (double), so
//   |fast - ref| <= 1e-5 * sum_i |w_i xq_i| + 1e-6 (w, xq dequantized), as in quant_test.cpp.
// - dot_rows_q8 (several rows per pass) gives each row bit for bit what dot_row_q8 gives it.
// - Accuracy of 8-bit activations against the f32 activation (ref::dot_row): see kQ8RelL2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"

namespace leoam::kernels {
namespace {

constexpr GgmlType kQ8Types[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

std::string type_name(GgmlType t) { return ggml_type_name(static_cast<uint32_t>(t)); }

const char* path_name(CpuPath p) {
  switch (p) {
    case CpuPath::kScalar:
      return "scalar";
    case CpuPath::kAvx2:
      return "avx2";
    case CpuPath::kAvx512:
      return "avx512";
  }
  return "?";
}

// Ragged block counts (odd, not multiples of the 4-row or 2-block unrolls).
std::vector<int64_t> test_lengths(GgmlType type) {
  const int64_t bs = ggml_block_size(type);
  if (bs == kQK_K) return {1 * bs, 2 * bs, 5 * bs};
  return {1 * bs, 2 * bs, 3 * bs, 7 * bs, 33 * bs};
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// Rows of random quant bits with finite scales: every bit pattern, including Q8_0's -128 and
// Q6_K's negative sub-block scales.
std::vector<uint8_t> random_rows(GgmlType type, int64_t n, int64_t n_rows, std::mt19937& rng) {
  const size_t row_bytes = ggml_row_size(type, n);
  std::vector<uint8_t> rows(row_bytes * static_cast<size_t>(n_rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : rows) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  auto set_f16 = [&](uint8_t* p) {
    const uint16_t h = f32_to_f16(scale(rng));
    std::memcpy(p, &h, 2);
  };
  const int64_t n_blocks = n_rows * (n / ggml_block_size(type));
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* blk = rows.data() + b * ggml_row_size(type, ggml_block_size(type));
    switch (type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ8_0:
        set_f16(blk);
        break;
      case GgmlType::kQ4_K:
        set_f16(blk + offsetof(BlockQ4_K, d));
        set_f16(blk + offsetof(BlockQ4_K, dmin));
        break;
      case GgmlType::kQ6_K:
        set_f16(blk + offsetof(BlockQ6_K, d));
        break;
      default:
        break;
    }
  }
  return rows;
}

// The activation as the integer dot sees it: d * qs.
std::vector<float> dequantize_activation(GgmlType type, const std::vector<uint8_t>& xq, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  if (activation_format(type) == ActivationFormat::kQ8A32) {
    const auto* b = reinterpret_cast<const BlockQ8A32*>(xq.data());
    for (int64_t i = 0; i < n; ++i) x[i] = b[i / 32].d * static_cast<float>(b[i / 32].qs[i % 32]);
  } else {
    const auto* b = reinterpret_cast<const BlockQ8K*>(xq.data());
    for (int64_t i = 0; i < n; ++i) x[i] = b[i / kQK_K].d * static_cast<float>(b[i / kQK_K].qs[i % kQK_K]);
  }
  return x;
}

// Runs fn once per path this CPU has (capped with set_cpu_path_cap), then restores the best.
template <typename Fn>
void for_each_path(Fn fn) {
  for (CpuPath p : {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvx512}) {
    if (set_cpu_path_cap(p) != p) {
      std::printf("[  SKIPPED ] CPU lacks %s: path not tested\n", path_name(p));
      continue;
    }
    SCOPED_TRACE(std::string("path ") + path_name(p));
    fn(p);
  }
  set_cpu_path_cap(CpuPath::kAvx512);
}

TEST(Q8Activation, FormatsAndSizes) {
  EXPECT_EQ(activation_format(GgmlType::kQ4_0), ActivationFormat::kQ8A32);
  EXPECT_EQ(activation_format(GgmlType::kQ8_0), ActivationFormat::kQ8A32);
  EXPECT_EQ(activation_format(GgmlType::kQ4_K), ActivationFormat::kQ8K);
  EXPECT_EQ(activation_format(GgmlType::kQ6_K), ActivationFormat::kQ8K);
  EXPECT_EQ(activation_format(GgmlType::kF16), ActivationFormat::kF32);
  EXPECT_EQ(activation_bytes(GgmlType::kQ4_0, 96), 3 * sizeof(BlockQ8A32));
  EXPECT_EQ(activation_bytes(GgmlType::kQ6_K, 512), 2 * sizeof(BlockQ8K));
  EXPECT_EQ(activation_bytes(GgmlType::kBF16, 512), 0u);
  EXPECT_FALSE(has_dot_q8(GgmlType::kF32));
  EXPECT_TRUE(has_dot_q8(GgmlType::kQ6_K));
}

TEST(Q8Activation, ReferenceBlockValues) {
  // One block: max |x| = 2.54 -> d = 0.02, x / d rounded to nearest-even.
  std::vector<float> x(32, 0.0f);
  x[0] = 2.54f;
  x[1] = -1.27f;
  x[2] = 0.01f;   // 0.5 -> 0 (ties to even)
  x[3] = 0.03f;   // 1.5 -> 2
  BlockQ8A32 b;
  ref::quantize_activation(GgmlType::kQ8_0, x.data(), 32, &b);
  EXPECT_FLOAT_EQ(b.d, 0.02f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -64);  // -63.5 -> -64
  EXPECT_EQ(b.qs[2], 0);
  EXPECT_EQ(b.qs[3], 2);
  EXPECT_EQ(b.qs[4], 0);
  EXPECT_FLOAT_EQ(b.s, b.d * (127 - 64 + 2));
  // All zeros: d = 0, qs = 0.
  std::vector<float> z(256, 0.0f);
  BlockQ8K k;
  ref::quantize_activation(GgmlType::kQ4_K, z.data(), 256, &k);
  EXPECT_EQ(k.d, 0.0f);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(k.qs[i], 0);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(k.bsums[i], 0);
}

TEST(Q8Activation, EveryPathEqualsReferenceBitwise) {
  std::mt19937 rng(7);
  for_each_path([&](CpuPath) {
    for (GgmlType type : kQ8Types) {
      for (int64_t n : test_lengths(type)) {
        SCOPED_TRACE(type_name(type) + " n=" + std::to_string(n));
        std::vector<float> x = random_floats(n, rng, 3.0f);
        x[static_cast<size_t>(n / 2)] = 0.0f;
        const size_t bytes = activation_bytes(type, n);
        std::vector<uint8_t> fast(bytes, 0xAA), want(bytes, 0x55);
        quantize_activation(type, x.data(), n, fast.data());
        ref::quantize_activation(type, x.data(), n, want.data());
        ASSERT_EQ(0, std::memcmp(fast.data(), want.data(), bytes));
      }
    }
  });
}

// The bound a path's dot of `row` with the activation (decoded: xd) is held to:
// 1e-5 * sum_i |w_i x_i| + 1e-6.
double dot_tolerance(GgmlType type, const uint8_t* row, const std::vector<float>& xd, int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  ref::dequantize_row(type, row, w.data(), n);
  double magnitude = 0.0;
  for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(static_cast<double>(w[i]) * xd[i]);
  return 1e-5 * magnitude + 1e-6;
}

TEST(DotQ8, EveryPathMatchesReference) {
  std::mt19937 rng(11);
  for_each_path([&](CpuPath) {
    for (GgmlType type : kQ8Types) {
      for (int64_t n : test_lengths(type)) {
        SCOPED_TRACE(type_name(type) + " n=" + std::to_string(n));
        constexpr int64_t kRows = 9;  // two passes of 4 rows and a single row
        const std::vector<uint8_t> rows = random_rows(type, n, kRows, rng);
        const size_t row_bytes = ggml_row_size(type, n);
        const std::vector<float> x = random_floats(n, rng);
        std::vector<uint8_t> xq(activation_bytes(type, n));
        ref::quantize_activation(type, x.data(), n, xq.data());
        const std::vector<float> xd = dequantize_activation(type, xq, n);
        std::vector<float> y(kRows, -1.0f);
        dot_rows_q8(type, rows.data(), row_bytes, kRows, xq.data(), n, y.data());
        for (int64_t r = 0; r < kRows; ++r) {
          const uint8_t* row = rows.data() + r * row_bytes;
          const float want = ref::dot_row_q8(type, row, xq.data(), n);
          ASSERT_NEAR(y[r], want, dot_tolerance(type, row, xd, n)) << "row " << r;
          ASSERT_EQ(y[r], dot_row_q8(type, row, xq.data(), n)) << "row " << r << ": multi-row pass differs";
        }
      }
    }
  });
}

// Row groups (row_groups.h) of Q4_0 and Q8_0: every path against ref::dot_row_q8 of the rows as
// GGUF stores them, over 3 groups in one call (each group's prefetch reaches into the next).
TEST(DotQ8, RowGroupsEveryPathMatchesReference) {
  std::mt19937 rng(13);
  for_each_path([&](CpuPath) {
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
      for (int64_t n : test_lengths(type)) {
        SCOPED_TRACE(type_name(type) + " n=" + std::to_string(n));
        constexpr int64_t kGroups = 3, kRows = kGroups * kRowGroup;
        const std::vector<uint8_t> rows = random_rows(type, n, kRows, rng);
        const size_t row_bytes = ggml_row_size(type, n);
        std::vector<uint8_t> grouped(rows.size());
        group_rows(type, rows.data(), row_bytes, kRows, grouped.data());
        const std::vector<float> x = random_floats(n, rng);
        std::vector<uint8_t> xq(activation_bytes(type, n));
        ref::quantize_activation(type, x.data(), n, xq.data());
        const std::vector<float> xd = dequantize_activation(type, xq, n);
        std::vector<float> y(kRows, -1.0f);
        dot_groups_q8(type, grouped.data(), row_bytes, kGroups, xq.data(), n, y.data());
        for (int64_t r = 0; r < kRows; ++r) {
          const uint8_t* row = rows.data() + r * row_bytes;
          ASSERT_NEAR(y[r], ref::dot_row_q8(type, row, xq.data(), n), dot_tolerance(type, row, xd, n)) << "row " << r;
        }
      }
    }
  });
}

// A multi-token product: product(xq, n_tokens, y, ldy) writes y[t * ldy + r] for the n_rows
// rows of `rows` (row-major, in the file's layout) and tokens [0, n_tokens) at xq. Checked against
// ref::dot_row_q8 for every token and row, for each count in `counts` out of n_tokens random
// tokens; each token's outputs are the same bits as for the token alone (so a prompt's chunking
// does not change them), and nothing is written past the rows.
using MultiTokenProduct = std::function<void(const uint8_t* xq, int64_t n_tokens, float* y, int64_t ldy)>;
void expect_multi_token_product(GgmlType type, int64_t n, const std::vector<uint8_t>& rows, int64_t n_rows,
                                std::initializer_list<int64_t> counts, std::mt19937& rng,
                                const MultiTokenProduct& product) {
  const size_t row_bytes = ggml_row_size(type, n);
  const size_t stride = activation_bytes(type, n);
  const int64_t n_tokens = std::max(counts);
  std::vector<uint8_t> xq(stride * n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {
    ref::quantize_activation(type, random_floats(n, rng).data(), n, xq.data() + t * stride);
  }
  const int64_t ldy = n_rows + 3;  // a row stride wider than the rows
  for (int64_t count : counts) {
    SCOPED_TRACE(type_name(type) + " n=" + std::to_string(n) + " tokens=" + std::to_string(count));
    std::vector<float> y(static_cast<size_t>(count * ldy), -1.0f);
    product(xq.data(), count, y.data(), ldy);
    for (int64_t t = 0; t < count; ++t) {
      const uint8_t* xt = xq.data() + t * stride;
      const std::vector<float> xd = dequantize_activation(type, std::vector<uint8_t>(xt, xt + stride), n);
      std::vector<float> alone(static_cast<size_t>(n_rows));
      product(xt, 1, alone.data(), n_rows);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* row = rows.data() + r * row_bytes;
        const float got = y[t * ldy + r];
        ASSERT_NEAR(got, ref::dot_row_q8(type, row, xt, n), dot_tolerance(type, row, xd, n))
            << "token " << t << " row " << r;
        ASSERT_EQ(got, alone[r]) << "token " << t << " row " << r << ": differs from the token alone";
      }
      for (int64_t r = n_rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -1.0f) << "wrote past the rows";
    }
  }
}

// Row groups (gemm_groups_q8, prefill) on every path: 5 groups (two pairs and a lone group on
// the AVX-512 kernel), token counts around its 8-token step.
TEST(DotQ8, GemmGroupsEveryPathMatchesReference) {
  std::mt19937 rng(17);
  for_each_path([&](CpuPath) {
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
      for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{2048}}) {
        constexpr int64_t kGroups = 5, kRows = kGroups * kRowGroup;
        const std::vector<uint8_t> rows = random_rows(type, n, kRows, rng);
        const size_t row_bytes = ggml_row_size(type, n);
        std::vector<uint8_t> grouped(rows.size());
        group_rows(type, rows.data(), row_bytes, kRows, grouped.data());
        const size_t stride = activation_bytes(type, n);
        expect_multi_token_product(type, n, rows, kRows, {1, 7, 8, 19}, rng,
                                   [&](const uint8_t* xq, int64_t n_tokens, float* y, int64_t ldy) {
                                     gemm_groups_q8(type, grouped.data(), row_bytes, kGroups, xq, stride, n_tokens, n,
                                                    y, ldy);
                                   });
      }
    }
  });
}

// Row-major rows (gemm_rows_q8) of every type with an integer dot, on every path: 37 rows are
// two 16-row panels (Q4_K, Q6_K) or two pairs of groups (Q4_0, Q8_0) and a ragged rest, token
// counts around the 4- and 8-token steps.
TEST(DotQ8, GemmRowsEveryPathMatchesReference) {
  std::mt19937 rng(19);
  for_each_path([&](CpuPath) {
    for (GgmlType type : kQ8Types) {
      const int64_t bs = ggml_block_size(type);
      for (int64_t n : {bs, 8 * bs}) {
        constexpr int64_t kRows = 37;
        const std::vector<uint8_t> rows = random_rows(type, n, kRows, rng);
        const size_t row_bytes = ggml_row_size(type, n);
        const size_t stride = activation_bytes(type, n);
        expect_multi_token_product(type, n, rows, kRows, {1, 3, 4, 11}, rng,
                                   [&](const uint8_t* xq, int64_t n_tokens, float* y, int64_t ldy) {
                                     gemm_rows_q8(type, rows.data(), row_bytes, kRows, xq, stride, n_tokens, n, y,
                                                  ldy);
                                   });
      }
    }
  });
}

// 8-bit activations against the exact f32 activation, over a 64 x 4096 matrix of quantized
// Gaussian weights: relative L2 error of y, for a Gaussian x and for the same x with one 20x
// outlier channel in every 512 (as LLM activations have; a block holding an outlier quantizes
// the rest of its elements coarsely, and Q8K's blocks are 8x longer than Q8A32's).
// Measured on this machine (same on every path; the quantized activation is bit-identical):
//            Gaussian   with outliers
//   Q4_0     4.8e-3     8.4e-3
//   Q8_0     4.8e-3     8.3e-3
//   Q4_K     5.9e-3     2.7e-2
//   Q6_K     5.9e-3     2.7e-2
// The bounds are ~3x the measured errors.
struct AccuracyBound {
  double gaussian;
  double outliers;
};
constexpr AccuracyBound kQ8RelL2[] = {{1.5e-2, 2.5e-2}, {1.5e-2, 2.5e-2}, {1.8e-2, 8e-2}, {1.8e-2, 8e-2}};  // kQ8Types order

double q8_rel_l2(GgmlType type, const std::vector<float>& x, const std::vector<float>& wf, int64_t n_rows) {
  const auto n = static_cast<int64_t>(x.size());
  const size_t row_bytes = ggml_row_size(type, n);
  std::vector<uint8_t> rows(row_bytes * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) quantize_row(type, wf.data() + r * n, rows.data() + r * row_bytes, n);
  std::vector<uint8_t> xq(activation_bytes(type, n));
  quantize_activation(type, x.data(), n, xq.data());
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows.data() + r * row_bytes;
    const double exact = ref::dot_row(type, row, x.data(), n);
    const double q8 = dot_row_q8(type, row, xq.data(), n);
    err2 += (q8 - exact) * (q8 - exact);
    ref2 += exact * exact;
  }
  return std::sqrt(err2 / ref2);
}

TEST(DotQ8, AccuracyAgainstFloatActivation) {
  constexpr int64_t n = 4096, n_rows = 64;
  std::mt19937 rng(5);
  const std::vector<float> x = random_floats(n, rng);
  std::vector<float> x_outliers = x;
  for (int64_t i = 0; i < n; i += 512) x_outliers[static_cast<size_t>(i + 7)] *= 20.0f;
  const std::vector<float> wf = random_floats(n * n_rows, rng);
  for (size_t t = 0; t < std::size(kQ8Types); ++t) {
    const GgmlType type = kQ8Types[t];
    SCOPED_TRACE(type_name(type));
    const double gaussian = q8_rel_l2(type, x, wf, n_rows);
    const double outliers = q8_rel_l2(type, x_outliers, wf, n_rows);
    std::printf("%s: relative L2 error of 8-bit activations: Gaussian %.3g (bound %.3g), outliers %.3g (bound %.3g)\n",
                type_name(type).c_str(), gaussian, kQ8RelL2[t].gaussian, outliers, kQ8RelL2[t].outliers);
    EXPECT_LT(gaussian, kQ8RelL2[t].gaussian);
    EXPECT_LT(outliers, kQ8RelL2[t].outliers);
    EXPECT_GT(gaussian, 0.0);
  }
}

}  // namespace
}  // namespace leoam::kernels
