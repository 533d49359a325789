// The prompt cache on real files: the longest common prefix loads, what is kept and what not,
// least-recently-used eviction, entries found again after a reopen, and a corrupt entry dropped.
#include "engine/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "../temp_dir.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;

constexpr int kLayers = 2, kHeads = 2, kDim = 8;

std::unique_ptr<MemoryKvCache> empty_cache() {
  MemoryKvCacheOptions o;
  o.shape = {kLayers, kHeads, kDim, 1024};
  return MemoryKvCache::create(o).value();
}

// A store holding a row for each token, made from the token and its position (so that a
// position's KV says which token and place it came from).
std::unique_ptr<MemoryKvCache> filled(const std::vector<int32_t>& tokens) {
  auto kv = empty_cache();
  const size_t row = kHeads * kDim;
  std::vector<float> k(tokens.size() * row), v(k.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (size_t j = 0; j < row; ++j) {
      k[t * row + j] = static_cast<float>(tokens[t]) + 0.001f * static_cast<float>(t);
      v[t * row + j] = -static_cast<float>(tokens[t]) - 0.5f * static_cast<float>(j);
    }
  }
  for (int il = 0; il < kLayers; ++il) EXPECT_TRUE(kv->append(il, 0, static_cast<int64_t>(tokens.size()), k.data(), v.data()).is_ok());
  return kv;
}

// The first key value of each position of layer 0.
std::vector<float> keys(KvCache& kv) {
  std::vector<float> out;
  auto view = kv.view(0, kv.n_tokens());
  EXPECT_TRUE(view.is_ok());
  for (const KvSegment& s : view->segments()) {
    for (int64_t t = 0; t < s.n_tokens; ++t) out.push_back(*static_cast<const float*>(s.k_row(t)));
  }
  return out;
}

std::vector<int32_t> tokens(int n, int base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

class PromptCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<PromptCache> open(uint64_t max_bytes = 1ull << 30, uint64_t hash = 7) {
    PromptCacheOptions o;
    o.dir = dir_;
    o.max_bytes = max_bytes;
    o.model_hash = hash;
    o.min_tokens = 16;
    auto c = PromptCache::open(o);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.is_ok() ? std::move(*c) : nullptr;
  }
  testing_util::TempDir temp_;
  const std::string& dir_ = temp_.path();
};

// remember() in two halves: a claimed prompt is under way (claimed once), and kept once saved.
TEST_F(PromptCacheTest, AClaimedPromptIsSavedOnce) {
  auto cache = open();
  const std::vector<int32_t> doc = [] { auto t = tokens(100, 1000); t.push_back(1); return t; }();
  auto kv = filled(doc);
  const std::optional<std::string> dir = cache->claim(doc, *kv, 0);
  ASSERT_TRUE(dir.has_value());
  EXPECT_FALSE(cache->claim(doc, *kv, 0).has_value()) << "under way";
  EXPECT_EQ(cache->stats().n_entries, 0);
  ASSERT_TRUE(cache->save(*dir, doc, *kv).is_ok());
  EXPECT_EQ(cache->stats().n_entries, 1);
  EXPECT_FALSE(cache->claim(doc, *kv, 0).has_value()) << "kept";
  EXPECT_FALSE(cache->claim(tokens(10, 5), *filled(tokens(10, 5)), 0).has_value()) << "too short to keep";
  auto back = empty_cache();
  EXPECT_EQ(cache->restore(doc, *back), static_cast<int64_t>(doc.size()) - 1);
}

TEST_F(PromptCacheTest, ALaterPromptLoadsTheLongestCommonPrefix) {
  auto cache = open();
  const std::vector<int32_t> doc_q1 = [] { auto t = tokens(100, 1000); t.push_back(1); t.push_back(2); return t; }();
  auto first = filled(doc_q1);
  ASSERT_TRUE(cache->remember(doc_q1, *first, 0).is_ok());
  EXPECT_EQ(cache->stats().n_entries, 1);
  EXPECT_EQ(cache->stats().saves, 1u);

  // Another question about the same document: the document's 100 positions load.
  std::vector<int32_t> doc_q2 = tokens(100, 1000);
  doc_q2.push_back(5);
  auto kv = empty_cache();
  EXPECT_EQ(cache->restore(doc_q2, *kv), 100);
  EXPECT_EQ(keys(*kv), keys(*filled(tokens(100, 1000))));
  // It reused most of itself: not kept again.
  ASSERT_TRUE(cache->remember(doc_q2, *filled(doc_q2), 100).is_ok());
  EXPECT_EQ(cache->stats().n_entries, 1);

  // The same prompt again: all but its last token (whose logits start the answer).
  auto same = empty_cache();
  EXPECT_EQ(cache->restore(doc_q1, *same), static_cast<int64_t>(doc_q1.size()) - 1);
  // A prompt that shares nothing, and one too short to keep.
  auto other = empty_cache();
  EXPECT_EQ(cache->restore(tokens(50, 7), *other), 0);
  EXPECT_EQ(other->n_tokens(), 0);
  // One that shares fewer than kMinReuseTokens (a BOS token, say): nothing worth loading, a miss.
  std::vector<int32_t> short_share = tokens(PromptCache::kMinReuseTokens - 1, 1000);
  short_share.push_back(9);
  short_share.push_back(9);
  EXPECT_EQ(cache->restore(short_share, *other), 0);
  EXPECT_EQ(other->n_tokens(), 0);
  ASSERT_TRUE(cache->remember(tokens(10, 5), *filled(tokens(10, 5)), 0).is_ok());
  const PromptCacheStats s = cache->stats();
  EXPECT_EQ(s.n_entries, 1);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.tokens_reused, 100u + doc_q1.size() - 1);
  EXPECT_GT(s.bytes, 0u);

  // Reopened (a restart): the entry is found again; another model's cache ignores it.
  cache.reset();
  auto again = open();
  EXPECT_EQ(again->stats().n_entries, 1);
  auto kv2 = empty_cache();
  EXPECT_EQ(again->restore(doc_q2, *kv2), 100);
  EXPECT_EQ(open(1ull << 30, /*hash=*/8)->stats().n_entries, 0);
  EXPECT_EQ(open()->stats().n_entries, 1);  // and it did not remove it
}

