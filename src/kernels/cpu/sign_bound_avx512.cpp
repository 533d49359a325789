// The sign-refined bound's AVX-512 kernels over slices (sign_bound_kernels.h): rows sit in 32
// int16 lanes, a channel's 32 bits the mask of one masked add of its whole steps (an integer add
// waits one cycle on the one before it, a float add more), 64 rows a pass where a run covers them
// (one broadcast term serves two masked adds), each partial widened by vpmaddwd. Over row words
// this table holds the AVX2 kernels. Why: docs/selection.md#sign-bound-kernels
#include "kernels/cpu/sign_bound_kernels.h"

#include <algorithm>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx512_util.h"  // first: before any include of immintrin.h
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {
namespace {

constexpr int kInt16Channels = 8;  // the channels an int16 partial sum takes

// Calls fn(c, lanes) for channels [c, c + 16) of hd: each whole block with all 16 lanes, then the
// tail's first hd % 16.
template <typename Fn>
[[gnu::always_inline]] LEOAM_AVX512 inline void for_channel_blocks(int hd, Fn fn) {
  int c = 0;
  for (; c + 16 <= hd; c += 16) fn(c, static_cast<__mmask16>(0xffff));
  if (c < hd) fn(c, static_cast<__mmask16>((1u << (hd - c)) - 1u));
}

// group_terms over AVX-512 for G heads: the box's 16 channels a step made once for the G heads,
// then each head's d rounded up to whole steps (SignTerms) for slices_bound_avx512. A head
// whose largest |d| is not finite (a box past f16's range) leaves the group unquantized.
template <int G>
LEOAM_AVX512 void heads_terms_avx512(const SignQuery* heads, const uint16_t* mn16, const uint16_t* mx16, int hd,
                                     SignTerms& t) {
  const __m512 zero = _mm512_setzero_ps();
  const float* qp[G];
  const float* qn[G];
  float* d[G];
  __m512 base[G];
  __m512 largest[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    qp[j] = heads[j].pos;
    qn[j] = heads[j].neg;
    d[j] = t.d.data() + static_cast<int64_t>(j) * hd;
    base[j] = largest[j] = zero;
  }
  // Channels [c, c + 16) where `in` (all of them but in the tail).
  const auto terms = [&](int c, __mmask16 in) LEOAM_AVX512 {
    const __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, mn16 + c));
    const __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, mx16 + c));
    const __m512 lo_pos = _mm512_max_ps(zero, lo);
    const __m512 hi_neg = _mm512_min_ps(zero, hi);
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const __m512 p = _mm512_maskz_loadu_ps(in, qp[j] + c);
      const __m512 n = _mm512_maskz_loadu_ps(in, qn[j] + c);
      const __m512 pos = _mm512_fmadd_ps(p, hi, _mm512_mul_ps(n, lo_pos));
      const __m512 neg = _mm512_fmadd_ps(p, hi_neg, _mm512_mul_ps(n, lo));
      const __m512 dj = _mm512_sub_ps(neg, pos);
      base[j] = _mm512_add_ps(base[j], pos);
      largest[j] = _mm512_max_ps(largest[j], _mm512_abs_ps(dj));
      _mm512_mask_storeu_ps(d[j] + c, in, dj);
    }
  };
  for_channel_blocks(hd, terms);
  t.quantized = true;
  float most[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    t.base[j] = _mm512_reduce_add_ps(base[j]);
    most[j] = _mm512_reduce_max_ps(largest[j]);
    if (!(most[j] < std::numeric_limits<float>::infinity())) t.quantized = false;
    t.step[j] = most[j] / kSignTermSteps;
  }
  if (!t.quantized) return;
  // Each d in whole steps, rounded up, twice in a 32-bit word.
  __m512 per_step[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) per_step[j] = _mm512_set1_ps(most[j] > 0.0f ? kSignTermSteps / most[j] : 0.0f);
  for_channel_blocks(hd, [&](int c, __mmask16 in) LEOAM_AVX512 {
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const __m512 steps = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, d[j] + c), per_step[j]);
      const __m512i up = _mm512_cvt_roundps_epi32(steps, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
      const __m512i twice = _mm512_or_si512(_mm512_and_si512(up, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(up, 16));
      _mm512_mask_storeu_epi32(t.dq.data() + static_cast<int64_t>(j) * hd + c, in, twice);
    }
  });
}

LEOAM_AVX512 void terms_avx512(const SignQuery* heads, int g, const uint16_t* mn, const uint16_t* mx, int hd,
                                     SignTerms& t) {
  detail::for_sign_group(g, [&](auto G) { heads_terms_avx512<G>(heads, mn, mx, hd, t); });
}

