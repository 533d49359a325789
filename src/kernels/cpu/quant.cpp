// The fast row kernels and their dispatch (cpu_path()). On the AVX2 path each type has a
// vector dequantize_row (bitwise equal to ref::dequantize_row) and a fused dequantize-and-dot
// that never materialises the row. Elsewhere the scalar references run. The AVX2 functions carry
// a target attribute, so this file needs no special flags and the binary runs on any x86-64.
#include "kernels/cpu/quant.h"

#include <cassert>
#include <cstring>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/quant_blocks.h"

#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {
namespace {

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using DotFn = float (*)(const void* row, const float* x, int64_t n);

#ifdef LEOAM_HAVE_X86

// 8 bytes at p into the low half of a vector (sign/zero-extending loads then need no shuffle).
LEOAM_AVX2 inline __m128i load8(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }
// 8 bytes at p zero-extended to 8 x 32-bit lanes.
LEOAM_AVX2 inline __m256i load_u8x8_epi32(const uint8_t* p) { return _mm256_cvtepu8_epi32(load8(p)); }

// One f16 scale -> f32 with F16C (exact, same value as f16_to_f32 but branch-free).
LEOAM_AVX2 inline float f16_scale(uint16_t h) { return _cvtsh_ss(h); }

// The low 8 signed bytes of v -> 8 floats.
LEOAM_AVX2 inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// ---- F32 ----

LEOAM_AVX2 float dot_f32_avx2(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const float*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// ---- F16 / BF16: 8 halves -> 8 floats, exact ----

LEOAM_AVX2 inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
LEOAM_AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

template <bool kBf16>
LEOAM_AVX2 inline __m256 load_half8(const uint16_t* p) {
  if constexpr (kBf16) {
    return load_bf16x8(p);
  } else {
    return load_f16x8(p);
  }
}

template <bool kBf16>
inline float half_to_f32(uint16_t h) {
  if constexpr (kBf16) {
    return bf16_to_f32(h);
  } else {
    return f16_to_f32(h);
  }
}

template <bool kBf16>
LEOAM_AVX2 void dequantize_half_avx2(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_half8<kBf16>(h + i));
  for (; i < n; ++i) dst[i] = half_to_f32<kBf16>(h[i]);
}

template <bool kBf16>
LEOAM_AVX2 float dot_half_avx2(const void* row, const float* x, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(load_half8<kBf16>(h + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load_half8<kBf16>(h + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load_half8<kBf16>(h + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load_half8<kBf16>(h + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_half8<kBf16>(h + i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += half_to_f32<kBf16>(h[i]) * x[i];
  return sum;
}

// ---- Q8_0 ----

// The 32 quants of a Q8_0 block as 4 x 8 floats.
struct Q8Floats {
  __m256 v[4];
};
LEOAM_AVX2 inline Q8Floats q8_0_quants(const BlockQ8_0& b) {
  return {{i8x8_to_ps(load8(b.qs)), i8x8_to_ps(load8(b.qs + 8)), i8x8_to_ps(load8(b.qs + 16)),
           i8x8_to_ps(load8(b.qs + 24))}};
}

// ---- Q4_0 ----

// The 32 values q - 8 of a Q4_0 block as 4 x 8 floats, in element order. Zero-extending the
// bytes straight from memory to 32-bit lanes and splitting nibbles there costs 2 shuffles
// instead of 6 for the byte-wise split.
LEOAM_AVX2 inline Q8Floats q4_0_quants(const BlockQ4_0& b) {
  const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs)));      // bytes 0..7
  const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8)));  // 8..15
  const __m256i mask = _mm256_set1_epi32(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  return {{_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b0, mask), eight)),   // elements 0..7
           _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b1, mask), eight)),   // 8..15
           _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b0, 4), eight)),     // 16..23
           _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b1, 4), eight))}};   // 24..31
}

// Dequantization and dot product of any 32-element block type with one f16 scale `d`, given the
// function that turns a block's quants into 4 x 8 floats (Q8_0, Q4_0).
template <typename Block, Q8Floats (*kQuants)(const Block&)>
LEOAM_AVX2 void dequantize_d32_avx2(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const Block*>(src);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256 d = _mm256_set1_ps(f16_scale(blocks[b].d));
    const Q8Floats q = kQuants(blocks[b]);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + b * 32 + 8 * k, _mm256_mul_ps(q.v[k], d));
  }
}

