// The AVX-512 tile kernels of flash attention (attention_tiles.h): the AVX2 set's steps on 16
// lanes, blocked for 32 zmm registers. head_dim is a multiple of 16 (pick_kernels checks).
//   scores      an R x K block keeps R*K <= 16 accumulators over d (each K vector, converted
//               once, feeds R FMAs), then one transposing add tree makes their 16 sums
//   accumulate  R rows x D vectors of acc stay in registers over the tile's keys, R*D <= 24
//   fold        the AVX2 fold on 16 lanes with the same exp (exp16 = exp8's operations)
// What is gained over AVX2 is half the conversions, loads and loop work, not FMA rate: a CPU that
// issues one 512-bit FMA a cycle against two 256-bit ones has no more FMA lanes.
// Like q8_avx512.cpp, compiled on every x86 build with a target attribute and reached only through
// cpu_path() >= kAvx512. The block shapes, and what they ran at: docs/cpu.md#attention
#include "kernels/cpu/attention_tiles.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx512_util.h"  // first: before any include of immintrin.h

#include <algorithm>
#include <cmath>
#include <limits>

namespace leoam::kernels::detail {
namespace {

LEOAM_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
LEOAM_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

LEOAM_AVX512 void load_f16_avx512(const void* src, size_t stride_bytes, int64_t n, int n_heads, int hd, float* dst,
                                  size_t head_stride) {
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const char*>(src) + j * stride_bytes);
    for (int h = 0; h < n_heads; ++h) {
      float* out = dst + h * head_stride + j * hd;
      for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(out + d, load16(row + h * hd + d));
    }
  }
}

// Lane i of the result = the sum of the 16 lanes of v[i]. Pairs are interleaved and added at
// 32, then 64, then 128 bits, then the 128-bit quarters are summed across two vectors and one:
// after each level a vector holds twice as many accumulators, each summed over half as many lanes.
LEOAM_AVX512 inline __m512 hsum16(const __m512 (&v)[16]) {
  __m512 w[8];  // w[i], per 128 bits: lanes 0, 2 parts of v[2i]; 1, 3 of v[2i + 1]
  #pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 x[4];  // x[i], per 128 bits: lane p a part of v[4i + p]
  #pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
    x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // y0: 128-bit quarters {x0 q0+q2, x0 q1+q3, x1 q0+q2, x1 q1+q3}; y1 alike of x2, x3.
  const __m512 y0 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x44), _mm512_shuffle_f32x4(x[0], x[1], 0xEE));
  const __m512 y1 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], 0x44), _mm512_shuffle_f32x4(x[2], x[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y0, y1, 0x88), _mm512_shuffle_f32x4(y0, y1, 0xDD));
}

// s[r * ld + c] = q[r] . k[c] for r < R, c < nk (nk in [1, K]); k[c] is only read for c < nk.
template <int R, int K, typename T>
LEOAM_AVX512 inline void scores_block(const float* q, const T* const* k, int nk, int hd, float* s, int ld) {
  static_assert(R * K <= 16);
  const T* kp[K];
  #pragma GCC unroll 16
  for (int c = 0; c < K; ++c) kp[c] = k[std::min(c, nk - 1)];
  __m512 acc[16];
  #pragma GCC unroll 16
  for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 16) {
    __m512 kv[K];
    #pragma GCC unroll 16
    for (int c = 0; c < K; ++c) kv[c] = load16(kp[c] + d);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 qv = _mm512_loadu_ps(q + r * hd + d);
      // In a register: GCC otherwise folds the load into each of the K FMAs, and the loads,
      // not the FMAs, then bound the block (K + 1 loads per K FMAs).
      asm("" : "+v"(qv));
      #pragma GCC unroll 16
      for (int c = 0; c < K; ++c) acc[r * K + c] = _mm512_fmadd_ps(qv, kv[c], acc[r * K + c]);
    }
  }
  const __m512 sums = hsum16(acc);  // lane r * K + c: row r, key c
  const __mmask16 keys = static_cast<__mmask16>((1u << nk) - 1);
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    // Lane r * K + c lands at s + r * ld + c; the base stays inside s since ld >= K.
    _mm512_mask_storeu_ps(s + r * (ld - K), static_cast<__mmask16>(keys << (r * K)), sums);
  }
}

template <int R, int K, typename T>
LEOAM_AVX512 inline void scores_rows(const float* q, const T* const* k, int nk, int hd, float* s, int ld) {
  for (int j = 0; j < nk; j += K) scores_block<R, K>(q, k + j, std::min(K, nk - j), hd, s + j, ld);
}

// 8-row blocks for f16 K only: with f32 K the conversion they save is a plain load.
template <typename T>
LEOAM_AVX512 void scores_avx512(const float* q, int nq, const T* const* k, int nk, int hd, float* s, int ld) {
  int i = 0;
  if constexpr (sizeof(T) == 2) {
    for (; i + 8 <= nq; i += 8) scores_rows<8, 2>(q + i * hd, k, nk, hd, s + i * ld, ld);
  }
  for (; i + 4 <= nq; i += 4) scores_rows<4, 4>(q + i * hd, k, nk, hd, s + i * ld, ld);
  switch (nq - i) {
    case 3: scores_rows<3, 5>(q + i * hd, k, nk, hd, s + i * ld, ld); break;
    case 2: scores_rows<2, 8>(q + i * hd, k, nk, hd, s + i * ld, ld); break;
    case 1: scores_rows<1, 8>(q + i * hd, k, nk, hd, s + i * ld, ld); break;
    default: break;
  }
}

