// Prefill products: y = W x for several tokens at once (see matmul.h for the shapes).
//
// Several methods compute the same product; kAuto picks the one measured fastest on the prompt
// batches that matter (32-512 tokens, see the numbers at the top of gemm.cpp): kQ8 for the types
// with an integer dot where the CPU has its multi-token kernels (AVX-512 VNNI), else kBlas, or
// kTiled for tiny products; and kQ8 for up to 16 tokens (a batched decode) of any type with an
// integer dot. The others stay
// selectable so that tests cover each of them and the benchmark can keep comparing them.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace leoam::kernels {

enum class GemmMethod : uint8_t {
  kAuto,
  // Decode 16 rows of W to f32, 4 rows x 2 tokens register-blocked dot products (any CPU).
  kTiled,
  // Each pool thread decodes panels of its rows of W to f32 and multiplies them with a
  // single-threaded OpenBLAS sgemm; OpenBLAS's own threads are not used.
  kBlas,
  // The pool decodes a panel of W to f32, then one OpenBLAS sgemm with OpenBLAS's own threads
  // (as many as the pool has) multiplies it. Kept for the comparison only.
  kBlasThreaded,
  // The tokens are quantized to 8-bit activations (q8_activation.h) and every output is an
  // integer dot (dot_q8.h): gemm_groups_q8 over row groups, gemm_rows_q8 over other rows.
  // For the types with an integer dot only (Q4_0, Q8_0, Q4_K, Q6_K); others take kBlas.
  kQ8,
};

struct GemmOptions {
  GemmMethod method = GemmMethod::kAuto;
};

// y[t][r] = sum_c w[r][c] * x[t][c] for t in [0, n_tokens), n_tokens >= 1.
// x: [n_tokens][n_cols] f32, y: [n_tokens][n_rows] f32.
void gemm(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
          const GemmOptions& options = {});

// Whether kAuto takes kQ8 for `type` and n_tokens (the activations are then rounded to 8 bits, as
// a test's reference must know).
bool gemm_auto_uses_q8(GgmlType type, int64_t n_tokens);

// The reference rate for prefill: one plain OpenBLAS sgemm, C[m][n] = A[m][k] B[n][k]^T, all
// f32 row-major, with OpenBLAS threads = n_threads. For the benchmark.
void blas_sgemm_nt(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int n_threads);

const char* gemm_method_name(GemmMethod method);

}  // namespace leoam::kernels
