// Scalar references and AVX2+FMA paths of the elementwise kernels (see ops.h). The AVX2 code is
// compiled with target attributes, so the binary runs on any x86-64 and picks the path at run
// time (core/cpu_features.h).
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <limits>

#include "core/cpu_features.h"
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {

namespace ref {

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void add_rmsnorm(float* x, const float* delta, const float* weight, int64_t n, float eps, float* out) {
  for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
  rmsnorm(x, weight, n, eps, out);
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void rope(float* x, const RopeShape& shape, const float* cos, const float* sin) {
  const int n_pairs = shape.n_rot / 2;
  for (int h = 0; h < shape.n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * shape.head_dim;
    for (int i = 0; i < n_pairs; ++i) {
      const int i0 = shape.neox ? i : 2 * i;
      const int i1 = shape.neox ? i + n_pairs : 2 * i + 1;
      const float x0 = v[i0];
      const float x1 = v[i1];
      v[i0] = x0 * cos[i] - x1 * sin[i];
      v[i1] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void exp(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

}  // namespace ref

namespace {

// The AVX2 path also serves CPUs with AVX-512 (these kernels are far from bound by vector width);
// LEOAM_CPU_PATH=scalar selects the references.
bool use_avx2() { return cpu_path() >= CpuPath::kAvx2; }


LEOAM_AVX2 inline double hsum(__m256d v) {
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

// Adds the squares of the 8 floats of v, in double, to acc.
LEOAM_AVX2 inline __m256d add_squares(__m256d acc, __m256 v) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  return _mm256_fmadd_pd(hi, hi, _mm256_fmadd_pd(lo, lo, acc));
}

// out = x * inv * weight, in the reference's order of rounding.
LEOAM_AVX2 void scale_by_weight(const float* x, float inv, const float* weight, int64_t n, float* out) {
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _mm256_loadu_ps(weight + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

LEOAM_AVX2 float inv_rms(double sum_sq, int64_t n, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
}

LEOAM_AVX2 void rmsnorm_avx2(const float* x, const float* weight, int64_t n, float eps, float* out) {
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = add_squares(acc0, _mm256_loadu_ps(x + i));
    acc1 = add_squares(acc1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) acc0 = add_squares(acc0, _mm256_loadu_ps(x + i));
  double sum_sq = hsum(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  scale_by_weight(x, inv_rms(sum_sq, n, eps), weight, n, out);
}

LEOAM_AVX2 void add_rmsnorm_avx2(float* x, const float* delta, const float* weight, int64_t n, float eps, float* out) {
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(delta + i));
    const __m256 b = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(delta + i + 8));
    _mm256_storeu_ps(x + i, a);
    _mm256_storeu_ps(x + i + 8, b);
    acc0 = add_squares(acc0, a);
    acc1 = add_squares(acc1, b);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(delta + i));
    _mm256_storeu_ps(x + i, a);
    acc0 = add_squares(acc0, a);
  }
  double sum_sq = hsum(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) {
    x[i] += delta[i];
    sum_sq += static_cast<double>(x[i]) * x[i];
  }
  scale_by_weight(x, inv_rms(sum_sq, n, eps), weight, n, out);
}

LEOAM_AVX2 void add_avx2(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

// Normal pairing, 4 pairs per vector: with c = (c0 c0 c1 c1 ..) and s = (s0 s0 s1 s1 ..),
// fmaddsub(x, c, swap(x) * s) gives x0 c - x1 s in even lanes and x1 c + x0 s in odd lanes.
LEOAM_AVX2 void rope_normal_avx2(float* v, int n_pairs, const float* cos, const float* sin) {
  int i = 0;
  for (; i + 4 <= n_pairs; i += 4) {
    const __m128 c4 = _mm_loadu_ps(cos + i);
    const __m128 s4 = _mm_loadu_ps(sin + i);
    const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
    const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
    const __m256 x = _mm256_loadu_ps(v + 2 * i);
    const __m256 x_swapped = _mm256_permute_ps(x, 0xB1);  // (x1 x0 x3 x2 ..)
    _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(x, c, _mm256_mul_ps(x_swapped, s)));
  }
  for (; i < n_pairs; ++i) {
    const float x0 = v[2 * i];
    const float x1 = v[2 * i + 1];
    v[2 * i] = x0 * cos[i] - x1 * sin[i];
    v[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
  }
}

LEOAM_AVX2 void rope_neox_avx2(float* v, int n_pairs, const float* cos, const float* sin) {
  int i = 0;
  for (; i + 8 <= n_pairs; i += 8) {
    const __m256 c = _mm256_loadu_ps(cos + i);
    const __m256 s = _mm256_loadu_ps(sin + i);
    const __m256 x0 = _mm256_loadu_ps(v + i);
    const __m256 x1 = _mm256_loadu_ps(v + i + n_pairs);
    _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
    _mm256_storeu_ps(v + i + n_pairs, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
  }
  for (; i < n_pairs; ++i) {
    const float x0 = v[i];
    const float x1 = v[i + n_pairs];
    v[i] = x0 * cos[i] - x1 * sin[i];
    v[i + n_pairs] = x0 * sin[i] + x1 * cos[i];
  }
}

LEOAM_AVX2 void rope_avx2(float* x, const RopeShape& shape, const float* cos, const float* sin) {
  const int n_pairs = shape.n_rot / 2;
  for (int h = 0; h < shape.n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * shape.head_dim;
    if (shape.neox) {
      rope_neox_avx2(v, n_pairs, cos, sin);
    } else {
      rope_normal_avx2(v, n_pairs, cos, sin);
    }
  }
}

LEOAM_AVX2 void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) ref::swiglu(gate + i, up + i, n - i, out + i);
}

LEOAM_AVX2 void exp_avx2(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    // The tail through the same vector code, so every element has the same error bound.
    alignas(32) float buf[8] = {};
    std::copy(x + i, x + n, buf);
    _mm256_store_ps(buf, exp8(_mm256_load_ps(buf)));
    std::copy(buf, buf + (n - i), out + i);
  }
}

LEOAM_AVX2 void softmax_avx2(float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  float max = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  for (; i < n; ++i) max = std::max(max, x[i]);

  const __m256 vm = _mm256_set1_ps(max);
  __m256d sum0 = _mm256_setzero_pd();
  __m256d sum1 = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double sum = hsum(_mm256_add_pd(sum0, sum1));
  if (i < n) {
    for (int64_t j = i; j < n; ++j) x[j] -= max;
    exp_avx2(x + i, n - i, x + i);
    for (int64_t j = i; j < n; ++j) sum += x[j];
  }

  const float inv = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (use_avx2()) {
    rmsnorm_avx2(x, weight, n, eps, out);
  } else {
    ref::rmsnorm(x, weight, n, eps, out);
  }
}

void add_rmsnorm(float* x, const float* delta, const float* weight, int64_t n, float eps, float* out) {
  if (use_avx2()) {
    add_rmsnorm_avx2(x, delta, weight, n, eps, out);
  } else {
    ref::add_rmsnorm(x, delta, weight, n, eps, out);
  }
}

void add(float* x, const float* y, int64_t n) {
  if (use_avx2()) {
    add_avx2(x, y, n);
  } else {
    ref::add(x, y, n);
  }
}

void rope(float* x, const RopeShape& shape, const float* cos, const float* sin) {
  if (use_avx2()) {
    rope_avx2(x, shape, cos, sin);
  } else {
    ref::rope(x, shape, cos, sin);
  }
}

void layernorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>((x[i] - mean) * inv) * weight[i] + bias[i];
}

void add_layernorm(float* x, const float* delta, const float* weight, const float* bias, int64_t n, float eps,
                   float* out) {
  for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
  layernorm(x, weight, bias, n, eps, out);
}

void geglu(const float* gate, const float* up, int64_t n, float* out) {
  const float k = std::sqrt(2.0f / std::numbers::pi_v<float>);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (use_avx2()) {
    swiglu_avx2(gate, up, n, out);
  } else {
    ref::swiglu(gate, up, n, out);
  }
}

void softmax(float* x, int64_t n) {
  if (use_avx2()) {
    softmax_avx2(x, n);
  } else {
    ref::softmax(x, n);
  }
}

void exp(const float* x, int64_t n, float* out) {
  if (use_avx2()) {
    exp_avx2(x, n, out);
  } else {
    ref::exp(x, n, out);
  }
}

}  // namespace leoam::kernels
