#include "kv/kv_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace leoam {
namespace {

TEST(LatencyHistogramTest, BucketPlacement) {
  LatencyHistogram h;
  const struct {
    double us;
    int bucket;
  } cases[] = {{0.5, 0}, {1.0, 0}, {1.9, 0}, {2.0, 1}, {3.0, 1}, {1000.0, 9}};
  for (const auto& c : cases) {
    const uint64_t before = h.bucket(c.bucket);
    h.record_us(c.us);
    EXPECT_EQ(h.bucket(c.bucket), before + 1) << c.us << " us";
  }
  EXPECT_EQ(h.bucket(0), 3u);
  EXPECT_EQ(h.bucket(1), 2u);
  EXPECT_EQ(h.bucket(9), 1u);
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.mean_us(), (0.5 + 1.0 + 1.9 + 2.0 + 3.0 + 1000.0) / 6);
  EXPECT_EQ(h.max_us(), 1000.0);
}

TEST(LatencyHistogramTest, OutOfRangeSamples) {
  LatencyHistogram h;
  h.record_us(1e12);  // past 2^31 us: the last bucket
  EXPECT_EQ(h.bucket(LatencyHistogram::kBuckets - 1), 1u);
  h.record_us(-5.0);  // a clock that stepped back counts as 0 us
  EXPECT_EQ(h.bucket(0), 1u);
  EXPECT_DOUBLE_EQ(h.mean_us(), 1e12 / 2);
  EXPECT_EQ(h.count(), 2u);
}

TEST(LatencyHistogramTest, Quantiles) {
  LatencyHistogram h;
  EXPECT_EQ(h.quantile_upper_us(0.5), 0.0);
  EXPECT_EQ(h.mean_us(), 0.0);
  for (int i = 0; i < 90; ++i) h.record_us(0.5);  // bucket 0, upper 2 us
  for (int i = 0; i < 9; ++i) h.record_us(10.0);  // bucket 3, upper 16 us
  h.record_us(1000.0);                            // bucket 9, upper 1024 us
  EXPECT_EQ(h.quantile_upper_us(0.0), 2.0);
  EXPECT_EQ(h.quantile_upper_us(0.5), 2.0);
  EXPECT_EQ(h.quantile_upper_us(0.9), 2.0);
  EXPECT_EQ(h.quantile_upper_us(0.91), 16.0);
  EXPECT_EQ(h.quantile_upper_us(0.99), 16.0);  // 99 of 100 samples are under 16 us
  EXPECT_EQ(h.quantile_upper_us(0.995), 1024.0);
  EXPECT_EQ(h.quantile_upper_us(1.0), 1024.0);
}

KvStats example_stats() {
  KvStats s;
  s[Tier::kDevice] = {.bytes_read = 512, .bytes_written = 2048, .hits = 40, .misses = 0, .evictions = 7};
  s[Tier::kHost] = {.bytes_read = 12897485, .bytes_written = 5, .hits = 9, .misses = 3, .evictions = 2};
  s[Tier::kDisk] = {.bytes_read = 3ull << 30, .bytes_written = 1, .hits = 1234567, .misses = 11, .evictions = 0};
  s.resident_bytes = {1ull << 20, 3ull << 10, 0};
  s.resident_chunks = {16, 1, 0};
  s.abstract_bytes = {3ull << 20, 1ull << 10, 5ull << 12};
  s.peak_abstract_bytes = {4ull << 20, 2ull << 10, 5ull << 12};
  s.buffer_bytes = 40ull << 20;
  s.disk_bytes_prefetched = 3ull << 20;
  s.disk_abstract_bytes_read = 5ull << 10;
  s.disk_read_latency.record_us(1.5);
  s.disk_read_latency.record_us(1000.0);
  s.disk_write_latency.record_us(40.0);
  s.disk_io_mode = "O_DIRECT + io_uring";
  return s;
}

