#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "io/fault_injection_file_system.h"
#include "kv/memory_kv_cache.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::random_rows;
using testing_util::TempDir;

constexpr int kLayers = 2;
constexpr int kHeads = 2;
constexpr int kHeadDim = 8;
constexpr int kChunk = 8;
constexpr int64_t kCtx = 2048;

TieredKvCacheOptions small_options(const std::string& dir, KvCodec codec = KvCodec::kNone) {
  TieredKvCacheOptions o;
  o.host_codec = codec;
  o.shape = {kLayers, kHeads, kHeadDim, kCtx};
  o.chunk_tokens = kChunk;
  o.dir = dir;
  o.session = "test";
  o.n_sink_tokens = 4;
  o.n_recent_tokens = 8;
  // A chunk costs its tier's budget its KV, and with a codec its abstract (keeps_abstracts).
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 2 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  o.host_budget_bytes = 3 * TieredKvCache::chunk_budget_bytes(o, Tier::kHost);  // three chunks
  o.gather_batch_bytes = 5 * kDirectIoAlignment;                 // five chunks a batch: many batches
  return o;
}

// The same appends go to a tiered store and an in-memory F16 cache.
class Twin {
 public:
  explicit Twin(const TieredKvCacheOptions& options, uint32_t seed = 1) : rng_(seed) {
    auto tiered = TieredKvCache::create(options);
    EXPECT_TRUE(tiered.is_ok()) << tiered.status().message();
    if (tiered.is_ok()) tiered_ = std::move(*tiered);
    MemoryKvCacheOptions m;
    m.shape = options.shape;
    m.dtype = options.dtype;
    memory_ = MemoryKvCache::create(m).value();
  }

  Status append(int64_t n) {
    const int64_t pos0 = tiered_->n_tokens();
    for (int il = 0; il < kLayers; ++il) {
      const auto k = random_rows(rng_, n, kHeads * kHeadDim);
      const auto v = random_rows(rng_, n, kHeads * kHeadDim);
      LEOAM_RETURN_IF_ERROR(tiered_->append(il, pos0, n, k.data(), v.data()));
      EXPECT_TRUE(memory_->append(il, pos0, n, k.data(), v.data()).is_ok());
    }
    return Status::ok();
  }

  TieredKvCache& tiered() { return *tiered_; }
  MemoryKvCache& memory() { return *memory_; }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
  std::unique_ptr<TieredKvCache> tiered_;
  std::unique_ptr<MemoryKvCache> memory_;
};

// Position -> (K row bytes, V row bytes) of every position `ranges` visit, read via for_each_view
// (in order), or for_each_view_unordered (each position once, in any order).
using Rows = std::map<int64_t, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>>;

Result<Rows> read_rows(KvCache& kv, int layer, std::span<const TokenRange> ranges, bool unordered = false) {
  Rows rows;
  int64_t last = -1;
  const KvCache::ViewVisitor visit = [&](const KvView& view) {
    for (const KvSegment& s : view.segments()) {
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        const int64_t pos = s.pos0 + t;
        if (unordered ? rows.count(pos) != 0 : pos <= last) return internal_error("positions out of order or twice");
        last = pos;
        const auto* k = static_cast<const uint8_t*>(s.k_row(t));
        const auto* v = static_cast<const uint8_t*>(s.v_row(t));
        const size_t n = s.row_stride_bytes;
        rows[pos] = {std::vector<uint8_t>(k, k + n), std::vector<uint8_t>(v, v + n)};
      }
    }
    return Status::ok();
  };
  const Status st = unordered ? kv.for_each_view_unordered(layer, ranges, visit) : kv.for_each_view(layer, ranges, visit);
  if (!st.is_ok()) return st;
  return rows;
}

void expect_same_rows(Twin& twin, int layer, std::span<const TokenRange> ranges) {
  auto got = read_rows(twin.tiered(), layer, ranges);
  auto want = read_rows(twin.memory(), layer, ranges);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (const auto& [pos, kv] : *want) {
    ASSERT_TRUE(got->count(pos)) << "position " << pos << " missing";
    EXPECT_EQ(got->at(pos), kv) << "layer " << layer << " position " << pos;
  }
}

// The abstract recomputed from the chunk's rows as the store serves them.
std::vector<float> recomputed_abstract(TieredKvCache& kv, ChunkKey key) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, std::min(p0 + g.chunk_tokens, kv.n_tokens(key.layer))};
  std::vector<uint8_t> chunk(g.chunk_bytes());
  auto rows = read_rows(kv, key.layer, {&r, 1});
  EXPECT_TRUE(rows.is_ok());
  for (const auto& [pos, row] : *rows) std::memcpy(chunk.data() + (pos - p0) * g.row_bytes(), row.first.data(), g.row_bytes());
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()));
  reset_abstract(g, a.data());
  update_abstract(g, chunk.data(), 0, r.end - r.begin, a.data());
  return a;
}

// A whole abstract (chunk_layout.h) from the box and the sign words the catalog gives apart.
std::vector<float> joined_abstract(const ChunkGeometry& g, const float* box, const uint32_t* signs) {
  std::vector<float> a(static_cast<size_t>(g.abstract_floats()));
  std::memcpy(a.data(), box, static_cast<size_t>(g.box_floats()) * sizeof(float));
  std::memcpy(a.data() + g.box_floats(), signs, static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
  return a;
}

// "" when `abstract` (box and signs, chunk_layout.h) bounds every key of chunk `key` as the store
// serves it now: each channel within [min, max], and <= 0 where its sign bit is set, >= 0 where
// not; else the first key that breaks it.
std::string check_bounds(TieredKvCache& kv, ChunkKey key, const float* abstract) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, std::min(p0 + g.chunk_tokens, kv.n_tokens(key.layer))};
  auto rows = read_rows(kv, key.layer, {&r, 1});
  if (!rows.is_ok()) return rows.status().message();
  const int64_t n = g.row_elements();
  const int wph = g.sign_words_per_head();
  for (const auto& [pos, row] : *rows) {
    const int64_t t = pos - p0;
    const auto* k = reinterpret_cast<const uint16_t*>(row.first.data());
    for (int64_t i = 0; i < n; ++i) {
      const float x = f16_to_f32(k[i]);
      uint32_t word;
      const int64_t h = i / g.head_dim, c = i % g.head_dim;
      std::memcpy(&word, abstract + g.box_floats() + t * g.sign_words_per_row() + h * wph + c / 32, sizeof(word));
      const bool negative = (word >> (c % 32)) & 1u;
      if (x < abstract[i] || x > abstract[n + i] || (negative && x > 0.0f) || (!negative && x < 0.0f))
        return "layer " + std::to_string(key.layer) + " position " + std::to_string(pos) + " channel " +
               std::to_string(i) + ": key " + std::to_string(x) + " outside [" + std::to_string(abstract[i]) + ", " +
               std::to_string(abstract[n + i]) + "] with sign bit " + std::to_string(negative) + ", on the " +
               tier_name(kv.chunk_tier(key.layer, key.index));
    }
  }
  return "";
}

// The abstracts of chunks [0, n_chunks) of `layer` that the catalog serves, joined (LKA).
std::vector<std::vector<float>> served_abstracts(TieredKvCache& kv, int layer) {
  const ChunkGeometry& g = kv.geometry();
  const int64_t n = kv.n_chunks(layer);
  std::vector<float> boxes(static_cast<size_t>(n * g.box_floats()));
  std::vector<uint32_t> signs(static_cast<size_t>(n * g.sign_words()));
  EXPECT_TRUE(kv.load_abstracts(layer, 0, n, boxes.data(), AbstractSource::kLka, signs.data()).is_ok());
  std::vector<std::vector<float>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(joined_abstract(g, boxes.data() + i * g.box_floats(), signs.data() + i * g.sign_words()));
  return out;
}

