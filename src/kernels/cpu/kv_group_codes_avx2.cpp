// The AVX2 path of kv_group_codes.h: 8 elements a step, the rest by the scalar reference.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/kv_group_codes.h"

#ifdef LEOAM_HAVE_X86

namespace leoam::kernels {

namespace {

// Calls body(e0, min8, scale8, qg, i) for each 8 elements from e0 in [0, n8), n8 a multiple of 8,
// with their headers and their codes at index i of qg: 8 headers of their own (kGroup 1, codes
// end to end), or one for all (group a multiple of 8: kGroup 32, the codec's, or 0 for others).
template <int kGroup, class Q, class Body>
LEOAM_AVX2 inline void for_each8(const float* min, const float* scale, CodeLayout layout, int64_t n8, Q* q, Body&& body) {
  if constexpr (kGroup == 1) {
    for (int64_t e0 = 0; e0 < n8; e0 += 8) body(e0, _mm256_loadu_ps(min + e0), _mm256_loadu_ps(scale + e0), q, e0);
  } else {
    const int64_t group = kGroup == 0 ? layout.group : kGroup;
    const int64_t n_full = n8 / group * group;
    int64_t j = 0, e0 = 0;
    for (; e0 < n_full; ++j) {
      const __m256 min8 = _mm256_set1_ps(min[j]), scale8 = _mm256_set1_ps(scale[j]);
      Q* qg = q + j * static_cast<int64_t>(layout.group_bytes);
      const int64_t i0 = layout.group_bytes == 0 ? 0 : e0;
      const int64_t end = e0 + group;
#pragma GCC unroll 4
      for (; e0 < end; e0 += 8) body(e0, min8, scale8, qg, e0 - i0);
    }
    if (e0 < n8) {  // the whole 8s of a short last group
      const __m256 min8 = _mm256_set1_ps(min[j]), scale8 = _mm256_set1_ps(scale[j]);
      Q* qg = q + j * static_cast<int64_t>(layout.group_bytes);
      const int64_t i0 = layout.group_bytes == 0 ? 0 : e0;
      for (; e0 < n8; e0 += 8) body(e0, min8, scale8, qg, e0 - i0);
    }
  }
}

// Calls fn.template operator()<bits, group>() with both as template arguments (group as
// for_each8 takes it), so that the loops carry no branch on them; false for a layout the vector
// loops do not take.
template <class Fn>
inline bool with_layout(CodeLayout layout, Fn&& fn) {
  const bool per_lane = layout.group == 1 && layout.group_bytes == 0;
  if (!per_lane && layout.group % 8 != 0) return false;
  const auto with_group = [&]<int kBits>() {
    if (per_lane) {
      fn.template operator()<kBits, 1>();
    } else if (layout.group == 32) {
      fn.template operator()<kBits, 32>();
    } else {
      fn.template operator()<kBits, 0>();
    }
  };
  layout.bits == 8 ? with_group.template operator()<8>() : with_group.template operator()<4>();
  return true;
}

// The elements after n8 (fewer than 8, so in one group) as a layout of their own, for the
// reference: fn(their codes, their layout, their header's index).
template <class Q, class Fn>
inline void for_tail(Q* q, CodeLayout layout, int64_t n8, int64_t n, Fn&& fn) {
  if (n8 == n) return;
  const int64_t h = n8 / layout.group;
  const int64_t i = layout.group_bytes == 0 ? n8 : n8 - h * layout.group;
  Q* qt = q + h * static_cast<int64_t>(layout.group_bytes) + (layout.bits == 8 ? i : i / 2);
  fn(qt, CodeLayout{layout.bits, layout.group, 0}, h);
}

// The 8 codes in the low 8 bytes of `codes8` -> 8 floats min + scale * code, as the reference.
LEOAM_AVX2 inline __m256 decode8(__m128i codes8, __m256 scale, __m256 min) {
  return _mm256_add_ps(min, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes8))));
}

// 8 int4 codes, 4 bytes at q (element 2i in the low nibble of q[i]) -> 8 bytes in order.
LEOAM_AVX2 inline __m128i unpack_nibbles8(const uint8_t* q) {
  int32_t packed;
  std::memcpy(&packed, q, sizeof(packed));
  const __m128i v = _mm_cvtsi32_si128(packed);
  const __m128i mask = _mm_set1_epi8(0x0f);
  return _mm_unpacklo_epi8(_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask));
}

