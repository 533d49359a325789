// Microbenchmark of the sign-refined bound kernel (sparse/sign_bound.h) on 4 kv heads of head_dim
// 64 with 1 query head each (Llama 2's multi-head attention), 2 (models/leoam-byte-4l's grouping)
// or 4 (Llama 3's) over 8192 rows in units of 8 (leoam's smallest chunk) or 64 (its initial one),
// a box (1 KiB of f16) a unit or, for units of 8, a box a block of 32 rows (leoam's fine layers),
// as the reference ("ref"), the scalar path ("scalar") and the dispatched path over the rows' sign
// words ("fast") and over the channel slices the chunk tree keeps ("fast_sliced", AVX-512 or AVX2;
// "avx2_sliced" capped at AVX2). "items_per_second" counts rows times query heads: every row of
// every scored unit is read for every query head. "step_llama3_8b_32k" scores a whole decode
// step's layers at the Llama-3-8B shape (below).
//   build/release/bench/bench_sign_bound --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kv/box_f16.h"
#include "sparse/sign_bound.h"

namespace leoam::sparse {
namespace {

constexpr int64_t kRows = 8192;
constexpr int kKvHeads = 4;
constexpr int kHeadDim = 64;

enum class Variant { kRef, kScalar, kFast, kFastSliced, kAvx2Sliced };

template <Variant kVariant>
void BM_sign_bounds(benchmark::State& state) {
  const int64_t unit_rows = state.range(0);
  const int64_t block_rows = state.range(1);
  const int n_heads = kKvHeads * static_cast<int>(state.range(2));
  const BoundLayout layout{kKvHeads, kHeadDim, 2 * kKvHeads * kHeadDim};
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(n_heads * kHeadDim);
  for (float& x : q) x = dist(rng);
  const int64_t n_units = kRows / unit_rows;
  const int64_t n_blocks = kRows / block_rows;
  const int64_t half = layout.chunk_stride / 2;
  std::vector<float> boxes(static_cast<size_t>(n_blocks * layout.chunk_stride));
  for (float& x : boxes) x = dist(rng);
  std::vector<uint16_t> boxes16(boxes.size());
  std::vector<SignUnit> units;
  for (int64_t b = 0; b < n_blocks; ++b) {
    float* mn = boxes.data() + b * layout.chunk_stride;
    for (int64_t e = 0; e < half; ++e) {
      if (mn[e] > mn[e + half]) std::swap(mn[e], mn[e + half]);
    }
    round_box_outward(mn, layout.chunk_stride, boxes16.data() + b * layout.chunk_stride);
  }
  for (int64_t i = 0; i < n_units; ++i) {
    const int64_t b = i * unit_rows / block_rows;
    units.push_back({{i * unit_rows, (i + 1) * unit_rows}, boxes16.data() + b * layout.chunk_stride});
  }
  std::vector<uint32_t> words(static_cast<size_t>(kRows * kKvHeads * sign_words_per_head(kHeadDim)));
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  const SignSketch signs = SignSketch::of(words.data(), 0, kKvHeads, kHeadDim);
  std::vector<uint64_t> slices(static_cast<size_t>(sign_slice_words(kRows, kKvHeads, kHeadDim)), 0);
  slice_signs(words.data(), 0, kRows, kKvHeads, kHeadDim, slices.data());
  const SignSlices sliced{slices.data(), kKvHeads, kHeadDim};
  std::vector<float> bounds(static_cast<size_t>(n_heads * n_units));
  if (kVariant == Variant::kScalar) set_cpu_path_cap(CpuPath::kScalar);
  if (kVariant == Variant::kAvx2Sliced) set_cpu_path_cap(CpuPath::kAvx2);
  for (auto _ : state) {
    if (kVariant == Variant::kRef) {
      ref::sign_bounds(q.data(), n_heads, units, layout, signs, bounds.data());
    } else if (kVariant == Variant::kFastSliced || kVariant == Variant::kAvx2Sliced) {
      sign_bounds(q.data(), n_heads, units, layout, sliced, bounds.data());
    } else {
      sign_bounds(q.data(), n_heads, units, layout, signs, bounds.data());
    }
    benchmark::ClobberMemory();
  }
  set_cpu_path_cap(CpuPath::kAvx512);
  state.SetItemsProcessed(state.iterations() * kRows * n_heads);
}

// {unit rows, block rows, query heads a kv head}.
void shapes(benchmark::internal::Benchmark* b) {
  for (int group : {1, 2, 4}) {
    b->Args({8, 8, group})->Args({8, 32, group})->Args({64, 64, group});
  }
}

// One decode step's bounds at the Llama-3-8B shape (8 kv heads of head_dim 128, 4 query heads
// each) over 32768 rows in 64-row units with a box each, as leoam's coarse layers score them, on
// one thread: state.range(0) kv heads a call (1: a group at a time; 8: every head in one pass),
// over state.range(1) layers' own boxes and slices (1: 6 MiB, read again each layer; 32: 192 MiB,
// from memory as in a real step). "items_per_second" counts rows x query heads; the time is a
// step's, all 32 layers.
void BM_sign_bounds_step(benchmark::State& state) {
  constexpr int kLayers = 32, kKv = 8, kHd = 128, kGroup = 4, kUnitRows = 64;
  constexpr int64_t kStepRows = 32768;
  const int heads_a_call = static_cast<int>(state.range(0));
  const auto n_data = static_cast<int>(state.range(1));
  const BoundLayout layout{kKv, kHd, 2 * kKv * kHd};
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(kKv * kGroup * kHd);
  for (float& x : q) x = dist(rng);
  const int64_t n_units = kStepRows / kUnitRows;
  const int64_t half = layout.chunk_stride / 2;
  const int64_t layer_words = sign_slice_words(kStepRows, kKv, kHd);
  std::vector<float> box(static_cast<size_t>(layout.chunk_stride));
  std::vector<uint16_t> boxes(static_cast<size_t>(n_data * n_units * layout.chunk_stride));
  std::vector<uint64_t> slices(static_cast<size_t>(n_data * layer_words));
  for (int64_t b = 0; b < n_data * n_units; ++b) {
    for (float& x : box) x = dist(rng);
    for (int64_t e = 0; e < half; ++e) {
      if (box[e] > box[e + half]) std::swap(box[e], box[e + half]);
    }
    round_box_outward(box.data(), layout.chunk_stride, boxes.data() + b * layout.chunk_stride);
  }
  for (uint64_t& w : slices) w = rng() | (uint64_t{rng()} << 32);
  std::vector<std::vector<SignUnit>> units(static_cast<size_t>(n_data));
  for (int l = 0; l < n_data; ++l) {
    for (int64_t i = 0; i < n_units; ++i) {
      const uint16_t* b = boxes.data() + (l * n_units + i) * layout.chunk_stride;
      units[l].push_back({{i * kUnitRows, (i + 1) * kUnitRows}, b});
    }
  }
  std::vector<float> bounds(static_cast<size_t>(kKv * kGroup * n_units));
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      const int at = l % n_data;
      const SignSlices sliced{slices.data() + at * layer_words, kKv, kHd};
      if (heads_a_call == kKv) {
        sign_bounds(q.data(), kKv * kGroup, units[at], layout, sliced, bounds.data());
        continue;
      }
      for (int g = 0; g < kKv; ++g) {
        sign_bounds(q.data(), kKv * kGroup, units[at], layout, sliced, bounds.data(), nullptr, KvHeadGroups::of(g));
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kLayers * kStepRows * kKv * kGroup);
}
BENCHMARK(BM_sign_bounds_step)
    ->Name("sign_bounds/step_llama3_8b_32k")
    ->ArgsProduct({{1, 8}, {1, 32}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_TEMPLATE(BM_sign_bounds, Variant::kRef)->Name("sign_bounds/ref")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_sign_bounds, Variant::kScalar)->Name("sign_bounds/scalar")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_sign_bounds, Variant::kFast)->Name("sign_bounds/fast")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_sign_bounds, Variant::kFastSliced)->Name("sign_bounds/fast_sliced")->Apply(shapes);
BENCHMARK_TEMPLATE(BM_sign_bounds, Variant::kAvx2Sliced)->Name("sign_bounds/avx2_sliced")->Apply(shapes);

}  // namespace
}  // namespace leoam::sparse

BENCHMARK_MAIN();
