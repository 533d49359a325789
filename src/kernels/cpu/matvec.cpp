// y = W x for one token (decode). For Q4_0, Q8_0, Q4_K and Q6_K the activation x is quantized
// once to 8-bit blocks (q8_activation.h) and every row is an integer dot product (dot_q8.h), up
// to 4 rows per pass; F32, F16 and BF16 rows are a float dot (dot_row). W streams from memory
// once; rows are split evenly across the pool.
#include "kernels/cpu/matvec.h"

#include <memory>

#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"

namespace leoam::kernels {
namespace {

// 64 KiB: the quantized activation of up to 52K columns (Q8A32: 40 bytes per 32) lives on the
// stack, so decode allocates nothing; larger ones go to the heap.
constexpr size_t kStackActivationBytes = 64 * 1024;

void matvec_q8(const MatrixView& w, const void* xq, float* y, ThreadPool& pool) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int) {
    dot_rows_q8(w.type, base + static_cast<size_t>(begin) * w.row_bytes, w.row_bytes, end - begin, xq, w.n_cols,
                y + begin);
  });
}

}  // namespace

void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool) {
  if (has_dot_q8(w.type)) {
    const size_t xq_bytes = activation_bytes(w.type, w.n_cols);
    if (xq_bytes <= kStackActivationBytes) {
      alignas(64) uint8_t xq[kStackActivationBytes];
      quantize_activation(w.type, x, w.n_cols, xq);
      matvec_q8(w, xq, y, pool);
    } else {
      const std::unique_ptr<uint8_t[]> xq(new uint8_t[xq_bytes]);
      quantize_activation(w.type, x, w.n_cols, xq.get());
      matvec_q8(w, xq.get(), y, pool);
    }
    return;
  }
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      y[r] = dot_row(w.type, base + static_cast<size_t>(r) * w.row_bytes, x, w.n_cols);
    }
  });
}

}  // namespace leoam::kernels
