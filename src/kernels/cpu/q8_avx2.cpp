// AVX2 (+FMA, F16C) activation quantizers and integer dots (see q8_activation.h, dot_q8.h).
// The products are vpmaddubsw (unsigned x signed bytes -> pairs summed into int16) then vpmaddwd
// (int16 x int16 -> pairs summed into int32). vpmaddubsw saturates, so each pairing keeps its pair
// sums below 2^15: Q4_0/Q4_K nibbles 0..15 x |x| <= 127 -> 3810; Q6_K 0..63 -> 16002; Q8_0 as
// |w| <= 128 times sign(x, w) (|x| <= 127) -> 32512. The second step multiplies by the sub-block
// scale (K-quants) or by 1, so each block's integer sum is exact; only the f32 accumulation of
// scaled block sums differs from ref::dot_row_q8.
// Rows: the Q4_0 and Q8_0 kernels take up to 4 rows per pass, so each activation block (and its
// scale) is loaded once per 4 rows, and prefetch the next group of rows (avx2_util.h).
#include <cstring>

#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/q8_kernels.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels::detail {
namespace {

LEOAM_AVX2 inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

LEOAM_AVX2 inline float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

LEOAM_AVX2 inline float f16_scale(uint16_t h) { return _cvtsh_ss(h); }

// ---- activation quantization ----

// max |x| over 32 floats.
LEOAM_AVX2 inline __m256 absmax32(const float* x, __m256 m) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int k = 0; k < 4; ++k) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
  return m;
}

// 32 floats * id rounded to nearest-even -> 32 int8 at qs; returns the 4 x 8 int32 sums lanes.
struct Quantized32 {
  __m256i lo;  // elements 0..15 as int32, pairwise added (for the sum of the first 16)
  __m256i hi;  // elements 16..31
};
LEOAM_AVX2 inline Quantized32 quantize32(const float* x, float id, int8_t* qs) {
  const __m256 idv = _mm256_set1_ps(id);
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), idv));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), idv));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), idv));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), idv));
  // The packs work within 128-bit lanes; the dword permute puts the 4-element groups back in order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q);
  return {_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)};
}

LEOAM_AVX2 void quantize_q8a32_avx2(const float* x, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8A32*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    const float amax = hmax_ps(absmax32(xb, _mm256_setzero_ps()));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const Quantized32 s = quantize32(xb, id, y[b].qs);
    y[b].d = amax / 127.0f;
    y[b].s = y[b].d * static_cast<float>(hsum_epi32(_mm256_add_epi32(s.lo, s.hi)));
  }
}

LEOAM_AVX2 void quantize_q8k_avx2(const float* x, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    __m256 m = _mm256_setzero_ps();
    for (int g = 0; g < 8; ++g) m = absmax32(xb + 32 * g, m);
    const float amax = hmax_ps(m);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int g = 0; g < 8; ++g) {
      const Quantized32 s = quantize32(xb + 32 * g, id, y[b].qs + 32 * g);
      y[b].bsums[2 * g] = static_cast<int16_t>(hsum_epi32(s.lo));
      y[b].bsums[2 * g + 1] = static_cast<int16_t>(hsum_epi32(s.hi));
    }
    y[b].d = amax / 127.0f;
  }
}

// ---- Q4_0 x Q8A32 ----
//
// sum_j (u_j - 8) x_j, u the stored nibble. The main loop takes 8 blocks (4 pairs) per step:
//
//   one 256-bit register holds a pair of blocks A, B: low lane A.qs[16], high lane B.qs[16], so
//   q & 0xF = [A elements 0..15 | B elements 0..15] and q >> 4 = [A 16..31 | B 16..31]; the
//   activations are loaded in the same arrangement (once per step for all rows).
//
// The int16 pair sums of the 4 pairs fold by two vphaddw into 2 lanes per block (q4_0_fold8), and
// the -8 x_j term is subtracted there, exactly: c is the same fold with u = 8 (computed once per
// step for all rows), p is at most 4 * 2 * 2 * 15 * 127 = 30480, c at most 16256, and p - c (16
// products (u - 8) x, |u - 8| <= 8) at most 16256, all within int16. One vpmaddwd with ones then
// gives one int32 per block, so one convert and one FMA serve 8 blocks, whose 8 weight scales go
// through one vcvtph2ps. Every row takes the same sequence of operations, so a row's result does
// not depend on how many rows share the pass.
//
// The tail (< 8 blocks) uses the activation sum s: sum_j u_j x_j - 8 s.

