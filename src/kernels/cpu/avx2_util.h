// The AVX2 building blocks the CPU kernels share: the target attribute that lets one function use
// AVX2, FMA and F16C in a binary built for any x86-64 (callers check cpu_path() first), a
// prefetch of the next rows, a 4-byte broadcast, a horizontal sum, and a vectorized exp.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <limits>

#define LEOAM_HAVE_X86 1
#define LEOAM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace leoam::kernels {

// Prefetches the cache lines of [p, p + kBytes) (one hint per 64 bytes; a region that a line
// boundary splits leaves its last line to the next call). The Q4_0 and Q8_0 dot kernels call it
// with p in the group of rows after their own: a group of 4 rows is 4 short streams (2304 bytes
// each for Q4_0 at 4096 columns, 4352 for Q8_0) that end before the hardware prefetchers ramp
// up, while the rows of a matrix are contiguous, so the next group is where the next loads go. A
// hint past the matrix end is harmless. Decode from DRAM reads faster so, on some CPUs much
// faster (docs/cpu.md#8-bit-dot-products).
template <size_t kBytes>
inline void prefetch_bytes(const void* p) {
  for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

// The 4 bytes at p in every 32-bit lane.
LEOAM_AVX2 inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The sum of the 8 lanes.
LEOAM_AVX2 inline float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// The largest of the 8 lanes.
LEOAM_AVX2 inline float hmax(__m256 v) {
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

// exp(x) for 8 lanes. Range reduction x = k ln2 + r, |r| <= ln2/2, with ln2 split in a part
// exact in float (so k * kLn2Hi is exact for |k| <= 128) and a correction; then
// exp(r) = the degree-7 Taylor polynomial, whose truncation error r^8/8! <= 5.3e-9 relative is
// below float rounding, and 2^k is built in the exponent bits. The result is within a few ulp
// (tests bound it at 1.5e-7 relative). Below -87.33 (exp < FLT_MIN) it returns 0; above 88.376,
// where 2^k would need k = 128, +inf (the true value is then >= 2.4e38, within 30% of
// overflow); NaN returns 0 or +inf.
LEOAM_AVX2 inline __m256 exp8(__m256 x) {
  constexpr float kMinX = -87.33654f;          // ln(FLT_MIN)
  constexpr float kMaxX = 88.37626266479492f;  // 127.5 ln 2: keeps k <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 8 significant bits: k * kLn2Hi exact
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMinX)), _mm256_set1_ps(kMaxX));
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  // Horner from 1/7! down to 1/0!.
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kMinX), _CMP_LT_OQ), y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                          _mm256_cmp_ps(x, _mm256_set1_ps(kMaxX), _CMP_GT_OQ));
}

}  // namespace leoam::kernels

#endif