template <typename Block, Q8Floats (*kQuants)(const Block&)>
LEOAM_AVX2 float dot_d32_avx2(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const Block*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t n_blocks = n / 32;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * 32;
    const Q8Floats q = kQuants(blocks[b]);
    const __m256 s01 = _mm256_fmadd_ps(q.v[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(q.v[0], _mm256_loadu_ps(xb)));
    const __m256 s23 =
        _mm256_fmadd_ps(q.v[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(q.v[2], _mm256_loadu_ps(xb + 16)));
    const __m256 d = _mm256_set1_ps(f16_scale(blocks[b].d));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, _mm256_add_ps(s01, s23), acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, _mm256_add_ps(s01, s23), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}
static_assert(kQK8_0 == 32 && kQK4_0 == 32, "dequantize_d32_avx2 and dot_d32_avx2 assume 32-element blocks");

// ---- Q4_K ----
//
// The nibbles are split in 32-bit lanes: 8 bytes are zero-extended straight from memory, then
// `& 15` and `>> 4` give 8 elements of the low and 8 of the high sub-block, with no byte shuffles.

// Elements [8k, 8k + 8) of the low (lo) and high (hi) sub-block of qs group `q` (32 bytes).
struct Q4KOctet {
  __m256 lo;
  __m256 hi;
};
LEOAM_AVX2 inline Q4KOctet q4_k_octet(const uint8_t* q, int k) {
  const __m256i b = load_u8x8_epi32(q + 8 * k);
  return {_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0x0F))),
          _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4))};
}

LEOAM_AVX2 void dequantize_q4_k_avx2(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = f16_scale(blk.d);
    const float dmin = f16_scale(blk.dmin);
    for (int g = 0; g < 4; ++g) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      q4_k_scale_min(2 * g, blk.scales, &sc_lo, &m_lo);
      q4_k_scale_min(2 * g + 1, blk.scales, &sc_hi, &m_hi);
      const __m256 d_lo = _mm256_set1_ps(d * static_cast<float>(sc_lo));
      const __m256 min_lo = _mm256_set1_ps(dmin * static_cast<float>(m_lo));
      const __m256 d_hi = _mm256_set1_ps(d * static_cast<float>(sc_hi));
      const __m256 min_hi = _mm256_set1_ps(dmin * static_cast<float>(m_hi));
      float* y = dst + b * kQK_K + 64 * g;
      for (int k = 0; k < 4; ++k) {
        const Q4KOctet q = q4_k_octet(blk.qs + 32 * g, k);
        _mm256_storeu_ps(y + 8 * k, _mm256_fmsub_ps(d_lo, q.lo, min_lo));
        _mm256_storeu_ps(y + 32 + 8 * k, _mm256_fmsub_ps(d_hi, q.hi, min_hi));
      }
    }
  }
}

// sum over a sub-block of (d*sc) q x - (dmin*m) x = d*sc * sum(q x) - dmin*m * sum(x).
LEOAM_AVX2 float dot_q4_k_avx2(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(row);
  __m256 acc = _mm256_setzero_ps();   // sum of d*sc * q*x
  __m256 accm = _mm256_setzero_ps();  // sum of dmin*m * x
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = f16_scale(blk.d);
    const float dmin = f16_scale(blk.dmin);
    const float* xb = x + b * kQK_K;
    for (int g = 0; g < 4; ++g) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      q4_k_scale_min(2 * g, blk.scales, &sc_lo, &m_lo);
      q4_k_scale_min(2 * g + 1, blk.scales, &sc_hi, &m_hi);
      const float* xl = xb + 64 * g;
      const float* xh = xl + 32;
      __m256 qx_lo = _mm256_setzero_ps(), qx_hi = _mm256_setzero_ps();
      __m256 x_lo = _mm256_setzero_ps(), x_hi = _mm256_setzero_ps();
      for (int k = 0; k < 4; ++k) {
        const Q4KOctet q = q4_k_octet(blk.qs + 32 * g, k);
        const __m256 vl = _mm256_loadu_ps(xl + 8 * k);
        const __m256 vh = _mm256_loadu_ps(xh + 8 * k);
        qx_lo = _mm256_fmadd_ps(q.lo, vl, qx_lo);
        qx_hi = _mm256_fmadd_ps(q.hi, vh, qx_hi);
        x_lo = _mm256_add_ps(x_lo, vl);
        x_hi = _mm256_add_ps(x_hi, vh);
      }
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc_lo)), qx_lo, acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc_hi)), qx_hi, acc);
      accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * static_cast<float>(m_lo)), x_lo, accm);
      accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * static_cast<float>(m_hi)), x_hi, accm);
    }
  }
  return hsum(acc) - hsum(accm);
}

// ---- Q6_K ----
//
// Decoded in 32-bit lanes, 8 values of l at a time: ql[l], ql[l + 32] and qh[l] are
// zero-extended from memory and give elements l, l + 32, l + 64 and l + 96 of the half (see
// BlockQ6_K), with per-lane shifts that cannot leak bits between bytes.

