#include "kernels/cpu/peak_rate.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace leoam::kernels {
namespace {

// 12 FMA chains: more than latency x ports (4 cycles x 2 ports on current x86 cores). 6 madd
// chains: only the 1-cycle add is loop-carried, so a few suffice; GCC 12 spilled accumulators to
// the stack with 8 or 10 (seen in objdump), which put store-forwarding latency in the loop.
constexpr int kFmaChains = 12;
constexpr int kMaddChains = 6;
constexpr double kFlopsPerFma = 16.0;    // 8 f32 lanes x (multiply + add)
constexpr double kMacsPerMaddubs = 32.0;  // 32 u8 x s8 products, summed in pairs

// n_iter x kFmaChains FMAs. acc = acc * a + b converges to b / (1 - a) = 1: no overflow, no
// denormals. Returns the sum of the accumulators so that the work is observable.
__attribute__((target("avx2,fma"))) float fma_loop(int64_t n_iter, float seed) {
  __m256 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_set1_ps(seed + 0.01f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999f);
  const __m256 b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < n_iter; ++i) {
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kFmaChains; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// n_iter x kMaddChains int8 dot steps: maddubs(x, w) -> madd(., 1) -> acc += . The empty asm tells
// the compiler x changed before each maddubs (it emits no instruction), so the products cannot be
// hoisted out of the loop or shared between chains.
__attribute__((target("avx2"))) int32_t madd_loop(int64_t n_iter, int8_t seed) {
  __m256i acc[kMaddChains];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  __m256i x = _mm256_set1_epi8(static_cast<char>(seed & 0x7f));
  const __m256i w = _mm256_set1_epi8(static_cast<char>(seed));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n_iter; ++i) {
    for (int j = 0; j < kMaddChains; ++j) {
      asm volatile("" : "+x"(x));
      const __m256i pairs = _mm256_maddubs_epi16(x, w);  // [16] s16: x[2k] w[2k] + x[2k+1] w[2k+1]
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));
    }
  }
  __m256i s = acc[0];
  for (int j = 1; j < kMaddChains; ++j) s = _mm256_add_epi32(s, acc[j]);
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  int32_t total = 0;
  for (int32_t v : lanes) total += v;
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `loop(n_iter, thread)` on every thread of `pool` at once, n_passes times, and returns the
// median rate in ops/s, where one iteration is ops_per_iter ops on each thread. The iteration
// count is calibrated on the calling thread so that a pass lasts about min_seconds.
template <typename Loop>
double measure_rate(ThreadPool& pool, const PeakRateOptions& options, double ops_per_iter, Loop loop) {
  int64_t n_iter = 1 << 12;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    loop(n_iter, 0);
    const double dt = seconds_since(t0);
    if (dt >= options.min_seconds * 0.25 || n_iter >= (int64_t{1} << 40)) {
      n_iter = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n_iter) * options.min_seconds / std::max(dt, 1e-9)));
      break;
    }
    n_iter *= dt < options.min_seconds * 0.01 ? 16 : 2;
  }
  const int n_threads = pool.n_threads();
  std::vector<double> rates;
  for (int pass = 0; pass < std::max(1, options.n_passes); ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n_threads, [&](int64_t b, int64_t e, int thread) {
      for (int64_t i = b; i < e; ++i) loop(n_iter, thread);
    });
    const double dt = seconds_since(t0);
    rates.push_back(static_cast<double>(n_iter) * ops_per_iter * n_threads / std::max(dt, 1e-9));
  }
  return median(std::move(rates));
}

}  // namespace

PeakRates measure_peak_rates(const PeakRateOptions& options) {
  PeakRates out;
  ThreadPool pool(options.n_threads);
  out.n_threads = pool.n_threads();
  // The CPU's own answer, not cpu_path(): this measures the machine's instructions.
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return out;
  out.available = true;
  out.isa = "avx2";

  // Each loop's result lands in its thread's slot and the slots escape through a volatile store,
  // so the loops are observable and cannot be dropped.
  std::vector<double> sink(static_cast<size_t>(out.n_threads), 0.0);
  out.f32_flops_per_s = measure_rate(pool, options, kFmaChains * kFlopsPerFma, [&sink](int64_t n_iter, int thread) {
    sink[static_cast<size_t>(thread)] += fma_loop(n_iter, 0.5f);
  });
  out.int8_macs_per_s = measure_rate(pool, options, kMaddChains * kMacsPerMaddubs, [&sink](int64_t n_iter, int thread) {
    sink[static_cast<size_t>(thread)] += madd_loop(n_iter, 3);
  });
  volatile double escape = 0;
  for (double v : sink) escape = escape + v;
  return out;
}

}  // namespace leoam::kernels