TEST(TieredKvCache, ServesTheSameRowsAsTheMemoryCacheWhileMostKvIsOnDisk) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  const int64_t sizes[] = {1, 3, 8, 13, 40, 7, 64, 100};
  for (int64_t n : sizes) ASSERT_TRUE(twin.append(n).is_ok());
  const int64_t n = twin.tiered().n_tokens();
  ASSERT_EQ(n, 236);
  EXPECT_GT(twin.tiered().residency().n_chunks(Tier::kDisk), twin.tiered().residency().n_chunks() / 2);

  for (int il = 0; il < kLayers; ++il) {
    const TokenRange all{0, n};
    expect_same_rows(twin, il, {&all, 1});
    const TokenRange sparse[] = {{0, 4}, {17, 18}, {20, 45}, {46, 47}, {100, 180}, {228, 236}};
    expect_same_rows(twin, il, sparse);
  }
  const KvStats stats = twin.tiered().stats();
  EXPECT_GT(stats[Tier::kDisk].bytes_read, 0u);
  EXPECT_GT(stats[Tier::kDisk].hits, 0u);
  EXPECT_GT(stats[Tier::kDevice].evictions, 0u);
  EXPECT_LE(stats.resident_bytes[0] + stats.abstract_bytes[0], twin.tiered().residency().options().device_budget_bytes);
  EXPECT_LE(stats.resident_bytes[1] + stats.abstract_bytes[1], twin.tiered().residency().options().host_budget_bytes);
}

// for_each_view_unordered hands over each position once, with the memory cache's rows; a gather
// batch with disk reads and chunks in memory visits the latter while its reads are in flight, a
// view of them first and a view of the chunks read after, so positions come out of order.
TEST(TieredKvCache, UnorderedViewsVisitTheChunksInMemoryWhileTheReadsAreInFlight) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(236).is_ok());
  TieredKvCache& kv = twin.tiered();
  const TokenRange sparse[] = {{0, 4}, {17, 18}, {20, 45}, {46, 47}, {100, 180}, {228, 236}};
  for (int il = 0; il < kLayers; ++il) {
    const auto want = read_rows(twin.memory(), il, sparse);
    ASSERT_TRUE(want.is_ok());
    auto got = read_rows(kv, il, sparse, /*unordered=*/true);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    EXPECT_EQ(*got, *want) << "layer " << il;
  }
  // Each view: its chunks' tiers as it is visited (a batch promotes what it read after its views).
  int n_in_memory = 0, n_read = 0;
  bool read_after_memory = false, out_of_order = false;
  int64_t last = -1;
  const uint64_t read0 = kv.stats()[Tier::kDisk].bytes_read;
  ASSERT_TRUE(kv.for_each_view_unordered(1, sparse, [&](const KvView& view) {
                  int on_disk = 0;
                  for (const KvSegment& seg : view.segments()) {
                    on_disk += kv.chunk_tier(1, seg.pos0 / kChunk) == Tier::kDisk ? 1 : 0;
                    out_of_order |= seg.pos0 < last;
                    last = seg.pos0;
                  }
                  EXPECT_TRUE(on_disk == 0 || on_disk == static_cast<int>(view.segments().size()))
                      << "a view is of chunks in memory or of chunks read, not both";
                  read_after_memory |= on_disk > 0 && n_in_memory > 0;
                  (on_disk > 0 ? n_read : n_in_memory) += 1;
                  return Status::ok();
                }).is_ok());
  EXPECT_GT(kv.stats()[Tier::kDisk].bytes_read, read0);
  EXPECT_GT(n_read, 0);
  EXPECT_TRUE(read_after_memory);
  EXPECT_TRUE(out_of_order);
}

// Runs of chunks across the tiers give the boxes load_abstracts gives run by run, with every run's
// disk chunks read in one batch (one latency sample).
TEST(TieredKvCache, AbstractRunsAreTheBoxesOfEachRunWithOneDiskBatch) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(236).is_ok());
  TieredKvCache& kv = twin.tiered();
  const ChunkGeometry& g = kv.geometry();
  const std::vector<ChunkRun> runs = {{0, 4}, {10, 12}, {20, 21}, {25, 30}};
  int64_t n = 0;
  for (const ChunkRun& r : runs) n += r.size();
  std::vector<float> got(static_cast<size_t>(n * g.box_floats()));
  const uint64_t samples = kv.stats().disk_read_latency.count();
  ASSERT_TRUE(kv.load_abstract_runs(1, runs, got.data(), AbstractSource::kLka).is_ok());
  EXPECT_EQ(kv.stats().disk_read_latency.count(), samples + 1);
  const float* at = got.data();
  for (const ChunkRun& r : runs) {
    std::vector<float> want(static_cast<size_t>(r.size() * g.box_floats()));
    ASSERT_TRUE(kv.load_abstracts(1, r.begin, r.end, want.data(), AbstractSource::kLka).is_ok());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), at)) << "[" << r.begin << ", " << r.end << ")";
    at += want.size();
  }
  bool saw_disk = false, saw_memory = false;
  for (const ChunkRun& r : runs) {
    for (int64_t i = r.begin; i < r.end; ++i) (kv.chunk_tier(1, i) == Tier::kDisk ? saw_disk : saw_memory) = true;
  }
  EXPECT_TRUE(saw_disk && saw_memory) << "the runs must cross the tiers";
}

// Without a codec a device or host chunk's abstract is computed from its keys when asked: it
// costs its tier's budget nothing, and the stats say so. On disk the abstracts are the abstract
// files as they lie in the directory.
TEST(TieredKvCache, ResidentAbstractsCostNothingWithoutACodecAndTheStatsShowIt) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.visible_files = true;
  const ChunkGeometry g{kHeads, kHeadDim, kChunk, KvDtype::kF16};
  ASSERT_FALSE(TieredKvCache::keeps_abstracts(o));
  ASSERT_EQ(TieredKvCache::chunk_budget_bytes(o, Tier::kDevice), g.chunk_bytes());
  o.host_budget_bytes = 3 * g.chunk_bytes();  // three chunks, all KV
  Twin twin(o);
  for (const int64_t n : {40, 100, 13, 83}) ASSERT_TRUE(twin.append(n).is_ok());
  TieredKvCache& kv = twin.tiered();
  EXPECT_EQ(kv.residency().n_chunks(Tier::kHost), 3);
  const KvStats stats = kv.stats();
  for (const Tier t : {Tier::kDevice, Tier::kHost}) {
    SCOPED_TRACE(tier_name(t));
    const int i = static_cast<int>(t);
    const uint64_t n = static_cast<uint64_t>(kv.residency().n_chunks(t));
    EXPECT_EQ(stats.resident_bytes[i], n * g.chunk_bytes());  // no codec: the host holds them as they are
    EXPECT_EQ(stats.abstract_bytes[i], 0u);
    EXPECT_EQ(stats.peak_abstract_bytes[i], 0u);
    EXPECT_EQ(kv.residency().used_bytes(t), stats.resident_bytes[i]);
  }
  uint64_t lka_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".lka") lka_bytes += entry.file_size();
  }
  EXPECT_GT(lka_bytes, 0u);
  EXPECT_EQ(stats.abstract_bytes[static_cast<int>(Tier::kDisk)], lka_bytes);
  EXPECT_GE(stats.buffer_bytes, o.gather_batch_bytes);
}

