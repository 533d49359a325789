// Telemetry of the tiered KV store: per tier, what moved and how the gathers were served, and a
// histogram of disk I/O latency. Plain counters, owned by one store (not thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kv/tier.h"

namespace leoam {

// "512 B", "12.3 MiB": a byte count in binary units, as the stats print them.
std::string human_bytes(uint64_t bytes);

// What one tier T moved and served.
struct TierStats {
  // Bytes read out of T (disk: from the file; host: decoded or copied to scratch or to the
  // device; device: bytes gathered straight from it).
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;  // into T (inserts, demotions and promotions that landed in T)
  uint64_t hits = 0;           // chunks a gather found in T
  uint64_t misses = 0;         // chunks a gather needed that were not in T or any faster tier
  uint64_t evictions = 0;      // chunks demoted out of T
};

// One sample per disk operation (a batch of reads submitted together, or one write), in
// power-of-two microsecond buckets: bucket b counts samples in [2^b, 2^(b+1)) us, bucket 0 also
// takes samples under 1 us (and negative or NaN ones, recorded as 0), and the last bucket takes
// everything from 2^31 us up.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 32;

  void record_us(double us);
  uint64_t count() const { return count_; }
  uint64_t bucket(int b) const { return buckets_[b]; }
  // The smallest bucket upper bound (2^(b+1) us) below which at least fraction p (in [0, 1]) of
  // the samples fall, never below the first non-empty bucket's; 0 when empty.
  double quantile_upper_us(double p) const;
  double mean_us() const { return count_ == 0 ? 0.0 : sum_us_ / static_cast<double>(count_); }
  double max_us() const { return max_us_; }
  // Adds other's samples.
  void merge(const LatencyHistogram& other);

 private:
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  double sum_us_ = 0.0;
  double max_us_ = 0.0;
};

// What the attention selection policy holds in RAM about the KV (trees, abstracts read, scores,
// partial keys; sparse/sparse_attention.h), for the report: its budget, 0 for none.
struct PolicyMemoryStats {
  std::string policy;  // empty: no policy ran
  uint64_t bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t budget_bytes = 0;

  // "policy leoam holds 5.2 MiB about the KV (peak 6.1 MiB), in RAM; budget 64.0 MiB"
  std::string to_text() const;
  // {"policy":..,"bytes":..,"peak_bytes":..,"budget_bytes":..}
  std::string to_json() const;
};

// The prompt's part of a run, for the report: its disk traffic (the rest of the run's is the
// decode's) and the layered prefill's working set (ForwardOptions::prefill_working_set_bytes).
// Filled by the caller that ran the prompt; known is false when none did.
struct PrefillIoStats {
  bool known = false;
  std::array<uint64_t, kNumTiers> bytes_read{};     // per tier (indexed by Tier), at the prefill's end
  std::array<uint64_t, kNumTiers> bytes_written{};
  uint64_t working_set_budget_bytes = 0;  // 0: the prompt ran batch by batch
  uint64_t working_set_bytes = 0;         // the most the working set held
  int64_t n_segments = 0;
};

// The decode pipeline's read-ahead (kv/read_ahead.h): disk chunks of the next layer read while
// this one computes, picked by a selection speculated from this layer's input.
struct ReadAheadStats {
  uint64_t jobs = 0;            // layers read ahead
  uint64_t failed_jobs = 0;     // jobs whose read failed (their chunks were read again when needed)
  uint64_t chunks_staged = 0;   // disk chunks read ahead
  uint64_t chunks_used = 0;     // of them, gathered by the layer they were read for
  uint64_t chunks_missed = 0;   // disk chunks a gather read itself though its layer was read ahead:
                                // what the speculation missed (or its staging could not hold)
  double wait_ms = 0.0;         // the compute thread's waits for read-ahead jobs to finish

  // "read-ahead: 24 layers, 1203 chunks read ahead, 1100 of them used; 310 chunks missed and read
  // when needed; 3.2 ms waited" (for --kv-stats)
  std::string to_text() const;
};

// Disk reads of compressed chunks (--kv-compress; kv/transfer_compression.h).
struct TransferStats {
  std::string mode;                 // "int4", "int8" or "auto (int4)"; empty: off
  uint64_t chunks_compressed = 0;   // disk chunk reads of the compressed form (decoded when used)
  uint64_t chunks_as_is = 0;        // disk chunk reads of chunks as they are
  uint64_t bytes_compressed = 0;    // the compressed reads' bytes, part of the disk's bytes_read
  double decode_ms = 0.0;           // decoding them
  // auto: the cost model's times a chunk at the end, in us (0: not measured)
  double as_is_us_per_chunk = 0.0;
  double compressed_us_per_chunk = 0.0;
  double decode_us_per_chunk = 0.0;

