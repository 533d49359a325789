// The importance of a KV chunk for a query: an upper bound on q.k over every key in the chunk,
// from the chunk's abstract (per-channel min and max of its keys, chunk_layout.h):
//
//   bound(q, chunk) = sum_c max(q_c * min_c, q_c * max_c)  >=  q.k  for every key k in the chunk
//
// (each term bounds q_c * k_c since min_c <= k_c <= max_c). Quest and LeoAM rank chunks by it.
// The lower bound sum_c min(q_c * min_c, q_c * max_c) <= q.k serves attention-desert detection
// (how much mass the near window holds at least).
#pragma once

#include <cstdint>
#include <vector>

namespace leoam::sparse {

// Where the abstracts are, as KvCatalog::load_abstracts lays them out: chunk i's minima for kv
// head h at abstracts + i * chunk_stride + h * head_dim, its maxima n_kv_heads * head_dim floats
// further on.
struct BoundLayout {
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t chunk_stride = 0;  // floats from one chunk's abstract to the next: 2 * n_kv_heads * head_dim
};

enum class BoundSide : uint8_t { kUpper, kLower };

// A query row's positive and negative parts, q = pos + neg with pos = max(q, 0), neg = min(q, 0)
// (one of them 0 in each channel), head_dim floats each. The fast paths of the bound kernels
// (here and sign_bound.h) multiply them into the abstracts, so that a channel's extreme term
// needs no compare: max(q_c min_c, q_c max_c) = pos_c max_c + neg_c min_c, exactly.
struct QueryParts {
  std::vector<float> pos;
  std::vector<float> neg;
};
QueryParts split_query(const float* q, int head_dim);

// bounds[i] for chunks i in [0, n_chunks): the bound of query row q (head_dim floats) against kv
// head `kv_head` of chunk i. side = kLower gives the lower bound instead.
// Chunks must be non-empty: the empty abstract (min +inf, max -inf) bounds nothing, and its
// bound is unspecified (it may be NaN). The dispatched path sums in float (AVX2+FMA or scalar).
void chunk_bounds(const float* q, int kv_head, const float* abstracts, int64_t n_chunks, const BoundLayout& layout,
                  float* bounds, BoundSide side = BoundSide::kUpper);

namespace ref {
// Plain loops in double: what the dispatched version is tested against.
void chunk_bounds(const float* q, int kv_head, const float* abstracts, int64_t n_chunks, const BoundLayout& layout,
                  float* bounds, BoundSide side = BoundSide::kUpper);
}  // namespace ref

}  // namespace leoam::sparse
