// Microbenchmark of the chunk bound kernel (sparse/chunk_bound.h): the upper bounds of 4096
// chunks for one GQA group of 4 query heads at head_dim 128, as the reference ("ref"), the
// scalar path ("scalar") and the dispatched path ("fast"). The argument is the kv heads the
// abstracts hold: 1 (the group's slices are contiguous: compute-bound) or 8 (a Llama-3-8B layer:
// each chunk's 1 KiB slice lies in 8 KiB of abstract, as a policy reads them: memory-bound).
// "items_per_second" counts chunks.
//
//   build/h7/bench/bench_chunk_bound --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "sparse/chunk_bound.h"

namespace leoam::sparse {
namespace {

constexpr int64_t kChunks = 4096;
constexpr int kHeadDim = 128;
constexpr int kGroup = 4;

enum class Variant { kRef, kScalar, kFast };

template <Variant kVariant>
void BM_chunk_bounds(benchmark::State& state) {
  const int n_kv_heads = static_cast<int>(state.range(0));
  const BoundLayout layout{n_kv_heads, kHeadDim, 2 * n_kv_heads * kHeadDim};
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(kGroup) * kHeadDim);
  for (float& x : q) x = dist(rng);
  std::vector<float> abstracts(static_cast<size_t>(kChunks * layout.chunk_stride));
  for (float& x : abstracts) x = dist(rng);
  for (int64_t i = 0; i < kChunks; ++i) {  // min <= max per channel
    float* mn = abstracts.data() + i * layout.chunk_stride;
    for (int c = 0; c < n_kv_heads * kHeadDim; ++c) {
      if (mn[c] > mn[c + n_kv_heads * kHeadDim]) std::swap(mn[c], mn[c + n_kv_heads * kHeadDim]);
    }
  }
  std::vector<float> bounds(kChunks);
  if (kVariant == Variant::kScalar) set_cpu_path_cap(CpuPath::kScalar);
  for (auto _ : state) {
    for (int h = 0; h < kGroup; ++h) {
      const float* qh = q.data() + h * kHeadDim;
      if (kVariant == Variant::kRef) {
        ref::chunk_bounds(qh, 0, abstracts.data(), kChunks, layout, bounds.data());
      } else {
        chunk_bounds(qh, 0, abstracts.data(), kChunks, layout, bounds.data());
      }
    }
    benchmark::ClobberMemory();
  }
  set_cpu_path_cap(CpuPath::kAvx512);
  state.SetItemsProcessed(state.iterations() * kChunks);
}

BENCHMARK_TEMPLATE(BM_chunk_bounds, Variant::kRef)->Name("chunk_bounds/ref")->Arg(1)->Arg(8);
BENCHMARK_TEMPLATE(BM_chunk_bounds, Variant::kScalar)->Name("chunk_bounds/scalar")->Arg(1)->Arg(8);
BENCHMARK_TEMPLATE(BM_chunk_bounds, Variant::kFast)->Name("chunk_bounds/fast")->Arg(1)->Arg(8);

}  // namespace
}  // namespace leoam::sparse

BENCHMARK_MAIN();
