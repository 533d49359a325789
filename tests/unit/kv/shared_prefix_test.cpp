// A store reading its first chunks in place from a kept session's files (share_prefix): the same
// KV and disk abstracts as a store that holds a copy, nothing of the prefix written or counted as
// the store's own, several stores on one opened session, truncation and clearing into the
// prefix, the stores that cannot share, and a corrupt session refused when opened.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "kv/disk_tier.h"
#include "kv/kv_session.h"
#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::random_rows;
using testing_util::TempDir;

constexpr uint64_t kHash = 0x5eed;
constexpr int kPrefixLayers = 3, kPrefixHeads = 2, kDim = 8, kPrefixChunk = 16;
constexpr int64_t kDoc = 150;  // 9 whole chunks and 6 positions

struct Source {
  std::unique_ptr<MemoryKvCache> kv;
  std::vector<std::vector<float>> k, v;  // [layer][position][row]
};

Source make_source(uint32_t seed) {
  MemoryKvCacheOptions o;
  o.shape = {kPrefixLayers, kPrefixHeads, kDim, 512};
  Source s{MemoryKvCache::create(o).value(), {}, {}};
  std::mt19937 rng(seed);
  for (int il = 0; il < kPrefixLayers; ++il) {
    s.k.push_back(random_rows(rng, kDoc, kPrefixHeads * kDim));
    s.v.push_back(random_rows(rng, kDoc, kPrefixHeads * kDim));
    EXPECT_TRUE(s.kv->append(il, 0, kDoc, s.k[il].data(), s.v[il].data()).is_ok());
  }
  return s;
}

TieredKvCacheOptions store_options(const std::string& dir) {
  TieredKvCacheOptions t;
  t.shape = {kPrefixLayers, kPrefixHeads, kDim, 512};
  t.chunk_tokens = kPrefixChunk;
  t.dir = dir;
  t.abstract_tokens = {2 * kPrefixChunk, 2 * kPrefixChunk, kPrefixChunk};  // records per block, as a policy asks
  t.n_sink_tokens = 4;
  t.n_recent_tokens = 16;
  t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
  t.host_budget_bytes = 0;
  return t;
}

// Every position's K and V bytes of each layer, read through views.
std::vector<uint8_t> contents(KvCache& kv, int64_t n) {
  std::vector<uint8_t> out;
  for (int il = 0; il < kPrefixLayers; ++il) {
    auto view = kv.view(il, n);
    EXPECT_TRUE(view.is_ok()) << view.status().message();
    if (!view.is_ok()) return {};
    for (const KvSegment& s : view->segments()) {
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        const auto* k = static_cast<const uint8_t*>(s.k_row(t));
        const auto* v = static_cast<const uint8_t*>(s.v_row(t));
        out.insert(out.end(), k, k + s.row_stride_bytes);
        out.insert(out.end(), v, v + s.row_stride_bytes);
      }
    }
  }
  return out;
}

class SharedPrefixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = make_source(11);
    KvSession session;
    session.model_hash = kHash;
    for (int i = 0; i <= kDoc; ++i) session.tokens.push_back(100 + i);
    session.n_kv = kDoc;
    KvSessionIoOptions io;
    io.chunk_tokens = kPrefixChunk;
    io.abstract_tokens = store_options("").abstract_tokens;
    ASSERT_TRUE(save_kv_session(*source_.kv, session, session_dir(), io).is_ok());
  }
  std::string session_dir() const { return entry_.path() + "/s"; }
  std::unique_ptr<TieredKvCache> store() { return TieredKvCache::create(store_options(kv_dir_.path())).value(); }
  // A store given the session's KV: its whole chunks shared, the rest copied.
  std::unique_ptr<TieredKvCache> sharing(const std::shared_ptr<const KeptKvFiles>& base, int64_t n = kDoc) {
    auto kv = store();
    Result<int64_t> shared = kv->share_prefix(base, n);
    EXPECT_TRUE(shared.is_ok()) << shared.status().message();
    EXPECT_EQ(*shared, n / kPrefixChunk * kPrefixChunk);
    EXPECT_TRUE(load_kv_session_tier(*base->tier(), *shared, n, *kv).is_ok());
    EXPECT_EQ(kv->n_tokens(), n);
    return kv;
  }

  Source source_;
  TempDir entry_, kv_dir_;
};

