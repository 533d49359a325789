// Prefill GEMM: y = W x for a batch of tokens, every method of gemm.h on the shapes of a 1B-7B
// model's projections, against a plain OpenBLAS sgemm of the same shape (the reference peak).
//
//   shape 0: W 2048 x 2048   (attention projections)   shape 1: W 8192 x 2048 (FFN up/gate)
//   shape 2: W 2048 x 8192   (FFN down)                 rows x cols, cols = the reduction
//
// "GFLOP/s" counts 2 * rows * cols * tokens. Wall time; run it alone on the machine:
//   build/b/bench/bench_gemm --benchmark_min_time=0.3
//   (add --benchmark_repetitions=3 --benchmark_report_aggregates_only=true for medians)
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

namespace leoam::kernels {
namespace {

struct Shape {
  int64_t n_rows, n_cols;
};
constexpr Shape kShapes[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Quantized weights, built once per (type, shape): quantizing 16M elements takes a while. Q4_0
// and Q8_0 are in row groups (row_groups.h), as the model loader stores them.
const std::vector<uint8_t>& weights(GgmlType type, int shape) {
  static std::map<std::pair<GgmlType, int>, std::vector<uint8_t>> cache;
  auto& w = cache[{type, shape}];
  if (w.empty()) {
    const Shape s = kShapes[shape];
    const std::vector<float> f = random_floats(static_cast<size_t>(s.n_rows * s.n_cols), 3);
    const size_t row_bytes = ggml_row_size(type, s.n_cols);
    w.resize(row_bytes * static_cast<size_t>(s.n_rows));
    for (int64_t r = 0; r < s.n_rows; ++r) {
      quantize_row(type, f.data() + r * s.n_cols, w.data() + r * row_bytes, s.n_cols);
    }
    if (has_row_groups(type)) {
      std::vector<uint8_t> grouped(w.size());
      group_rows(type, w.data(), row_bytes, s.n_rows, grouped.data());
      w.swap(grouped);
    }
  }
  return w;
}

void set_flops(benchmark::State& state, const Shape& s, int64_t n_tokens) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(s.n_rows * s.n_cols * n_tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// range(0): method, range(1): shape, range(2): tokens, range(3): threads.
void BM_gemm(benchmark::State& state, GgmlType type) {
  const auto method = static_cast<GemmMethod>(state.range(0));
  const Shape s = kShapes[state.range(1)];
  const int64_t n_tokens = state.range(2);
  const std::vector<uint8_t>& w_bytes = weights(type, static_cast<int>(state.range(1)));
  const std::vector<float> x = random_floats(static_cast<size_t>(s.n_cols * n_tokens), 4);
  std::vector<float> y(static_cast<size_t>(s.n_rows * n_tokens));
  ThreadPool pool(static_cast<int>(state.range(3)));
  const MatrixView w{type, w_bytes.data(), s.n_cols, s.n_rows, ggml_row_size(type, s.n_cols), has_row_groups(type)};
  state.SetLabel(gemm_method_name(method));
  for (auto _ : state) {
    gemm(w, x.data(), n_tokens, y.data(), pool, GemmOptions{method});
    benchmark::ClobberMemory();
  }
  set_flops(state, s, n_tokens);
}

// The reference: plain f32 OpenBLAS sgemm with OpenBLAS threads. range(0): shape, (1): tokens,
// (2): threads.
void BM_openblas_sgemm(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t n_tokens = state.range(1);
  const std::vector<float> w = random_floats(static_cast<size_t>(s.n_rows * s.n_cols), 3);
  const std::vector<float> x = random_floats(static_cast<size_t>(s.n_cols * n_tokens), 4);
  std::vector<float> y(static_cast<size_t>(s.n_rows * n_tokens));
  for (auto _ : state) {
    blas_sgemm_nt(x.data(), w.data(), y.data(), n_tokens, s.n_rows, s.n_cols, static_cast<int>(state.range(2)));
    benchmark::ClobberMemory();
  }
  set_flops(state, s, n_tokens);
}

constexpr int64_t kTokens[] = {32, 128, 512};

void all_methods(benchmark::internal::Benchmark* b) {
  b->ArgNames({"method", "shape", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const auto m : {GemmMethod::kTiled, GemmMethod::kBlas, GemmMethod::kBlasThreaded}) {
    for (int shape = 0; shape < 3; ++shape) {
      for (int64_t t : kTokens) b->Args({static_cast<int64_t>(m), shape, t, 2});
    }
  }
}
// The types with row groups: their f32 method and the 8-bit one (kAuto picks one of them).
void blas_and_q8(benchmark::internal::Benchmark* b) {
  b->ArgNames({"method", "shape", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const auto m : {GemmMethod::kBlas, GemmMethod::kQ8}) {
    for (int shape = 0; shape < 3; ++shape) {
      for (int64_t t : kTokens) b->Args({static_cast<int64_t>(m), shape, t, 2});
    }
  }
}
// A batched decode's few rows (ForwardContext::decode_batch): the f32 method, the 8-bit one, and
// what kAuto picks.
void few_tokens(benchmark::internal::Benchmark* b) {
  b->ArgNames({"method", "shape", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const auto m : {GemmMethod::kBlas, GemmMethod::kQ8, GemmMethod::kAuto}) {
    for (int shape = 0; shape < 3; ++shape) {
      for (int64_t t : {1, 2, 4, 8, 16}) b->Args({static_cast<int64_t>(m), shape, t, 2});
    }
  }
}
void auto_only(benchmark::internal::Benchmark* b) {
  b->ArgNames({"method", "shape", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (int shape = 0; shape < 3; ++shape) {
    for (int64_t t : kTokens) b->Args({static_cast<int64_t>(GemmMethod::kAuto), shape, t, 2});
  }
}
void sgemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"shape", "tokens", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (int shape = 0; shape < 3; ++shape) {
    for (int64_t t : kTokens) b->Args({shape, t, 2});
  }
  b->Args({0, 512, 1});
}

BENCHMARK(BM_openblas_sgemm)->Apply(sgemm_args);
BENCHMARK_CAPTURE(BM_gemm, F32, GgmlType::kF32)->Apply(all_methods);
BENCHMARK_CAPTURE(BM_gemm, Q4_0, GgmlType::kQ4_0)->Apply(all_methods);
BENCHMARK_CAPTURE(BM_gemm, Q4_0_q8, GgmlType::kQ4_0)->Apply(blas_and_q8);
BENCHMARK_CAPTURE(BM_gemm, Q8_0, GgmlType::kQ8_0)->Apply(blas_and_q8);
BENCHMARK_CAPTURE(BM_gemm, Q4_0_few, GgmlType::kQ4_0)->Apply(few_tokens);
BENCHMARK_CAPTURE(BM_gemm, F16, GgmlType::kF16)->Apply(auto_only);
BENCHMARK_CAPTURE(BM_gemm, Q4_K, GgmlType::kQ4_K)->Apply(auto_only);

}  // namespace
}  // namespace leoam::kernels

BENCHMARK_MAIN();
