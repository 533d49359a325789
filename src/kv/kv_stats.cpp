#include "kv/kv_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

namespace leoam {

namespace {

constexpr Tier kTiers[kNumTiers] = {Tier::kDevice, Tier::kHost, Tier::kDisk};

double bucket_upper_us(int b) { return std::ldexp(1.0, b + 1); }

std::string format_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f us", us);
  return buf;
}

// `label` ends in ':' and is padded so that both latency lines line up.
std::string latency_line(const char* label, const LatencyHistogram& h) {
  return std::string(label) + " count " + std::to_string(h.count()) + ", mean " + format_us(h.mean_us()) +
         ", p50 <= " + format_us(h.quantile_upper_us(0.5)) + ", p99 <= " + format_us(h.quantile_upper_us(0.99)) +
         ", max " + format_us(h.max_us());
}

nlohmann::ordered_json latency_json(const LatencyHistogram& h) {
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
    if (h.bucket(b) != 0) buckets.push_back({static_cast<uint64_t>(1) << (b + 1), h.bucket(b)});
  }
  nlohmann::ordered_json j;
  j["count"] = h.count();
  j["mean"] = h.mean_us();
  j["p50"] = h.quantile_upper_us(0.5);
  j["p99"] = h.quantile_upper_us(0.99);
  j["max"] = h.max_us();
  j["buckets"] = std::move(buckets);
  return j;
}

nlohmann::ordered_json policy_memory_json(const PolicyMemoryStats& m) {
  nlohmann::ordered_json j;
  j["policy"] = m.policy;
  j["bytes"] = m.bytes;
  j["peak_bytes"] = m.peak_bytes;
  j["budget_bytes"] = m.budget_bytes;
  return j;
}

nlohmann::ordered_json transfer_json(const TransferStats& t) {
  return {{"mode", t.mode},
          {"chunks_compressed", t.chunks_compressed},
          {"chunks_as_is", t.chunks_as_is},
          {"bytes_compressed", t.bytes_compressed},
          {"decode_ms", t.decode_ms},
          {"as_is_us_per_chunk", t.as_is_us_per_chunk},
          {"compressed_us_per_chunk", t.compressed_us_per_chunk},
          {"decode_us_per_chunk", t.decode_us_per_chunk}};
}

}  // namespace

std::string PolicyMemoryStats::to_text() const {
  return "policy " + policy + " holds " + human_bytes(bytes) + " about the KV (peak " + human_bytes(peak_bytes) +
         "), in RAM; " + (budget_bytes > 0 ? "budget " + human_bytes(budget_bytes) : std::string("no budget"));
}

std::string PolicyMemoryStats::to_json() const { return policy_memory_json(*this).dump(); }

std::string TransferStats::to_json() const { return transfer_json(*this).dump(); }

std::string human_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u + 1 < static_cast<int>(std::size(kUnits))) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

void LatencyHistogram::record_us(double us) {
  if (!(us > 0.0)) us = 0.0;  // a clock that stepped back, or NaN: count it as instant
  int b = 0;
  if (us >= 1.0) b = std::min(std::ilogb(us), kBuckets - 1);  // ilogb is exact: 2.0 -> 1, 1.99 -> 0
  ++buckets_[b];
  ++count_;
  sum_us_ += us;
  max_us_ = std::max(max_us_, us);
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (int b = 0; b < kBuckets; ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  sum_us_ += other.sum_us_;
  max_us_ = std::max(max_us_, other.max_us_);
}

std::string ReadAheadStats::to_text() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "read-ahead: %llu layers, %llu chunks read ahead, %llu of them used; %llu chunks missed and read when "
                "needed; %.1f ms waited",
                static_cast<unsigned long long>(jobs), static_cast<unsigned long long>(chunks_staged),
                static_cast<unsigned long long>(chunks_used), static_cast<unsigned long long>(chunks_missed), wait_ms);
  std::string out = buf;
  if (failed_jobs > 0) out += "; " + std::to_string(failed_jobs) + " reads failed (their chunks read again when needed)";
  return out;
}

