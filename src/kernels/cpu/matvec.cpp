// y = W x for one token (decode). For Q4_0, Q8_0, Q4_K and Q6_K the activation x is quantized
// once to 8-bit blocks (q8_activation.h) and every row is an integer dot product (dot_q8.h), up
// to 4 rows per pass, or 8 (one row group, row_groups.h) when W is stored in row groups; F32, F16
// and BF16 rows are a float dot (dot_row). W streams from memory once; rows (or groups) are split
// evenly across the pool.
#include "kernels/cpu/matvec.h"

#include <memory>

#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

namespace leoam::kernels {
namespace {

// 64 KiB: the quantized activation of up to 52K columns (Q8A32: 40 bytes per 32) lives on the
// stack, so decode allocates nothing; larger ones go to the heap.
constexpr size_t kStackActivationBytes = 64 * 1024;

// The groups, then the n_rows % 8 row-major rows after them as one more unit of work.
void matvec_groups_q8(const MatrixView& w, const void* xq, float* y, ThreadPool& pool) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t n_groups = w.n_rows / kRowGroup;
  const int64_t n_tail = w.n_rows - n_groups * kRowGroup;
  pool.parallel_for(n_groups + (n_tail > 0 ? 1 : 0), [&](int64_t begin, int64_t end, int) {
    const int64_t g1 = end < n_groups ? end : n_groups;
    if (begin < g1) {
      dot_groups_q8(w.type, base + static_cast<size_t>(begin) * kRowGroup * w.row_bytes, w.row_bytes, g1 - begin, xq,
                    w.n_cols, y + begin * kRowGroup);
    }
    if (end > n_groups) {
      const int64_t r0 = n_groups * kRowGroup;
      dot_rows_q8(w.type, base + static_cast<size_t>(r0) * w.row_bytes, w.row_bytes, n_tail, xq, w.n_cols, y + r0);
    }
  });
}

void matvec_q8(const MatrixView& w, const void* xq, float* y, ThreadPool& pool) {
  if (w.row_groups) return matvec_groups_q8(w, xq, y, pool);
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