// The 32 nibbles of a Q4_0 block in element order, as unsigned bytes 0..15.
LEOAM_AVX2 inline __m256i q4_0_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 16 bytes at a (low lane) and b (high lane).
LEOAM_AVX2 inline __m256i load_2x128(const void* a, const void* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(static_cast<const __m128i*>(b)), 1);
}

// The activations of blocks a, b (a pair) in the pair arrangement, and the int16 -8 term.
struct Q4_0PairX {
  __m256i lo;  // [a.qs[0..16) | b.qs[0..16)]
  __m256i hi;  // [a.qs[16..32) | b.qs[16..32)]
  __m256i c;   // maddubs(8, lo) + maddubs(8, hi)
};
LEOAM_AVX2 inline Q4_0PairX q4_0_pair_x(const BlockQ8A32& a, const BlockQ8A32& b) {
  const __m256i eight = _mm256_set1_epi8(8);
  Q4_0PairX p;
  p.lo = load_2x128(a.qs, b.qs);
  p.hi = load_2x128(a.qs + 16, b.qs + 16);
  p.c = _mm256_add_epi16(_mm256_maddubs_epi16(eight, p.lo), _mm256_maddubs_epi16(eight, p.hi));
  return p;
}

// Integer dots of weight blocks wa, wb with a pair, before the -8 term: int16, at most 7620.
LEOAM_AVX2 inline __m256i q4_0_pair_dot(const BlockQ4_0& wa, const BlockQ4_0& wb, const Q4_0PairX& x) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i q = load_2x128(wa.qs, wb.qs);
  const __m256i lo = _mm256_and_si256(q, m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  return _mm256_add_epi16(_mm256_maddubs_epi16(lo, x.lo), _mm256_maddubs_epi16(hi, x.hi));
}

// The f16 scales of 8 consecutive blocks as f32, in the order 0 2 4 6 1 3 5 7.
LEOAM_AVX2 inline __m256 q4_0_scales8(const BlockQ4_0* w) {
  const uint64_t even = static_cast<uint64_t>(w[0].d) | static_cast<uint64_t>(w[2].d) << 16 |
                        static_cast<uint64_t>(w[4].d) << 32 | static_cast<uint64_t>(w[6].d) << 48;
  const uint64_t odd = static_cast<uint64_t>(w[1].d) | static_cast<uint64_t>(w[3].d) << 16 |
                       static_cast<uint64_t>(w[5].d) << 32 | static_cast<uint64_t>(w[7].d) << 48;
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<long long>(even)),
                                            _mm_cvtsi64_si128(static_cast<long long>(odd))));
}

// The int16 sums of 4 pairs (blocks 0..7) folded by two vphaddw into [0:2 2:2 4:2 6:2 | 1:2 3:2 5:2 7:2]
// (i:2, two lanes of block i). Each level at most doubles the bound: p 7620 -> 30480, c 4064 -> 16256.
LEOAM_AVX2 inline __m256i q4_0_fold8(__m256i p01, __m256i p23, __m256i p45, __m256i p67) {
  return _mm256_hadd_epi16(_mm256_hadd_epi16(p01, p23), _mm256_hadd_epi16(p45, p67));
}

