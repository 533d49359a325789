#include "kv/kv_session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::random_rows;
using testing_util::TempDir;

constexpr uint64_t kModelHash = 0x1234abcd5678ef00ull;

MemoryKvCacheOptions shape_options(int64_t n_ctx = 512) {
  MemoryKvCacheOptions o;
  o.shape = {3, 2, 8, n_ctx};
  return o;
}

std::unique_ptr<MemoryKvCache> filled_cache(int64_t n, uint32_t seed) {
  auto kv = MemoryKvCache::create(shape_options()).value();
  std::mt19937 rng(seed);
  for (int il = 0; il < 3; ++il) {
    const auto k = random_rows(rng, n, 16), v = random_rows(rng, n, 16);
    EXPECT_TRUE(kv->append(il, 0, n, k.data(), v.data()).is_ok());
  }
  return kv;
}

void expect_same_kv(KvCache& a, KvCache& b, int64_t n) {
  for (int il = 0; il < 3; ++il) {
    auto va = a.view(il, n), vb = b.view(il, n);
    ASSERT_TRUE(va.is_ok() && vb.is_ok());
    std::vector<uint8_t> ka, kb;
    for (auto* pair : {&va, &vb}) {
      std::vector<uint8_t>& dst = pair == &va ? ka : kb;
      for (const KvSegment& s : (*pair)->segments()) {
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          const auto* k = static_cast<const uint8_t*>(s.k_row(t));
          const auto* v = static_cast<const uint8_t*>(s.v_row(t));
          dst.insert(dst.end(), k, k + s.row_stride_bytes);
          dst.insert(dst.end(), v, v + s.row_stride_bytes);
        }
      }
    }
    EXPECT_EQ(ka, kb) << "layer " << il;
  }
}

KvSession session_of(int64_t n_kv) {
  KvSession s;
  s.model_hash = kModelHash;
  for (int i = 0; i < n_kv + 1; ++i) s.tokens.push_back(100 + i);
  s.n_kv = n_kv;
  s.sampler_state = "rng 42";
  return s;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(KvSession, RoundTripsIntoAMemoryAndATieredCache) {
  TempDir dir;
  auto source = filled_cache(150, 7);
  const KvSession saved = session_of(150);
  KvSessionIoOptions io;
  io.chunk_tokens = 32;
  ASSERT_TRUE(save_kv_session(*source, saved, dir.path() + "/s", io).is_ok());

  auto memory = MemoryKvCache::create(shape_options()).value();
  auto loaded = load_kv_session(dir.path() + "/s", kModelHash, *memory);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->tokens, saved.tokens);
  EXPECT_EQ(loaded->n_kv, 150);
  EXPECT_EQ(loaded->sampler_state, "rng 42");
  EXPECT_EQ(memory->n_tokens(), 150);
  expect_same_kv(*source, *memory, 150);

  TempDir kv_dir;
  TieredKvCacheOptions t;
  t.shape = shape_options().shape;
  t.chunk_tokens = 16;
  t.dir = kv_dir.path();
  t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
  t.host_budget_bytes = 0;
  auto tiered = TieredKvCache::create(t).value();
  ASSERT_TRUE(load_kv_session(dir.path() + "/s", kModelHash, *tiered).is_ok());
  expect_same_kv(*source, *tiered, 150);
  EXPECT_GT(tiered->residency().n_chunks(Tier::kDisk), 0);
}

// A prefix of a session loads alone (a prompt that shares only its beginning with a cached
// one), and the header reads without the KV.
TEST(KvSession, LoadsAPrefixAndReadsTheHeaderAlone) {
  TempDir dir;
  auto source = filled_cache(150, 9);
  KvSessionIoOptions io;
  io.chunk_tokens = 32;
  ASSERT_TRUE(save_kv_session(*source, session_of(150), dir.path() + "/s", io).is_ok());
  for (int64_t n : {0, 1, 31, 32, 33, 100, 150, 400}) {
    auto memory = MemoryKvCache::create(shape_options()).value();
    KvSessionIoOptions part;
    part.max_positions = n;
    auto loaded = load_kv_session(dir.path() + "/s", kModelHash, *memory, part);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    const int64_t expected = std::min<int64_t>(n, 150);
    EXPECT_EQ(loaded->n_kv, expected);
    EXPECT_EQ(memory->n_tokens(), expected);
    expect_same_kv(*source, *memory, expected);
  }
  auto header = read_kv_session(dir.path() + "/s", kModelHash);
  ASSERT_TRUE(header.is_ok()) << header.status().message();
  EXPECT_EQ(header->tokens, session_of(150).tokens);
  EXPECT_EQ(header->n_kv, 150);
  EXPECT_EQ(read_kv_session(dir.path() + "/s", kModelHash + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_kv_session(dir.path() + "/none", kModelHash).status().code(), StatusCode::kNotFound);
}

class KvSessionRejects : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = filled_cache(40, 3);
    ASSERT_TRUE(save_kv_session(*source_, session_of(40), path(), {}).is_ok());
    target_ = MemoryKvCache::create(shape_options()).value();
  }
  std::string path() const { return dir_.path() + "/s"; }
  Status load(uint64_t hash = kModelHash) { return load_kv_session(path(), hash, *target_).status(); }
  void edit_header(const std::function<void(nlohmann::json&)>& fn) {
    nlohmann::json j = nlohmann::json::parse(read_text(path() + "/session.json"));
    fn(j);
    write_text(path() + "/session.json", j.dump());
  }

  TempDir dir_;
  std::unique_ptr<MemoryKvCache> source_;
  std::unique_ptr<MemoryKvCache> target_;
};

TEST_F(KvSessionRejects, AnotherModel) {
  const Status st = load(kModelHash + 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("another model"), std::string::npos) << st.message();
  EXPECT_EQ(target_->n_tokens(), 0);
}

TEST_F(KvSessionRejects, ANewerFormatVersion) {
  edit_header([](nlohmann::json& j) { j["version"] = kKvSessionVersion + 1; });
  const Status st = load();
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("newer leoam"), std::string::npos) << st.message();
}

TEST_F(KvSessionRejects, AnOlderFormatVersion) {
  edit_header([](nlohmann::json& j) { j["version"] = 4; });  // 16-byte chunk slots in its records
  const Status st = load();
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("older leoam"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("save the session again"), std::string::npos) << st.message();
  EXPECT_EQ(target_->n_tokens(), 0);
}

TEST_F(KvSessionRejects, AnEditedHeader) {
  edit_header([](nlohmann::json& j) { j["tokens"][3] = 7; });
  const Status st = load();
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
  write_text(path() + "/session.json", "{\"format\": ");
  EXPECT_EQ(load().code(), StatusCode::kCorrupt);
}

TEST_F(KvSessionRejects, AFlippedBitInTheKv) {
  const std::string kv_path = path() + "/session-L002.kv";
  std::fstream f(kv_path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(100);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(100);
  f.write(&c, 1);
  f.close();
  const Status st = load();
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("layer 2 chunk 0"), std::string::npos) << st.message();
}

TEST_F(KvSessionRejects, AMissingSessionOrASmallContext) {
  EXPECT_EQ(load_kv_session(dir_.path() + "/none", kModelHash, *target_).status().code(), StatusCode::kNotFound);
  auto small = MemoryKvCache::create(shape_options(16)).value();
  const Status st = load_kv_session(path(), kModelHash, *small).status();
  EXPECT_NE(st.message().find("context size"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace leoam