TEST_F(SharedPrefixTest, ReadsAsACopyWouldAndWritesNothingOfThePrefix) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  auto a = sharing(*base);
  auto b = sharing(*base);  // a second store on the same opened session
  auto copy = store();
  ASSERT_TRUE(load_kv_session(session_dir(), kHash, *copy).is_ok());

  for (int il = 0; il < kPrefixLayers; ++il) {
    EXPECT_EQ(a->disk().shared_chunks(il), kDoc / kPrefixChunk);
    EXPECT_EQ(a->chunk_tier(il, 0), Tier::kDevice) << "the sink chunk is read onto the device";
    EXPECT_EQ(a->chunk_tier(il, 5), Tier::kDisk);
  }
  const KvStats before = a->stats();
  EXPECT_EQ(before[Tier::kDisk].bytes_written, 0u) << "the shared chunks are never written";
  EXPECT_EQ(before.resident_chunks[static_cast<int>(Tier::kDisk)], 0);
  EXPECT_EQ(before.shared_disk_chunks, kPrefixLayers * (kDoc / kPrefixChunk - 1));  // all but the sinks
  EXPECT_EQ(before.shared_disk_bytes, static_cast<uint64_t>(before.shared_disk_chunks) * a->disk().slot_bytes());
  EXPECT_EQ(nlohmann::json::parse(before.to_json()).at("shared_disk_chunks"), before.shared_disk_chunks);
  EXPECT_NE(before.to_text().find("shared prefix: "), std::string::npos) << before.to_text();

  const std::vector<uint8_t> expected = contents(*source_.kv, kDoc);
  EXPECT_EQ(contents(*copy, kDoc), expected);
  EXPECT_EQ(contents(*a, kDoc), expected);
  EXPECT_EQ(contents(*b, kDoc), expected);
  EXPECT_GT(a->stats()[Tier::kDisk].bytes_read, 0u) << "the shared chunks were read from the session's files";

  // The disk abstracts of the shared chunks are the session's records: those a store that wrote
  // the same chunks itself keeps (chunks 0 to 7; the session's group of chunk 8 holds its partial
  // chunk 9 too, so that its box is wider there, and as sound).
  const int64_t stride = a->geometry().abstract_floats();
  for (int il = 0; il < kPrefixLayers; ++il) {
    std::vector<float> mine(static_cast<size_t>(8 * stride)), theirs(mine.size());
    ASSERT_TRUE(a->read_disk_abstracts(il, 0, 8, mine.data()).is_ok());
    ASSERT_TRUE(copy->read_disk_abstracts(il, 0, 8, theirs.data()).is_ok());
    EXPECT_EQ(std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)), 0) << "layer " << il;
  }
  EXPECT_GT(a->stats().disk_abstract_bytes_read, 0u);
}

TEST_F(SharedPrefixTest, GrowsTruncatesIntoThePrefixAndClears) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  auto kv = sharing(*base);
  // The store's own chunks follow the shared ones (a record group straddles the boundary in the
  // first two layers: 9 shared chunks, 2 a group).
  std::mt19937 rng(5);
  const int64_t more = 3 * kPrefixChunk;
  std::vector<std::vector<float>> k(kPrefixLayers), v(kPrefixLayers);
  auto grown = make_source(11);
  for (int il = 0; il < kPrefixLayers; ++il) {
    k[il] = random_rows(rng, more, kPrefixHeads * kDim);
    v[il] = random_rows(rng, more, kPrefixHeads * kDim);
    ASSERT_TRUE(kv->append(il, kDoc, more, k[il].data(), v[il].data()).is_ok());
    ASSERT_TRUE(grown.kv->append(il, kDoc, more, k[il].data(), v[il].data()).is_ok());
  }
  EXPECT_GT(kv->stats()[Tier::kDisk].bytes_written, 0u);
  EXPECT_EQ(contents(*kv, kDoc + more), contents(*grown.kv, kDoc + more));
  // Own chunks' abstracts read in one batch with shared ones, in order.
  const int64_t stride = kv->geometry().abstract_floats();
  std::vector<float> mixed(static_cast<size_t>(12 * stride)), split(mixed.size());
  ASSERT_TRUE(kv->read_disk_abstracts(0, 0, 12, mixed.data()).is_ok());
  ASSERT_TRUE(kv->read_disk_abstracts(0, 0, 9, split.data()).is_ok());
  ASSERT_TRUE(kv->read_disk_abstracts(0, 9, 12, split.data() + 9 * stride).is_ok());
  EXPECT_EQ(std::memcmp(mixed.data(), split.data(), mixed.size() * sizeof(float)), 0);

  // Cut inside the shared part: the chunks past the cut are no longer read from the session.
  ASSERT_TRUE(kv->truncate(100).is_ok());
  for (int il = 0; il < kPrefixLayers; ++il) EXPECT_EQ(kv->disk().shared_chunks(il), 100 / kPrefixChunk);
  EXPECT_EQ(contents(*kv, 100), contents(*source_.kv, 100));
  for (int il = 0; il < kPrefixLayers; ++il) {
    ASSERT_TRUE(kv->append(il, 100, kDoc - 100, source_.k[il].data() + 100 * kPrefixHeads * kDim,
                           source_.v[il].data() + 100 * kPrefixHeads * kDim).is_ok());
  }
  EXPECT_EQ(contents(*kv, kDoc), contents(*source_.kv, kDoc));

  kv->clear();
  EXPECT_EQ(kv->n_tokens(), 0);
  EXPECT_EQ(kv->disk().shared_chunks(0), 0);
  EXPECT_EQ(kv->stats().shared_disk_chunks, 0);
}

