// Microbenchmarks of the CPU kernels: dot_row per type at 4096 elements; the 8-bit activation
// quantizer and integer dots per type and path (scalar, avx2, avx512 where the CPU has it);
// matvec (one token) per type at 4096 x 4096 and 8192 rows x 2048 columns on 1 and 2 threads;
// matmul with 8 tokens. "bytes_per_second" counts the weight bytes read, so the matvec figures
// compare directly with memory bandwidth. matvec/matmul are timed in wall time (several threads);
// on a loaded machine run them alone. Note 4096 x 4096 Q4_0 (9 MiB) fits in a 32 MiB L3, so it
// measures decode throughput rather than DRAM bandwidth; BM_matvec_dram (Q4_0, Q8_0 at 32768 x
// 4096: 72 and 136 MiB) streams from DRAM, the decode regime of a model; BM_peak_maddubs gives the int8 multiply-
// add rate of the AVX2 dot instruction pair (vpmaddubsw + vpmaddwd) in a tight loop.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/dot_q8.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace leoam::kernels {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<uint8_t> quantized(GgmlType type, const std::vector<float>& f, int64_t n_cols) {
  const size_t row_bytes = ggml_row_size(type, n_cols);
  const int64_t n_rows = static_cast<int64_t>(f.size()) / n_cols;
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) quantize_row(type, f.data() + r * n_cols, out.data() + r * row_bytes, n_cols);
  return out;
}

