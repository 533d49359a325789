// The AVX2 tile kernels of flash attention (attention_tiles.h), with F16C converting f16 K and V
// as they are loaded. head_dim is a multiple of 8 (pick_kernels checks).
//   scores      R query rows x K keys of dot products kept in registers over d: 2 x 4 over a
//               converted f32 tile, 4 x 3 over f16 rows read in place
//   fold        vector max and exp8 (avx2_util.h) over a row of scores
//   accumulate  R rows x up to 24 dims of acc in registers over the tile's keys
// Compiled on every x86 build with a target attribute and reached only through
// cpu_path() >= kAvx2. The block shapes, and what they ran at: docs/cpu.md#attention
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/avx2_util.h"

#ifdef LEOAM_HAVE_X86
#include <algorithm>
#include <cmath>
#include <limits>

namespace leoam::kernels::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

LEOAM_AVX2 void load_f16_avx2(const void* src, size_t stride_bytes, int64_t n, int n_heads, int hd, float* dst,
                              size_t head_stride) {
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const char*>(src) + j * stride_bytes);
    for (int h = 0; h < n_heads; ++h) {
      float* out = dst + h * head_stride + j * hd;
      for (int d = 0; d < hd; d += 8) {
        _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + h * hd + d))));
      }
    }
  }
}

LEOAM_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
LEOAM_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// {sum a, sum b, sum c, sum d}
LEOAM_AVX2 inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// R query rows x K keys of dot products; hd a multiple of 8.
template <int R, int K, typename T>
LEOAM_AVX2 inline void scores_block(const float* q, const T* const* k, int hd, float* s, int ld) {
  __m256 acc[R][K];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < K; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int d = 0; d < hd; d += 8) {
    __m256 kv[K];
    #pragma GCC unroll 16
    for (int c = 0; c < K; ++c) kv[c] = load8(k[c] + d);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * hd + d);
      #pragma GCC unroll 16
      for (int c = 0; c < K; ++c) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
    if constexpr (R == 4 && K != 4) {  // a column of 4 rows per key
#pragma GCC unroll 16
    for (int c = 0; c < K; ++c) {
      alignas(16) float col[4];
      _mm_store_ps(col, hsum4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
      for (int r = 0; r < 4; ++r) s[r * ld + c] = col[r];
    }
    return;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    if constexpr (K == 4) {
      _mm_storeu_ps(s + r * ld, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    } else {
      #pragma GCC unroll 16
      for (int c = 0; c < K; ++c) s[r * ld + c] = hsum(acc[r][c]);
    }
  }
}

template <int R, typename T>
LEOAM_AVX2 inline void scores_rows(const float* q, const T* const* k, int nk, int hd, float* s, int ld) {
  int j = 0;
  for (; j + 4 <= nk; j += 4) scores_block<R, 4>(q, k + j, hd, s + j, ld);
  for (; j < nk; ++j) scores_block<R, 1>(q, k + j, hd, s + j, ld);
}

// f32 K (a converted tile, many query rows): 2 rows x 4 keys, 6 loads per 8 FMAs.
LEOAM_AVX2 void scores_avx2(const float* q, int nq, const float* const* k, int nk, int hd, float* s, int ld) {
  int i = 0;
  for (; i + 2 <= nq; i += 2) scores_rows<2>(q + i * hd, k, nk, hd, s + i * ld, ld);
  if (i < nq) scores_rows<1>(q + i * hd, k, nk, hd, s + i * ld, ld);
}

// f16 K: 4 rows x 3 keys, so that each converted K vector feeds 4 FMAs; 12 accumulators, so that
// 3 FMAs per cycle-latency window keep both FMA pipes busy.
LEOAM_AVX2 void scores_f16_avx2(const float* q, int nq, const uint16_t* const* k, int nk, int hd, float* s,
                                int ld) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) {
    int j = 0;
    for (; j + 3 <= nk; j += 3) scores_block<4, 3>(q + i * hd, k + j, hd, s + i * ld + j, ld);
    // 2 keys left: one 8-accumulator block, not two latency-bound 4-accumulator ones.
    if (nk - j == 2) scores_block<4, 2>(q + i * hd, k + j, hd, s + i * ld + j, ld);
    if (nk - j == 1) scores_block<4, 1>(q + i * hd, k + j, hd, s + i * ld + j, ld);
  }
  for (; i < nq; ++i) scores_rows<1>(q + i * hd, k, nk, hd, s + i * ld, ld);
}

