// Peak rates of the dot-product instructions, measured by tight loops: the compute term of the
// roofline that `leoam bench` compares against (arithmetic per token / peak = the fastest a token
// can be on these instructions).
//   f32 FMA    _mm256_fmadd_ps on 12 independent accumulators, 16 flops each (8 lanes x mul+add)
//   int8 madd  _mm256_maddubs_epi16, _mm256_madd_epi16 with ones, _mm256_add_epi32 into 6
//              accumulators: the quantized matvec's AVX2 int8 dot (ggml's mul_sum_us8_pairs),
//              32 MACs per maddubs; inputs laundered each iteration (an empty asm), no loads.
// The loops use no memory, so the rates are what the execution ports allow, with n_threads
// threads running the same loop at once (per-core rates times cores, minus any frequency drop).
// Nothing else of the kernels is counted (nibble unpacking, scales): a real kernel stays below.
#pragma once

#include <string_view>

namespace leoam::kernels {

struct PeakRateOptions {
  int n_threads = 1;          // <= 0: ThreadPool::default_thread_count()
  double min_seconds = 0.05;  // each timed pass runs at least this long (iterations calibrated)
  int n_passes = 3;           // timed passes per instruction; the median is reported
};

struct PeakRates {
  bool available = false;       // false: the CPU lacks AVX2+FMA; the rates are 0
  int n_threads = 0;
  double f32_flops_per_s = 0;   // AVX2 FMA, median over passes
  double int8_macs_per_s = 0;   // AVX2 vpmaddubsw + vpmaddwd, median over passes
  std::string_view isa = "none";  // "avx2" when measured
};

// Takes about 2 * n_passes * min_seconds plus calibration (~0.4 s at the defaults).
PeakRates measure_peak_rates(const PeakRateOptions& options);

}  // namespace leoam::kernels
