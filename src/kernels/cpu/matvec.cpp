// y = W x for one token (decode): each row is a fused dequantize-and-dot (dot_row), so W streams
// from memory once. Rows are split evenly across the pool.
#include "kernels/cpu/matvec.h"

#include "kernels/cpu/quant.h"

namespace leoam::kernels {

void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      y[r] = dot_row(w.type, base + static_cast<size_t>(r) * w.row_bytes, x, w.n_cols);
    }
  });
}

}  // namespace leoam::kernels
