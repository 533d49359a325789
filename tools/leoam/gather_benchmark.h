// The disk tier's chunk-gather benchmark behind `leoam bench-gather`: how fast
// TieredKvCache::for_each_view reads a sparse set of chunks from disk, set against what the device
// gives for the same slots read with the file interface alone, alternating, in the same run.
// Figures are medians over the reps, in MB/s (1e6 bytes); the fraction is the median of the reps'
// gather / raw ratios. One configuration's store and files exist at a time; memory is a gather
// batch of scratch, a raw buffer of the same size, a batch of fill rows and a few device chunks.
// The procedure: docs/kv-store.md#the-gather-benchmark
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace leoam {

struct GatherBenchOptions {
  std::string dir;                                             // where the chunk files go
  std::vector<int> chunk_tokens = {8, 16, 32, 64, 128};
  std::vector<std::pair<int, int>> shapes = {{32, 128}, {8, 128}};  // {n_kv_heads, head_dim}: 7B, GQA
  uint64_t file_bytes = uint64_t{512} << 20;  // KV written per configuration
  double select_fraction = 0.1;                // of the disk chunks, per gather (a 10% sparse budget)
  int queue_depth = 32;
  int n_reps = 5;
  uint64_t gather_batch_bytes = uint64_t{32} << 20;
  uint32_t seed = 1;
  std::function<void(const std::string&)> progress;  // optional: one line of what is happening
};

struct GatherBenchRow {
  int n_kv_heads = 0;
  int head_dim = 0;
  int chunk_tokens = 0;
  size_t slot_bytes = 0;        // one chunk on disk
  int64_t n_chunks_read = 0;    // per gather
  double gather_mb_per_s = 0;   // median over reps; disk slot bytes read / wall time of for_each_view
  double raw_mb_per_s = 0;      // median over reps; the same slots read with the file interface alone
  // Median over reps of gather / raw, each gather rep paired with the raw rep right after it:
  // the device's throughput drifts between reps, and the pair shares the drift.
  double fraction = 0;
  std::vector<double> gather_samples_mb_per_s;  // [n_reps], in order
  std::vector<double> raw_samples_mb_per_s;     // [n_reps], in order
  std::string io_mode;          // the disk tier's I/O mode, and whether the page cache was dropped
};

// One row per (shape, chunk size), shapes outer. Fails on bad options (kInvalidArgument, e.g. a
// file_bytes too small to leave any chunk on disk) or on any I/O error.
Result<std::vector<GatherBenchRow>> run_gather_benchmark(const GatherBenchOptions& options);

}  // namespace leoam