// With a lossy codec each device or host chunk keeps its abstract (it must bound the keys as
// appended and as decoded), and without one when asked (keep_abstracts: a policy that scores
// every far chunk at every step): it costs its tier's budget its KV and that abstract, and the
// stats report the abstracts per tier, now and at their peak.
TEST(TieredKvCache, KeptAbstractsCountInTheirTierBudgetAndTheStatsShowThem) {
  for (const bool lossy : {true, false}) {
    SCOPED_TRACE(lossy ? "int8 codec" : "no codec, keep_abstracts");
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path(), lossy ? KvCodec::kInt8 : KvCodec::kNone);
    if (!lossy) {
      o.keep_abstracts = true;
      o.device_budget_bytes =
          TieredKvCache::min_device_budget_bytes(o) + 2 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
    }
    const ChunkGeometry g{kHeads, kHeadDim, kChunk, KvDtype::kF16};
    const uint64_t host_kv = encoded_chunk_bytes(g, o.host_codec);
    ASSERT_TRUE(TieredKvCache::keeps_abstracts(o));
    ASSERT_EQ(TieredKvCache::chunk_budget_bytes(o, Tier::kDevice), g.chunk_bytes() + g.abstract_bytes());
    ASSERT_EQ(TieredKvCache::chunk_budget_bytes(o, Tier::kHost), host_kv + g.abstract_bytes());
    // Room for three chunks' KV but not for their abstracts too: the host holds two.
    o.host_budget_bytes = 3 * host_kv;
    ASSERT_LT(o.host_budget_bytes, 3 * (host_kv + g.abstract_bytes()));
    Twin twin(o);
    for (const int64_t n : {40, 100, 13, 83}) ASSERT_TRUE(twin.append(n).is_ok());
    TieredKvCache& kv = twin.tiered();
    EXPECT_EQ(kv.residency().n_chunks(Tier::kHost), 2);
    const KvStats stats = kv.stats();
    EXPECT_TRUE(stats.abstracts_in_memory);
    for (const Tier t : {Tier::kDevice, Tier::kHost}) {
      SCOPED_TRACE(tier_name(t));
      const int i = static_cast<int>(t);
      const uint64_t n = static_cast<uint64_t>(kv.residency().n_chunks(t));
      EXPECT_EQ(stats.resident_bytes[i], n * (t == Tier::kHost ? host_kv : g.chunk_bytes()));
      EXPECT_EQ(stats.abstract_bytes[i], n * g.abstract_bytes());
      EXPECT_GE(stats.peak_abstract_bytes[i], stats.abstract_bytes[i]);
      const uint64_t budget = t == Tier::kDevice ? o.device_budget_bytes : o.host_budget_bytes;
      EXPECT_LE(stats.resident_bytes[i] + stats.abstract_bytes[i], budget);
      EXPECT_LE(stats.peak_abstract_bytes[i], budget);
      EXPECT_EQ(kv.residency().used_bytes(t), stats.resident_bytes[i] + stats.abstract_bytes[i]);
    }
  }
}

// Write-through: every chunk an append seals is written to disk by the end of the append, where
// it lives, in one batch a layer (of consecutive chunks: one write); demoting it later writes
// nothing. The chunks an append creates are not its first victims: the older ones, already on
// disk, go first. Here the device holds one append's chunks besides the pinned ones.
TEST(TieredKvCache, SealedChunksAreWrittenThroughAndDemotedWithoutAWrite) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 2 * 8 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  o.host_budget_bytes = 0;  // device -> disk: a demotion would be the only other writer
  Twin twin(o);
  const uint64_t per_chunk = twin.tiered().disk().slot_bytes() + twin.tiered().disk().record_bytes(0);
  const auto sealed_on_disk = [&](int64_t n_sealed) {
    for (int il = 0; il < kLayers; ++il) {
      for (int64_t i = 0; i < n_sealed; ++i) {
        const ChunkResidency* r = twin.tiered().residency().find({il, i});
        ASSERT_NE(r, nullptr);
        EXPECT_TRUE(r->on_disk) << "layer " << il << " chunk " << i;
        EXPECT_TRUE(twin.tiered().disk().has_chunk(il, i)) << "layer " << il << " chunk " << i;
      }
    }
  };
  ASSERT_TRUE(twin.append(64).is_ok());  // 8 chunks a layer, all sealed
  sealed_on_disk(8);
  KvStats stats = twin.tiered().stats();
  EXPECT_EQ(stats[Tier::kDisk].bytes_written, 2 * 8 * per_chunk);
  EXPECT_EQ(stats.disk_write_latency.count(), 2u);
  ASSERT_TRUE(twin.append(64).is_ok());  // demotes chunks of the first append
  sealed_on_disk(16);
  stats = twin.tiered().stats();
  EXPECT_GT(stats[Tier::kDevice].evictions, 4u);
  EXPECT_EQ(stats[Tier::kDisk].bytes_written, 2 * 16 * per_chunk);  // each sealed chunk once
  EXPECT_EQ(stats.disk_write_latency.count(), 4u);
  const TokenRange all{0, twin.tiered().n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
}

