// Microbenchmarks of the CPU kernels: dot_row per type at 4096 elements, and matvec
// (4096 x 4096, one token) for F32, Q4_0 and Q8_0. "bytes_per_second" counts the weight bytes
// read, so the matvec figures compare directly with memory bandwidth. matmul is timed in wall
// time (several threads); on a loaded machine run it alone. Note 4096 x 4096 Q4_0 (9 MiB) fits in
// a 32 MiB L3, so it measures decode throughput rather than DRAM bandwidth.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

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

#define LEOAM_BENCH_TYPE(fn, type) BENCHMARK_CAPTURE(fn, type, GgmlType::k##type)

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
  b->ArgNames({"threads", "tokens"})->Args({1, 1})->Args({2, 1})->Args({1, 8})->Unit(benchmark::kMillisecond)->UseRealTime();
}
LEOAM_BENCH_TYPE(BM_matmul, F32)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q8_0)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q4_0)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q4_K)->Apply(matmul_args);
LEOAM_BENCH_TYPE(BM_matmul, Q6_K)->Apply(matmul_args);

}  // namespace
}  // namespace leoam::kernels

BENCHMARK_MAIN();
