// The sign-refined bound's AVX2+FMA kernels (sign_bound_kernels.h). Over row words a row's
// channels sit in the lanes: its sign bits pick the lanes of d to add, and each row ends in a
// horizontal sum. Over slices 8 rows sit in the lanes, so that no row needs a horizontal sum.
// Why these layouts: docs/selection.md#sign-bound-kernels
#include "kernels/cpu/sign_bound_kernels.h"

#include <algorithm>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
// The sliced kernel's sums are written before they are read (the first row sums them), which GCC
// 12 does not see through: before any include of immintrin.h.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {
namespace {

// Independent float sums the sliced kernel keeps per query head: a masked add waits for the one
// before it in its sum, so a group of 1 or 2 heads sums even and odd channels apart and adds the
// two at the end; 3 or 4 heads are enough sums as they are.
constexpr int chains_for(int g) { return g <= 2 ? 2 : 1; }

// channel_terms_scalar 8 channels a step (both vector paths: a unit of 8 rows costs as much here
// as in its rows), then a scalar tail.
LEOAM_AVX2 float channel_terms_avx2(const float* qp, const float* qn, const uint16_t* mn, const uint16_t* mx,
                                    int hd, float* d) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 base = zero;
  int c = 0;
  for (; c + 8 <= hd; c += 8) {
    const __m256 p = _mm256_loadu_ps(qp + c);
    const __m256 n = _mm256_loadu_ps(qn + c);
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mn + c)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mx + c)));
    const __m256 pos = _mm256_fmadd_ps(p, hi, _mm256_mul_ps(n, _mm256_max_ps(zero, lo)));
    const __m256 neg = _mm256_fmadd_ps(p, _mm256_min_ps(zero, hi), _mm256_mul_ps(n, lo));
    base = _mm256_add_ps(base, pos);
    _mm256_storeu_ps(d + c, _mm256_sub_ps(neg, pos));
  }
  return hsum(base) + ref::sign_channel_terms(qp + c, qn + c, mn + c, mx + c, hd - c, d + c);
}

// kLaneBits.lanes[k][j] = 1 << (8k + j): the bit of channel 8k + j within its 32-bit word.
struct LaneBits {
  alignas(32) uint32_t lanes[4][8];
};
constexpr LaneBits make_lane_bits() {
  LaneBits b{};
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 8; ++j) b.lanes[k][j] = 1u << (8 * k + j);
  }
  return b;
}
constexpr LaneBits kLaneBits = make_lane_bits();

// All ones in the lanes whose bit (`bits`, one per lane) is set in `word` (in every lane).
LEOAM_AVX2 inline __m256 lane_mask(__m256i word, __m256i bits) {
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(word, bits), bits));
}

// group_bound_scalar for G heads (head_dim % 8 == 0): a row's sign masks are built once for the
// G heads, 16 channels a step into two accumulators a head (an 8-channel step ends an odd count).
template <int G>
LEOAM_AVX2 void group_bound_avx2(const float* base, const float* d, const SignRowWords& signs, SignRows rows,
                                 int kv_head, int hd, float* best) {
  __m256i bits[4];
  for (int k = 0; k < 4; ++k) bits[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLaneBits.lanes[k]));
  float top[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) top[j] = -std::numeric_limits<float>::infinity();
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    const uint32_t* words = signs.row(t, kv_head);
    __m256 acc0[G];
    __m256 acc1[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
      const __m256i w = _mm256_set1_epi32(static_cast<int>(words[c / 32]));
      const int k = (c % 32) / 8;
      const __m256 m0 = lane_mask(w, bits[k]);
      const __m256 m1 = lane_mask(w, bits[k + 1]);
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        const float* dj = d + static_cast<int64_t>(j) * hd + c;
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(dj)));
        acc1[j] = _mm256_add_ps(acc1[j], _mm256_and_ps(m1, _mm256_loadu_ps(dj + 8)));
      }
    }
    if (c < hd) {
      const __m256 m0 = lane_mask(_mm256_set1_epi32(static_cast<int>(words[c / 32])), bits[(c % 32) / 8]);
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(d + static_cast<int64_t>(j) * hd + c)));
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = std::max(top[j], base[j] + hsum(_mm256_add_ps(acc0[j], acc1[j])));
  }
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) best[j] = top[j];
}