// Stores keep reading an opened session whose files are removed (an entry evicted while in use).
TEST_F(SharedPrefixTest, OutlivesTheRemovalOfTheSessionFiles) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  auto kv = sharing(*base);
  std::filesystem::remove_all(session_dir());
  EXPECT_EQ(contents(*kv, kDoc), contents(*source_.kv, kDoc));
}

TEST_F(SharedPrefixTest, StoresThatCannotShareTakeNothing) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  MemoryKvCacheOptions m;
  m.shape = {kPrefixLayers, kPrefixHeads, kDim, 512};
  auto memory = MemoryKvCache::create(m).value();
  EXPECT_EQ(memory->share_prefix(*base, kDoc).value(), 0);

  for (const auto& change : std::vector<std::function<void(TieredKvCacheOptions&)>>{
           [](TieredKvCacheOptions& t) { t.chunk_tokens = 2 * kPrefixChunk; t.abstract_tokens.clear(); },
           [](TieredKvCacheOptions& t) { t.host_codec = KvCodec::kInt8; },
           [](TieredKvCacheOptions& t) { t.compress = KvCompress::kInt4; }}) {
    TieredKvCacheOptions t = store_options(kv_dir_.path());
    change(t);
    t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
    t.host_budget_bytes = 1 << 20;
    auto kv = TieredKvCache::create(t).value();
    Result<int64_t> shared = kv->share_prefix(*base, kDoc);
    ASSERT_TRUE(shared.is_ok()) << shared.status().message();
    EXPECT_EQ(*shared, 0);
    EXPECT_EQ(kv->n_tokens(), 0);
  }

  auto full = store();
  const std::vector<float> row(kPrefixHeads * kDim, 1.0f);
  for (int il = 0; il < kPrefixLayers; ++il) ASSERT_TRUE(full->append(il, 0, 1, row.data(), row.data()).is_ok());
  EXPECT_EQ(full->share_prefix(*base, kDoc).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedPrefixTest, TheRestLoadsOnlyWhereItFollows) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  auto kv = store();
  EXPECT_EQ(load_kv_session_tier(*(*base)->tier(), 16, kDoc, *kv).code(), StatusCode::kInvalidArgument);  // holds 0
  EXPECT_EQ(load_kv_session_tier(*(*base)->tier(), 0, kDoc + 1, *kv).code(), StatusCode::kInvalidArgument);  // past the session
  EXPECT_EQ(kv->n_tokens(), 0);
  ASSERT_TRUE(load_kv_session_tier(*(*base)->tier(), 0, 100, *kv).is_ok());  // a store that copies it all
  ASSERT_TRUE(load_kv_session_tier(*(*base)->tier(), 100, kDoc, *kv).is_ok());
  EXPECT_EQ(contents(*kv, kDoc), contents(*source_.kv, kDoc));
}

TEST_F(SharedPrefixTest, TheTierRefusesWritesOverSharedChunks) {
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  auto kv = sharing(*base);
  DiskTierOptions d;
  d.dir = kv_dir_.path();
  d.session = "other";
  d.n_layer = kPrefixLayers;
  d.geometry = kv->geometry();
  auto tier = DiskTier::create(d).value();
  ASSERT_TRUE(tier->share_prefix((*base)->tier(), std::vector<int64_t>(kPrefixLayers, 4)).is_ok());
  EXPECT_TRUE(tier->has_chunk(0, 3));
  EXPECT_EQ(tier->n_tokens_of(0, 3), kPrefixChunk);
  EXPECT_FALSE(tier->has_chunk(0, 4));
  auto buffer = AlignedBuffer::allocate(tier->slot_bytes()).value();
  std::vector<float> abstract(static_cast<size_t>(d.geometry.abstract_floats()));
  reset_abstract(d.geometry, abstract.data());
  EXPECT_EQ(tier->write_chunk(0, {3, buffer.data(), kPrefixChunk, abstract.data()}).code(), StatusCode::kInternal);
  EXPECT_TRUE(tier->write_chunk(0, {4, buffer.data(), kPrefixChunk, abstract.data()}).is_ok());
  // Sharing comes before any write.
  auto written = DiskTier::create(d).value();
  ASSERT_TRUE(written->write_chunk(0, {0, buffer.data(), kPrefixChunk, abstract.data()}).is_ok());
  EXPECT_EQ(written->share_prefix((*base)->tier(), std::vector<int64_t>(kPrefixLayers, 4)).code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedPrefixTest, ACorruptSessionIsRefusedWhenOpened) {
  {
    std::fstream f(session_dir() + "/session-L001.kv", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3 * 4096 + 10);
    const char c = static_cast<char>(f.get());
    f.seekp(3 * 4096 + 10);
    f.put(static_cast<char>(c ^ 0x08));
  }
  auto base = open_kv_session_tier(session_dir(), kHash, *store());
  ASSERT_FALSE(base.is_ok());
  EXPECT_EQ(base.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(base.status().message().find("checksum mismatch"), std::string::npos) << base.status().message();
  EXPECT_EQ(open_kv_session_tier(session_dir(), kHash + 1, *store()).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leoam