// The 8 codes from index e (a multiple of 8) of the packed codes at q, as 8 bytes in the low half.
template <int kBits>
LEOAM_AVX2 inline __m128i load_codes8(const uint8_t* q, int64_t e) {
  if constexpr (kBits == 8) {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + e));
  } else {
    return unpack_nibbles8(q + e / 2);
  }
}

// The reference's code for 8 lanes, each with its own header (scale_nz: the lanes whose scale is
// not 0, the others coded 0): IEEE division rounds as the scalar's does.
LEOAM_AVX2 inline __m256i codes8(__m256 x, __m256 min, __m256 scale, __m256 scale_nz, double levels, bool keep_signs) {
  const __m256d half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0), top = _mm256_set1_pd(levels);
  __m128i c4[2];
  for (int k = 0; k < 2; ++k) {
    const auto part = [k](__m256 v) { return _mm256_cvtps_pd(k == 0 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1)); };
    const __m256d q = _mm256_add_pd(_mm256_div_pd(_mm256_sub_pd(part(x), part(min)), part(scale)), half);
    c4[k] = _mm256_cvttpd_epi32(_mm256_and_pd(_mm256_cmp_pd(q, one, _CMP_GE_OQ), _mm256_min_pd(q, top)));
  }
  __m256i c = _mm256_set_m128i(c4[1], c4[0]);
  if (keep_signs) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 dec = _mm256_add_ps(min, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(c)));
    const __m256i negative = _mm256_srai_epi32(_mm256_castps_si256(x), 31);
    const __m256i up = _mm256_andnot_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_LT_OQ)));
    const __m256i down = _mm256_and_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_GT_OQ)));
    c = _mm256_add_epi32(_mm256_sub_epi32(c, up), down);  // masks are -1
  }
  return _mm256_and_si256(c, _mm256_castps_si256(scale_nz));
}

// The min and max of x[n], n a multiple of 8 (> 0): 8 lanes side by side, then a tree.
LEOAM_AVX2 inline void range8(const float* x, int64_t n, float* lo, float* hi) {
  __m256 l8 = _mm256_loadu_ps(x), h8 = l8;
  for (int64_t i = 8; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    l8 = _mm256_min_ps(l8, v);
    h8 = _mm256_max_ps(h8, v);
  }
  __m128 l4 = _mm_min_ps(_mm256_castps256_ps128(l8), _mm256_extractf128_ps(l8, 1));
  __m128 h4 = _mm_max_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  l4 = _mm_min_ps(l4, _mm_movehl_ps(l4, l4));
  h4 = _mm_max_ps(h4, _mm_movehl_ps(h4, h4));
  *lo = _mm_cvtss_f32(_mm_min_ss(l4, _mm_movehdup_ps(l4)));
  *hi = _mm_cvtss_f32(_mm_max_ss(h4, _mm_movehdup_ps(h4)));
}

LEOAM_AVX2 void group_ranges_avx2(const float* x, int64_t n, int64_t group, float* lo, float* hi) {
  if (group % 8 != 0) return ref::kv_code_kernels().group_ranges(x, n, group, lo, hi);
  int64_t j = 0, i0 = 0;
  for (; i0 + group <= n; ++j, i0 += group) range8(x + i0, group, lo + j, hi + j);
  if (i0 == n) return;
  // A short last group: its whole 8s by vector, the rest by the reference.
  const int64_t n8 = (n - i0) / 8 * 8;
  if (n8 == 0) return ref::kv_code_kernels().group_ranges(x + i0, n - i0, group, lo + j, hi + j);
  range8(x + i0, n8, lo + j, hi + j);
  if (i0 + n8 == n) return;
  float l, h;
  ref::kv_code_kernels().group_ranges(x + i0 + n8, n - i0 - n8, group, &l, &h);
  lo[j] = std::min(lo[j], l);
  hi[j] = std::max(hi[j], h);
}

LEOAM_AVX2 void column_range_avx2(const float* x, int64_t t, int64_t n, float* lo, float* hi) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t e0 = 0; e0 < n8; e0 += 8) {
    __m256 l8 = _mm256_loadu_ps(x + e0), h8 = l8;
    for (int64_t r = 1; r < t; ++r) {
      const __m256 v = _mm256_loadu_ps(x + r * n + e0);
      l8 = _mm256_min_ps(l8, v);
      h8 = _mm256_max_ps(h8, v);
    }
    _mm256_storeu_ps(lo + e0, l8);
    _mm256_storeu_ps(hi + e0, h8);
  }
  for (int64_t e = n8; e < n; ++e) {
    float l = x[e], h = x[e];
    for (int64_t r = 1; r < t; ++r) {
      const float v = x[r * n + e];
      l = std::min(l, v);
      h = std::max(h, v);
    }
    lo[e] = l;
    hi[e] = h;
  }
}