std::string TransferStats::to_text() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "compressed transfers (%s): %llu disk chunks read compressed (%s), %llu as they are; %.1f ms decoding",
                mode.c_str(), static_cast<unsigned long long>(chunks_compressed), human_bytes(bytes_compressed).c_str(),
                static_cast<unsigned long long>(chunks_as_is), decode_ms);
  std::string out = buf;
  if (decode_us_per_chunk > 0.0) {
    std::snprintf(buf, sizeof(buf), "; a chunk: %.1f us as it is, %.1f compressed + %.1f decoding", as_is_us_per_chunk,
                  compressed_us_per_chunk, decode_us_per_chunk);
    out += buf;
  }
  return out;
}

double LatencyHistogram::quantile_upper_us(double p) const {
  if (count_ == 0) return 0.0;
  p = std::clamp(p, 0.0, 1.0);
  uint64_t below = 0;
  for (int b = 0; b < kBuckets; ++b) {
    below += buckets_[b];
    // A ratio, not below >= p * count_: 99 / 100 rounds to the same double as 0.99, while
    // 0.99 * 100 may land just above 99.
    if (below != 0 && static_cast<double>(below) / static_cast<double>(count_) >= p) return bucket_upper_us(b);
  }
  return bucket_upper_us(kBuckets - 1);
}

std::string KvStats::to_text() const {
  // Cells first, then pad every column to its widest cell: the numbers right-aligned.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"tier", "read", "written", "hits", "misses", "evictions", "resident KV", "abstracts (peak)"});
  for (Tier t : kTiers) {
    const TierStats& s = (*this)[t];
    const int i = static_cast<int>(t);
    rows.push_back({tier_name(t), human_bytes(s.bytes_read), human_bytes(s.bytes_written), std::to_string(s.hits),
                    std::to_string(s.misses), std::to_string(s.evictions),
                    human_bytes(resident_bytes[i]) + " in " + std::to_string(resident_chunks[i]) +
                        (resident_chunks[i] == 1 ? " chunk" : " chunks"),
                    human_bytes(abstract_bytes[i]) + " (" + human_bytes(peak_abstract_bytes[i]) + ")"});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c == 0) {
        out += row[c] + pad;
      } else {
        out += "  " + pad + row[c];
      }
    }
    out += '\n';
  }
  out += latency_line("disk read latency: ", disk_read_latency) + '\n';
  out += latency_line("disk write latency:", disk_write_latency) + '\n';
  out += "disk I/O: " + (disk_io_mode.empty() ? std::string("unknown") : disk_io_mode) + '\n';
  if (shared_disk_chunks > 0) {
    out += "shared prefix: " + human_bytes(shared_disk_bytes) + " in " + std::to_string(shared_disk_chunks) +
           " chunks on disk, read in place from a kept session\n";
  }
  out += abstracts_in_memory
             ? "abstracts: on the device and host in memory (a lossy host codec, or a policy that scores every "
               "chunk at every step), inside their tier's budget; on disk in the abstract files\n"
             : "abstracts: on disk in the abstract files; a device or host chunk's computed from its keys when asked, "
               "none kept in memory\n";
  out += "buffers: " + human_bytes(buffer_bytes) + " (gather scratch and write-through)\n";
  if (window_dropped_chunks > 0) {
    out += "sliding windows: " + std::to_string(window_dropped_chunks) +
           " chunks dropped behind their layer's window, never read again\n";
  }
  if (!policy_memory.policy.empty()) out += policy_memory.to_text() + '\n';
  if (read_ahead.jobs > 0) out += read_ahead.to_text() + '\n';
  if (!transfer.mode.empty()) out += transfer.to_text() + '\n';
  if (prefill.known) {
    const int d = static_cast<int>(Tier::kDisk);
    const std::string ahead =
        disk_bytes_prefetched > 0
            ? " (" + human_bytes(disk_bytes_prefetched) + " of it read ahead for the first decode step)"
            : std::string();
    out += "disk during the prefill: read " + human_bytes(prefill.bytes_read[d]) + ahead + ", written " +
           human_bytes(prefill.bytes_written[d]) + "; during the decode: read " +
           human_bytes(tiers[d].bytes_read - prefill.bytes_read[d]) + ", written " +
           human_bytes(tiers[d].bytes_written - prefill.bytes_written[d]) + '\n';
    out += prefill.working_set_budget_bytes == 0
               ? std::string("prefill working set: none, batch by batch\n")
               : "prefill working set: " + human_bytes(prefill.working_set_bytes) + " at most, of " +
                     human_bytes(prefill.working_set_budget_bytes) + ", " +
                     std::to_string(prefill.n_segments) + (prefill.n_segments == 1 ? " segment\n" : " segments\n");
  }
  return out;
}

