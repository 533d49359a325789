#include "kernels/cpu/box_bound.h"

#include "core/cpu_features.h"
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {

namespace ref {

float box_bound(const float* on_max, const float* on_min, const float* max, const float* min, int n) {
  float sum = 0.0f;
  for (int c = 0; c < n; ++c) sum += on_max[c] * max[c] + on_min[c] * min[c];
  return sum;
}

}  // namespace ref

namespace {

#ifdef LEOAM_HAVE_X86
// 16 channels a step into four accumulators (the max and the min terms of two 8-channel blocks),
// so that four FMA chains run side by side rather than waiting on one another's latency; then an
// 8-channel step and a scalar tail for n % 8.
LEOAM_AVX2 float box_bound_avx2(const float* a, const float* b, const float* mx, const float* mn, int n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps();
  __m256 acc3 = _mm256_setzero_ps();
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(mx + c), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c), _mm256_loadu_ps(mn + c), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 8), _mm256_loadu_ps(mx + c + 8), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c + 8), _mm256_loadu_ps(mn + c + 8), acc3);
  }
  for (; c + 8 <= n; c += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(mx + c), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c), _mm256_loadu_ps(mn + c), acc1);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; c < n; ++c) sum += a[c] * mx[c] + b[c] * mn[c];
  return sum;
}
#endif

}  // namespace

BoxBoundFn box_bound_kernel() {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) return box_bound_avx2;
#endif
  return ref::box_bound;
}

}  // namespace leoam::kernels
