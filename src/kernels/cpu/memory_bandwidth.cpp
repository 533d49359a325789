#include "kernels/cpu/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/thread_pool.h"

namespace leoam {
namespace {

// 256: bytes per step of the read loops (eight 32-byte loads, four cache lines); slices are whole
// steps so neither loop needs a tail.
constexpr size_t kStepBytes = 256;
// 2 MiB: the buffer's alignment, a huge page, so slices start on page boundaries.
constexpr size_t kBufferAlign = size_t{2} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Sums [p, p + n_bytes) as 64-bit integers with eight independent 256-bit accumulators, so that the
// adds never limit the rate and the loads stay in flight back to back.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n_bytes) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (size_t off = 0; off < n_bytes; off += kStepBytes) {
    const auto* v = reinterpret_cast<const __m256i*>(p + off);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_epi64(acc[j], _mm256_load_si256(v + j));
  }
  __m256i s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_epi64(s, acc[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t sum_scalar(const uint8_t* p, size_t n_bytes) {
  uint64_t acc[4] = {0, 0, 0, 0};
  for (size_t off = 0; off < n_bytes; off += 32) {
    uint64_t w[4];
    std::memcpy(w, p + off, sizeof(w));
    for (int j = 0; j < 4; ++j) acc[j] += w[j];
  }
  return acc[0] + acc[1] + acc[2] + acc[3];
}

}  // namespace

Result<MemoryBandwidth> measure_memory_bandwidth(const MemoryBandwidthOptions& options) {
  if (options.buffer_bytes < (size_t{1} << 20)) {
    return invalid_argument("memory bandwidth: buffer of " + std::to_string(options.buffer_bytes) +
                            " bytes is too small; use at least 1 MiB (and far more than the L3 cache for DRAM)");
  }
  if (options.n_passes < 1) {
    return invalid_argument("memory bandwidth: n_passes must be at least 1, got " + std::to_string(options.n_passes));
  }
  const size_t n_bytes = options.buffer_bytes / kStepBytes * kStepBytes;
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t n_alloc_bytes = (n_bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
  std::unique_ptr<uint8_t, FreeDeleter> buffer(static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, n_alloc_bytes)));
  if (buffer == nullptr) {
    return io_error("memory bandwidth: cannot allocate " + std::to_string(n_bytes >> 20) +
                    " MiB; pass a smaller buffer");
  }

  ThreadPool pool(options.n_threads);
  // The CPU's own answer, not cpu_path(): this measures the machine, whatever path the kernels are
  // capped to (LEOAM_CPU_PATH).
  const bool simd = options.allow_simd && __builtin_cpu_supports("avx2");
  const int64_t n_steps = static_cast<int64_t>(n_bytes / kStepBytes);
  uint8_t* base = buffer.get();

  // Each thread writes the slice it will read: pages land on the memory nearest that thread.
  pool.parallel_for(n_steps, [base](int64_t s0, int64_t s1, int) {
    std::memset(base + s0 * kStepBytes, 0x5a, static_cast<size_t>(s1 - s0) * kStepBytes);
  });

  std::vector<uint64_t> sums(static_cast<size_t>(pool.n_threads()), 0);
  auto read_pass = [&] {
    pool.parallel_for(n_steps, [&](int64_t s0, int64_t s1, int thread) {
      const uint8_t* p = base + s0 * kStepBytes;
      const size_t len = static_cast<size_t>(s1 - s0) * kStepBytes;
      sums[static_cast<size_t>(thread)] += simd ? sum_avx2(p, len) : sum_scalar(p, len);
    });
  };

  read_pass();  // warm-up: page tables, TLB, thread wake-up
  MemoryBandwidth out;
  out.buffer_bytes = n_bytes;
  out.n_threads = pool.n_threads();
  out.method = simd ? "avx2" : "scalar";
  for (int pass = 0; pass < options.n_passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    read_pass();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    out.pass_bytes_per_s.push_back(static_cast<double>(n_bytes) / std::max(dt.count(), 1e-9));
  }
  // The sums escape through a volatile store, so the loads cannot be optimized away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;

  std::vector<double> sorted = out.pass_bytes_per_s;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  out.bytes_per_s = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  out.min_bytes_per_s = sorted.front();
  out.max_bytes_per_s = sorted.back();
  return out;
}

}  // namespace leoam
