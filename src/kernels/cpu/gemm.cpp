// y = W x for a batch of tokens (prefill). Rows of W are split evenly across the pool.
// kQ8 (the default for Q4_0, Q8_0, Q4_K and Q6_K where the CPU has AVX-512 VNNI): the tokens are
// quantized to 8 bits once and gemm_groups_q8 / gemm_rows_q8 (dot_q8.h) multiply each block of 16
// weight rows with several tokens at a time in integer vpdpbusd.
// kBlas (the default above 2^20 multiply-adds otherwise): each pool thread decodes panels of its
// rows of W to f32 (4 MiB each) and multiplies them with a single-threaded OpenBLAS sgemm;
// OpenBLAS's own threads are no faster and spin after each call, taking the pool's cores.
// kTiled: each thread decodes 16 rows at a time, and a 4 rows x 2 tokens register-blocked
// micro-kernel computes dot products. W is decoded once per call whatever n_tokens is.
// Why these methods, and what each ran at: docs/cpu.md#gemm
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {
namespace {

// 16: rows per decoded tile; 16 x 4096 f32 = 256 KiB, half a 512 KiB L2.
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

#endif

template <int R, int T>
void dot_block(const float* const* rows, const float* const* xs, int64_t n, float (*out)[T]) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
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
  // Grows to kTileRows * n_cols floats per thread and is reused across calls.
  thread_local std::vector<float> tile;
  thread_local std::vector<uint8_t> row_scratch;
  const bool is_f32 = w.type == GgmlType::kF32;
  if (!is_f32) tile.resize(static_cast<size_t>(kTileRows * w.n_cols));
  if (w.row_groups) row_scratch.resize(w.row_bytes);
  const float* rows[kTileRows];
  for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
    const int64_t n_tile_rows = std::min(kTileRows, end - r0);
    for (int64_t i = 0; i < n_tile_rows; ++i) {
      const void* src = matrix_row(w, r0 + i, row_scratch.data());
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

// 2^20 multiply-adds: below it (toy and test models) kAuto keeps the tiled kernel. The tiled
// kernel's rounding does not depend on n_tokens, so a prompt evaluated whole or in chunks gives
// the same bits; OpenBLAS's does (with blas, chunks of 3 vs one batch differ by 1.2e-5 relative in
// the logits of the 2-layer Q4_0 test model, tests/unit/model/forward_context_test.cpp, against
// 1.5e-7 with tiled). Such products take microseconds either way; the crossover in speed was not
// measured.
constexpr double kBlasMinMacs = 1 << 20;

// OpenBLAS keeps its thread count in a process-wide setting; this mirrors it so that the setting
// is only changed when a different count is wanted (a change may start or stop its threads).
std::atomic<int> g_blas_threads{0};

// Called before every BLAS call: the first one also checks OpenBLAS's core (blas_core.h).
void set_blas_threads(int n_threads) {
  blas_core();
  if (g_blas_threads.exchange(n_threads) != n_threads) openblas_set_num_threads(n_threads);
}

// 4 MiB: the f32 panel a thread decodes W into between sgemm calls; its rows are the N side of
// the sgemm, so bigger panels amortize OpenBLAS's packing of x over more rows. Measured at
// 2048 x 8192, Q4_0, 512 tokens: 1 MiB panels (32 rows) 112 GFLOP/s, 4 MiB (128 rows) 157.
constexpr size_t kPanelBytes = size_t{4} << 20;

int64_t panel_rows(int64_t n_cols) {
  const auto rows = static_cast<int64_t>(kPanelBytes / (sizeof(float) * static_cast<size_t>(n_cols)));
  return std::clamp<int64_t>(rows / 16 * 16, 16, 512);
}

// y[t][r] for r in [r0, r0 + n) from f32 rows w_f32 (row stride ld floats).
void sgemm_rows(const float* w_f32, int64_t ld, int64_t n, int64_t r0, const float* x, int64_t n_tokens,
                int64_t n_cols, int64_t n_rows, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n_tokens), static_cast<blasint>(n),
              static_cast<blasint>(n_cols), 1.0f, x, static_cast<blasint>(n_cols), w_f32, static_cast<blasint>(ld),
              0.0f, y + r0, static_cast<blasint>(n_rows));
}

// Rows in row groups are first put back row-major, the panel's groups read once each.
void decode_rows(const MatrixView& w, int64_t r0, int64_t n, float* dst) {
  thread_local std::vector<uint8_t> rows;
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.row_bytes;
  if (w.row_groups) {
    rows.resize(static_cast<size_t>(n) * w.row_bytes);
    ungroup_rows(w.type, w.data, w.row_bytes, w.n_rows, r0, n, rows.data());
    src = rows.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    dequantize_row(w.type, src + static_cast<size_t>(i) * w.row_bytes, dst + i * w.n_cols, w.n_cols);
  }
}

void blas_rows(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t begin, int64_t end) {
  if (w.type == GgmlType::kF32) {
    const auto* w_f32 = static_cast<const float*>(w.data) + begin * w.n_cols;
    sgemm_rows(w_f32, w.n_cols, end - begin, begin, x, n_tokens, w.n_cols, w.n_rows, y);
    return;
  }
  const int64_t n_panel = panel_rows(w.n_cols);
  thread_local std::vector<float> panel;  // [n_panel][n_cols], reused across calls
  panel.resize(static_cast<size_t>(n_panel * w.n_cols));
  for (int64_t r0 = begin; r0 < end; r0 += n_panel) {
    const int64_t n = std::min(n_panel, end - r0);
    decode_rows(w, r0, n, panel.data());
    sgemm_rows(panel.data(), w.n_cols, n, r0, x, n_tokens, w.n_cols, w.n_rows, y);
  }
}

// 16: up to this many tokens (a batched decode's rows) kAuto takes the 8-bit dots even without a
// multi-token kernel: W streams once through gemm_q8's tiles, where kBlas decodes all of W to f32
// for a few tokens, several times slower (docs/cpu.md#gemm).
constexpr int64_t kFewTokens = 16;

// 256 KiB: without a multi-token kernel (gemm_q8_is_fast) every token is a pass of dot products
// over the rows, so gemm_q8 hands them over in tiles this big, each passed by every token while
// it sits in the L2 cache: W streams from DRAM once, not once a token.
constexpr size_t kTokenPassTileBytes = size_t{256} << 10;

// The rows of a tile of kTokenPassTileBytes, a multiple of `unit` (at least one unit); the whole
// range where the path has a multi-token kernel.
int64_t tile_rows(const MatrixView& w, int64_t unit) {
  if (gemm_q8_is_fast(w.type)) return std::numeric_limits<int64_t>::max();
  const auto rows = static_cast<int64_t>(kTokenPassTileBytes / w.row_bytes);
  return std::max<int64_t>(unit, rows / unit * unit);
}

void gemm_q8(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const size_t stride = activation_bytes(w.type, w.n_cols);
  // The caller's buffer, reused across calls; the pool's threads reach it through xq (a name of
  // a thread_local in the lambdas would be each thread's own).
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(static_cast<size_t>(n_tokens) * stride);
  uint8_t* const xq = buffer.data();
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      quantize_activation(w.type, x + t * w.n_cols, w.n_cols, xq + static_cast<size_t>(t) * stride);
    }
  });
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (!w.row_groups) {
    const int64_t n_units = (w.n_rows + 15) / 16;  // whole panels and row pairs of groups
    const int64_t tile = tile_rows(w, 16);
    pool.parallel_for(n_units, [&](int64_t begin, int64_t end, int) {
      const int64_t r1 = std::min(end * 16, w.n_rows);
      for (int64_t r0 = begin * 16; r0 < r1; r0 += std::min(tile, r1 - r0)) {
        const int64_t n = std::min(tile, r1 - r0);
        gemm_rows_q8(w.type, base + static_cast<size_t>(r0) * w.row_bytes, w.row_bytes, n, xq, stride, n_tokens,
                     w.n_cols, y + r0, w.n_rows);
      }
    });
    return;
  }
  const int64_t n_groups = w.n_rows / kRowGroup;
  const int64_t n_pairs = (n_groups + 1) / 2;  // gemm_groups_q8 works on two groups at a time
  const int64_t r_tail = n_groups * kRowGroup;
  const int64_t tile_groups = tile_rows(w, 2 * kRowGroup) / kRowGroup;
  pool.parallel_for(n_pairs + (r_tail < w.n_rows ? 1 : 0), [&](int64_t begin, int64_t end, int) {
    const int64_t g1 = std::min(2 * end, n_groups);
    for (int64_t g0 = 2 * begin; g0 < g1; g0 += std::min(tile_groups, g1 - g0)) {
      const int64_t n = std::min(tile_groups, g1 - g0);
      gemm_groups_q8(w.type, base + static_cast<size_t>(g0) * kRowGroup * w.row_bytes, w.row_bytes, n, xq, stride,
                     n_tokens, w.n_cols, y + g0 * kRowGroup, w.n_rows);
    }
    if (end > n_pairs) {
      gemm_rows_q8(w.type, base + static_cast<size_t>(r_tail) * w.row_bytes, w.row_bytes, w.n_rows - r_tail, xq,
                   stride, n_tokens, w.n_cols, y + r_tail, w.n_rows);
    }
  });
}