template <int kBits, int kGroup>
LEOAM_AVX2 void encode8(const float* x, const float* min, const float* scale, CodeLayout layout, int64_t n8,
                        bool keep_signs, uint8_t* q) {
  constexpr double kLevels = kBits == 8 ? 255.0 : 15.0;
  for_each8<kGroup>(min, scale, layout, n8, q, [&](int64_t e0, __m256 min8, __m256 scale8, uint8_t* qg, int64_t i) LEOAM_AVX2 {
    const __m256 nz = _mm256_cmp_ps(scale8, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    alignas(32) int32_t c[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), codes8(_mm256_loadu_ps(x + e0), min8, scale8, nz, kLevels, keep_signs));
    if constexpr (kBits == 8) {
      for (int k = 0; k < 8; ++k) qg[i + k] = static_cast<uint8_t>(c[k]);
    } else {
      for (int k = 0; k < 4; ++k) qg[i / 2 + k] = static_cast<uint8_t>(c[2 * k] | (c[2 * k + 1] << 4));
    }
  });
}

LEOAM_AVX2 void encode_avx2(const float* x, const float* min, const float* scale, CodeLayout layout, int64_t n,
                            bool keep_signs, uint8_t* q) {
  const KvCodeKernels& ref = ref::kv_code_kernels();
  const int64_t n8 = n / 8 * 8;
  const bool vector = with_layout(layout, [&]<int kBits, int kGroup>() LEOAM_AVX2 {
    encode8<kBits, kGroup>(x, min, scale, layout, n8, keep_signs, q);
  });
  if (!vector) return ref.encode(x, min, scale, layout, n, keep_signs, q);
  for_tail(q, layout, n8, n, [&](uint8_t* qt, CodeLayout lt, int64_t h) {
    ref.encode(x + n8, min + h, scale + h, lt, n - n8, keep_signs, qt);
  });
}

// Elements [0, n8) of y (kF16: u16, else float), n8 a multiple of 8.
template <int kBits, int kGroup, bool kF16, class Out>
LEOAM_AVX2 void decode8_all(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n8, Out* y) {
  for_each8<kGroup>(min, scale, layout, n8, q, [&](int64_t e0, __m256 min8, __m256 scale8, const uint8_t* qg, int64_t i) LEOAM_AVX2 {
    const __m256 v = decode8(load_codes8<kBits>(qg, i), scale8, min8);
    if constexpr (kF16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + e0), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    } else {
      _mm256_storeu_ps(y + e0, v);
    }
  });
}

template <bool kF16, class Out>
LEOAM_AVX2 void decode_avx2(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n, Out* y) {
  const auto decode_ref = [](const uint8_t* qr, CodeLayout lr, const float* mr, const float* sr, int64_t nr, Out* yr) {
    if constexpr (kF16) {
      ref::kv_code_kernels().decode_f16(qr, lr, mr, sr, nr, yr);
    } else {
      ref::kv_code_kernels().decode_f32(qr, lr, mr, sr, nr, yr);
    }
  };
  const int64_t n8 = n / 8 * 8;
  const bool vector = with_layout(layout, [&]<int kBits, int kGroup>() LEOAM_AVX2 {
    decode8_all<kBits, kGroup, kF16>(q, layout, min, scale, n8, y);
  });
  if (!vector) return decode_ref(q, layout, min, scale, n, y);
  for_tail(q, layout, n8, n, [&](const uint8_t* qt, CodeLayout lt, int64_t h) {
    decode_ref(qt, lt, min + h, scale + h, n - n8, y + n8);
  });
}

}  // namespace

const KvCodeKernels& kv_code_kernels_avx2() {
  static constexpr KvCodeKernels kKernels{group_ranges_avx2, column_range_avx2, encode_avx2, decode_avx2<false, float>,
                                          decode_avx2<true, uint16_t>};
  return kKernels;
}

}  // namespace leoam::kernels

#endif  // LEOAM_HAVE_X86
