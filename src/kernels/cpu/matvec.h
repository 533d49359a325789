// Decode products: y = W x for one token (see matmul.h for the shapes).
#pragma once

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace leoam::kernels {

// y[r] = sum_c w[r][c] * x[c]; rows split across the pool. For Q4_0, Q8_0, Q4_K and Q6_K, x is
// first quantized to 8 bits per block (q8_activation.h), which costs a relative error of about
// 1% of sum_c |w[r][c] x[c]| (bounds in tests/unit/kernels/q8_test.cpp); F32/F16/BF16 use x as is.
void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool);

}  // namespace leoam::kernels