// Elements {l, l + 32, l + 64, l + 96} + [0, 8) of a half, as q - 32 in floats.
struct Q6KOctets {
  __m256 v[4];
};
LEOAM_AVX2 inline Q6KOctets q6_k_octets(const uint8_t* ql, const uint8_t* qh, int l) {
  const __m256i a = load_u8x8_epi32(ql + l);
  const __m256i b = load_u8x8_epi32(ql + l + 32);
  const __m256i h = load_u8x8_epi32(qh + l);
  const __m256i m4 = _mm256_set1_epi32(0x0F);
  const __m256i m2 = _mm256_set1_epi32(0x30);  // the two high bits, moved to bits 4-5
  const __m256i k32 = _mm256_set1_epi32(32);
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi32(h, 4), m2));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi32(h, 2), m2));
  const __m256i q2 = _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(h, m2));
  const __m256i q3 = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_and_si256(_mm256_srli_epi32(h, 2), m2));
  return {{_mm256_cvtepi32_ps(_mm256_sub_epi32(q0, k32)), _mm256_cvtepi32_ps(_mm256_sub_epi32(q1, k32)),
           _mm256_cvtepi32_ps(_mm256_sub_epi32(q2, k32)), _mm256_cvtepi32_ps(_mm256_sub_epi32(q3, k32))}};
}

LEOAM_AVX2 void dequantize_q6_k_avx2(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16_scale(blk.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      float* y = dst + b * kQK_K + 128 * h;
      for (int l = 0; l < 32; l += 8) {
        const Q6KOctets q = q6_k_octets(ql, qh, l);
        for (int k = 0; k < 4; ++k) {
          const __m256 scale = _mm256_set1_ps(d * static_cast<float>(sc[l / 16 + 2 * k]));
          _mm256_storeu_ps(y + l + 32 * k, _mm256_mul_ps(q.v[k], scale));
        }
      }
    }
  }
}

LEOAM_AVX2 float dot_q6_k_avx2(const void* row, const float* x, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16_scale(blk.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      const float* xh = x + b * kQK_K + 128 * h;
      for (int is = 0; is < 2; ++is) {  // l in [16 is, 16 is + 16): scales sc[is + 2k]
        const int l = 16 * is;
        const Q6KOctets qa = q6_k_octets(ql, qh, l);
        const Q6KOctets qb = q6_k_octets(ql, qh, l + 8);
        __m256 s[4];
        for (int k = 0; k < 4; ++k) {
          s[k] = _mm256_fmadd_ps(qb.v[k], _mm256_loadu_ps(xh + 32 * k + l + 8),
                                 _mm256_mul_ps(qa.v[k], _mm256_loadu_ps(xh + 32 * k + l)));
        }
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 0])), s[0], acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 2])), s[1], acc1);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 4])), s[2], acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 6])), s[3], acc1);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

#endif  // LEOAM_HAVE_X86

struct RowKernels {
  DequantizeFn dequantize = nullptr;
  DotFn dot = nullptr;
};

// The kernels for `type` on this CPU; {nullptr, nullptr} means "use the reference".
RowKernels select_kernels(GgmlType type) {
#ifdef LEOAM_HAVE_X86
  // The AVX2 kernels also serve the AVX-512 path: the float dots are bound by the weight bytes.
  if (cpu_path() >= CpuPath::kAvx2) {
    switch (type) {
      case GgmlType::kF32:
        return {dequantize_f32, dot_f32_avx2};
      case GgmlType::kF16:
        return {dequantize_half_avx2<false>, dot_half_avx2<false>};
      case GgmlType::kBF16:
        return {dequantize_half_avx2<true>, dot_half_avx2<true>};
      case GgmlType::kQ8_0:
        return {dequantize_d32_avx2<BlockQ8_0, q8_0_quants>, dot_d32_avx2<BlockQ8_0, q8_0_quants>};
      case GgmlType::kQ4_0:
        return {dequantize_d32_avx2<BlockQ4_0, q4_0_quants>, dot_d32_avx2<BlockQ4_0, q4_0_quants>};
      case GgmlType::kQ4_K:
        return {dequantize_q4_k_avx2, dot_q4_k_avx2};
      case GgmlType::kQ6_K:
        return {dequantize_q6_k_avx2, dot_q6_k_avx2};
    }
  }
#endif
  (void)type;
  return {};
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  assert(n % ggml_block_size(type) == 0);
  const RowKernels k = select_kernels(type);
  if (k.dequantize != nullptr) {
    k.dequantize(src, dst, n);
  } else {
    ref::dequantize_row(type, src, dst, n);
  }
}

float dot_row(GgmlType type, const void* row, const float* x, int64_t n) {
  assert(n % ggml_block_size(type) == 0);
  const RowKernels k = select_kernels(type);
  return k.dot != nullptr ? k.dot(row, x, n) : ref::dot_row(type, row, x, n);
}

}  // namespace leoam::kernels
