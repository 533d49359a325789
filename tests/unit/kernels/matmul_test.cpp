// matmul against its reference for every type, several shapes, 1..5 tokens and 1..3 threads.
// Tolerance per output: |y - y_ref| <= 1e-5 * sum_c |w[r][c] x[t][c]| + 1e-6 (see quant_test.cpp
// for why this bound). With a quantized weight type a single token (a decode matvec), and
// several where the CPU has the 8-bit GEMM, quantize x to 8 bits first: their reference is
// ref::quantize_activation + ref::dot_row_q8.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"
#include "random_matrix.h"

namespace leoam::kernels {
namespace {

struct Shape {
  int64_t n_rows;
  int64_t n_cols;  // in blocks of the type's block size when `in_blocks`
};

using testing::random_floats;
using testing::RandomMatrix;

class MatmulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTest, MatchesReference) {
  const GgmlType type = GetParam();
  const int64_t bs = ggml_block_size(type);
  std::mt19937 rng(static_cast<uint32_t>(type) + 17);
  // Rows: fewer than the threads, not a multiple of the 16-row tile or 4-row micro-kernel, and
  // several tiles. Columns: 1, 3 and 5 blocks (for 1-element types: ragged vector tails).
  const std::vector<Shape> shapes = bs == 1 ? std::vector<Shape>{{1, 5}, {7, 33}, {37, 260}, {64, 1027}}
                                            : std::vector<Shape>{{1, bs}, {7, 3 * bs}, {37, 5 * bs}, {64, 2 * bs}};
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (const Shape& s : shapes) {
    const RandomMatrix m(type, s.n_rows, s.n_cols, rng);
    const MatrixView& w = m.view;
    for (int64_t n_tokens = 1; n_tokens <= 5; ++n_tokens) {
      const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * s.n_cols), rng);
      std::vector<float> y_ref(static_cast<size_t>(n_tokens * s.n_rows));
      // Decode, and products that kAuto gives the 8-bit GEMM (gemm.h), take 8-bit activations.
      if (has_dot_q8(type) && (n_tokens == 1 || gemm_auto_uses_q8(type, n_tokens))) {
        std::vector<uint8_t> xq(activation_bytes(type, s.n_cols));
        for (int64_t t = 0; t < n_tokens; ++t) {
          ref::quantize_activation(type, x.data() + t * s.n_cols, s.n_cols, xq.data());
          for (int64_t r = 0; r < s.n_rows; ++r) {
            y_ref[static_cast<size_t>(t * s.n_rows + r)] =
                ref::dot_row_q8(type, m.bytes.data() + r * w.row_bytes, xq.data(), s.n_cols);
          }
        }
      } else {
        ref::matmul(w, x.data(), n_tokens, y_ref.data());
      }
      for (ThreadPool& pool : pools) {
        SCOPED_TRACE("rows " + std::to_string(s.n_rows) + " cols " + std::to_string(s.n_cols) + " tokens " +
                     std::to_string(n_tokens) + " threads " + std::to_string(pool.n_threads()));
        std::vector<float> y(y_ref.size(), std::numeric_limits<float>::quiet_NaN());
        matmul(w, x.data(), n_tokens, y.data(), pool);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < s.n_rows; ++r) {
            const size_t i = static_cast<size_t>(t * s.n_rows + r);
            ASSERT_NEAR(y[i], y_ref[i], m.tolerance(x.data(), t, r)) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// The same matrix in the row-group layout (row_groups.h), whole and as the view of its rows 8..
// that a decode region takes: decode (1 token) within the reference's bound, and prefill by each
// f32 method of gemm exactly equal to the row-major matrix's (it decodes the same rows), by the
// 8-bit method within the bound.
class RowGroupsMatmulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(RowGroupsMatmulTest, MatchRowMajor) {
  const GgmlType type = GetParam();
  const int64_t bs = ggml_block_size(type);
  std::mt19937 rng(static_cast<uint32_t>(type) + 29);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (const Shape& s : {Shape{8, 3 * bs}, Shape{21, 5 * bs}, Shape{64, 2 * bs}, Shape{72, 128 * bs}}) {
    const RandomMatrix m(type, s.n_rows, s.n_cols, rng);
    std::vector<uint8_t> grouped(m.bytes.size());
    group_rows(type, m.bytes.data(), m.view.row_bytes, s.n_rows, grouped.data());
    for (const int64_t r0 : {int64_t{0}, int64_t{8}}) {
      if (r0 >= s.n_rows) continue;
      MatrixView plain = m.view;
      plain.data = m.bytes.data() + r0 * plain.row_bytes;
      plain.n_rows = s.n_rows - r0;
      MatrixView view = plain;
      view.data = grouped.data() + r0 * view.row_bytes;
      view.row_groups = true;
      for (int64_t n_tokens : {1, 5}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens * s.n_cols), rng);
        std::vector<float> want(static_cast<size_t>(n_tokens * plain.n_rows));
        std::vector<float> y(want.size());
        for (ThreadPool& pool : pools) {
          SCOPED_TRACE("rows " + std::to_string(s.n_rows) + " from " + std::to_string(r0) + " tokens " +
                       std::to_string(n_tokens) + " threads " + std::to_string(pool.n_threads()));
          if (n_tokens == 1) {
            matmul(plain, x.data(), n_tokens, want.data(), pool);
            matmul(view, x.data(), n_tokens, y.data(), pool);
            for (int64_t r = 0; r < plain.n_rows; ++r) {
              ASSERT_NEAR(y[r], want[r], m.tolerance(x.data(), 0, r0 + r)) << "row " << r;
            }
            continue;
          }
          // The f32 methods decode the same rows from either layout: the same bits. kQ8 runs
          // gemm_groups_q8 on the groups and dot_rows_q8 on the rows: the same integer sums,
          // accumulated in another order.
          for (const GemmMethod method : {GemmMethod::kTiled, GemmMethod::kBlas, GemmMethod::kQ8}) {
            SCOPED_TRACE(gemm_method_name(method));
            gemm(plain, x.data(), n_tokens, want.data(), pool, GemmOptions{method});
            gemm(view, x.data(), n_tokens, y.data(), pool, GemmOptions{method});
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = 0; r < plain.n_rows; ++r) {
                const size_t i = static_cast<size_t>(t * plain.n_rows + r);
                if (method == GemmMethod::kQ8) {
                  ASSERT_NEAR(y[i], want[i], m.tolerance(x.data(), t, r0 + r)) << "token " << t << " row " << r;
                } else {
                  ASSERT_EQ(y[i], want[i]) << "token " << t << " row " << r;
                }
              }
            }
          }
        }
        std::vector<float> y_ref(want.size());
        ref::matmul(view, x.data(), n_tokens, y_ref.data());
        std::vector<float> y_plain_ref(want.size());
        ref::matmul(plain, x.data(), n_tokens, y_plain_ref.data());
        ASSERT_EQ(y_ref, y_plain_ref) << "ref::matmul reads the groups as rows";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RowGroupsMatmulTest, ::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_0),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return ggml_type_name(static_cast<uint32_t>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                                           GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return ggml_type_name(static_cast<uint32_t>(info.param));
                         });

TEST(Matmul, ReferenceIsRowTimesToken) {
  // 2 x 3 F32 matrix, 2 tokens, worked by hand.
  const float w_data[6] = {1, 2, 3, -1, 0, 4};
  const float x[6] = {1, 1, 1, 2, -1, 0.5f};
  const MatrixView w{GgmlType::kF32, w_data, 3, 2, 3 * sizeof(float)};
  float y_ref[4];
  ref::matmul(w, x, 2, y_ref);
  EXPECT_EQ(y_ref[0], 6.0f);   // token 0, row 0
  EXPECT_EQ(y_ref[1], 3.0f);   // token 0, row 1
  EXPECT_EQ(y_ref[2], 1.5f);   // token 1, row 0: 2 - 2 + 1.5
  EXPECT_EQ(y_ref[3], 0.0f);   // token 1, row 1: -2 + 0 + 2
  ThreadPool pool(2);
  float y[4];
  matmul(w, x, 2, y, pool);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], y_ref[i]);
}

}  // namespace
}  // namespace leoam::kernels