void BM_dot_row(benchmark::State& state, GgmlType type) {
  constexpr int64_t n = 4096;
  const std::vector<uint8_t> row = quantized(type, random_floats(n, 1), n);
  const std::vector<float> x = random_floats(n, 2);
  for (auto _ : state) benchmark::DoNotOptimize(dot_row(type, row.data(), x.data(), n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(row.size()));
}

void BM_dequantize_row(benchmark::State& state, GgmlType type) {
  constexpr int64_t n = 4096;
  const std::vector<uint8_t> row = quantized(type, random_floats(n, 1), n);
  std::vector<float> y(n);
  for (auto _ : state) {
    dequantize_row(type, row.data(), y.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(row.size()));
}

// state.range(0): threads; state.range(1): tokens.
void BM_matmul(benchmark::State& state, GgmlType type) {
  constexpr int64_t n = 4096;
  const std::vector<uint8_t> w_bytes = quantized(type, random_floats(n * n, 3), n);
  const int64_t n_tokens = state.range(1);
  const std::vector<float> x = random_floats(static_cast<size_t>(n * n_tokens), 4);
  std::vector<float> y(static_cast<size_t>(n * n_tokens));
  ThreadPool pool(static_cast<int>(state.range(0)));
  const MatrixView w{type, w_bytes.data(), n, n, ggml_row_size(type, n)};
  for (auto _ : state) {
    matmul(w, x.data(), n_tokens, y.data(), pool);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w_bytes.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * static_cast<double>(n_tokens) *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Forces a kernel path for one benchmark; skips it when the CPU lacks the path.
class PathScope {
 public:
  PathScope(benchmark::State& state, CpuPath path) : ok_(set_cpu_path_cap(path) == path) {
    if (!ok_) state.SkipWithError("CPU lacks this path");
  }
  ~PathScope() { set_cpu_path_cap(CpuPath::kAvx512); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// Integer dot of 4 rows of 4096 with one quantized activation (the matvec inner loop, in L1/L2).
void BM_dot_q8(benchmark::State& state, GgmlType type, CpuPath path) {
  PathScope scope(state, path);
  if (!scope.ok()) return;
  constexpr int64_t n = 4096, n_rows = 4;
  const std::vector<uint8_t> rows = quantized(type, random_floats(n * n_rows, 1), n);
  const std::vector<float> x = random_floats(n, 2);
  std::vector<uint8_t> xq(activation_bytes(type, n));
  quantize_activation(type, x.data(), n, xq.data());
  float out[n_rows];
  for (auto _ : state) {
    dot_rows_q8(type, rows.data(), ggml_row_size(type, n), n_rows, xq.data(), n, out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rows.size()));
}

// The same dot over one row group of 8 rows of 4096 (row_groups.h).
void BM_dot_q8_groups(benchmark::State& state, GgmlType type, CpuPath path) {
  PathScope scope(state, path);
  if (!scope.ok()) return;
  constexpr int64_t n = 4096;
  const std::vector<uint8_t> rows = quantized(type, random_floats(n * kRowGroup, 1), n);
  std::vector<uint8_t> grouped(rows.size());
  group_rows(type, rows.data(), ggml_row_size(type, n), kRowGroup, grouped.data());
  const std::vector<float> x = random_floats(n, 2);
  std::vector<uint8_t> xq(activation_bytes(type, n));
  quantize_activation(type, x.data(), n, xq.data());
  float out[kRowGroup];
  for (auto _ : state) {
    dot_groups_q8(type, grouped.data(), ggml_row_size(type, n), 1, xq.data(), n, out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rows.size()));
}

void BM_quantize_activation(benchmark::State& state, GgmlType type, CpuPath path) {
  PathScope scope(state, path);
  if (!scope.ok()) return;
  constexpr int64_t n = 4096;
  const std::vector<float> x = random_floats(n, 2);
  std::vector<uint8_t> xq(activation_bytes(type, n));
  for (auto _ : state) {
    quantize_activation(type, x.data(), n, xq.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

// matvec (decode) of n_rows x n_cols; state.range(0): threads, (1): rows, (2): cols; the matrix
// row-major or in row groups (row_groups.h).
void BM_matvec(benchmark::State& state, GgmlType type, bool groups = false) {
  const int64_t n_rows = state.range(1), n_cols = state.range(2);
  std::vector<uint8_t> w_bytes = quantized(type, random_floats(n_rows * n_cols, 3), n_cols);
  const std::vector<float> x = random_floats(static_cast<size_t>(n_cols), 4);
  std::vector<float> y(static_cast<size_t>(n_rows));
  ThreadPool pool(static_cast<int>(state.range(0)));
  MatrixView w{type, w_bytes.data(), n_cols, n_rows, ggml_row_size(type, n_cols)};
  std::vector<uint8_t> grouped;
  if (groups) {
    grouped.resize(w_bytes.size());
    group_rows(type, w_bytes.data(), w.row_bytes, n_rows, grouped.data());
    w_bytes = {};
    w.data = grouped.data();
    w.row_groups = true;
  }
  const auto n_bytes = static_cast<int64_t>(w.row_bytes) * n_rows;
  for (auto _ : state) {
    matvec(w, x.data(), y.data(), pool);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n_bytes);
}

#if defined(__x86_64__)
// Peak rate of vpmaddubsw + vpmaddwd on one core: 8 independent chains, 32 int8 multiply-adds
// per pair. The bound a compute-bound Q4_0/Q8_0 matvec can approach.
__attribute__((target("avx2"))) void BM_peak_maddubs(benchmark::State& state) {
  if (!cpu_features().avx2) {
    state.SkipWithError("CPU lacks AVX2");
    return;
  }
  constexpr int kIters = 1024;
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) {
      for (auto& v : acc) v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
      __asm__ volatile("" : "+x"(a), "+x"(b));  // keeps the products inside the loop
    }
  }
  __m256i s = acc[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, acc[k]);
  benchmark::DoNotOptimize(s);
  state.counters["int8_MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * kIters * 8 * 32,
                                                    benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_peak_maddubs);
#endif

#define LEOAM_BENCH_TYPE(fn, type) BENCHMARK_CAPTURE(fn, type, GgmlType::k##type)
#define LEOAM_BENCH_TYPE_PATH(fn, type, path) \
  BENCHMARK_CAPTURE(fn, type##_##path, GgmlType::k##type, CpuPath::k##path)
#define LEOAM_BENCH_ALL_PATHS(fn, type)    \
  LEOAM_BENCH_TYPE_PATH(fn, type, Scalar); \
  LEOAM_BENCH_TYPE_PATH(fn, type, Avx2);   \
  LEOAM_BENCH_TYPE_PATH(fn, type, Avx512)

LEOAM_BENCH_ALL_PATHS(BM_dot_q8, Q4_0);
LEOAM_BENCH_ALL_PATHS(BM_dot_q8, Q8_0);
LEOAM_BENCH_ALL_PATHS(BM_dot_q8, Q4_K);
LEOAM_BENCH_ALL_PATHS(BM_dot_q8, Q6_K);
LEOAM_BENCH_ALL_PATHS(BM_dot_q8_groups, Q4_0);
LEOAM_BENCH_ALL_PATHS(BM_dot_q8_groups, Q8_0);
LEOAM_BENCH_ALL_PATHS(BM_quantize_activation, Q8_0);
LEOAM_BENCH_ALL_PATHS(BM_quantize_activation, Q4_K);

void matvec_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "rows", "cols"})
      ->Args({1, 4096, 4096})
      ->Args({2, 4096, 4096})
      ->Args({1, 8192, 2048})
      ->Args({2, 8192, 2048})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}
LEOAM_BENCH_TYPE(BM_matvec, F32)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, F16)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, BF16)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, Q8_0)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, Q4_0)->Apply(matvec_args);
BENCHMARK_CAPTURE(BM_matvec, Q8_0_groups, GgmlType::kQ8_0, true)->Apply(matvec_args);
BENCHMARK_CAPTURE(BM_matvec, Q4_0_groups, GgmlType::kQ4_0, true)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, Q4_K)->Apply(matvec_args);
LEOAM_BENCH_TYPE(BM_matvec, Q6_K)->Apply(matvec_args);

// 32768 x 4096 (72 MB of Q4_0, 136 MB of Q8_0): larger than the L3 of most machines, so the rows
// stream from DRAM as in decode; not on a CPU with a 300 MB L3, where
// `leoam bench`'s decode of a 1.1 B model is the DRAM-bound figure.
void matvec_dram_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "rows", "cols"})
      ->Args({1, 32768, 4096})
      ->Args({2, 32768, 4096})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}