template <int kRows>
LEOAM_AVX2 void dot_q4_0_rows(const uint8_t* rows, size_t row_bytes, const BlockQ8A32* x, int64_t n_blocks,
                              float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  const BlockQ4_0* w[kRows];
  __m256 acc[kRows];
  for (int r = 0; r < kRows; ++r) {
    w[r] = reinterpret_cast<const BlockQ4_0*>(rows + r * row_bytes);
    acc[r] = _mm256_setzero_ps();
  }
  const int64_t n_main = n_blocks & ~int64_t{7};
  for (int64_t b = 0; b < n_main; b += 8) {
    const BlockQ8A32* xb = x + b;
    const Q4_0PairX x01 = q4_0_pair_x(xb[0], xb[1]);
    const Q4_0PairX x23 = q4_0_pair_x(xb[2], xb[3]);
    const Q4_0PairX x45 = q4_0_pair_x(xb[4], xb[5]);
    const Q4_0PairX x67 = q4_0_pair_x(xb[6], xb[7]);
    const __m256i c = q4_0_fold8(x01.c, x23.c, x45.c, x67.c);
    const __m256 dx = _mm256_setr_ps(xb[0].d, xb[2].d, xb[4].d, xb[6].d, xb[1].d, xb[3].d, xb[5].d, xb[7].d);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const BlockQ4_0* wb = w[r] + b;
      prefetch_bytes<8 * sizeof(BlockQ4_0)>(reinterpret_cast<const uint8_t*>(wb) + kRows * row_bytes);
      const __m256i p = q4_0_fold8(q4_0_pair_dot(wb[0], wb[1], x01), q4_0_pair_dot(wb[2], wb[3], x23),
                                   q4_0_pair_dot(wb[4], wb[5], x45), q4_0_pair_dot(wb[6], wb[7], x67));
      // p - c: 32 products (u - 8) x per block, in int16 (at most 16256); then one int32 per block.
      const __m256i p32 = _mm256_madd_epi16(_mm256_sub_epi16(p, c), ones);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(q4_0_scales8(wb), dx), acc[r]);
    }
  }
  float corr[kRows];
  for (int r = 0; r < kRows; ++r) corr[r] = 0.0f;
  for (int64_t b = n_main; b < n_blocks; ++b) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256 dx = _mm256_broadcast_ss(&x[b].d);
    const float sx = x[b].s;
    for (int r = 0; r < kRows; ++r) {
      const BlockQ4_0& wb = w[r][b];
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q4_0_nibbles(wb.qs), xq), ones);
      const float dw = f16_scale(wb.d);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_set1_ps(dw), dx), acc[r]);
      corr[r] += dw * sx;
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]) - 8.0f * corr[r];
}

// ---- Q8_0 x Q8A32: |w| x sign(x, w) ----

template <int kRows>
LEOAM_AVX2 void dot_q8_0_rows(const uint8_t* rows, size_t row_bytes, const BlockQ8A32* x, int64_t n_blocks,
                              float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256 dx = _mm256_broadcast_ss(&x[b].d);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(rows + r * row_bytes)[b];
      prefetch_bytes<sizeof(BlockQ8_0)>(reinterpret_cast<const uint8_t*>(&w) + kRows * row_bytes);
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
      const __m256i p =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)), ones);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_set1_ps(f16_scale(w.d)), dx), acc[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]);
}

// ---- Row groups (row_groups.h): one int32 lane per row ----
//
// A 256-bit load of a group's block holds quant-byte chunk j (4 bytes) of all 8 rows; the
// activation's 4 matching bytes are broadcast, so each lane's pair sums belong to one row and the
// 8 scales of a block convert with one vcvtph2ps. Q4_0: sum_j u_j x_j in int16 over the 4 chunks
// of both nibbles (8 pair sums of at most 2 * 15 * 127 each: 30480), one vpmaddwd, then the -8 x
// term through the activation sum s: acc - 8 sum_b d_w s_b. Q8_0: |w| x sign(x, w) per chunk
// (pair sums up to 32512, so each goes to int32 at once). Each block prefetches the same block of
// the next group.