// Over sliced signs with AVX-512 and the terms in whole steps (SignTerms::dq): rows in the int16
// lanes, 32 a vector, a channel's 32 bits the mask of one masked add of its steps (broadcast) per
// query head, kInt16Channels channels a partial sum widened into int32 (which cannot overflow: 8
// terms of at most 4095 steps); a row's bound is base + step * its steps. The run's rows are
// summed once, as in the AVX2 path, H halves of a slice word at a time: both (64 rows, one
// broadcast serves two adds) where the run covers both, else the one it covers (a fine layer's
// 32-row box).
//
// sum_rows: rows [r0, r0 + 32 H) of `slice` (r0 % 64 == shift; shift 0 when H == 2) into
// acc[2 h] (the even rows of half h) and acc[2 h + 1] (its odd rows): vpmaddwd widens a partial's
// even and odd lanes, each in one step.
template <int G, int H>
[[gnu::always_inline]] LEOAM_AVX512 inline void sum_rows(const SignTerms& t, const uint64_t* slice, int shift, int hd,
                                                          __m512 (&acc)[4][G]) {
  const __m512i even = _mm512_set1_epi32(1);
  const __m512i odd = _mm512_set1_epi32(1 << 16);
  __m512i sum[2 * H][G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    #pragma GCC unroll 4
    for (int k = 0; k < 2 * H; ++k) sum[k][j] = _mm512_setzero_si512();
  }
  for (int c0 = 0; c0 < hd; c0 += kInt16Channels) {
    const int c1 = std::min(hd, c0 + kInt16Channels);
    __m512i part[H][G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      #pragma GCC unroll 2
      for (int h = 0; h < H; ++h) part[h][j] = _mm512_setzero_si512();
    }
    #pragma GCC unroll 8
    for (int c = c0; c < c1; ++c) {
      const uint64_t w = slice[c] >> shift;
      const __mmask32 m[2] = {static_cast<__mmask32>(w), static_cast<__mmask32>(w >> 32)};
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        const __m512i steps = _mm512_set1_epi32(static_cast<int>(t.dq[static_cast<int64_t>(j) * hd + c]));
        #pragma GCC unroll 2
        for (int h = 0; h < H; ++h) part[h][j] = _mm512_mask_add_epi16(part[h][j], m[h], part[h][j], steps);
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      #pragma GCC unroll 2
      for (int h = 0; h < H; ++h) {
        sum[2 * h][j] = _mm512_add_epi32(sum[2 * h][j], _mm512_madd_epi16(part[h][j], even));
        sum[2 * h + 1][j] = _mm512_add_epi32(sum[2 * h + 1][j], _mm512_madd_epi16(part[h][j], odd));
      }
    }
  }
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    const __m512 step = _mm512_set1_ps(t.step[j]);
    const __m512 base = _mm512_set1_ps(t.base[j]);
    #pragma GCC unroll 4
    for (int k = 0; k < 2 * H; ++k) acc[k][j] = _mm512_fmadd_ps(step, _mm512_cvtepi32_ps(sum[k][j]), base);
  }
}

template <int G>
LEOAM_AVX512 void slices_bound_avx512(const SignTerms& t, const SignSliceWords& signs, std::span<const SignRows> run,
                                      int kv_head, int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  const int64_t run_end = run.back().end;
  __m512 acc[4][G];  // rows [summed, summed + 32 halves), as sum_rows leaves them
  int64_t summed = -1;
  int halves = 0;
  for (int64_t u = 0; u < n; ++u) {
    const SignRows rows = run[u];
    __m512 top[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t r0 = rows.begin / 32 * 32; r0 < rows.end; r0 += 32) {
      if (summed < 0 || r0 < summed || r0 >= summed + 32 * halves) {
        const uint64_t* slice = signs.slice(r0 / 64, kv_head);
        halves = r0 % 64 == 0 && run_end > r0 + 32 ? 2 : 1;
        if (halves == 2) {
          sum_rows<G, 2>(t, slice, 0, hd, acc);
        } else {
          sum_rows<G, 1>(t, slice, static_cast<int>(r0 % 64), hd, acc);
        }
        summed = r0;
      }
      const auto k0 = static_cast<int>((r0 - summed) / 32 * 2);
      // Only the lanes of rows inside the unit count: of rows [r0 + p, r0 + p + 2, ...) (p = 0
      // even, 1 odd), lanes [ceil((first - p) / 2), ceil((end - p) / 2)).
      const int64_t first = std::max<int64_t>(rows.begin - r0, 0);
      const int64_t end = std::min<int64_t>(rows.end - r0, 32);
      #pragma GCC unroll 2
      for (int p = 0; p < 2; ++p) {
        const int64_t a = std::max<int64_t>((first - p + 1) >> 1, 0);
        const int64_t b = (end - p + 1) >> 1;
        const auto in = static_cast<__mmask16>(a < b ? ((1u << b) - 1u) & ~((1u << a) - 1u) : 0u);
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) top[j] = _mm512_mask_max_ps(top[j], in, top[j], acc[k0 + p][j]);
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) best[j * n + u] = _mm512_reduce_max_ps(top[j]);
  }
}

LEOAM_AVX512 void slices_bounds_avx512(const SignTerms& terms, int g, const SignSliceWords& signs,
                                       std::span<const SignRows> run, int kv_head, int hd, float* best) {
  if (!terms.quantized) return detail::sign_bound_kernels_avx2()->slices_bound(terms, g, signs, run, kv_head, hd, best);
  detail::for_sign_group(g, [&](auto G) { slices_bound_avx512<G>(terms, signs, run, kv_head, hd, best); });
}

}  // namespace

const SignBoundKernels* detail::sign_bound_kernels_avx512() {
  static const SignBoundKernels kernels = [] {
    const SignBoundKernels* avx2 = sign_bound_kernels_avx2();
    return SignBoundKernels{avx2->rows_terms, avx2->rows_bound, terms_avx512, slices_bounds_avx512};
  }();
  return &kernels;
}

}  // namespace leoam::kernels

#else

namespace leoam::kernels {
const SignBoundKernels* detail::sign_bound_kernels_avx512() { return nullptr; }
}  // namespace leoam::kernels

#endif