// prefetch: the host and disk chunks of the ranges come up as a read would leave them (more
// important than the residents, as a policy's hint makes them), their disk bytes counted as
// prefetched; device chunks are not touched (no hit counted), the rows served stay the same, and
// a range past the layer's end is refused.
TEST(TieredKvCache, PrefetchBringsChunksUpAsAReadWouldAndCountsItsDiskBytes) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o) + 4 * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());  // 32 chunks a layer; most of them on disk
  TieredKvCache& kv = twin.tiered();
  const std::vector<TokenRange> ranges = {{20, 36}, {80, 84}};  // chunks 2, 3, 4 and 10
  const std::vector<int64_t> chunks = {2, 3, 4, 10};
  uint64_t want_disk = 0;
  int64_t on_device = 0;
  for (int64_t i : chunks) {
    const Tier t = kv.residency().find({1, i})->tier;
    want_disk += t == Tier::kDisk ? kv.disk().slot_bytes() : 0;
    on_device += t == Tier::kDevice;
  }
  ASSERT_GT(want_disk, 0u);
  ASSERT_EQ(on_device, 0);
  for (int64_t i : chunks) kv.raise_importance({1, i}, 1.0f);
  const KvStats before = kv.stats();
  ASSERT_TRUE(kv.prefetch(1, ranges).is_ok());
  const KvStats after = kv.stats();
  EXPECT_EQ(after.disk_bytes_prefetched, want_disk);
  EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read, want_disk);
  for (int64_t i : chunks) {
    EXPECT_EQ(kv.residency().find({1, i})->tier, Tier::kDevice) << "chunk " << i;
  }
  // Once they are on the device, a second prefetch reads and counts nothing.
  const KvStats again_before = kv.stats();
  ASSERT_TRUE(kv.prefetch(1, ranges).is_ok());
  const KvStats again = kv.stats();
  EXPECT_EQ(again.disk_bytes_prefetched, want_disk);
  EXPECT_EQ(again[Tier::kDevice].hits, again_before[Tier::kDevice].hits);
  EXPECT_EQ(again[Tier::kDevice].bytes_read, again_before[Tier::kDevice].bytes_read);
  const TokenRange all{0, kv.n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});

  const TokenRange past{250, 257};
  EXPECT_EQ(kv.prefetch(1, {&past, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.prefetch(kLayers, ranges).code(), StatusCode::kInvalidArgument);
}

// The disk chunks of a layer's ranges in order (what a read-ahead of them stages).
std::vector<int64_t> disk_chunks_of(TieredKvCache& kv, int layer, std::span<const TokenRange> ranges) {
  std::vector<int64_t> out;
  for (const TokenRange& r : ranges) {
    for (int64_t i = r.begin / kChunk; i * kChunk < r.end; ++i) {
      if (kv.residency().find({layer, i})->tier == Tier::kDisk) out.push_back(i);
    }
  }
  return out;
}

// read_ahead: the disk chunks of the ranges are read on the I/O thread, and the layer's next
// gather takes them from the staging (used), reads the rest itself (missed), and serves the same
// rows; the job's disk bytes count once. A bad range is refused, and a truncate with a job in
// flight leaves the store right.
TEST(TieredKvCache, ReadAheadStagesDiskChunksForTheLayersNextGather) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;  // 16 chunks a job
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());
  TieredKvCache& kv = twin.tiered();
  const std::vector<TokenRange> ahead = {{20, 36}, {80, 84}};
  const std::vector<int64_t> staged = disk_chunks_of(kv, 1, ahead);
  ASSERT_EQ(staged.size(), 4u);
  const KvStats before = kv.stats();
  ASSERT_TRUE(kv.read_ahead(1, ahead).is_ok());
  expect_same_rows(twin, 1, ahead);
  KvStats after = kv.stats();
  EXPECT_EQ(after.read_ahead.jobs, 1u);
  EXPECT_EQ(after.read_ahead.chunks_staged, 4u);
  EXPECT_EQ(after.read_ahead.chunks_used, 4u);
  EXPECT_EQ(after.read_ahead.chunks_missed, 0u);
  EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read, 4 * kv.disk().slot_bytes());
  EXPECT_GE(after.buffer_bytes, o.read_ahead_bytes);  // the staging counts as the store's buffers

  // A gather of other ranges than were read ahead: what it finds staged it uses, the rest it reads.
  const std::vector<TokenRange> guess = {{100, 116}};
  const std::vector<TokenRange> asked = {{108, 140}};
  const std::vector<int64_t> guessed = disk_chunks_of(kv, 1, guess);
  const std::vector<int64_t> needed = disk_chunks_of(kv, 1, asked);
  const auto n_hit = static_cast<uint64_t>(
      std::count_if(needed.begin(), needed.end(), [&](int64_t i) { return std::ranges::count(guessed, i) > 0; }));
  ASSERT_GT(n_hit, 0u);
  ASSERT_LT(n_hit, needed.size());
  ASSERT_TRUE(kv.read_ahead(1, guess).is_ok());
  expect_same_rows(twin, 1, asked);
  after = kv.stats();
  EXPECT_EQ(after.read_ahead.chunks_staged, 4 + guessed.size());
  EXPECT_EQ(after.read_ahead.chunks_used, 4 + n_hit);
  EXPECT_EQ(after.read_ahead.chunks_missed, needed.size() - n_hit);
  const std::string text = after.to_text();
  EXPECT_NE(text.find("read-ahead: 2 layers, " + std::to_string(4 + guessed.size()) + " chunks read ahead, " +
                      std::to_string(4 + n_hit) + " of them used; " + std::to_string(needed.size() - n_hit) +
                      " chunks missed"),
            std::string::npos)
      << text;

  const TokenRange past{250, 257};
  EXPECT_EQ(kv.read_ahead(1, {&past, 1}).code(), StatusCode::kInvalidArgument);
  const std::vector<TokenRange> late = {{160, 200}};
  ASSERT_TRUE(kv.read_ahead(0, late).is_ok());
  ASSERT_TRUE(kv.truncate(150).is_ok());
  ASSERT_TRUE(twin.memory().truncate(150).is_ok());
  const TokenRange all{0, 150};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
}

// A gather serves a host chunk in place when it is stored as-is (no codec): both tiers are RAM, so
// moving it to the device would only copy it and push another down. A disk chunk it reads is
// promoted, as before.
TEST(TieredKvCache, AsIsHostChunksAreReadInPlaceAndDiskChunksPromoted) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(256).is_ok());
  TieredKvCache& kv = twin.tiered();
  int64_t on_host = -1, on_disk = -1;
  for (int64_t i = 1; i < 28 && (on_host < 0 || on_disk < 0); ++i) {
    const Tier t = kv.residency().find({1, i})->tier;
    if (t == Tier::kHost && on_host < 0) on_host = i;
    if (t == Tier::kDisk && on_disk < 0) on_disk = i;
  }
  ASSERT_GE(on_host, 0);
  ASSERT_GE(on_disk, 0);
  for (int64_t i : {on_host, on_disk}) kv.raise_importance({1, i}, 5.0f);  // worth promoting
  const uint64_t device_written = kv.stats()[Tier::kDevice].bytes_written;
  const TokenRange host_rows{on_host * kChunk, (on_host + 1) * kChunk};
  expect_same_rows(twin, 1, {&host_rows, 1});
  EXPECT_EQ(kv.residency().find({1, on_host})->tier, Tier::kHost);
  EXPECT_EQ(kv.stats()[Tier::kDevice].bytes_written, device_written);
  const TokenRange disk_rows{on_disk * kChunk, (on_disk + 1) * kChunk};
  expect_same_rows(twin, 1, {&disk_rows, 1});
  EXPECT_NE(kv.residency().find({1, on_disk})->tier, Tier::kDisk);
}

TEST(TieredKvCache, ViewGathersEveryPositionIntoOneSegment) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(77).is_ok());
  auto got = twin.tiered().view(1, 70);
  auto want = twin.memory().view(1, 70);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  ASSERT_EQ(got->segments().size(), 1u);
  const size_t n = 70 * twin.tiered().geometry().row_bytes();
  EXPECT_EQ(std::memcmp(got->segments()[0].k, want->segments()[0].k, n), 0);
  EXPECT_EQ(std::memcmp(got->segments()[0].v, want->segments()[0].v, n), 0);
}

// Under random appends, budgets and reads: every chunk has one home, budgets hold, and every
// abstract (in memory or on disk) equals the min/max recomputed from the served keys.
TEST(TieredKvCache, PropertyBudgetsResidencyAndAbstractsHold) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path());
    std::mt19937 pick(seed);
    o.host_budget_bytes = std::uniform_int_distribution<uint64_t>(0, 6)(pick) * TieredKvCache::chunk_budget_bytes(o, Tier::kHost);
    o.device_budget_bytes +=
        std::uniform_int_distribution<uint64_t>(0, 4)(pick) * TieredKvCache::chunk_budget_bytes(o, Tier::kDevice);
    Twin twin(o, seed);
    TieredKvCache& kv = twin.tiered();
    for (int step = 0; step < 25; ++step) {
      ASSERT_TRUE(twin.append(std::uniform_int_distribution<int64_t>(1, 30)(pick)).is_ok());
      const int64_t n = kv.n_tokens();
      const int64_t b = std::uniform_int_distribution<int64_t>(0, n - 1)(pick);
      const TokenRange r{b, std::min(n, b + std::uniform_int_distribution<int64_t>(1, 60)(pick))};
      expect_same_rows(twin, step % kLayers, {&r, 1});
      if (step % 5 == 0) kv.raise_importance({0, std::uniform_int_distribution<int64_t>(0, n / kChunk)(pick)}, 1.0f);

      const Residency& res = kv.residency();
      ASSERT_LE(res.used_bytes(Tier::kDevice), o.device_budget_bytes);
      ASSERT_LE(res.used_bytes(Tier::kHost), o.host_budget_bytes);
      for (int il = 0; il < kLayers; ++il) {
        const int64_t n_chunks = (kv.n_tokens(il) + kChunk - 1) / kChunk;
        for (int64_t i = 0; i < n_chunks; ++i) {
          const ChunkResidency* c = res.find({il, i});
          ASSERT_NE(c, nullptr) << "chunk " << i << " has no home";
          const std::vector<float> want = recomputed_abstract(kv, {il, i});
          std::vector<float> got(want.size());
          if (c->tier == Tier::kDisk) {  // its record
            ASSERT_TRUE(kv.read_disk_abstracts(il, i, i + 1, got.data()).is_ok());
          } else {  // computed from the resident keys (no codec: nothing kept)
            const ChunkGeometry& g = kv.geometry();
            std::vector<uint32_t> signs(static_cast<size_t>(g.sign_words()));
            ASSERT_TRUE(kv.load_abstracts(il, i, i + 1, got.data(), AbstractSource::kLka, signs.data()).is_ok());
            std::memcpy(got.data() + g.box_floats(), signs.data(), signs.size() * sizeof(uint32_t));
          }
          ASSERT_TRUE(abstracts_equal(kv.geometry(), got.data(), want.data()))
              << "seed " << seed << " layer " << il << " chunk " << i << " in " << tier_name(c->tier);
        }
        ASSERT_EQ(res.n_chunks(), [&] {
          int64_t total = 0;
          for (int l = 0; l < kLayers; ++l) total += (kv.n_tokens(l) + kChunk - 1) / kChunk;
          return total;
        }());
      }
    }
  }
}