// exp8 (avx2_util.h) on 16 lanes, operation for operation, so both paths round alike: within a
// few ulp, 0 below ln(FLT_MIN), +inf above 127.5 ln 2.
LEOAM_AVX512 inline __m512 exp16(__m512 x) {
  constexpr float kMinX = -87.33654f;          // ln(FLT_MIN)
  constexpr float kMaxX = 88.37626266479492f;  // 127.5 ln 2: keeps k <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // 8 significant bits: k * kLn2Hi exact
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinX)), _mm512_set1_ps(kMaxX));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~_mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinX), _CMP_LT_OQ)), y);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kMaxX), _CMP_GT_OQ), y,
                              _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}

LEOAM_AVX512 void fold_scores_avx512(float* s, int n, float& m, float& l, float* acc, int hd) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __mmask16 tail = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int n16 = n - n % 16;
  __m512 mx = _mm512_set1_ps(m);
  for (int j = 0; j < n16; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
  if (tail != 0) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, tail, s + n16));
  const float m_new = _mm512_reduce_max_ps(mx);
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n16; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail != 0) {  // the lanes past n are -inf: e^-inf = 0 adds nothing
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, s + n16), mv));
    _mm512_mask_storeu_ps(s + n16, tail, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (m_new != m) {
    const float c = std::exp(m - m_new);  // 0 while m is -inf
    l *= c;
    const __m512 cv = _mm512_set1_ps(c);
    for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(cv, _mm512_loadu_ps(acc + d)));
    m = m_new;
  }
  l += _mm512_reduce_add_ps(sum);
}

// acc[r][d + 16c + lane] += sum_j p[r * ld + j] v[j][d + 16c + lane] for r < R, c < D.
template <int R, int D, typename T>
LEOAM_AVX512 inline void accumulate_block(const float* p, int ld, const T* const* v, int nk, int hd, int d,
                                          float* acc) {
  __m512 a[R][D];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) a[r][c] = _mm512_loadu_ps(acc + r * hd + d + 16 * c);
  }
  for (int j = 0; j < nk; ++j) {
    __m512 vv[D];
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) vv[c] = load16(v[j] + d + 16 * c);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 w = _mm512_set1_ps(p[r * ld + j]);
      #pragma GCC unroll 16
      for (int c = 0; c < D; ++c) a[r][c] = _mm512_fmadd_ps(w, vv[c], a[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) _mm512_storeu_ps(acc + r * hd + d + 16 * c, a[r][c]);
  }
}

// accumulate_block<R, n_vec> for n_vec in [1, D].
template <int R, int D, typename T>
LEOAM_AVX512 inline void accumulate_vecs(int n_vec, const float* p, int ld, const T* const* v, int nk, int hd, int d,
                                         float* acc) {
  if constexpr (D > 1) {
    if (n_vec < D) return accumulate_vecs<R, D - 1>(n_vec, p, ld, v, nk, hd, d, acc);
  }
  accumulate_block<R, D>(p, ld, v, nk, hd, d, acc);
}

// R rows over all of head_dim, in passes of at most 24 / R vectors (24 accumulators, 8 registers
// left for the V vectors and the weight), the vectors spread evenly over the passes.
template <int R, typename T>
LEOAM_AVX512 inline void accumulate_rows(const float* p, int ld, const T* const* v, int nk, int hd, float* acc) {
  constexpr int kMaxVecs = std::min(8, 24 / R);
  const int n_vec = hd / 16;
  const int n_pass = (n_vec + kMaxVecs - 1) / kMaxVecs;
  int done = 0;  // vectors
  for (int pass = 0; pass < n_pass; ++pass) {
    const int left = n_pass - pass;
    const int nv = (n_vec - done + left - 1) / left;
    accumulate_vecs<R, kMaxVecs>(nv, p, ld, v, nk, hd, 16 * done, acc);
    done += nv;
  }
}

template <typename T>
LEOAM_AVX512 void accumulate_avx512(const float* p, int ld, int nq, const T* const* v, int nk, int hd, float* acc) {
  int i = 0;
  for (; i + 8 <= nq; i += 8) accumulate_rows<8>(p + i * ld, ld, v, nk, hd, acc + i * hd);
  for (; i + 4 <= nq; i += 4) accumulate_rows<4>(p + i * ld, ld, v, nk, hd, acc + i * hd);
  switch (nq - i) {
    case 3: accumulate_rows<3>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    case 2: accumulate_rows<2>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    case 1: accumulate_rows<1>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    default: break;
  }
}

constexpr TileKernels kAvx512Kernels{load_f16_avx512,    scores_avx512<float>,     scores_avx512<uint16_t>,
                                     fold_scores_avx512, accumulate_avx512<float>, accumulate_avx512<uint16_t>};

}  // namespace

const TileKernels* attention_tiles_avx512() { return &kAvx512Kernels; }

}  // namespace leoam::kernels::detail

#else

namespace leoam::kernels::detail {
const TileKernels* attention_tiles_avx512() { return nullptr; }
}  // namespace leoam::kernels::detail

#endif