// Vector max and exp over the row: the scalar max chain it replaces cost 4 cycles a key.
LEOAM_AVX2 void fold_scores_avx2(float* s, int n, float& m, float& l, float* acc, int hd) {
  __m256 mx0 = _mm256_set1_ps(m), mx1 = mx0;  // two chains halve the max latency
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    mx0 = _mm256_max_ps(mx0, _mm256_loadu_ps(s + j));
    mx1 = _mm256_max_ps(mx1, _mm256_loadu_ps(s + j + 8));
  }
  float m_new = hmax(_mm256_max_ps(mx0, mx1));
  for (int t = j; t < n; ++t) m_new = std::max(m_new, s[t]);
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < n) {  // the tail through a padded copy, so every element gets the same exp
    alignas(32) float tail[8];
    for (int t = 0; t < 8; ++t) tail[t] = j + t < n ? s[j + t] : kNegInf;
    const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(tail), mv));
    _mm256_store_ps(tail, e);
    sum = _mm256_add_ps(sum, e);
    for (int t = 0; j + t < n; ++t) s[j + t] = tail[t];
  }
  if (m_new != m) {
    const float c = std::exp(m - m_new);  // 0 while m is -inf
    l *= c;
    const __m256 cv = _mm256_set1_ps(c);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(cv, _mm256_loadu_ps(acc + d)));
    m = m_new;
  }
  l += hsum(sum);
}

// R rows x 16 dims (D = 2 vectors) or x 8 dims (D = 1) of acc, kept in registers over the keys.
template <int R, int D, typename T>
LEOAM_AVX2 inline void accumulate_block(const float* p, int ld, const T* const* v, int nk, int hd, int d,
                                        float* acc) {
  __m256 a[R][D];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) a[r][c] = _mm256_loadu_ps(acc + r * hd + d + 8 * c);
  }
  for (int j = 0; j < nk; ++j) {
    __m256 vv[D];
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) vv[c] = load8(v[j] + d + 8 * c);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 w = _mm256_broadcast_ss(p + r * ld + j);
      #pragma GCC unroll 16
      for (int c = 0; c < D; ++c) a[r][c] = _mm256_fmadd_ps(w, vv[c], a[r][c]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int c = 0; c < D; ++c) _mm256_storeu_ps(acc + r * hd + d + 8 * c, a[r][c]);
  }
}

template <int R, typename T>
LEOAM_AVX2 inline void accumulate_rows(const float* p, int ld, const T* const* v, int nk, int hd, float* acc) {
  int d = 0;
  if constexpr (R == 4) {
    // 4 x 24 dims: 12 accumulators hide the FMA latency; as many as leave a multiple of 16
    // dims (128 = 4 x 24 + 2 x 16), since an 8-dim tail has only 4 chains and runs at half rate.
    int n24 = hd / 24;
    while (n24 > 0 && (hd - 24 * n24) % 16 != 0) --n24;
    for (; d < 24 * n24; d += 24) accumulate_block<R, 3>(p, ld, v, nk, hd, d, acc);
  }
  for (; d + 16 <= hd; d += 16) accumulate_block<R, 2>(p, ld, v, nk, hd, d, acc);
  if (d < hd) accumulate_block<R, 1>(p, ld, v, nk, hd, d, acc);
}

template <typename T>
LEOAM_AVX2 void accumulate_avx2(const float* p, int ld, int nq, const T* const* v, int nk, int hd, float* acc) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) accumulate_rows<4>(p + i * ld, ld, v, nk, hd, acc + i * hd);
  switch (nq - i) {
    case 3: accumulate_rows<3>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    case 2: accumulate_rows<2>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    case 1: accumulate_rows<1>(p + i * ld, ld, v, nk, hd, acc + i * hd); break;
    default: break;
  }
}

constexpr TileKernels kAvx2Kernels{load_f16_avx2,           scores_avx2,          scores_f16_avx2,
                                   fold_scores_avx2,        accumulate_avx2<float>, accumulate_avx2<uint16_t>};

}  // namespace

const TileKernels* attention_tiles_avx2() { return &kAvx2Kernels; }

}  // namespace leoam::kernels::detail

#else

namespace leoam::kernels::detail {
const TileKernels* attention_tiles_avx2() { return nullptr; }
}  // namespace leoam::kernels::detail

#endif