// LKA: a policy gets every chunk's abstract, memory-resident or on disk, without any KV read.
TEST(TieredKvCache, CatalogServesAbstractsFromMemoryAndTheDiskWithoutReadingKv) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(150).is_ok());
  TieredKvCache& kv = twin.tiered();
  KvCatalog& catalog = kv;
  ASSERT_EQ(catalog.n_chunks(1), 19);  // 150 tokens in chunks of 8
  std::vector<std::vector<float>> want;
  for (int64_t i = 0; i < 19; ++i) want.push_back(recomputed_abstract(kv, {1, i}));  // reads KV

  const KvStats before = kv.stats();
  const ChunkGeometry& g = kv.geometry();
  ASSERT_TRUE(catalog.has_key_signs());
  std::vector<float> got(static_cast<size_t>(19 * g.box_floats()));
  std::vector<uint32_t> signs(static_cast<size_t>(19 * g.sign_words()));
  ASSERT_TRUE(catalog.load_abstracts(1, 0, 19, got.data(), AbstractSource::kLka, signs.data()).is_ok());
  for (int64_t i = 0; i < 19; ++i) {
    EXPECT_TRUE(abstracts_equal(g, joined_abstract(g, got.data() + i * g.box_floats(), signs.data() + i * g.sign_words()).data(),
                                want[i].data()))
        << "chunk " << i << " on the " << tier_name(catalog.chunk_tier(1, i));
  }
  // Without a place for the signs, the boxes alone, the same.
  std::vector<float> boxes(got.size());
  ASSERT_TRUE(catalog.load_abstracts(1, 0, 19, boxes.data(), AbstractSource::kLka).is_ok());
  EXPECT_EQ(boxes, got);
  const KvStats after = kv.stats();
  EXPECT_EQ(after[Tier::kDisk].hits, before[Tier::kDisk].hits) << "no chunk was read";
  const int64_t n_disk = kv.residency().n_chunks(Tier::kDisk);
  EXPECT_GT(n_disk, 0);
  EXPECT_GT(after[Tier::kDisk].bytes_read, before[Tier::kDisk].bytes_read);
  // Two loads, each reading the whole blocks under its runs of disk records (O_DIRECT): at most
  // the records plus two partial blocks a run.
  EXPECT_LE(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read,
            2 * static_cast<uint64_t>(n_disk) * (kv.disk().record_bytes(0) + 2 * kDirectIoAlignment));
  EXPECT_FALSE(catalog.load_abstracts(1, 0, 20, got.data(), AbstractSource::kLka).is_ok());
}

// Without LKA, a disk chunk's abstract is recomputed from its KV: the same abstracts, at the cost
// of reading every disk chunk in full.
TEST(TieredKvCache, CatalogRecomputesDiskAbstractsFromKvWithoutLka) {
  for (const KvCodec codec : {KvCodec::kNone, KvCodec::kInt4}) {
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path(), codec);
    Twin twin(o);
    ASSERT_TRUE(twin.append(150).is_ok());
    TieredKvCache& kv = twin.tiered();
    KvCatalog& catalog = kv;
    const ChunkGeometry& g = kv.geometry();
    std::vector<float> lka(static_cast<size_t>(19 * g.box_floats()));
    std::vector<float> from_kv(lka.size());
    std::vector<uint32_t> lka_signs(static_cast<size_t>(19 * g.sign_words()));
    std::vector<uint32_t> kv_signs(lka_signs.size());
    ASSERT_TRUE(catalog.load_abstracts(1, 0, 19, lka.data(), AbstractSource::kLka, lka_signs.data()).is_ok());
    const KvStats before = kv.stats();
    ASSERT_TRUE(catalog.load_abstracts(1, 0, 19, from_kv.data(), AbstractSource::kKv, kv_signs.data()).is_ok());
    const KvStats after = kv.stats();  // before the checks below, which read rows
    for (int64_t i = 0; i < 19; ++i) {
      SCOPED_TRACE("chunk " + std::to_string(i) + " on the " + tier_name(catalog.chunk_tier(1, i)) + ", codec " +
                   kv_codec_name(codec));
      const auto recomputed = joined_abstract(g, from_kv.data() + i * g.box_floats(), kv_signs.data() + i * g.sign_words());
      const auto recorded = joined_abstract(g, lka.data() + i * g.box_floats(), lka_signs.data() + i * g.sign_words());
      if (codec == KvCodec::kNone) {
        EXPECT_TRUE(abstracts_equal(g, recomputed.data(), recorded.data()));
      } else {
        // Lossy: the record also covers the keys as appended, so it may be wider; both bound the
        // keys as served, and the recomputed one is theirs exactly.
        EXPECT_EQ(check_bounds(kv, {1, i}, recorded.data()), "");
        if (catalog.chunk_tier(1, i) == Tier::kDisk) {
          EXPECT_TRUE(abstracts_equal(g, recomputed.data(), recomputed_abstract(kv, {1, i}).data()));
        }
      }
    }
    const int64_t n_disk = kv.residency().n_chunks(Tier::kDisk);
    ASSERT_GT(n_disk, 0);
    int64_t n_disk_layer = 0;
    for (int64_t i = 0; i < 19; ++i) n_disk_layer += catalog.chunk_tier(1, i) == Tier::kDisk ? 1 : 0;
    EXPECT_EQ(after[Tier::kDisk].hits - before[Tier::kDisk].hits, static_cast<uint64_t>(n_disk_layer));
    EXPECT_GE(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read,
              static_cast<uint64_t>(n_disk_layer) * kv.disk().slot_bytes());
  }
}

TEST(TieredKvCache, TruncateThenAppendMatchesTheMemoryCache) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(150).is_ok());
  for (int64_t cut : {141, 96, 37}) {
    ASSERT_TRUE(twin.tiered().truncate(cut).is_ok());
    ASSERT_TRUE(twin.memory().truncate(cut).is_ok());
    ASSERT_EQ(twin.tiered().n_tokens(), cut);
    ASSERT_TRUE(twin.append(23).is_ok());
    const TokenRange all{0, twin.tiered().n_tokens()};
    for (int il = 0; il < kLayers; ++il) expect_same_rows(twin, il, {&all, 1});
  }
  twin.tiered().clear();
  EXPECT_EQ(twin.tiered().n_tokens(), 0);
  EXPECT_EQ(twin.tiered().residency().n_chunks(), 0);
}

