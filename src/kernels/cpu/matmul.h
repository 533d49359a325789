// Matrix products of a weight matrix (any supported type) with F32 activations.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"
#include "core/thread_pool.h"

namespace leoam::kernels {

// A row-major weight matrix as stored in GGUF: n_rows rows (ggml ne[1]) of n_cols elements
// (ggml ne[0]), each row_bytes = ggml_row_size(type, n_cols) long; or, with row_groups, the same
// bytes in the row-group layout of row_groups.h (a view of rows r0.. then needs r0 % 8 == 0).
struct MatrixView {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t n_cols = 0;
  int64_t n_rows = 0;
  size_t row_bytes = 0;
  bool row_groups = false;  // Q4_0 / Q8_0 rows interleaved in groups of 8 (row_groups.h)
};

// y[t][r] = sum_c w[r][c] * x[t][c] for t in [0, n_tokens).
// x: [n_tokens][n_cols] f32, y: [n_tokens][n_rows] f32. Rows are split across the pool.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

namespace ref {
// The same product, single-threaded, one ref::dot_row per (token, row): what tests compare to.
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y);
}  // namespace ref

}  // namespace leoam::kernels