TEST(KvStatsTest, JsonHasTheDocumentedKeysAndValues) {
  const KvStats s = example_stats();
  const nlohmann::json j = nlohmann::json::parse(s.to_json());
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 8u);  // no policy_memory: no policy ran
  const char* names[] = {"device", "host", "disk"};
  for (int t = 0; t < kNumTiers; ++t) {
    const nlohmann::json& tj = j.at("tiers").at(names[t]);
    SCOPED_TRACE(names[t]);
    EXPECT_EQ(tj.size(), 9u);
    EXPECT_EQ(tj.at("bytes_read").get<uint64_t>(), s.tiers[t].bytes_read);
    EXPECT_EQ(tj.at("bytes_written").get<uint64_t>(), s.tiers[t].bytes_written);
    EXPECT_EQ(tj.at("hits").get<uint64_t>(), s.tiers[t].hits);
    EXPECT_EQ(tj.at("misses").get<uint64_t>(), s.tiers[t].misses);
    EXPECT_EQ(tj.at("evictions").get<uint64_t>(), s.tiers[t].evictions);
    EXPECT_EQ(tj.at("resident_bytes").get<uint64_t>(), s.resident_bytes[t]);
    EXPECT_EQ(tj.at("resident_chunks").get<int64_t>(), s.resident_chunks[t]);
    EXPECT_EQ(tj.at("abstract_bytes").get<uint64_t>(), s.abstract_bytes[t]);
    EXPECT_EQ(tj.at("peak_abstract_bytes").get<uint64_t>(), s.peak_abstract_bytes[t]);
  }
  EXPECT_EQ(j.at("buffer_bytes").get<uint64_t>(), s.buffer_bytes);
  EXPECT_EQ(j.at("disk_bytes_prefetched").get<uint64_t>(), s.disk_bytes_prefetched);
  EXPECT_EQ(j.at("disk_abstract_bytes_read").get<uint64_t>(), s.disk_abstract_bytes_read);
  const nlohmann::json& r = j.at("disk_read_latency_us");
  EXPECT_EQ(r.at("count").get<uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(r.at("mean").get<double>(), 500.75);
  EXPECT_EQ(r.at("p50").get<double>(), 2.0);
  EXPECT_EQ(r.at("p99").get<double>(), 1024.0);
  EXPECT_EQ(r.at("max").get<double>(), 1000.0);
  EXPECT_EQ(r.at("buckets"), nlohmann::json::parse("[[2, 1], [1024, 1]]"));
  const nlohmann::json& w = j.at("disk_write_latency_us");
  EXPECT_EQ(w.at("count").get<uint64_t>(), 1u);
  EXPECT_EQ(w.at("p50").get<double>(), 64.0);
  EXPECT_EQ(w.at("buckets"), nlohmann::json::parse("[[64, 1]]"));
  EXPECT_EQ(j.at("disk_io_mode").get<std::string>(), "O_DIRECT + io_uring");
  EXPECT_FALSE(j.at("abstracts_in_memory").get<bool>());
}

// The abstracts line says where the abstracts are: kept in memory only with a lossy host codec.
TEST(KvStatsTest, TheAbstractsLineSaysWhetherTheyAreKeptInMemory) {
  KvStats s = example_stats();
  EXPECT_NE(s.to_text().find("computed from its keys when asked, none kept in memory"), std::string::npos) << s.to_text();
  s.abstracts_in_memory = true;
  EXPECT_NE(s.to_text().find("in memory (a lossy host codec, or a policy that scores every chunk at every step), inside"), std::string::npos) << s.to_text();
  EXPECT_TRUE(nlohmann::json::parse(s.to_json()).at("abstracts_in_memory").get<bool>());
}

TEST(KvStatsTest, PolicyMemoryIsReportedWhenAPolicyRan) {
  KvStats s = example_stats();
  s.policy_memory = {"leoam", 5ull << 20, 6ull << 20, 64ull << 20};
  const nlohmann::json j = nlohmann::json::parse(s.to_json());
  const nlohmann::json& p = j.at("policy_memory");
  EXPECT_EQ(p.at("policy").get<std::string>(), "leoam");
  EXPECT_EQ(p.at("bytes").get<uint64_t>(), 5ull << 20);
  EXPECT_EQ(p.at("peak_bytes").get<uint64_t>(), 6ull << 20);
  EXPECT_EQ(p.at("budget_bytes").get<uint64_t>(), 64ull << 20);
  EXPECT_EQ(nlohmann::json::parse(s.policy_memory.to_json()), p);
  const std::string text = s.to_text();
  EXPECT_NE(text.find("policy leoam holds 5.0 MiB about the KV (peak 6.0 MiB), in RAM; budget 64.0 MiB"),
            std::string::npos)
      << text;
  s.policy_memory.budget_bytes = 0;
  EXPECT_NE(s.to_text().find("no budget"), std::string::npos);
}

