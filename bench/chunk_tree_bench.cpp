// Microbenchmark of an IAKM step's restructuring of a chunk tree (sparse/chunk_tree.h): the
// shape of the trained model's layer 0 at 8192 tokens (1024 leaves of 8 tokens, 4 KV heads of
// 64 dims) when its cold leaves merge, every other pair of leaves (512 merges), made one merge at
// a time ("one_at_a_time": each moves every leaf after it) or in one ChunkTree::edit ("edit").
// Each iteration grows a fresh tree (not timed) and restructures it; "items_per_second" counts
// merges.
//
//   build/release/bench/bench_chunk_tree --benchmark_min_time=0.5 --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "sparse/chunk_tree.h"

namespace leoam::sparse {
namespace {

constexpr int kStoreChunk = 8;
constexpr int64_t kTokens = 8192;
constexpr int kKvHeads = 4;
constexpr int kHeadDim = 64;

// Every store chunk's box is [-(i % 7), i % 5] in each channel: what the tree reads does not
// matter to its restructuring, only its size does.
class ConstantCatalog final : public KvCatalog {
 public:
  int chunk_tokens() const override { return kStoreChunk; }
  int catalog_kv_heads() const override { return kKvHeads; }
  int catalog_head_dim() const override { return kHeadDim; }
  int64_t n_chunks(int /*layer*/) const override { return kTokens / kStoreChunk; }
  Tier chunk_tier(int /*layer*/, int64_t /*index*/) const override { return Tier::kDevice; }
  Status load_abstracts(int /*layer*/, int64_t i0, int64_t i1, float* dst, AbstractSource /*source*/,
                        uint32_t* /*signs*/) override {
    constexpr int64_t kRow = int64_t{kKvHeads} * kHeadDim;
    for (int64_t i = i0; i < i1; ++i, dst += 2 * kRow) {
      std::fill(dst, dst + kRow, -static_cast<float>(i % 7));
      std::fill(dst + kRow, dst + 2 * kRow, static_cast<float>(i % 5));
    }
    return Status::ok();
  }
  void raise_importance(ChunkKey /*key*/, float /*amount*/) override {}
};

enum class Variant { kOneAtATime, kEdit };

template <Variant kVariant>
void BM_merge_cold_pairs(benchmark::State& state) {
  ConstantCatalog catalog;
  const ChunkTreeOptions options{kStoreChunk, 512, kStoreChunk, kStoreChunk, false};
  std::vector<int64_t> merges;
  for (int64_t i = 0; i + 1 < kTokens / kStoreChunk; i += 2) merges.push_back(i);
  for (auto _ : state) {
    state.PauseTiming();
    Result<ChunkTree> tree = ChunkTree::create(options, kStoreChunk, kKvHeads, kHeadDim);
    if (!tree.is_ok() || !tree->grow(catalog, 0, kTokens, AbstractSource::kLka).is_ok()) {
      state.SkipWithError("cannot build the tree");
      return;
    }
    state.ResumeTiming();
    if (kVariant == Variant::kEdit) {
      if (!tree->edit({}, merges).is_ok()) state.SkipWithError("edit failed");
    } else {
      for (auto m = merges.rbegin(); m != merges.rend(); ++m) tree->merge(*m);  // the last first
    }
    benchmark::DoNotOptimize(tree->block_box(0));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(merges.size()));
}

BENCHMARK_TEMPLATE(BM_merge_cold_pairs, Variant::kOneAtATime)->Name("merge_cold_pairs/one_at_a_time");
BENCHMARK_TEMPLATE(BM_merge_cold_pairs, Variant::kEdit)->Name("merge_cold_pairs/edit");

}  // namespace
}  // namespace leoam::sparse

BENCHMARK_MAIN();