  // "compressed transfers (auto (int4)): 1200 disk chunks read compressed (47.0 MiB), 30 as they
  // are; 35.2 ms decoding; a chunk: 81.0 us as it is, 30.2 compressed + 12.9 decoding" (for --kv-stats)
  std::string to_text() const;
  // {"mode":..,"chunks_compressed":..,"chunks_as_is":..,"bytes_compressed":..,"decode_ms":..,
  //  "as_is_us_per_chunk":..,"compressed_us_per_chunk":..,"decode_us_per_chunk":..}
  std::string to_json() const;
};

struct KvStats {
  // False: a store without tiers (MemoryKvCache), and nothing below is filled in.
  bool tiered = false;
  bool disk_tier = false;  // the store has a disk tier (else its KV stays in memory)
  std::array<TierStats, kNumTiers> tiers{};  // indexed by Tier
  // One sample per read batch (chunks or abstracts), from its start to its check: for a batch
  // started while attention ran over chunks in memory (DiskTier::start_read_chunks), that
  // attention's time too, so an upper bound on the disk's.
  LatencyHistogram disk_read_latency;
  LatencyHistogram disk_write_latency;  // one sample per write batch (DiskTier::write_chunks)
  // Where the bytes of the device and host tiers and the disk files stood at the end.
  std::array<uint64_t, kNumTiers> resident_bytes{};
  std::array<int64_t, kNumTiers> resident_chunks{};
  // A shared prefix's chunks on the disk tier (TieredKvCache::share_prefix): read in place from a
  // kept session's files, which the store does not own; not in the disk's resident figures.
  int64_t shared_disk_chunks = 0;
  uint64_t shared_disk_bytes = 0;
  std::string disk_io_mode;  // "O_DIRECT + io_uring", or the fallback in effect and why
  // The chunks' abstracts (box and key sign sketch): device and host, in memory, counted in their
  // tier's budget, now and the most at once (only when abstracts_in_memory: a lossy host codec,
  // or quest; otherwise they are computed from the resident keys when asked); disk, the abstract files.
  bool abstracts_in_memory = false;
  std::array<uint64_t, kNumTiers> abstract_bytes{};
  std::array<uint64_t, kNumTiers> peak_abstract_bytes{};
  uint64_t buffer_bytes = 0;  // the store's gather scratch, write-through buffer and spare chunk buffers
  // Disk bytes read ahead of need (KvCache::prefetch: a prompt's forecast of the first decode
  // step), part of the disk tier's bytes_read.
  uint64_t disk_bytes_prefetched = 0;
  ReadAheadStats read_ahead;
  TransferStats transfer;
  // Disk bytes of abstract records read (DiskTier::read_abstracts: LKA and the policies' scoring
  // of disk chunks), part of the disk tier's bytes_read.
  uint64_t disk_abstract_bytes_read = 0;
  // Chunks of sliding-window layers dropped once behind every later query's window
  // (KvCache::release_before), never read again.
  uint64_t window_dropped_chunks = 0;
  PolicyMemoryStats policy_memory;
  PrefillIoStats prefill;

  TierStats& operator[](Tier t) { return tiers[static_cast<int>(t)]; }
  const TierStats& operator[](Tier t) const { return tiers[static_cast<int>(t)]; }

  // A human-readable table, one row per tier, then the latency summaries (for --kv-stats).
  std::string to_text() const;
  // The same as one JSON object:
  //   {"tiers": {"device": {"bytes_read":..,"bytes_written":..,"hits":..,"misses":..,
  //    "evictions":..,"resident_bytes":..,"resident_chunks":..,"abstract_bytes":..,
  //    "peak_abstract_bytes":..}, "host": {..}, "disk": {..}},
  //    "disk_read_latency_us": {"count":..,"mean":..,"p50":..,"p99":..,"max":..,
  //    "buckets": [[upper_us, count], ...]}, "disk_write_latency_us": {...},
  //    "disk_io_mode": "..", "shared_disk_chunks":.., "shared_disk_bytes":.. (only with a
  //    shared prefix on disk), "abstracts_in_memory": bool, "buffer_bytes":.., "disk_bytes_prefetched":.., "disk_abstract_bytes_read":..,
  //    "window_dropped_chunks":.. (only when a sliding-window layer dropped some),
  //    "read_ahead": {"jobs":..,"failed_jobs":..,"chunks_staged":..,"chunks_used":..,
  //    "chunks_missed":..,"wait_ms":..} (only when a read-ahead ran),
  //    "transfer": {TransferStats::to_json} (only with --kv-compress),
  //    "policy_memory": {"policy":..,"bytes":..,"peak_bytes":..,"budget_bytes":..},
  //    "prefill": {"bytes_read": {"device":..,"host":..,"disk":..}, "bytes_written": {..},
  //    "working_set_budget_bytes":..,"working_set_bytes":..,"segments":..},
  //    "decode": {"bytes_read": {..}, "bytes_written": {..}}}
  // (resident_bytes: the KV alone; policy_memory only when a policy ran; prefill and decode only
  // when the prefill is known, decode being the rest of the run's disk traffic).
  // with p50/p99 as bucket upper bounds (quantile_upper_us) and only the non-empty buckets,
  // ascending, upper_us an integer.
  std::string to_json() const;
};

}  // namespace leoam
