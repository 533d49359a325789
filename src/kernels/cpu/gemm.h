// Prefill products: y = W x for several tokens at once (see matmul.h for the shapes).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace leoam::kernels {

// y[t][r] = sum_c w[r][c] * x[t][c] for t in [0, n_tokens), n_tokens >= 1; rows split across the pool.
void gemm(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

}  // namespace leoam::kernels