// group_bound_avx2 for 1 <= g <= kSignMaxGroup heads, unit by unit.
LEOAM_AVX2 void group_bounds_avx2(const SignTerms& terms, int g, const SignRowWords& signs,
                                  std::span<const SignRows> run, int kv_head, int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  float top[kSignMaxGroup];
  for (int64_t u = 0; u < n; ++u) {
    detail::for_sign_group(g, [&](auto G) {
      group_bound_avx2<G>(terms.base, terms.d.data(), signs, run[u], kv_head, hd, top);
    });
    for (int j = 0; j < g; ++j) best[j * n + u] = top[j];
  }
}

// Over sliced signs (SignSliceWords): 8 rows in the lanes, a channel's 8 bits tested lane by lane
// pick the lanes that get its d; the rows' sums need no horizontal add, only each unit's max.
// The run's rows are summed once, 8 at a time: the units that share a run of 8 take its lanes.
template <int G>
LEOAM_AVX2 void slices_bound_avx2(const float* base, const float* d, const SignSliceWords& signs,
                                  std::span<const SignRows> run, int kv_head, int hd, float* best) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 none = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const auto n = static_cast<int64_t>(run.size());
  __m256 acc[G];
  int64_t summed = -1;  // the first row of the 8 whose sums are in acc
  for (int64_t u = 0; u < n; ++u) {
    const SignRows rows = run[u];
    __m256 top[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = none;
    for (int64_t r0 = rows.begin / 8 * 8; r0 < rows.end; r0 += 8) {
      if (r0 != summed) {
        const uint64_t* slice = signs.slice(r0 / 64, kv_head);
        const int shift = static_cast<int>(r0 % 64);
        constexpr int kChains = chains_for(G);
        __m256 chain[kChains][G];
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) {
          chain[0][j] = _mm256_set1_ps(base[j]);
          if constexpr (kChains == 2) chain[1][j] = _mm256_setzero_ps();
        }
        const auto add_channel = [&](int k, int c) LEOAM_AVX2 {
          const __m256 m = lane_mask(_mm256_set1_epi32(static_cast<int>((slice[c] >> shift) & 0xffu)), lane_bit);
          #pragma GCC unroll 4
          for (int j = 0; j < G; ++j) {
            chain[k][j] =
                _mm256_add_ps(chain[k][j], _mm256_and_ps(m, _mm256_broadcast_ss(d + static_cast<int64_t>(j) * hd + c)));
          }
        };
        int c = 0;
        for (; c + kChains <= hd; c += kChains) {
          #pragma GCC unroll 2
          for (int k = 0; k < kChains; ++k) add_channel(k, c + k);
        }
        for (; c < hd; ++c) add_channel(0, c);
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) acc[j] = kChains == 2 ? _mm256_add_ps(chain[0][j], chain[kChains - 1][j]) : chain[0][j];
        summed = r0;
      }
      // Only the lanes of rows inside the unit count.
      const int64_t lo = std::max<int64_t>(rows.begin - r0, 0);
      const int64_t hi = std::min<int64_t>(rows.end - r0, 8);
      const __m256 in = _mm256_castsi256_ps(
          _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(lo) - 1)),
                           _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), lane)));
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) top[j] = _mm256_max_ps(top[j], _mm256_blendv_ps(none, acc[j], in));
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) best[j * n + u] = hmax(top[j]);
  }
}

LEOAM_AVX2 void slices_bounds_avx2(const SignTerms& terms, int g, const SignSliceWords& signs,
                                   std::span<const SignRows> run, int kv_head, int hd, float* best) {
  detail::for_sign_group(g, [&](auto G) {
    slices_bound_avx2<G>(terms.base, terms.d.data(), signs, run, kv_head, hd, best);
  });
}

// The terms head by head (a group's heads share nothing but the box, which stays in L1).
LEOAM_AVX2 void terms_avx2(const SignQuery* heads, int g, const uint16_t* mn, const uint16_t* mx, int hd,
                           SignTerms& t) {
  for (int j = 0; j < g; ++j) {
    t.base[j] = channel_terms_avx2(heads[j].pos, heads[j].neg, mn, mx, hd, t.d.data() + static_cast<int64_t>(j) * hd);
  }
  t.quantized = false;
}

constexpr SignBoundKernels kAvx2Kernels = {terms_avx2, group_bounds_avx2, terms_avx2, slices_bounds_avx2};

}  // namespace

const SignBoundKernels* detail::sign_bound_kernels_avx2() { return &kAvx2Kernels; }

}  // namespace leoam::kernels

#else

namespace leoam::kernels {
const SignBoundKernels* detail::sign_bound_kernels_avx2() { return nullptr; }
}  // namespace leoam::kernels

#endif
