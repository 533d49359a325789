// Microbenchmarks of the elementwise kernels (kernels/cpu/ops.h), each as the scalar reference
// ("ref") and the dispatched path ("fast"), at the sizes of a 1B-7B model's decode step; and of
// the thread pool's hand-off cost, the per-region overhead a decode step pays dozens of times.
// "bytes_per_second" counts the bytes each kernel must read and write.
//
//   build/d-rel/bench/bench_ops --benchmark_filter=swiglu
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"

namespace leoam::kernels {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

constexpr int64_t kFloat = sizeof(float);

template <bool kFast>
void BM_rmsnorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = random_floats(n, 1), w = random_floats(n, 2);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    if (kFast) {
      rmsnorm(x.data(), w.data(), n, 1e-5f, out.data());
    } else {
      ref::rmsnorm(x.data(), w.data(), n, 1e-5f, out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * kFloat);
}

template <bool kFast>
void BM_add_rmsnorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x = random_floats(n, 1);
  // delta ~ 0 keeps x from growing over millions of iterations.
  const std::vector<float> delta(x.size(), 0.0f), w = random_floats(n, 2);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    if (kFast) {
      add_rmsnorm(x.data(), delta.data(), w.data(), n, 1e-5f, out.data());
    } else {
      ref::add_rmsnorm(x.data(), delta.data(), w.data(), n, 1e-5f, out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 5 * n * kFloat);
}

// range(0): heads, range(1): head_dim, range(2): 1 for NeoX pairing.
template <bool kFast>
void BM_rope(benchmark::State& state) {
  const RopeShape shape{.n_heads = static_cast<int>(state.range(0)),
                        .head_dim = static_cast<int>(state.range(1)),
                        .n_rot = static_cast<int>(state.range(1)),
                        .neox = state.range(2) != 0};
  const int64_t n = int64_t{shape.n_heads} * shape.head_dim;
  std::vector<float> x = random_floats(n, 3);
  std::vector<float> cos(static_cast<size_t>(shape.n_rot / 2)), sin(cos.size());
  for (size_t i = 0; i < cos.size(); ++i) {  // a rotation by a tiny angle keeps x bounded
    cos[i] = std::cos(1e-3f * static_cast<float>(i));
    sin[i] = std::sin(1e-3f * static_cast<float>(i));
  }
  for (auto _ : state) {
    if (kFast) {
      rope(x.data(), shape, cos.data(), sin.data());
    } else {
      ref::rope(x.data(), shape, cos.data(), sin.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * kFloat);
}

template <bool kFast>
void BM_swiglu(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> gate = random_floats(n, 4, 3.0f), up = random_floats(n, 5);
  std::vector<float> out(gate.size());
  for (auto _ : state) {
    if (kFast) {
      swiglu(gate.data(), up.data(), n, out.data());
    } else {
      ref::swiglu(gate.data(), up.data(), n, out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * kFloat);
}

template <bool kFast>
void BM_softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> scores = random_floats(n, 6, 4.0f);
  std::vector<float> x(scores.size());
  for (auto _ : state) {
    state.PauseTiming();
    x = scores;
    state.ResumeTiming();
    if (kFast) {
      softmax(x.data(), n);
    } else {
      ref::softmax(x.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * kFloat);
}

template <bool kFast>
void BM_exp(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = random_floats(n, 7, 10.0f);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    if (kFast) {
      exp(x.data(), n, out.data());
    } else {
      ref::exp(x.data(), n, out.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

BENCHMARK_TEMPLATE(BM_rmsnorm, false)->Name("rmsnorm/ref")->Arg(2048)->Arg(4096);
BENCHMARK_TEMPLATE(BM_rmsnorm, true)->Name("rmsnorm/fast")->Arg(2048)->Arg(4096);
BENCHMARK_TEMPLATE(BM_add_rmsnorm, false)->Name("add_rmsnorm/ref")->Arg(2048)->Arg(4096);
BENCHMARK_TEMPLATE(BM_add_rmsnorm, true)->Name("add_rmsnorm/fast")->Arg(2048)->Arg(4096);
BENCHMARK_TEMPLATE(BM_rope, false)->Name("rope/ref")->Args({32, 64, 0})->Args({32, 128, 0})->Args({32, 128, 1});
BENCHMARK_TEMPLATE(BM_rope, true)->Name("rope/fast")->Args({32, 64, 0})->Args({32, 128, 0})->Args({32, 128, 1});
BENCHMARK_TEMPLATE(BM_swiglu, false)->Name("swiglu/ref")->Arg(5632)->Arg(11008);
BENCHMARK_TEMPLATE(BM_swiglu, true)->Name("swiglu/fast")->Arg(5632)->Arg(11008);
BENCHMARK_TEMPLATE(BM_softmax, false)->Name("softmax/ref")->Arg(512)->Arg(32768);
BENCHMARK_TEMPLATE(BM_softmax, true)->Name("softmax/fast")->Arg(512)->Arg(32768);
BENCHMARK_TEMPLATE(BM_exp, false)->Name("exp/ref")->Arg(4096);
BENCHMARK_TEMPLATE(BM_exp, true)->Name("exp/fast")->Arg(4096);

// The wall time of one parallel_for of near-empty ranges on range(0) threads: the fixed cost of
// a parallel region. range(1) = 1: back to back (the workers are still polling); 0: after a
// 200 us pause each time, so the workers have gone to sleep and must be woken (the pause is
// not timed).
void BM_parallel_for_handoff(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const bool warm = state.range(1) != 0;
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
      state.ResumeTiming();
    }
    pool.parallel_for(pool.n_threads(), [&](int64_t begin, int64_t end, int) { sink += end - begin; });
  }
  state.counters["threads"] = static_cast<double>(pool.n_threads());
}
BENCHMARK(BM_parallel_for_handoff)->Args({2, 1})->Args({2, 0})->UseRealTime();

}  // namespace
}  // namespace leoam::kernels

BENCHMARK_MAIN();
