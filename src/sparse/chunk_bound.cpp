// The chunk bound kernel (chunk_bound.h): a double-precision reference, a float scalar path and
// an AVX2+FMA path, picked at run time (core/cpu_features.h). Both fast paths split each query row
// into its positive and negative parts, q = q+ + q- (split_query), so that a channel's term is
// two multiply-adds without a compare:
//   max(q_c * min_c, q_c * max_c) = q+_c * max_c + q-_c * min_c     (upper)
//   min(q_c * min_c, q_c * max_c) = q+_c * min_c + q-_c * max_c     (lower)
// One of q+_c, q-_c is zero, so each identity is exact for finite abstracts and the sum rounds
// as a plain dot product would.
#include "sparse/chunk_bound.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/avx2_util.h"

namespace leoam::sparse {

namespace ref {

void chunk_bounds(const float* q, int kv_head, const float* abstracts, int64_t n_chunks, const BoundLayout& layout,
                  float* bounds, BoundSide side) {
  const int hd = layout.head_dim;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  for (int64_t i = 0; i < n_chunks; ++i) {
    const float* mn = abstracts + i * layout.chunk_stride + static_cast<int64_t>(kv_head) * hd;
    const float* mx = mn + max_offset;
    double b = 0.0;
    for (int c = 0; c < hd; ++c) {
      const double lo = static_cast<double>(q[c]) * mn[c];
      const double hi = static_cast<double>(q[c]) * mx[c];
      b += side == BoundSide::kUpper ? std::max(lo, hi) : std::min(lo, hi);
    }
    bounds[i] = static_cast<float>(b);
  }
}

}  // namespace ref

namespace {

// a.max + b.min over hd channels: one head's bound against one chunk (a, b: the query's parts
// that meet the maxima and the minima).
float head_bound_scalar(const float* a, const float* b, const float* mx, const float* mn, int hd) {
  float sum = 0.0f;
  for (int c = 0; c < hd; ++c) sum += a[c] * mx[c] + b[c] * mn[c];
  return sum;
}

#ifdef LEOAM_HAVE_X86
// 16 channels a step into four accumulators (the max and the min terms of two 8-channel blocks),
// so that four FMA chains run side by side rather than waiting on one another's latency; then an
// 8-channel step and a scalar tail for head_dim % 8.
LEOAM_AVX2 float head_bound_avx2(const float* a, const float* b, const float* mx, const float* mn, int hd) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps();
  __m256 acc3 = _mm256_setzero_ps();
  int c = 0;
  for (; c + 16 <= hd; c += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(mx + c), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c), _mm256_loadu_ps(mn + c), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c + 8), _mm256_loadu_ps(mx + c + 8), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c + 8), _mm256_loadu_ps(mn + c + 8), acc3);
  }
  for (; c + 8 <= hd; c += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(mx + c), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(b + c), _mm256_loadu_ps(mn + c), acc1);
  }
  float sum = kernels::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; c < hd; ++c) sum += a[c] * mx[c] + b[c] * mn[c];
  return sum;
}
#endif

// bounds[i] = the row's bound against chunk i; head_bound is one of the above, on_max and on_min
// the query's parts that meet the maxima and the minima.
template <typename HeadBound>
void bounds_of_chunks(const float* on_max, const float* on_min, int kv_head, const float* abstracts,
                      int64_t n_chunks, const BoundLayout& layout, float* bounds, HeadBound head_bound) {
  const int hd = layout.head_dim;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  for (int64_t i = 0; i < n_chunks; ++i) {
    const float* mn = abstracts + i * layout.chunk_stride + static_cast<int64_t>(kv_head) * hd;
    bounds[i] = head_bound(on_max, on_min, mn + max_offset, mn, hd);
  }
}

}  // namespace

QueryParts split_query(const float* q, int head_dim) {
  QueryParts parts{std::vector<float>(static_cast<size_t>(head_dim)), std::vector<float>(static_cast<size_t>(head_dim))};
  for (int c = 0; c < head_dim; ++c) {
    parts.pos[c] = std::max(q[c], 0.0f);
    parts.neg[c] = std::min(q[c], 0.0f);
  }
  return parts;
}

void chunk_bounds(const float* q, int kv_head, const float* abstracts, int64_t n_chunks, const BoundLayout& layout,
                  float* bounds, BoundSide side) {
  assert(0 <= kv_head && kv_head < layout.n_kv_heads);
  // The lower bound swaps the parts, so that both sides run the same loop: a.max + b.min.
  const QueryParts parts = split_query(q, layout.head_dim);
  const float* on_max = side == BoundSide::kUpper ? parts.pos.data() : parts.neg.data();
  const float* on_min = side == BoundSide::kUpper ? parts.neg.data() : parts.pos.data();
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    bounds_of_chunks(on_max, on_min, kv_head, abstracts, n_chunks, layout, bounds, head_bound_avx2);
    return;
  }
#endif
  bounds_of_chunks(on_max, on_min, kv_head, abstracts, n_chunks, layout, bounds, head_bound_scalar);
}

}  // namespace leoam::sparse