// Disk abstract records per group of chunks (abstract_tokens): a truncation that cuts a group
// writes its record again from the chunks kept, so that after it the records are those of a store
// that never held the forgotten rows, bit for bit, and still bound every key.
TEST(TieredKvCache, TruncatingIntoAGroupLeavesTheRecordsOfAFreshStore) {
  for (const KvCompress compress : {KvCompress::kOff, KvCompress::kInt4}) {
    SCOPED_TRACE(kv_compress_name(compress));
    TieredKvCacheOptions o = small_options("");
    o.abstract_tokens = {4 * kChunk, 2 * kChunk};
    o.compress = compress;
    std::mt19937 rng(21);
    // 40: five whole chunks kept (a cut after the one in a chunk re-reads that chunk's rows, and
    // with compressed transfers they may come back as the codec's round trip).
    const int64_t n_kept = 40, n_junk = 113, n_more = 60;
    std::vector<std::vector<float>> k(kLayers), v(kLayers), junk_k(kLayers), junk_v(kLayers);
    for (int il = 0; il < kLayers; ++il) {
      k[il] = random_rows(rng, n_kept + n_more, kHeads * kHeadDim);
      v[il] = random_rows(rng, n_kept + n_more, kHeads * kHeadDim);
      junk_k[il] = random_rows(rng, n_junk, kHeads * kHeadDim);
      junk_v[il] = random_rows(rng, n_junk, kHeads * kHeadDim);
    }
    const size_t row = kHeads * kHeadDim;
    TempDir dir_a, dir_b;
    o.dir = dir_a.path();
    auto a = TieredKvCache::create(o);
    o.dir = dir_b.path();
    auto b = TieredKvCache::create(o);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    for (int il = 0; il < kLayers; ++il) {
      ASSERT_TRUE((*a)->append(il, 0, n_kept, k[il].data(), v[il].data()).is_ok());
      ASSERT_TRUE((*a)->append(il, n_kept, n_junk, junk_k[il].data(), junk_v[il].data()).is_ok());
    }
    ASSERT_TRUE((*a)->truncate(n_kept).is_ok());
    for (int il = 0; il < kLayers; ++il) {
      ASSERT_TRUE((*a)->append(il, n_kept, n_more, k[il].data() + n_kept * row, v[il].data() + n_kept * row).is_ok());
      ASSERT_TRUE((*b)->append(il, 0, n_kept + n_more, k[il].data(), v[il].data()).is_ok());
    }
    const ChunkGeometry& g = (*a)->geometry();
    const int64_t n_sealed = (n_kept + n_more) / kChunk;
    for (int il = 0; il < kLayers; ++il) {
      std::vector<float> got(static_cast<size_t>(n_sealed * g.abstract_floats())), want(got.size());
      ASSERT_TRUE((*a)->read_disk_abstracts(il, 0, n_sealed, got.data()).is_ok());
      ASSERT_TRUE((*b)->read_disk_abstracts(il, 0, n_sealed, want.data()).is_ok());
      for (int64_t i = 0; i < n_sealed; ++i) {
        EXPECT_TRUE(abstracts_equal(g, got.data() + i * g.abstract_floats(), want.data() + i * g.abstract_floats()))
            << "layer " << il << " chunk " << i;
        EXPECT_EQ(check_bounds(**a, {il, i}, got.data() + i * g.abstract_floats()), "");
      }
    }
  }
}

TEST(TieredKvCache, CompressedHostServesCloseRowsAndBoundingAbstracts) {
  for (KvCodec codec : {KvCodec::kInt8, KvCodec::kInt4}) {
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path(), codec);
    Twin twin(o);
    ASSERT_TRUE(twin.append(120).is_ok());
    const TokenRange all{0, 120};
    auto got = read_rows(twin.tiered(), 0, {&all, 1});
    auto want = read_rows(twin.memory(), 0, {&all, 1});
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    // Inputs are in [-2, 2): a group's step is at most 4/255 (int8) or 4/15 (int4).
    const float tol = codec == KvCodec::kInt8 ? 4.0f / 255 : 4.0f / 15;
    float max_err = 0.0f;
    for (const auto& [pos, row] : *want) {
      const auto* a = reinterpret_cast<const uint16_t*>(row.first.data());
      const auto* b = reinterpret_cast<const uint16_t*>(got->at(pos).first.data());
      for (int e = 0; e < kHeads * kHeadDim; ++e) max_err = std::max(max_err, std::abs(f16_to_f32(a[e]) - f16_to_f32(b[e])));
    }
    EXPECT_GT(max_err, 0.0f) << kv_codec_name(codec) << ": nothing was compressed";
    // Half a step, or a whole one for a key kept on its side of 0 (kv_codec.h).
    EXPECT_LE(max_err, tol + 1e-2f) << kv_codec_name(codec);
    const auto abstracts = served_abstracts(twin.tiered(), 0);
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(check_bounds(twin.tiered(), {0, i}, abstracts[i].data()), "") << kv_codec_name(codec) << " chunk " << i;
    }
  }
}

// Every abstract bounds the keys that attention reads, in every tier and codec, and goes on
// bounding them as the chunk moves: what a policy read once (leoam's trees keep it) stays sound.
// Budgets from no host tier to a host that holds most chunks; gathers of scattered ranges promote
// chunks from the disk and the host, and appends push them back down.
TEST(TieredKvCache, AbstractsBoundTheServedKeysInEveryTierAndCodec) {
  const std::pair<KvCodec, KvCompress> forms[] = {{KvCodec::kNone, KvCompress::kOff},
                                                  {KvCodec::kInt8, KvCompress::kOff},
                                                  {KvCodec::kInt4, KvCompress::kOff},
                                                  {KvCodec::kNone, KvCompress::kInt8},
                                                  {KvCodec::kNone, KvCompress::kInt4},
                                                  // equal slots here: both forms are tried, and mostly as
                                                  // they are read later, but for the lossy chunks
                                                  {KvCodec::kNone, KvCompress::kAuto}};
  for (const auto& [codec, compress] : forms) {
    for (const uint64_t host_chunks : {0, 3, 40}) {
      for (const bool grouped : {false, true}) {  // disk records per chunk, or per 4 and 2 chunks
        SCOPED_TRACE(std::string(kv_codec_name(codec)) + ", --kv-compress " + kv_compress_name(compress) +
                     ", host tier of " + std::to_string(host_chunks) + " chunks" + (grouped ? ", grouped records" : ""));
        TempDir dir;
        TieredKvCacheOptions o = small_options(dir.path(), codec);
        o.compress = compress;
        if (grouped) o.abstract_tokens = {4 * kChunk, 2 * kChunk};
        o.host_budget_bytes = host_chunks * TieredKvCache::chunk_budget_bytes(o, Tier::kHost);
        Twin twin(o, 7);
        TieredKvCache& kv = twin.tiered();
        std::vector<std::vector<std::vector<float>>> first_seen(kLayers);  // [layer][chunk]: as first read
        std::uniform_int_distribution<int64_t> pick(0, 1 << 20);
        std::map<Tier, int> tiers_checked;
        for (const int64_t n : {37, 64, 5, 90, 1, 40}) {
          ASSERT_TRUE(twin.append(n).is_ok());
          for (int il = 0; il < kLayers; ++il) {
            // Two gathers of random ranges: chunks read from below move up.
            for (int g = 0; g < 2; ++g) {
              const int64_t total = kv.n_tokens(il);
              const int64_t a = pick(twin.rng()) % total, b = pick(twin.rng()) % total;
              const TokenRange ranges[] = {{0, std::min<int64_t>(4, total)}, {std::min(a, b), std::max(a, b) + 1}};
              ASSERT_TRUE(read_rows(kv, il, ranges[1].begin < 4 ? std::span(ranges + 1, 1) : std::span(ranges)).is_ok());
            }
            const auto now = served_abstracts(kv, il);
            const int64_t n_sealed = kv.n_tokens(il) / kChunk;
            for (int64_t i = 0; i < static_cast<int64_t>(now.size()); ++i) {
              SCOPED_TRACE("layer " + std::to_string(il) + " chunk " + std::to_string(i));
              ASSERT_EQ(check_bounds(kv, {il, i}, now[i].data()), "");
              if (i < static_cast<int64_t>(first_seen[il].size())) {
                ASSERT_EQ(check_bounds(kv, {il, i}, first_seen[il][i].data()), "") << "as first read";
              }
              tiers_checked[kv.chunk_tier(il, i)] += 1;
            }
            // Sealed chunks are immutable: remember them as first read.
            for (int64_t i = static_cast<int64_t>(first_seen[il].size()); i < n_sealed; ++i) first_seen[il].push_back(now[i]);
          }
        }
        EXPECT_GT(tiers_checked[Tier::kDevice], 0);
        if (host_chunks < 40) {
          EXPECT_GT(tiers_checked[Tier::kDisk], 0);
        }
        if (host_chunks > 0) {
          EXPECT_GT(tiers_checked[Tier::kHost], 0);
        }
      }
    }
  }
}