// Tiered stores with a disk tier read an entry's whole chunks in place, many at once, and hold a
// copy of the rest only; the entry is saved in their chunk size for that.
TEST_F(PromptCacheTest, TieredStoresReadTheEntryInPlace) {
  PromptCacheOptions o;
  o.dir = dir_;
  o.model_hash = 7;
  o.min_tokens = 16;
  o.layout.chunk_tokens = 16;
  o.layout.abstract_tokens = {32, 16};
  auto cache = PromptCache::open(o).value();
  const std::vector<int32_t> doc_q1 = [] { auto t = tokens(100, 1000); t.push_back(1); return t; }();
  ASSERT_TRUE(cache->remember(doc_q1, *filled(doc_q1), 0).is_ok());

  testing_util::TempDir kv_dir;
  const auto tiered = [&] {
    TieredKvCacheOptions t;
    t.shape = {kLayers, kHeads, kDim, 1024};
    t.chunk_tokens = 16;
    t.abstract_tokens = o.layout.abstract_tokens;
    t.dir = kv_dir.path();
    t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
    return TieredKvCache::create(t).value();
  };
  std::vector<int32_t> doc_q2 = tokens(100, 1000);
  doc_q2.push_back(5);
  auto a = tiered(), b = tiered();
  EXPECT_EQ(cache->restore(doc_q2, *a), 100);
  EXPECT_EQ(cache->restore(doc_q2, *b), 100);
  const std::vector<float> expected = keys(*filled(tokens(100, 1000)));
  EXPECT_EQ(keys(*a), expected);
  EXPECT_EQ(keys(*b), expected);
  EXPECT_EQ(cache->stats().tokens_reused, 200u);
  EXPECT_EQ(cache->stats().tokens_in_place, 2u * 96);  // 6 whole chunks each; 4 positions copied
  EXPECT_EQ(a->stats()[Tier::kDisk].bytes_written, 0u);
  EXPECT_GT(a->stats().shared_disk_chunks, 0);
}

TEST_F(PromptCacheTest, EvictsTheLeastRecentlyUsedPastItsBytes) {
  auto cache = open();
  const auto a = tokens(64, 100), b = tokens(64, 200), c = tokens(64, 300);
  ASSERT_TRUE(cache->remember(a, *filled(a), 0).is_ok());
  const uint64_t one = cache->stats().bytes;
  cache.reset();
  cache = open(/*max_bytes=*/2 * one + one / 2);
  ASSERT_TRUE(cache->remember(b, *filled(b), 0).is_ok());
  auto kv = empty_cache();
  std::vector<int32_t> a_more = a;
  a_more.push_back(9);
  EXPECT_EQ(cache->restore(a_more, *kv), 63);  // a (all but its last position) is now the most recently used
  ASSERT_TRUE(cache->remember(c, *filled(c), 0).is_ok());
  EXPECT_EQ(cache->stats().n_entries, 2);
  EXPECT_EQ(cache->stats().evictions, 1u);
  auto kb = empty_cache();
  EXPECT_EQ(cache->restore(b, *kb), 0);  // b went
  auto ka = empty_cache();
  EXPECT_EQ(cache->restore(a_more, *ka), 63);
}

TEST_F(PromptCacheTest, ACorruptEntryIsDroppedAndThePromptComputedWhole) {
  auto cache = open();
  const auto a = tokens(80, 100);
  ASSERT_TRUE(cache->remember(a, *filled(a), 0).is_ok());
  // Flip a byte in the middle of a KV file.
  std::string victim;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.path().extension() == ".kv") victim = e.path();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  auto kv = empty_cache();
  std::vector<int32_t> more = a;
  more.push_back(3);
  EXPECT_EQ(cache->restore(more, *kv), 0);
  EXPECT_EQ(kv->n_tokens(), 0);
  EXPECT_EQ(cache->stats().dropped, 1u);
  EXPECT_EQ(cache->stats().n_entries, 0);
  EXPECT_TRUE(fs::is_empty(dir_));
  // Computed again, it is kept again.
  ASSERT_TRUE(cache->remember(more, *filled(more), 0).is_ok());
  EXPECT_EQ(cache->stats().n_entries, 1);
}

}  // namespace
}  // namespace leoam
