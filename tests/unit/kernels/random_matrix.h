// A random weight matrix of any type for the matmul/gemm tests: N(0, 1) values quantized to
// `type`, with the F32 values it decodes to (what the references multiply) and the bound each
// output is held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace leoam::kernels::testing {

inline std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

struct RandomMatrix {
  std::vector<uint8_t> bytes;   // [n_rows] rows of ggml_row_size(type, n_cols) bytes
  std::vector<float> decoded;   // [n_rows][n_cols], ref::dequantize_row of each row
  MatrixView view;

  RandomMatrix(GgmlType type, int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
    const std::vector<float> values = random_floats(static_cast<size_t>(n_rows * n_cols), rng);
    const size_t row_bytes = ggml_row_size(type, n_cols);
    bytes.resize(row_bytes * static_cast<size_t>(n_rows));
    decoded.resize(values.size());
    for (int64_t r = 0; r < n_rows; ++r) {
      quantize_row(type, values.data() + r * n_cols, bytes.data() + r * row_bytes, n_cols);
      ref::dequantize_row(type, bytes.data() + r * row_bytes, decoded.data() + r * n_cols, n_cols);
    }
    view = MatrixView{type, bytes.data(), n_cols, n_rows, row_bytes};
  }

  // The tolerance of output (token t, row r) for activations x [n_tokens][n_cols]:
  // 1e-5 * sum_c |w[r][c] x[t][c]| + 1e-6 (see quant_test.cpp for why this bound).
  double tolerance(const float* x, int64_t t, int64_t r) const {
    const int64_t n_cols = view.n_cols;
    double magnitude = 0.0;
    for (int64_t c = 0; c < n_cols; ++c) magnitude += std::fabs(decoded[r * n_cols + c] * x[t * n_cols + c]);
    return 1e-5 * magnitude + 1e-6;
  }
};

}  // namespace leoam::kernels::testing
