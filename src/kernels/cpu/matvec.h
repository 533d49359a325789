// Decode products: y = W x for one token (see matmul.h for the shapes).
#pragma once

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace leoam::kernels {

// y[r] = sum_c w[r][c] * x[c]; rows split across the pool.
void matvec(const MatrixView& w, const float* x, float* y, ThreadPool& pool);

}  // namespace leoam::kernels
