// The tiered store without a disk tier (no dir): chunks and abstracts for the policies, and not
// one file touched.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "kv_test_util.h"

namespace leoam {
namespace {

using testing_util::random_rows;

// Fails every call and counts them: a store that touches no file never calls it.
class NoFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& path, const FileOpenOptions&) override {
    ++n_calls;
    return io_error("test: no file may be opened, asked for " + path);
  }
  Status remove(const std::string&) override {
    ++n_calls;
    return io_error("test: no file may be removed");
  }
  Status create_dirs(const std::string&) override {
    ++n_calls;
    return io_error("test: no directory may be made");
  }
  bool exists(const std::string&) override {
    ++n_calls;
    return false;
  }
  int n_calls = 0;
};

TieredKvCacheOptions in_memory_options(FileSystem* fs) {
  TieredKvCacheOptions o;
  o.shape = {3, 2, 8, 1000};
  o.chunk_tokens = 8;
  o.file_system = fs;
  o.device_budget_bytes = TieredKvCache::in_memory_device_budget_bytes(o);
  return o;
}

std::map<int64_t, std::vector<uint8_t>> keys_of(KvCache& kv, int layer, int64_t n) {
  std::map<int64_t, std::vector<uint8_t>> rows;
  const TokenRange all{0, n};
  EXPECT_TRUE(kv.for_each_view(layer, {&all, 1}, [&](const KvView& view) {
                  for (const KvSegment& s : view.segments()) {
                    for (int64_t t = 0; t < s.n_tokens; ++t) {
                      const auto* k = static_cast<const uint8_t*>(s.k_row(t));
                      rows[s.pos0 + t].assign(k, k + s.row_stride_bytes);
                    }
                  }
                  return Status::ok();
                }).is_ok());
  return rows;
}

TEST(InMemoryTieredStore, ServesTheKvAndAbstractsWithoutTouchingAFile) {
  NoFileSystem fs;
  auto kv = TieredKvCache::create(in_memory_options(&fs));
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  EXPECT_FALSE((*kv)->has_disk_tier());
  MemoryKvCacheOptions m;
  m.shape = (*kv)->shape();
  auto memory = MemoryKvCache::create(m).value();
  std::mt19937 rng(3);
  // Prefill in batches, then decode one token at a time, then go back and go on.
  for (int64_t n : {512, 300, 1, 1, 1, 1, 100}) {
    const int64_t pos0 = (*kv)->n_tokens();
    for (int il = 0; il < 3; ++il) {
      const auto k = random_rows(rng, n, 16);
      const auto v = random_rows(rng, n, 16);
      ASSERT_TRUE((*kv)->append(il, pos0, n, k.data(), v.data()).is_ok());
      ASSERT_TRUE(memory->append(il, pos0, n, k.data(), v.data()).is_ok());
    }
    if (n == 300) {
      ASSERT_TRUE((*kv)->truncate(700).is_ok());
      ASSERT_TRUE(memory->truncate(700).is_ok());
    }
  }
  const int64_t n = (*kv)->n_tokens();
  for (int il = 0; il < 3; ++il) EXPECT_EQ(keys_of(**kv, il, n), keys_of(*memory, il, n)) << "layer " << il;
  std::vector<float> abstracts(static_cast<size_t>((*kv)->n_chunks(0) * (*kv)->geometry().box_floats()));
  ASSERT_TRUE((*kv)->load_abstracts(0, 0, (*kv)->n_chunks(0), abstracts.data(), AbstractSource::kLka).is_ok());
  const KvStats stats = (*kv)->stats();
  EXPECT_EQ(stats.resident_chunks[static_cast<int>(Tier::kDisk)], 0);
  EXPECT_EQ(stats[Tier::kDisk].bytes_written, 0u);
  EXPECT_EQ(stats.resident_chunks[static_cast<int>(Tier::kDevice)], 3 * (*kv)->n_chunks(0));
  EXPECT_EQ(fs.n_calls, 0) << "the store touched the file system";
}

TEST(InMemoryTieredStore, ADeviceBudgetBelowTheWholeContextIsRefused) {
  NoFileSystem fs;
  TieredKvCacheOptions o = in_memory_options(&fs);
  o.device_budget_bytes -= 1;
  auto kv = TieredKvCache::create(o);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_EQ(kv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(kv.status().message().find("without a disk tier"), std::string::npos) << kv.status().message();
  EXPECT_EQ(kv.status().setting(), Setting::kKvDir);
  o = in_memory_options(&fs);
  o.host_codec = KvCodec::kInt8;
  EXPECT_FALSE(TieredKvCache::create(o).is_ok());
  EXPECT_EQ(fs.n_calls, 0);
}

}  // namespace
}  // namespace leoam
