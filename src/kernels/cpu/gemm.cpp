// y = W x for a batch of tokens (prefill). Rows of W are split evenly across the pool.
//
// Each thread decodes kTileRows rows at a time into a thread-local f32 tile (16 rows x n_cols,
// 256 KiB at n_cols = 4096: stays in L2), then a register-blocked micro-kernel computes 4 rows x
// 2 tokens of dots per pass, so each loaded weight vector feeds 2 FMAs and each loaded activation
// vector 4. W is decoded once per call whatever n_tokens is.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LEOAM_HAVE_X86 1
#define LEOAM_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace leoam::kernels {
namespace {

// 16: rows per decoded tile; 16 x 4096 f32 = 256 KiB, half an EPYC core's L2.
constexpr int64_t kTileRows = 16;
// Micro-kernel shape: rows x tokens of dots computed together (8 ymm accumulators).
constexpr int kMicroRows = 4;
constexpr int kMicroTokens = 2;

// out[r][t] = dot(rows[r], xs[t]) over n f32 elements.
template <int R, int T>
void dot_block_scalar(const float* const* rows, const float* const* xs, int64_t n, float (*out)[T]) {
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) out[r][t] = dot_row(GgmlType::kF32, rows[r], xs[t], n);
  }
}

#ifdef LEOAM_HAVE_X86
LEOAM_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int T>
LEOAM_AVX2 void dot_block_avx2(const float* const* rows, const float* const* xs, int64_t n, float (*out)[T]) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(xs[t] + i);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(rows[r] + i);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float sum = hsum(acc[r][t]);
      for (int64_t j = i; j < n; ++j) sum += rows[r][j] * xs[t][j];
      out[r][t] = sum;
    }
  }
}

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

template <int R, int T>
void dot_block(const float* const* rows, const float* const* xs, int64_t n, float (*out)[T]) {
#ifdef LEOAM_HAVE_X86
  static const bool avx2 = cpu_has_avx2_fma();
  if (avx2) {
    dot_block_avx2<R, T>(rows, xs, n, out);
    return;
  }
#endif
  dot_block_scalar<R, T>(rows, xs, n, out);
}

// y[t][r] for r in [r0, r0 + n_tile_rows), all t; `rows[i]` is row r0 + i as f32.
void tile_times_tokens(const float* const* rows, int64_t n_tile_rows, int64_t r0, const float* x, int64_t n_tokens,
                       int64_t n_cols, int64_t n_rows, float* y) {
  int64_t t = 0;
  for (; t + kMicroTokens <= n_tokens; t += kMicroTokens) {
    const float* xs[kMicroTokens];
    for (int k = 0; k < kMicroTokens; ++k) xs[k] = x + (t + k) * n_cols;
    int64_t i = 0;
    for (; i + kMicroRows <= n_tile_rows; i += kMicroRows) {
      float out[kMicroRows][kMicroTokens];
      dot_block<kMicroRows, kMicroTokens>(rows + i, xs, n_cols, out);
      for (int r = 0; r < kMicroRows; ++r) {
        for (int k = 0; k < kMicroTokens; ++k) y[(t + k) * n_rows + r0 + i + r] = out[r][k];
      }
    }
    for (; i < n_tile_rows; ++i) {
      float out[1][kMicroTokens];
      dot_block<1, kMicroTokens>(rows + i, xs, n_cols, out);
      for (int k = 0; k < kMicroTokens; ++k) y[(t + k) * n_rows + r0 + i] = out[0][k];
    }
  }
  for (; t < n_tokens; ++t) {  // an odd last token
    const float* xs[1] = {x + t * n_cols};
    int64_t i = 0;
    for (; i + kMicroRows <= n_tile_rows; i += kMicroRows) {
      float out[kMicroRows][1];
      dot_block<kMicroRows, 1>(rows + i, xs, n_cols, out);
      for (int r = 0; r < kMicroRows; ++r) y[t * n_rows + r0 + i + r] = out[r][0];
    }
    for (; i < n_tile_rows; ++i) y[t * n_rows + r0 + i] = dot_row(GgmlType::kF32, rows[i], xs[0], n_cols);
  }
}

void matmul_rows_batched(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t begin,
                         int64_t end) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  // Grows to kTileRows * n_cols floats per thread and is reused across calls.
  thread_local std::vector<float> tile;
  const bool is_f32 = w.type == GgmlType::kF32;
  if (!is_f32) tile.resize(static_cast<size_t>(kTileRows * w.n_cols));
  const float* rows[kTileRows];
  for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
    const int64_t n_tile_rows = std::min(kTileRows, end - r0);
    for (int64_t i = 0; i < n_tile_rows; ++i) {
      const void* src = base + static_cast<size_t>(r0 + i) * w.row_bytes;
      if (is_f32) {
        rows[i] = static_cast<const float*>(src);
      } else {
        float* dst = tile.data() + i * w.n_cols;
        dequantize_row(w.type, src, dst, w.n_cols);
        rows[i] = dst;
      }
    }
    tile_times_tokens(rows, n_tile_rows, r0, x, n_tokens, w.n_cols, w.n_rows, y);
  }
}

}  // namespace

void gemm(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  pool.parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int) {
    matmul_rows_batched(w, x, n_tokens, y, begin, end);
  });
}

}  // namespace leoam::kernels