// The prompt's disk traffic apart from the decode's (the rest of the run's), and the layered
// prefill's working set, once the prefill is known.
TEST(KvStatsTest, PrefillAndDecodeDiskTrafficAreSplit) {
  KvStats s = example_stats();
  s.disk_bytes_prefetched = 0;
  s[Tier::kDisk].bytes_read = 5ull << 20;
  s[Tier::kDisk].bytes_written = 3ull << 20;
  EXPECT_EQ(nlohmann::json::parse(s.to_json()).count("prefill"), 0u);
  s.prefill = {true, {500, 12897485, 1ull << 20}, {2000, 5, 3ull << 20}, 1ull << 30, 16ull << 20, 2};
  const nlohmann::json j = nlohmann::json::parse(s.to_json());
  EXPECT_EQ(j.at("prefill").at("bytes_read").at("disk").get<uint64_t>(), 1ull << 20);
  EXPECT_EQ(j.at("prefill").at("bytes_written").at("disk").get<uint64_t>(), 3ull << 20);
  EXPECT_EQ(j.at("prefill").at("bytes_read").at("device").get<uint64_t>(), 500u);
  EXPECT_EQ(j.at("decode").at("bytes_read").at("device").get<uint64_t>(), 12u);  // 512 in all
  EXPECT_EQ(j.at("decode").at("bytes_read").at("host").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("decode").at("bytes_written").at("device").get<uint64_t>(), 48u);
  EXPECT_EQ(j.at("prefill").at("working_set_budget_bytes").get<uint64_t>(), 1ull << 30);
  EXPECT_EQ(j.at("prefill").at("working_set_bytes").get<uint64_t>(), 16ull << 20);
  EXPECT_EQ(j.at("prefill").at("segments").get<int64_t>(), 2);
  EXPECT_EQ(j.at("decode").at("bytes_read").at("disk").get<uint64_t>(), 4ull << 20);
  EXPECT_EQ(j.at("decode").at("bytes_written").at("disk").get<uint64_t>(), 0u);
  const std::string text = s.to_text();
  EXPECT_NE(text.find("disk during the prefill: read 1.0 MiB, written 3.0 MiB; during the decode: read 4.0 MiB, "
                      "written 0 B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("prefill working set: 16.0 MiB at most, of 1.0 GiB, 2 segments"),
            std::string::npos)
      << text;
  s.prefill.working_set_budget_bytes = 0;
  EXPECT_NE(s.to_text().find("prefill working set: none, batch by batch"), std::string::npos);
  // What the prompt read ahead for the first decode step is said apart, inside the prefill's reads.
  s.disk_bytes_prefetched = 512ull << 10;
  EXPECT_NE(s.to_text().find("disk during the prefill: read 1.0 MiB (512.0 KiB of it read ahead for the first "
                             "decode step), written 3.0 MiB"),
            std::string::npos)
      << s.to_text();
}

TEST(KvStatsTest, EmptyStatsAreValidJson) {
  const nlohmann::json j = nlohmann::json::parse(KvStats{}.to_json());
  EXPECT_EQ(j.at("tiers").at("disk").at("hits").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("disk_read_latency_us").at("p99").get<double>(), 0.0);
  EXPECT_TRUE(j.at("disk_write_latency_us").at("buckets").empty());
  EXPECT_EQ(j.at("disk_io_mode").get<std::string>(), "");
}

TEST(KvStatsTest, TextIsAnAlignedTableThenLatencies) {
  const std::string text = example_stats().to_text();
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 9u) << text;
  // Header and one row per tier, in tier order, all the same width.
  EXPECT_EQ(lines[0].rfind("tier", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("device", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("host", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("disk", 0), 0u) << lines[3];
  for (int i = 1; i < 4; ++i) EXPECT_EQ(lines[i].size(), lines[0].size()) << lines[i];
  for (const char* column : {"read", "written", "hits", "misses", "evictions", "resident KV", "abstracts (peak)"}) {
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  }
  // Human units: 12897485 B = 12.3 MiB, 3 GiB, 512 B; the resident chunks counted.
  EXPECT_NE(lines[2].find("12.3 MiB"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("3.0 GiB"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("1234567"), std::string::npos) << lines[3];
  EXPECT_NE(lines[1].find("512 B"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("1.0 MiB in 16 chunks"), std::string::npos) << lines[1];
  // Right-aligned numbers: the hits column ends where its header does.
  const size_t hits_end = lines[0].find("hits") + 4;
  EXPECT_EQ(lines[3].substr(hits_end - 7, 7), "1234567") << lines[3];
  EXPECT_EQ(lines[1].substr(hits_end - 2, 2), "40") << lines[1];
  EXPECT_NE(lines[4].find("read"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("count 2"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("1000.0 us"), std::string::npos) << lines[4];
  EXPECT_NE(lines[2].find("3.0 KiB in 1 chunk"), std::string::npos) << lines[2];
  EXPECT_NE(lines[5].find("write"), std::string::npos) << lines[5];
  EXPECT_NE(lines[5].find("count 1"), std::string::npos) << lines[5];
  EXPECT_EQ(lines[4].find("count"), lines[5].find("count")) << "latency lines line up";
  EXPECT_EQ(lines[6], "disk I/O: O_DIRECT + io_uring");
  // Each tier's abstracts next to its KV, with their peak; then the buffers.
  EXPECT_NE(lines[1].find("3.0 MiB (4.0 MiB)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("20.0 KiB (20.0 KiB)"), std::string::npos) << lines[3];
  EXPECT_EQ(lines[7].rfind("abstracts:", 0), 0u) << lines[7];
  EXPECT_EQ(lines[8], "buffers: 40.0 MiB (gather scratch and write-through)");
}

}  // namespace
}  // namespace leoam
