// gemm, every method, against ref::matmul for every weight type (kAuto where it picks kQ8, and
// kQ8: against the same product of 8-bit activations): rows not a multiple of the 16-row units or
// of the panels, ragged token counts, 1-3 threads. Tolerance per output as in matmul_test.cpp:
// |y - y_ref| <= 1e-5 * sum_c |w[r][c] x[t][c]| + 1e-6.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"
#include "random_matrix.h"

namespace leoam::kernels {
namespace {

using testing::random_floats;
using testing::RandomMatrix;

// y[t][r] with 8-bit activations: ref::dot_row_q8 of ref::quantize_activation, what kQ8 computes.
std::vector<float> q8_reference(const RandomMatrix& m, const std::vector<float>& x, int64_t n_tokens) {
  const MatrixView& w = m.view;
  std::vector<uint8_t> xq(activation_bytes(w.type, w.n_cols));
  std::vector<float> y(static_cast<size_t>(n_tokens * w.n_rows));
  for (int64_t t = 0; t < n_tokens; ++t) {
    ref::quantize_activation(w.type, x.data() + t * w.n_cols, w.n_cols, xq.data());
    for (int64_t r = 0; r < w.n_rows; ++r) {
      y[t * w.n_rows + r] = ref::dot_row_q8(w.type, m.bytes.data() + r * w.row_bytes, xq.data(), w.n_cols);
    }
  }
  return y;
}

class GemmTest : public ::testing::TestWithParam<std::tuple<GgmlType, GemmMethod>> {};

TEST_P(GemmTest, MatchesReference) {
  const auto [type, method] = GetParam();
  const int64_t bs = ggml_block_size(type);
  std::mt19937 rng(static_cast<uint32_t>(type) * 7 + static_cast<uint32_t>(method));
  struct Shape {
    int64_t n_rows, n_cols;
  };
  // Columns: 256 = one K-quant super-block, 2304 = several OpenBLAS K blocks, 1 block for the
  // small types. Rows: 1, 37 (not a multiple of 16), 600 (above one panel of 2304 columns).
  const std::vector<Shape> shapes = {{1, bs == 1 ? 3 : bs}, {37, 256}, {600, 2304}};
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (const Shape& s : shapes) {
    const RandomMatrix m(type, s.n_rows, s.n_cols, rng);
    const MatrixView& w = m.view;
    for (int64_t n_tokens : {2, 7, 33}) {
      const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * s.n_cols), rng);
      std::vector<float> y_ref(static_cast<size_t>(n_tokens * s.n_rows));
      const bool q8 =
          has_dot_q8(type) && (method == GemmMethod::kQ8 || (method == GemmMethod::kAuto && gemm_auto_uses_q8(type, n_tokens)));
      if (q8) {
        y_ref = q8_reference(m, x, n_tokens);
      } else {
        ref::matmul(w, x.data(), n_tokens, y_ref.data());
      }
      // Each output's tolerance, once for the three pools (a sum over the columns each).
      std::vector<double> tolerance(y_ref.size());
      for (size_t i = 0; i < y_ref.size(); ++i) {
        tolerance[i] = (q8 ? 1.02 : 1.0) * m.tolerance(x.data(), static_cast<int64_t>(i) / s.n_rows,
                                                       static_cast<int64_t>(i) % s.n_rows);
      }
      for (ThreadPool& pool : pools) {
        SCOPED_TRACE("rows " + std::to_string(s.n_rows) + " cols " + std::to_string(s.n_cols) + " tokens " +
                     std::to_string(n_tokens) + " threads " + std::to_string(pool.n_threads()));
        std::vector<float> y(y_ref.size(), std::numeric_limits<float>::quiet_NaN());
        gemm(w, x.data(), n_tokens, y.data(), pool, GemmOptions{method});
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], y_ref[i], tolerance[i])
              << "token " << static_cast<int64_t>(i) / s.n_rows << " row " << static_cast<int64_t>(i) % s.n_rows;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAndMethods, GemmTest,
    ::testing::Combine(::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                                         GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K),
                       ::testing::Values(GemmMethod::kAuto, GemmMethod::kTiled, GemmMethod::kBlas,
                                         GemmMethod::kBlasThreaded, GemmMethod::kQ8)),
    [](const auto& info) {
      return std::string(ggml_type_name(static_cast<uint32_t>(std::get<0>(info.param)))) + "_" +
             gemm_method_name(std::get<1>(info.param));
    });

// kQ8 on matrices in row groups (the layout the model loader gives Q4_0 and Q8_0): groups, then a
// tail of n_rows % 8 row-major rows, against the 8-bit reference.
TEST(Gemm, Q8OnRowGroups) {
  std::mt19937 rng(23);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    for (const int64_t n_rows : {int64_t{8}, int64_t{45}, int64_t{600}}) {
      const RandomMatrix m(type, n_rows, 512, rng);
      std::vector<uint8_t> grouped(m.bytes.size());
      group_rows(type, m.bytes.data(), m.view.row_bytes, n_rows, grouped.data());
      MatrixView w = m.view;
      w.data = grouped.data();
      w.row_groups = true;
      for (int64_t n_tokens : {2, 9, 33}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * w.n_cols), rng);
        const std::vector<float> y_ref = q8_reference(m, x, n_tokens);
        for (ThreadPool& pool : pools) {
          SCOPED_TRACE(std::string(ggml_type_name(static_cast<uint32_t>(type))) + " rows " + std::to_string(n_rows) +
                       " tokens " + std::to_string(n_tokens) + " threads " + std::to_string(pool.n_threads()));
          std::vector<float> y(y_ref.size(), std::numeric_limits<float>::quiet_NaN());
          gemm(w, x.data(), n_tokens, y.data(), pool, GemmOptions{GemmMethod::kQ8});
          for (size_t i = 0; i < y.size(); ++i) {
            const int64_t t = static_cast<int64_t>(i) / n_rows, r = static_cast<int64_t>(i) % n_rows;
            ASSERT_NEAR(y[i], y_ref[i], 1.02 * m.tolerance(x.data(), t, r)) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

TEST(Gemm, BlasReferenceProduct) {
  // C = A B^T with A 2 x 3, B 2 x 3, worked by hand.
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const float b[6] = {1, 0, -1, 2, 1, 0};
  float c[4];
  blas_sgemm_nt(a, b, c, 2, 2, 3, 1);
  EXPECT_EQ(c[0], -2.0f);
  EXPECT_EQ(c[1], 4.0f);
  EXPECT_EQ(c[2], -2.0f);
  EXPECT_EQ(c[3], 13.0f);
}

}  // namespace
}  // namespace leoam::kernels