// The chunk of `key` as the in-memory twin holds it (the appended keys and values, exact).
std::vector<uint8_t> original_chunk(Twin& twin, const ChunkGeometry& g, ChunkKey key) {
  const int64_t p0 = key.index * g.chunk_tokens;
  const TokenRange r{p0, p0 + g.chunk_tokens};
  auto rows = read_rows(twin.memory(), key.layer, {&r, 1});
  EXPECT_TRUE(rows.is_ok());
  std::vector<uint8_t> chunk(g.chunk_bytes(), 0);
  for (const auto& [pos, row] : *rows) {
    std::memcpy(chunk.data() + (pos - p0) * g.row_bytes(), row.first.data(), g.row_bytes());
    std::memcpy(chunk.data() + g.k_bytes() + (pos - p0) * g.row_bytes(), row.second.data(), g.row_bytes());
  }
  return chunk;
}

// With compressed transfers a disk chunk is read in the codec's form and served decoded: every
// row the store serves is either the appended one (a chunk that never left memory) or exactly
// its codec round trip, and the chunks read that way stay decoded once promoted. Read-ahead
// stages the compressed form too.
TEST(TieredKvCache, CompressedTransfersServeTheCodecRoundTripAndCountIt) {
  for (const KvCompress mode : {KvCompress::kInt4, KvCompress::kInt8}) {
    SCOPED_TRACE(kv_compress_name(mode));
    TempDir dir;
    TieredKvCacheOptions o = small_options(dir.path());
    o.compress = mode;
    o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;
    Twin twin(o);
    ASSERT_TRUE(twin.append(256).is_ok());
    TieredKvCache& kv = twin.tiered();
    const ChunkGeometry& g = kv.geometry();
    const KvCodec codec = transfer_codec_of(mode);
    ASSERT_EQ(kv.disk().transfer_codec(), codec);
    const std::vector<TokenRange> ahead = {{40, 56}};
    const std::vector<int64_t> staged = disk_chunks_of(kv, 1, ahead);
    ASSERT_EQ(staged.size(), 2u);
    const std::vector<int64_t> on_disk = disk_chunks_of(kv, 1, {{{0, 256}}});
    ASSERT_GT(on_disk.size(), 10u);
    const KvStats before = kv.stats();
    ASSERT_TRUE(kv.read_ahead(1, ahead).is_ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second pass finds some chunks promoted, decoded
      const TokenRange all{0, 256};
      auto got = read_rows(kv, 1, {&all, 1});
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      int64_t n_round_trips = 0;
      for (int64_t i = 0; i < 32; ++i) {
        const std::vector<uint8_t> original = original_chunk(twin, g, {1, i});
        std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec)), round_trip(g.chunk_bytes());
        encode_chunk(g, codec, original.data(), encoded.data());
        ref::decode_chunk(g, codec, encoded.data(), round_trip.data());
        // A chunk on the disk at the start is read compressed; one that was on the device then
        // may have been pushed down by the promotions and read compressed too.
        const auto same = [&](const std::vector<uint8_t>& want) {
          for (int64_t t = 0; t < g.chunk_tokens; ++t) {
            const auto& row = got->at(i * g.chunk_tokens + t);
            if (std::memcmp(row.first.data(), want.data() + t * g.row_bytes(), g.row_bytes()) != 0 ||
                std::memcmp(row.second.data(), want.data() + g.k_bytes() + t * g.row_bytes(), g.row_bytes()) != 0) {
              return false;
            }
          }
          return true;
        };
        const bool was_on_disk = std::ranges::count(on_disk, i) > 0;
        if (same(round_trip)) {
          ++n_round_trips;
        } else {
          EXPECT_FALSE(was_on_disk) << "chunk " << i << " was on the disk and is not served as its round trip";
          EXPECT_TRUE(same(original)) << "chunk " << i << " is served as neither form";
        }
      }
      EXPECT_GE(n_round_trips, static_cast<int64_t>(on_disk.size()));
    }
    const KvStats after = kv.stats();
    EXPECT_EQ(after.transfer.mode, kv_compress_name(mode));
    EXPECT_GE(after.read_ahead.chunks_used, 2u);
    EXPECT_GE(after.transfer.chunks_compressed, on_disk.size());
    EXPECT_EQ(after.transfer.chunks_as_is, 0u);
    EXPECT_GT(after.transfer.decode_ms, 0.0);
    // Every disk read of this layer was of compressed slots.
    EXPECT_EQ(after[Tier::kDisk].bytes_read - before[Tier::kDisk].bytes_read,
              after.transfer.bytes_compressed - before.transfer.bytes_compressed);
    EXPECT_NE(after.to_text().find("compressed transfers (" + std::string(kv_compress_name(mode)) + ")"), std::string::npos);
    EXPECT_NE(after.to_json().find("\"transfer\""), std::string::npos);
  }
}

TEST(TieredKvCache, CompressedTransfersNeedTheHostCodecNone) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path(), KvCodec::kInt4);
  o.compress = KvCompress::kAuto;
  const auto kv = TieredKvCache::create(o);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.status().message().find("--kv-compress auto needs --kv-host-codec none"), std::string::npos)
      << kv.status().message();
}

// auto: the cost model has a decode time from the start (a calibration), tries each form, and
// reports its times.
TEST(TieredKvCache, AutoTransfersReportTheirRatesAndChoices) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.compress = KvCompress::kAuto;
  Twin twin(o);
  ASSERT_TRUE(twin.append(256).is_ok());
  const TokenRange all{0, 256};
  ASSERT_TRUE(read_rows(twin.tiered(), 0, {&all, 1}).is_ok());
  const KvStats s = twin.tiered().stats();
  EXPECT_EQ(s.transfer.mode, "auto (int4)");
  EXPECT_GT(s.transfer.chunks_compressed, 0u);
  EXPECT_GT(s.transfer.chunks_as_is, 0u);
  EXPECT_GT(s.transfer.decode_us_per_chunk, 0.0);
  EXPECT_GT(s.transfer.as_is_us_per_chunk, 0.0);
  EXPECT_GT(s.transfer.compressed_us_per_chunk, 0.0);
}

TEST(TieredKvCache, RejectsADeviceBudgetBelowThePinnedChunks) {
  TempDir dir;
  TieredKvCacheOptions o = small_options(dir.path());
  o.device_budget_bytes = TieredKvCacheOptions{}.device_budget_bytes + 1024;
  auto kv = TieredKvCache::create(o);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.status().message().find("--kv-device-mb"), std::string::npos) << kv.status().message();
  o.dir.clear();
  o.device_budget_bytes = TieredKvCache::min_device_budget_bytes(o);
  EXPECT_NE(TieredKvCache::create(o).status().message().find("--kv-dir"), std::string::npos);
}

