// The byte layout of a KV chunk and of its abstract: C consecutive positions of one layer of one
// sequence, K and V for every KV head.
//
// A chunk, as attention reads it (the device tier; dtype f16 by default):
//
//   offset 0                                 k_bytes()                               chunk_bytes()
//   +----------------------------------------+----------------------------------------+
//   | K: row 0 | row 1 | ... | row C-1       | V: row 0 | row 1 | ... | row C-1       |
//   +----------------------------------------+----------------------------------------+
//     row t = position index*C + t: [n_kv_heads][head_dim] dtype, row_bytes() long
//
// Rows past the chunk's fill (a chunk still being appended) are zero. A chunk's rows are a
// KvSegment with k = data, v = data + k_bytes(), row_stride_bytes = row_bytes().
//
// The abstract of a chunk (LeoAM's LKA), per KV head and channel, the minimum and maximum of the
// stored (already rounded to dtype) post-RoPE keys of the filled rows, as f32:
//
//   float abstract[2][n_kv_heads][head_dim]    [0] = min, [1] = max
//
// An empty chunk's abstract is min = +inf, max = -inf. Because the extremes are taken over the
// stored keys, sum_c max(q_c * min_c, q_c * max_c) bounds q.k for every stored key of the chunk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_dtype.h"

namespace leoam {

// 64: LeoAM's initial chunk size; 8..512 is what the store accepts.
inline constexpr int kDefaultChunkTokens = 64;
inline constexpr int kMinChunkTokens = 8;
inline constexpr int kMaxChunkTokens = 512;

struct ChunkGeometry {
  int n_kv_heads = 0;
  int head_dim = 0;
  int chunk_tokens = kDefaultChunkTokens;  // C
  KvDtype dtype = KvDtype::kF16;

  int64_t row_elements() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
  size_t row_bytes() const { return static_cast<size_t>(row_elements()) * kv_dtype_size(dtype); }
  size_t k_bytes() const { return row_bytes() * static_cast<size_t>(chunk_tokens); }
  size_t chunk_bytes() const { return 2 * k_bytes(); }
  int64_t abstract_floats() const { return 2 * row_elements(); }
  size_t abstract_bytes() const { return static_cast<size_t>(abstract_floats()) * sizeof(float); }
};

// abstract = the empty abstract (min +inf, max -inf).
void reset_abstract(const ChunkGeometry& g, float* abstract);

// Widens `abstract` to cover rows [t0, t1) of the K half of `chunk` (the layout above),
// 0 <= t0 <= t1 <= C. Updating [0, a) then [a, b) gives the same abstract as [0, b).
void update_abstract(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract);

// True when a and b are equal element for element (both empty counts as equal).
bool abstracts_equal(const ChunkGeometry& g, const float* a, const float* b);

}  // namespace leoam