std::string KvStats::to_json() const {
  nlohmann::ordered_json tiers_json;
  for (Tier t : kTiers) {
    const TierStats& s = (*this)[t];
    const int i = static_cast<int>(t);
    nlohmann::ordered_json j;
    j["bytes_read"] = s.bytes_read;
    j["bytes_written"] = s.bytes_written;
    j["hits"] = s.hits;
    j["misses"] = s.misses;
    j["evictions"] = s.evictions;
    j["resident_bytes"] = resident_bytes[i];
    j["resident_chunks"] = resident_chunks[i];
    j["abstract_bytes"] = abstract_bytes[i];
    j["peak_abstract_bytes"] = peak_abstract_bytes[i];
    tiers_json[tier_name(t)] = std::move(j);
  }
  nlohmann::ordered_json root;
  root["tiers"] = std::move(tiers_json);
  root["disk_read_latency_us"] = latency_json(disk_read_latency);
  root["disk_write_latency_us"] = latency_json(disk_write_latency);
  root["disk_io_mode"] = disk_io_mode;
  if (shared_disk_chunks > 0) {
    root["shared_disk_chunks"] = shared_disk_chunks;
    root["shared_disk_bytes"] = shared_disk_bytes;
  }
  root["abstracts_in_memory"] = abstracts_in_memory;
  root["buffer_bytes"] = buffer_bytes;
  root["disk_bytes_prefetched"] = disk_bytes_prefetched;
  root["disk_abstract_bytes_read"] = disk_abstract_bytes_read;
  if (window_dropped_chunks > 0) root["window_dropped_chunks"] = window_dropped_chunks;
  if (read_ahead.jobs > 0) {
    root["read_ahead"] = {{"jobs", read_ahead.jobs},
                          {"failed_jobs", read_ahead.failed_jobs},
                          {"chunks_staged", read_ahead.chunks_staged},
                          {"chunks_used", read_ahead.chunks_used},
                          {"chunks_missed", read_ahead.chunks_missed},
                          {"wait_ms", read_ahead.wait_ms}};
  }
  if (!transfer.mode.empty()) root["transfer"] = transfer_json(transfer);
  if (!policy_memory.policy.empty()) root["policy_memory"] = policy_memory_json(policy_memory);
  if (prefill.known) {
    nlohmann::ordered_json p, d;
    for (Tier t : kTiers) {
      const int i = static_cast<int>(t);
      p["bytes_read"][tier_name(t)] = prefill.bytes_read[i];
      d["bytes_read"][tier_name(t)] = tiers[i].bytes_read - prefill.bytes_read[i];
    }
    for (Tier t : kTiers) {
      const int i = static_cast<int>(t);
      p["bytes_written"][tier_name(t)] = prefill.bytes_written[i];
      d["bytes_written"][tier_name(t)] = tiers[i].bytes_written - prefill.bytes_written[i];
    }
    p["working_set_budget_bytes"] = prefill.working_set_budget_bytes;
    p["working_set_bytes"] = prefill.working_set_bytes;
    p["segments"] = prefill.n_segments;
    root["prefill"] = std::move(p);
    root["decode"] = std::move(d);
  }
  return root.dump();
}

}  // namespace leoam
