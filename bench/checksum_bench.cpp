// The chunk checksum (io/checksum.h: XXH3 through libxxhash's run-time dispatch) against the
// library's plain XXH3 entry point (the SSE2 code it was built with), over 32 KiB pieces (a chunk
// of 8 tokens at the Llama-3-8B shape) of a 72 MiB buffer, so from memory as after a step's disk
// reads. "bytes_per_second" counts the bytes hashed.
//
//   build/test/bench/bench_checksum --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <cstdint>
#include <vector>

#include "io/checksum.h"

namespace leoam {
namespace {

constexpr size_t kBytes = size_t{72} << 20;
constexpr size_t kPiece = size_t{32} << 10;

template <bool kDispatched>
void BM_checksum(benchmark::State& state) {
  std::vector<uint8_t> data(kBytes);
  for (size_t i = 0; i < kBytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  uint64_t h = 0;
  for (auto _ : state) {
    for (size_t at = 0; at < kBytes; at += kPiece) {
      h ^= kDispatched ? checksum64(data.data() + at, kPiece) : XXH3_64bits(data.data() + at, kPiece);
    }
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

BENCHMARK_TEMPLATE(BM_checksum, true)->Name("checksum64")->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_checksum, false)->Name("xxh3_plain")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace leoam

BENCHMARK_MAIN();
