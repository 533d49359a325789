// The KV codec (kv/kv_codec.h, kernels/cpu/kv_group_codes.h): one 64-token chunk of 8 KV heads of
// 128 channels in f16 (the Llama-3-8B shape's chunk a layer), encoded and decoded in int8 and
// int4, through the dispatched kernels and the scalar reference. "bytes_per_second" counts the
// chunk's f16 bytes.
//
//   build/test/bench/bench_kv_codec --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kv/kv_codec.h"

namespace leoam {
namespace {

ChunkGeometry geometry() {
  ChunkGeometry g;
  g.n_kv_heads = 8;
  g.head_dim = 128;
  g.chunk_tokens = 64;
  g.dtype = KvDtype::kF16;
  return g;
}

std::vector<uint16_t> random_chunk(const ChunkGeometry& g) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> chunk(g.chunk_bytes() / sizeof(uint16_t));
  for (uint16_t& h : chunk) h = f32_to_f16(dist(rng));
  return chunk;
}

void BM_encode(benchmark::State& state, KvCodec codec, bool reference) {
  const ChunkGeometry g = geometry();
  const std::vector<uint16_t> chunk = random_chunk(g);
  std::vector<uint8_t> out(encoded_chunk_bytes(g, codec));
  for (auto _ : state) {
    if (reference) {
      ref::encode_chunk(g, codec, chunk.data(), out.data());
    } else {
      encode_chunk(g, codec, chunk.data(), out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.chunk_bytes()));
}

void BM_decode(benchmark::State& state, KvCodec codec, bool reference) {
  const ChunkGeometry g = geometry();
  const std::vector<uint16_t> chunk = random_chunk(g);
  std::vector<uint8_t> coded(encoded_chunk_bytes(g, codec));
  encode_chunk(g, codec, chunk.data(), coded.data());
  std::vector<uint16_t> out(chunk.size());
  for (auto _ : state) {
    if (reference) {
      ref::decode_chunk(g, codec, coded.data(), out.data());
    } else {
      decode_chunk(g, codec, coded.data(), out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * g.chunk_bytes()));
}

BENCHMARK_CAPTURE(BM_encode, int8, KvCodec::kInt8, false);
BENCHMARK_CAPTURE(BM_encode, int4, KvCodec::kInt4, false);
BENCHMARK_CAPTURE(BM_encode, int8_ref, KvCodec::kInt8, true);
BENCHMARK_CAPTURE(BM_encode, int4_ref, KvCodec::kInt4, true);
BENCHMARK_CAPTURE(BM_decode, int8, KvCodec::kInt8, false);
BENCHMARK_CAPTURE(BM_decode, int4, KvCodec::kInt4, false);
BENCHMARK_CAPTURE(BM_decode, int8_ref, KvCodec::kInt8, true);
BENCHMARK_CAPTURE(BM_decode, int4_ref, KvCodec::kInt4, true);

}  // namespace
}  // namespace leoam

BENCHMARK_MAIN();
