// The machine's DRAM read bandwidth, measured: the memory term of the roofline that `leoam bench`
// compares decode speed against (bytes read per token / bandwidth = the fastest a token can be).
//
// Method: a buffer much larger than the last-level cache (1 GiB by default; 32 MiB of L3 here) is
// written once, so that every page is backed by its own memory (an untouched buffer would read the
// shared zero page, from cache), then read start to end by n_threads threads, each streaming its
// own contiguous slice. Every load is summed (AVX2 where the CPU has it, else 64-bit scalar) and the
// sum escapes, so the compiler cannot drop the reads. One untimed pass warms the TLB and the
// threads; the result is the median of n_passes timed passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace leoam {

struct MemoryBandwidthOptions {
  size_t buffer_bytes = size_t{1} << 30;  // 1 GiB: far beyond any L3, so reads come from DRAM
  int n_threads = 0;                      // 0 = ThreadPool::default_thread_count()
  int n_passes = 5;                       // timed passes; the median is reported
  bool allow_simd = true;                 // false: the scalar loop even where AVX2 exists (tests)
};

struct MemoryBandwidth {
  double bytes_per_s = 0;      // median over the passes
  double min_bytes_per_s = 0;  // slowest pass
  double max_bytes_per_s = 0;  // fastest pass
  std::vector<double> pass_bytes_per_s;  // [n_passes], in the order run
  size_t buffer_bytes = 0;
  int n_threads = 0;
  const char* method = "scalar";  // "avx2" or "scalar": the loop that did the loads
  double gb_per_s() const { return bytes_per_s * 1e-9; }
};

// Fails when buffer_bytes is below 1 MiB or n_passes < 1 (invalid_argument) or the buffer cannot be
// allocated. Takes about (n_passes + 2) * buffer_bytes / bandwidth: ~0.3 s for 1 GiB at 25 GB/s.
Result<MemoryBandwidth> measure_memory_bandwidth(const MemoryBandwidthOptions& options);

}  // namespace leoam
