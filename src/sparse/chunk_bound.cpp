// The chunk bound (chunk_bound.h): a double-precision reference, and the float kernel of
// kernels/cpu/box_bound.h (scalar or AVX2+FMA, picked at run time). That kernel takes each query
// row split into its positive and negative parts, q = q+ + q- (split_query), so that a channel's
// term is two multiply-adds without a compare:
//   max(q_c * min_c, q_c * max_c) = q+_c * max_c + q-_c * min_c     (upper)
//   min(q_c * min_c, q_c * max_c) = q+_c * min_c + q-_c * max_c     (lower)
// One of q+_c, q-_c is zero, so each identity is exact for finite abstracts and the sum rounds
// as a plain dot product would.
#include "sparse/chunk_bound.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <vector>

#include "kernels/cpu/box_bound.h"

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

// bounds[i] = the row's bound against chunk i; on_max and on_min the query's parts that meet the
// maxima and the minima.
void bounds_of_chunks(const float* on_max, const float* on_min, int kv_head, const float* abstracts,
                      int64_t n_chunks, const BoundLayout& layout, float* bounds) {
  const kernels::BoxBoundFn head_bound = kernels::box_bound_kernel();
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
  bounds_of_chunks(on_max, on_min, kv_head, abstracts, n_chunks, layout, bounds);
}

}  // namespace leoam::sparse