LEOAM_AVX2 void dot_groups_q4_0_avx2(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                     int64_t n, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const auto* x = static_cast<const BlockQ8A32*>(xq);
  const int64_t n_blocks = n / kQK4_0;
  const size_t group_bytes = kRowGroup * row_bytes;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* blk = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * group_bytes;
    __m256 acc = _mm256_setzero_ps();
    __m256 corr = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b, blk += kRowGroup * sizeof(BlockQ4_0)) {
      prefetch_bytes<kRowGroup * sizeof(BlockQ4_0)>(blk + group_bytes);
      const int8_t* xb = x[b].qs;
      __m256i s = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * j));
        const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), bcast4(xb + 4 * j));
        const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bcast4(xb + 16 + 4 * j));
        s = _mm256_add_epi16(s, _mm256_add_epi16(lo, hi));
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones)), _mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)),
                            acc);
      corr = _mm256_fmadd_ps(dw, _mm256_set1_ps(x[b].s), corr);
    }
    _mm256_storeu_ps(out + g * kRowGroup, _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), corr, acc));
  }
}

LEOAM_AVX2 void dot_groups_q8_0_avx2(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                     int64_t n, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  const auto* x = static_cast<const BlockQ8A32*>(xq);
  const int64_t n_blocks = n / kQK8_0;
  const size_t group_bytes = kRowGroup * row_bytes;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* blk = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * group_bytes;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b, blk += kRowGroup * sizeof(BlockQ8_0)) {
      prefetch_bytes<kRowGroup * sizeof(BlockQ8_0)>(blk + group_bytes);
      const int8_t* xb = x[b].qs;
      __m256i s = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * j));
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast4(xb + 4 * j), w));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), acc);
    }
    _mm256_storeu_ps(out + g * kRowGroup, acc);
  }
}

// ---- Q4_K x Q8K ----

// The 8 6-bit scales (sc) and mins (m) of a Q4_K block, unpacked 4 at a time in 32-bit words
// (the same mapping as q4_k_scale_min).
struct Q4KScales {
  uint8_t sc[8];
  uint8_t m[8];
};
inline Q4KScales q4_k_scales(const uint8_t* scales) {
  uint32_t a, b, c;
  std::memcpy(&a, scales, 4);
  std::memcpy(&b, scales + 4, 4);
  std::memcpy(&c, scales + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu;
  const uint32_t m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4);
  Q4KScales s;
  std::memcpy(s.sc, &sc_lo, 4);
  std::memcpy(s.sc + 4, &sc_hi, 4);
  std::memcpy(s.m, &m_lo, 4);
  std::memcpy(s.m + 4, &m_hi, 4);
  return s;
}

LEOAM_AVX2 float dot_q4_k_row(const BlockQ4_K* w, const BlockQ8K* x, int64_t n_blocks) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();   // d dx sum_j sc_j sum(q qx)
  __m256 accm = _mm256_setzero_ps();  // dmin dx sum_j m_j sum(qx)
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Q4KScales s = q4_k_scales(w[b].scales);
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * g));
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 64 * g));
      const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 64 * g + 32));
      const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_set1_epi16(s.sc[2 * g]));
      const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), _mm256_set1_epi16(s.sc[2 * g + 1]));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    // Sums of 32 activations (pairs of bsums) times the 8 mins.
    const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bsums)), ones);
    uint64_t m8;
    std::memcpy(&m8, s.m, 8);
    const __m256i mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(m8)));
    const __m256i pm = _mm256_mullo_epi32(bs, mins);
    const float dx = x[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_scale(w[b].d) * dx), _mm256_cvtepi32_ps(sumi), acc);
    accm = _mm256_fmadd_ps(_mm256_set1_ps(f16_scale(w[b].dmin) * dx), _mm256_cvtepi32_ps(pm), accm);
  }
  return hsum(acc) - hsum(accm);
}

