// TieredKvCache's chunk abstracts: what they cost each tier's budget, the catalog's loads from
// memory and the disk records (LKA) or recomputed from the KV, grouped records after a truncation,
// and that every abstract bounds the keys served, in every tier and codec.
#include "kv/tiered_kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tiered_kv_test_util.h"

namespace leoam {
namespace {

using testing_util::check_bounds;
using testing_util::joined_abstract;
using testing_util::kChunk;
using testing_util::kHeadDim;
using testing_util::kHeads;
using testing_util::kLayers;
using testing_util::random_rows;
using testing_util::read_rows;
using testing_util::recomputed_abstract;
using testing_util::served_abstracts;
using testing_util::small_options;
using testing_util::TempDir;
using testing_util::Twin;

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

}  // namespace
}  // namespace leoam