// By default the disk files are unlinked as soon as they are open: nothing is left behind however
// the process ends, and the store works on through its open files.
TEST(TieredKvCache, DiskFilesAreUnlinkedAtOnceAndTheStoreStillWorks) {
  TempDir dir;
  Twin twin(small_options(dir.path()));
  ASSERT_TRUE(twin.append(100).is_ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_GT(twin.tiered().residency().n_chunks(Tier::kDisk), 0);
  const TokenRange all{0, 100};
  expect_same_rows(twin, 1, {&all, 1});
}

TEST(TieredKvCache, VisibleFilesArePrivateAndRemovedAtTheEnd) {
  TempDir dir;
  {
    TieredKvCacheOptions o = small_options(dir.path());
    o.visible_files = true;
    Twin twin(o);
    ASSERT_TRUE(twin.append(100).is_ok());
    int n_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      struct stat st;
      ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
      ++n_files;
    }
    EXPECT_EQ(n_files, 2 * kLayers);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// --- faults ----------------------------------------------------------------------------------

class TieredKvCacheFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    TieredKvCacheOptions o = small_options(dir_.path());
    o.file_system = &fs_;
    twin_ = std::make_unique<Twin>(o);
    ASSERT_TRUE(twin_->append(120).is_ok());
    ASSERT_EQ(kv().residency().find({1, 2})->tier, Tier::kDisk);
  }
  TieredKvCache& kv() { return twin_->tiered(); }
  Status read_all(int layer, bool unordered = false) {
    const TokenRange all{0, kv().n_tokens()};
    return read_rows(kv(), layer, {&all, 1}, unordered).status();
  }

  TempDir dir_;
  FaultInjectionFileSystem fs_{posix_file_system()};
  std::unique_ptr<Twin> twin_;
};

// In order, and unordered (the chunks in memory visited while the reads are in flight).
TEST_F(TieredKvCacheFaults, FlippedBitInAChunkIsNamedAndNeverServed) {
  for (const bool unordered : {false, true}) {
    SCOPED_TRACE(unordered ? "unordered" : "in order");
    Fault f;
    f.kind = FaultKind::kFlipBit;
    f.path_suffix = "test-L001.kv";
    f.byte_offset = 2 * kv().disk().slot_bytes() + 37;
    f.bit = 3;
    f.sticky = true;
    fs_.arm(f);
    ASSERT_EQ(kv().residency().find({1, 2})->tier, Tier::kDisk);
    const Status st = read_all(1, unordered);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find("KV session 'test' layer 1 chunk 2"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
    fs_.disarm_all();
  }
  EXPECT_TRUE(read_all(1).is_ok());  // the file itself was never damaged
}

TEST(TieredKvCacheFaultsCompressed, FlippedBitInACompressedChunkIsNamedAndNeverServed) {
  TempDir dir;
  FaultInjectionFileSystem fs{posix_file_system()};
  TieredKvCacheOptions o = small_options(dir.path());
  o.file_system = &fs;
  o.compress = KvCompress::kInt4;
  Twin twin(o);
  ASSERT_TRUE(twin.append(120).is_ok());
  ASSERT_EQ(twin.tiered().residency().find({1, 2})->tier, Tier::kDisk);
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "test-L001.kvc";
  f.byte_offset = 2 * twin.tiered().disk().compressed_slot_bytes() + 9;
  f.bit = 1;
  f.sticky = true;
  fs.arm(f);
  const TokenRange all{0, 120};
  const Status st = read_rows(twin.tiered(), 1, {&all, 1}).status();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("layer 1 chunk 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("test-L001.kvc"), std::string::npos) << st.message();
  fs.disarm_all();
  EXPECT_TRUE(read_rows(twin.tiered(), 1, {&all, 1}).is_ok());
}

// A read-ahead whose read fails stages nothing: the gather reads the chunk itself and reports
// the corruption, naming the chunk, as without the pipeline.
TEST_F(TieredKvCacheFaults, AFailedReadAheadLeavesTheErrorToTheGather) {
  TieredKvCacheOptions o = small_options(dir_.path() + "/ahead");
  o.file_system = &fs_;
  o.session = "ahead";
  o.read_ahead_bytes = 2 * 16 * kDirectIoAlignment;
  Twin twin(o);
  ASSERT_TRUE(twin.append(120).is_ok());
  TieredKvCache& kv = twin.tiered();
  ASSERT_EQ(kv.residency().find({1, 2})->tier, Tier::kDisk);
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "ahead-L001.kv";
  f.byte_offset = 2 * kv.disk().slot_bytes() + 37;
  f.bit = 3;
  f.sticky = true;
  fs_.arm(f);
  const TokenRange r{16, 24};
  ASSERT_TRUE(kv.read_ahead(1, {&r, 1}).is_ok());
  const Status st = read_rows(kv, 1, {&r, 1}).status();
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("KV session 'ahead' layer 1 chunk 2"), std::string::npos) << st.message();
  EXPECT_EQ(kv.stats().read_ahead.failed_jobs, 1u);
  EXPECT_EQ(kv.stats().read_ahead.chunks_used, 0u);
  fs_.disarm_all();
  expect_same_rows(twin, 1, {&r, 1});
}

TEST_F(TieredKvCacheFaults, FlippedBitInAnAbstractIsNamed) {
  Fault f;
  f.kind = FaultKind::kFlipBit;
  f.path_suffix = "test-L001.lka";
  f.byte_offset = 2 * kv().disk().record_bytes(0) + 50;
  for (int64_t i = 1; i < 4; ++i) ASSERT_EQ(kv().residency().find({1, i})->tier, Tier::kDisk);
  std::vector<float> abstracts(3 * static_cast<size_t>(kv().geometry().abstract_floats()));
  ASSERT_TRUE(kv().read_disk_abstracts(1, 1, 4, abstracts.data()).is_ok());  // not yet armed
  fs_.arm(f);
  const Status st = kv().read_disk_abstracts(1, 1, 4, abstracts.data());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("layer 1 chunk 2"), std::string::npos) << st.message();
}

TEST_F(TieredKvCacheFaults, ReadErrorsAreReportedAndTheSessionStaysUsable) {
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    for (const bool unordered : {false, true}) {
      Fault f;
      f.kind = kind;
      f.path_suffix = ".kv";
      fs_.arm(f);
      const Status st = read_all(0, unordered);
      ASSERT_FALSE(st.is_ok());
      EXPECT_EQ(st.code(), StatusCode::kIoError);
      EXPECT_NE(st.message().find("KV session 'test' layer 0"), std::string::npos) << st.message();
      fs_.disarm_all();
      const TokenRange all{0, kv().n_tokens()};
      expect_same_rows(*twin_, 0, {&all, 1});
    }
  }
}

TEST_F(TieredKvCacheFaults, FullDiskFailsTheAppendCleanlyAndLaterAppendsWork) {
  Fault f;
  f.kind = FaultKind::kNoSpace;
  f.path_suffix = ".kv";
  f.sticky = true;
  fs_.arm(f);
  const int64_t before = kv().n_tokens();
  const auto k = random_rows(twin_->rng(), 64, kHeads * kHeadDim);
  const Status st = kv().append(0, before, 64, k.data(), k.data());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("No space left on device"), std::string::npos) << st.message();
  EXPECT_EQ(kv().n_tokens(0), before);
  EXPECT_LE(kv().residency().used_bytes(Tier::kDevice), kv().residency().options().device_budget_bytes);
  fs_.disarm_all();
  ASSERT_TRUE(twin_->append(64).is_ok());
  const TokenRange all{0, kv().n_tokens()};
  for (int il = 0; il < kLayers; ++il) expect_same_rows(*twin_, il, {&all, 1});
}

}  // namespace
}  // namespace leoam