// ---- Q6_K x Q8K ----
//
// sum_k sc_k sum_{e in k} (u_e - 32) x_e = sum_k sc_k sum(u x) - 32 sum_k sc_k bsums_k, with u the
// stored 6-bit value 0..63 (vpmaddubsw) and 16-element sub-blocks k.

LEOAM_AVX2 float dot_q6_k_row(const BlockQ6_K* w, const BlockQ8K* x, int64_t n_blocks) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& blk = w[b];
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      // 16-bit shifts leak bits across bytes only into bits the masks clear.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
      const int8_t* sc = blk.scales + 8 * h;
      for (int k = 0; k < 4; ++k) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 128 * h + 32 * k));
        // Elements [32k, 32k + 16) use scale 2k, the next 16 use 2k + 1: the two 128-bit halves.
        const __m256i scale = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[2 * k])),
                                                      _mm_set1_epi16(sc[2 * k + 1]), 1);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xq), scale));
      }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m256i bias =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bsums)), sc16);
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(bias, 5));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_scale(blk.d) * x[b].d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

// ---- the table ----

template <template <int> class Kernel, typename XBlock>
void dispatch_rows(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n_blocks, float* out) {
  const auto* r = static_cast<const uint8_t*>(rows);
  const auto* x = static_cast<const XBlock*>(xq);
  switch (n_rows) {
    case 4:
      Kernel<4>::run(r, row_bytes, x, n_blocks, out);
      return;
    case 3:
      Kernel<3>::run(r, row_bytes, x, n_blocks, out);
      return;
    case 2:
      Kernel<2>::run(r, row_bytes, x, n_blocks, out);
      return;
    default:
      Kernel<1>::run(r, row_bytes, x, n_blocks, out);
      return;
  }
}

template <int kRows>
struct Q4_0Rows {
  static void run(const uint8_t* r, size_t rb, const BlockQ8A32* x, int64_t nb, float* out) {
    dot_q4_0_rows<kRows>(r, rb, x, nb, out);
  }
};
template <int kRows>
struct Q8_0Rows {
  static void run(const uint8_t* r, size_t rb, const BlockQ8A32* x, int64_t nb, float* out) {
    dot_q8_0_rows<kRows>(r, rb, x, nb, out);
  }
};

void dot_q4_0_avx2(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  dispatch_rows<Q4_0Rows, BlockQ8A32>(rows, row_bytes, n_rows, xq, n / kQK4_0, out);
}
void dot_q8_0_avx2(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  dispatch_rows<Q8_0Rows, BlockQ8A32>(rows, row_bytes, n_rows, xq, n / kQK8_0, out);
}
void dot_q4_k_avx2(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  for (int r = 0; r < n_rows; ++r) {
    out[r] = dot_q4_k_row(reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(rows) + r * row_bytes),
                          static_cast<const BlockQ8K*>(xq), n / kQK_K);
  }
}
void dot_q6_k_avx2(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  for (int r = 0; r < n_rows; ++r) {
    out[r] = dot_q6_k_row(reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(rows) + r * row_bytes),
                          static_cast<const BlockQ8K*>(xq), n / kQK_K);
  }
}

constexpr Q8Kernels kAvx2Kernels = {quantize_q8a32_avx2,  quantize_q8k_avx2, dot_q4_0_avx2,
                                    dot_q8_0_avx2,        dot_q4_k_avx2,     dot_q6_k_avx2,
                                    dot_groups_q4_0_avx2, dot_groups_q8_0_avx2, nullptr,
                                    nullptr,              nullptr,           nullptr};

}  // namespace

const Q8Kernels* q8_kernels_avx2() { return &kAvx2Kernels; }

}  // namespace leoam::kernels::detail

#else  // not x86

namespace leoam::kernels::detail {
const Q8Kernels* q8_kernels_avx2() { return nullptr; }
}  // namespace leoam::kernels::detail

#endif