BENCHMARK_CAPTURE(BM_matvec, Q8_0_dram, GgmlType::kQ8_0)->Apply(matvec_dram_args);
BENCHMARK_CAPTURE(BM_matvec, Q4_0_dram, GgmlType::kQ4_0)->Apply(matvec_dram_args);
BENCHMARK_CAPTURE(BM_matvec, Q8_0_dram_groups, GgmlType::kQ8_0, true)->Apply(matvec_dram_args);
BENCHMARK_CAPTURE(BM_matvec, Q4_0_dram_groups, GgmlType::kQ4_0, true)->Apply(matvec_dram_args);

LEOAM_BENCH_TYPE(BM_dot_row, F32);
LEOAM_BENCH_TYPE(BM_dot_row, F16);
LEOAM_BENCH_TYPE(BM_dot_row, BF16);
LEOAM_BENCH_TYPE(BM_dot_row, Q8_0);
LEOAM_BENCH_TYPE(BM_dot_row, Q4_0);
LEOAM_BENCH_TYPE(BM_dot_row, Q4_K);
LEOAM_BENCH_TYPE(BM_dot_row, Q6_K);

LEOAM_BENCH_TYPE(BM_dequantize_row, F16);
LEOAM_BENCH_TYPE(BM_dequantize_row, Q8_0);
LEOAM_BENCH_TYPE(BM_dequantize_row, Q4_0);
LEOAM_BENCH_TYPE(BM_dequantize_row, Q4_K);
LEOAM_BENCH_TYPE(BM_dequantize_row, Q6_K);

void matmul_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "tokens"})->Args({1, 8})->Args({2, 8})->Unit(benchmark::kMillisecond)->UseRealTime();
}
LEOAM_BENCH_TYPE(BM_matmul, F32)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q8_0)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q4_0)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q4_K)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q6_K)->Apply(matmul_args);

}  // namespace
}  // namespace leoam::kernels

BENCHMARK_MAIN();