void gemm_blas(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  set_blas_threads(1);
  // Rows in multiples of 16 per thread, so that OpenBLAS's N blocking is not left with slivers.
  const int64_t n_units = (w.n_rows + 15) / 16;
  pool.parallel_for(n_units, [&](int64_t begin, int64_t end, int) {
    blas_rows(w, x, n_tokens, y, begin * 16, std::min(end * 16, w.n_rows));
  });
}

void gemm_blas_threaded(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  set_blas_threads(pool.n_threads());
  if (w.type == GgmlType::kF32) {
    sgemm_rows(static_cast<const float*>(w.data), w.n_cols, w.n_rows, 0, x, n_tokens, w.n_cols, w.n_rows, y);
    return;
  }
  const int64_t n_panel = 4 * panel_rows(w.n_cols);
  std::vector<float> panel(static_cast<size_t>(n_panel * w.n_cols));
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += n_panel) {
    const int64_t n = std::min(n_panel, w.n_rows - r0);
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
      decode_rows(w, r0 + begin, end - begin, panel.data() + begin * w.n_cols);
    });
    sgemm_rows(panel.data(), w.n_cols, n, r0, x, n_tokens, w.n_cols, w.n_rows, y);
  }
}

}  // namespace

void gemm(const MatrixView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
          const GemmOptions& options) {
  GemmMethod method = options.method;
  if (method == GemmMethod::kQ8 && !has_dot_q8(w.type)) method = GemmMethod::kBlas;
  if (method == GemmMethod::kAuto && gemm_auto_uses_q8(w.type, n_tokens)) method = GemmMethod::kQ8;
  if (method == GemmMethod::kAuto) {
    const double n_macs = static_cast<double>(w.n_rows) * static_cast<double>(w.n_cols) * static_cast<double>(n_tokens);
    method = n_macs < kBlasMinMacs ? GemmMethod::kTiled : GemmMethod::kBlas;
  }
  switch (method) {
    case GemmMethod::kTiled:
      pool.parallel_for(w.n_rows, [&](int64_t begin, int64_t end, int) {
        matmul_rows_batched(w, x, n_tokens, y, begin, end);
      });
      return;
    case GemmMethod::kBlasThreaded:
      gemm_blas_threaded(w, x, n_tokens, y, pool);
      return;
    case GemmMethod::kQ8:
      gemm_q8(w, x, n_tokens, y, pool);
      return;
    case GemmMethod::kAuto:
    case GemmMethod::kBlas:
      gemm_blas(w, x, n_tokens, y, pool);
      return;
  }
}

bool gemm_auto_uses_q8(GgmlType type, int64_t n_tokens) {
  return has_dot_q8(type) && (gemm_q8_is_fast(type) || n_tokens <= kFewTokens);
}

void blas_sgemm_nt(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, int n_threads) {
  set_blas_threads(n_threads);
  sgemm_rows(b, k, n, 0, a, m, k, n, c);
}

const char* gemm_method_name(GemmMethod method) {
  switch (method) {
    case GemmMethod::kAuto: return "auto";
    case GemmMethod::kTiled: return "tiled";
    case GemmMethod::kBlas: return "blas";
    case GemmMethod::kBlasThreaded: return "blas_threaded";
    case GemmMethod::kQ8: return "q8";
  }
  return "?";
}

}  // namespace leoam::kernels
