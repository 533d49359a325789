// Attention kernels: decode (one query over a long F16 KV, flash-decoding) against the DRAM read
// bandwidth measured in the same binary, and tiled prefill attention in GFLOP/s.
// Geometry of a 7B-8B GQA model: 32 query heads, 8 kv heads of 128 dims, F16 KV: 4 KiB of K+V
// per position per layer, 512 MiB per layer at 128K positions. "bytes_per_second" of the decode
// benchmarks counts those KV bytes, so it compares directly with BM_dram_read. So that short
// contexts do not run from the L3 (up to hundreds of MiB on a server CPU), each iteration reads
// the KV of another "layer" from a ring of layers that together span 512 MiB or more: each layer
// comes back after at least 512 MiB of other reads. What it measured: docs/cpu.md#attention
//   build/b/bench/bench_attention --benchmark_min_time=0.5
//   (medians: add --benchmark_repetitions=3 --benchmark_report_aggregates_only=true)
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/flash_attention.h"

namespace leoam::kernels {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr size_t kRowBytes = size_t{kKvHeads} * kHeadDim * 2;  // one position's K (or V), f16
constexpr size_t kRingBytes = size_t{512} << 20;                // K+V of all layers in the ring
// The decode benchmarks' "kv_heads" argument: 8 is the GQA geometry above (Llama 3 8B, 4 query
// heads per kv head); 32 is Llama 2 7B's (MHA), with 4x the KV bytes per position and a quarter
// of the arithmetic per KV byte. Its 128K layer (2 GiB) is larger than the ring, and the arena
// grows to hold it. 16 is groups of 2 (as Gemma 2 9B's 16 query / 8 kv heads), the largest group
// that the decode kernel walks in address order without software prefetch (flash_attention.cpp).
constexpr size_t kMhaLayerBytes = size_t{2} * 131072 * kHeads * kHeadDim * 2;

// One big allocation of f16 values in [-1, 1), written (so every page is backed) by a cheap hash.
struct Arena {
  std::unique_ptr<uint16_t[]> data;
  size_t n = 0;
  explicit Arena(size_t bytes) : data(new uint16_t[bytes / 2]), n(bytes / 2) {
    uint32_t x = 12345;
    for (size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      data[i] = f32_to_f16(static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
  }
};

Arena& arena() {
  static Arena a(std::max(kRingBytes, kMhaLayerBytes));
  return a;
}

std::vector<float> queries(int64_t n_tokens) {
  std::vector<float> q(static_cast<size_t>(n_tokens * kHeads * kHeadDim));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.002f - 1.0f;
  return q;
}

// Decodes one token over n_kv positions of the layers in turn, ring_bytes of K+V in all (one
// layer if that is less), with kHeads query heads over n_kv_heads kv heads. chunk_tokens 0: a
// layer is one run; else it is runs of chunk_tokens positions laid out as the KV store's chunks
// (K rows, then V rows), in a shuffled order in memory, as a sparse step gathers them.
void decode_over_layers(benchmark::State& state, int64_t n_kv, size_t ring_bytes, int n_kv_heads, int n_threads,
                        AttentionIsa isa, int64_t chunk_tokens = 0) {
  const size_t row_bytes = size_t(n_kv_heads) * kHeadDim * 2;
  const size_t layer_bytes = 2 * row_bytes * static_cast<size_t>(n_kv);
  const size_t n_layers = std::max<size_t>(1, ring_bytes / layer_bytes);
  const auto* base = reinterpret_cast<const char*>(arena().data.get());
  std::vector<std::vector<KvRun>> layers(n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    const char* k = base + l * layer_bytes;
    if (chunk_tokens == 0) {
      layers[l] = {KvRun{0, n_kv, k, k + layer_bytes / 2, true, row_bytes}};
      continue;
    }
    const int64_t n_chunks = n_kv / chunk_tokens;
    const size_t chunk_bytes = 2 * row_bytes * static_cast<size_t>(chunk_tokens);
    std::vector<int64_t> slot(static_cast<size_t>(n_chunks));
    for (int64_t i = 0; i < n_chunks; ++i) slot[i] = i;
    std::shuffle(slot.begin(), slot.end(), std::mt19937(static_cast<unsigned>(l)));
    for (int64_t i = 0; i < n_chunks; ++i) {
      const char* c = k + static_cast<size_t>(slot[i]) * chunk_bytes;
      layers[l].push_back(KvRun{i * chunk_tokens, chunk_tokens, c, c + chunk_bytes / 2, true, row_bytes});
    }
  }
  ThreadPool pool(n_threads);
  const std::vector<float> q = queries(1);
  std::vector<float> out(q.size());
  const FlashAttentionParams p{kHeads, n_kv_heads, kHeadDim, 0.088f, n_kv - 1, 1};
  const FlashAttentionOptions options{isa, 0};
  size_t l = 0;
  for (auto _ : state) {
    flash_attention(layers[l], p, q.data(), out.data(), pool, options);
    l = (l + 1) % n_layers;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(layer_bytes));
  state.counters["layers"] = static_cast<double>(n_layers);
}

// The "isa" argument of the benchmarks: 0 scalar, 1 AVX2, 2 AVX-512 (AVX2 where the CPU lacks it).
AttentionIsa isa_arg(int64_t arg) {
  return arg == 2 ? AttentionIsa::kAvx512 : arg == 1 ? AttentionIsa::kAvx2 : AttentionIsa::kScalar;
}

// range(0): n_kv, range(1): threads, range(2): isa, range(3): kv heads.
void BM_decode_attention(benchmark::State& state) {
  decode_over_layers(state, state.range(0), kRingBytes, static_cast<int>(state.range(3)),
                     static_cast<int>(state.range(1)), isa_arg(state.range(2)));
}

// The same over 32768 positions cut into chunks of range(0) positions, shuffled (a sparse step's
// gathered chunks), range(1) kv heads, 2 threads, AVX-512.
void BM_decode_attention_chunks(benchmark::State& state) {
  decode_over_layers(state, 32768, kRingBytes, static_cast<int>(state.range(1)), 2, AttentionIsa::kAvx512,
                     state.range(0));
}

// The arithmetic bound of decode: the same over one layer of 1 MiB of K+V (256 positions with 8
// kv heads, 64 with 32), which stays in cache from one iteration to the next. range(0): threads,
// range(1): isa, range(2): kv heads.
void BM_decode_attention_in_cache(benchmark::State& state) {
  const int n_kv_heads = static_cast<int>(state.range(2));
  decode_over_layers(state, 256 * kKvHeads / n_kv_heads, 0, n_kv_heads, static_cast<int>(state.range(0)),
                     isa_arg(state.range(1)));
}

// The same over a smaller query batch: prefill attention of n_tokens new positions after
// n_kv - n_tokens earlier ones. range(0): n_kv, range(1): n_tokens, range(2): threads, range(3): isa.
// GFLOP/s counts 4 * head_dim flops per (query head, visible key).
void BM_prefill_attention(benchmark::State& state) {
  const int64_t n_kv = state.range(0), n_tokens = state.range(1);
  const auto* base = reinterpret_cast<const char*>(arena().data.get());
  const std::vector<KvRun> runs = {KvRun{0, n_kv, base, base + kRowBytes * n_kv, true, kRowBytes}};
  ThreadPool pool(static_cast<int>(state.range(2)));
  const std::vector<float> q = queries(n_tokens);
  std::vector<float> out(q.size());
  const FlashAttentionParams p{kHeads, kKvHeads, kHeadDim, 0.088f, n_kv - n_tokens, n_tokens};
  for (auto _ : state) {
    flash_attention(runs, p, q.data(), out.data(), pool, FlashAttentionOptions{isa_arg(state.range(3)), 0});
    benchmark::ClobberMemory();
  }
  double pairs = 0;  // (query, visible key) pairs
  for (int64_t t = 0; t < n_tokens; ++t) pairs += static_cast<double>(n_kv - n_tokens + t + 1);
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * kHeadDim * kHeads * pairs * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// acc[i] += the floats of p, 128 bytes a step into four independent sums (n % 128 == 0), so that
// the adds' latency does not bound the reads.
__attribute__((target("avx2"))) void sum_bytes(const char* p, size_t n, __m256 (&acc)[4]) {
  const auto* f = reinterpret_cast<const float*>(p);
  for (size_t i = 0; i < n / 4; i += 32) {
    acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(f + i));
    acc[1] = _mm256_add_ps(acc[1], _mm256_loadu_ps(f + i + 8));
    acc[2] = _mm256_add_ps(acc[2], _mm256_loadu_ps(f + i + 16));
    acc[3] = _mm256_add_ps(acc[3], _mm256_loadu_ps(f + i + 24));
  }
}

// The sum of the four sums' lanes.
__attribute__((target("avx2"))) float total(const __m256 (&acc)[4]) {
  alignas(32) float out[8];
  _mm256_store_ps(out, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

// DRAM read bandwidth: range(0) threads stream their slices of a 1 GiB buffer, summing with AVX2.
__attribute__((target("avx2"))) float sum_slice(const float* p, size_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  sum_bytes(reinterpret_cast<const char*>(p), (n - n % 32) * sizeof(float), acc);
  return total(acc);
}

void BM_dram_read(benchmark::State& state) {
  constexpr size_t kBytes = size_t{1} << 30;
  const size_t n = kBytes / sizeof(float);
  static float* buf = [] {
    auto* b = static_cast<float*>(std::aligned_alloc(64, kBytes));
    for (size_t i = 0; i < kBytes / sizeof(float); ++i) b[i] = 1.0f;
    return b;
  }();
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> sums(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    pool.parallel_for(static_cast<int64_t>(state.range(0)), [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        const size_t slice = n / static_cast<size_t>(state.range(0));
        sums[static_cast<size_t>(t)] = sum_slice(buf + static_cast<size_t>(t) * slice, slice);
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
}

// The decode kernel's read order without its arithmetic: the K and V of 128K positions of 32 kv
// heads (MHA, 2 GiB), each thread summing its half of the positions either in address order
// (order 0) or as decode reads them (order 1): tile by tile of 64 positions, head by head, each
// head's 256-byte slice of every row of the tile, rows 8 KiB apart. range(0): order, range(1):
// threads.
__attribute__((target("avx2"))) float sum_kv(const char* k, const char* v, size_t row_bytes, int64_t j0, int64_t j1,
                                             bool tile_order) {
  constexpr int64_t kTile = 64;
  constexpr size_t kSlice = size_t{kHeadDim} * 2;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  if (!tile_order) {
    sum_bytes(k + j0 * row_bytes, static_cast<size_t>(j1 - j0) * row_bytes, acc);
    sum_bytes(v + j0 * row_bytes, static_cast<size_t>(j1 - j0) * row_bytes, acc);
  } else {
    for (int64_t t = j0; t < j1; t += kTile) {
      const int64_t t1 = std::min(j1, t + kTile);
      for (size_t h = 0; h < row_bytes / kSlice; ++h) {
        for (int64_t j = t; j < t1; ++j) sum_bytes(k + j * row_bytes + h * kSlice, kSlice, acc);
        for (int64_t j = t; j < t1; ++j) sum_bytes(v + j * row_bytes + h * kSlice, kSlice, acc);
      }
    }
  }
  return total(acc);
}

void BM_kv_read_order(benchmark::State& state) {
  constexpr int64_t kPositions = 131072;
  const size_t row_bytes = size_t{kHeads} * kHeadDim * 2;
  const size_t half = row_bytes * kPositions;  // K, then V
  const char* k = reinterpret_cast<const char*>(arena().data.get());
  const int n_threads = static_cast<int>(state.range(1));
  ThreadPool pool(n_threads);
  std::vector<float> sums(static_cast<size_t>(n_threads));
  for (auto _ : state) {
    pool.parallel_for(n_threads, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        sums[static_cast<size_t>(t)] = sum_kv(k, k + half, row_bytes, kPositions * t / n_threads,
                                              kPositions * (t + 1) / n_threads, state.range(0) == 1);
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * half));
}

BENCHMARK(BM_dram_read)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kv_read_order)
    ->ArgNames({"order", "threads"})
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_decode_attention)
    ->ArgNames({"n_kv", "threads", "isa", "kv_heads"})
    ->Args({4096, 1, 0, 8})
    ->ArgsProduct({{4096, 32768, 131072}, {1, 2}, {1, 2}, {8, 16, 32}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_decode_attention_chunks)
    ->ArgNames({"chunk_tokens", "kv_heads"})
    ->ArgsProduct({{8, 64, 512}, {8, 32}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_decode_attention_in_cache)
    ->ArgNames({"threads", "isa", "kv_heads"})
    ->ArgsProduct({{1, 2}, {1, 2}, {8, 16, 32}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_prefill_attention)
    ->ArgNames({"n_kv", "tokens", "threads", "isa"})
    ->ArgsProduct({{1024}, {1024}, {2}, {1, 2}})
    ->ArgsProduct({{4096}, {512}, {2}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace leoam::kernels

BENCHMARK_MAIN();
