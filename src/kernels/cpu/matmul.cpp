// y = W x: one token goes to matvec (decode), several to gemm (prefill).
#include "kernels/cpu/matmul.h"

#include <cassert>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

namespace leoam::kernels {

void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  assert(w.row_bytes == ggml_row_size(w.type, w.n_cols));
  if (n_tokens <= 0 || w.n_rows <= 0) return;
  if (n_tokens == 1) {
    matvec(w, x, y, pool);
  } else {
    gemm(w, x, n_tokens, y, pool);
  }
}

namespace ref {
void matmul(const MatrixView& w, const float* x, int64_t n_tokens, float* y) {
  std::vector<uint8_t> scratch(w.row_bytes);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < w.n_rows; ++r) {
      y[t * w.n_rows + r] = ref::dot_row(w.type, matrix_row(w, r, scratch.data()), x + t * w.n_cols, w.n_cols);
    }
  }
}
}  // namespace ref

}  // namespace leoam::kernels
