// The byte layout of a KV chunk and of its abstract: C consecutive positions of one layer of one
// sequence, K and V for every KV head.
//
//   | K: row 0 | row 1 | ... | row C-1 | V: row 0 | row 1 | ... | row C-1 |   row_bytes() a row
//   row t = position index*C + t: [n_kv_heads][head_dim] dtype; rows past the fill are zero
//
// The abstract (LeoAM's LKA): the f32 box (per-channel min and max of the stored keys of the
// filled rows), then the key sign sketch, one bit per key channel of every row (set where
// k_c <= 0), in uint32 words read and written with memcpy. The box bounds q.k; the signs tighten
// it (sign_bound.h). Layouts and the bound: docs/kv-store.md#chunk-and-abstract-layout
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_dtype.h"

namespace leoam {

// 64: LeoAM's initial chunk size; 2..512 is what the store accepts.
inline constexpr int kDefaultChunkTokens = 64;
inline constexpr int kMinChunkTokens = 2;
inline constexpr int kMaxChunkTokens = 512;

// 32-bit words of the key sign sketch per kv head of a row (one bit a channel).
inline int sign_words_per_head(int head_dim) { return (head_dim + 31) / 32; }

struct ChunkGeometry {
  int n_kv_heads = 0;
  int head_dim = 0;
  int chunk_tokens = kDefaultChunkTokens;  // C
  KvDtype dtype = KvDtype::kF16;

  int64_t row_elements() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
  size_t row_bytes() const { return static_cast<size_t>(row_elements()) * kv_dtype_size(dtype); }
  size_t k_bytes() const { return row_bytes() * static_cast<size_t>(chunk_tokens); }
  size_t chunk_bytes() const { return 2 * k_bytes(); }
  int64_t box_floats() const { return 2 * row_elements(); }
  int sign_words_per_head() const { return leoam::sign_words_per_head(head_dim); }
  int64_t sign_words_per_row() const { return static_cast<int64_t>(n_kv_heads) * sign_words_per_head(); }
  int64_t sign_words() const { return sign_words_per_row() * chunk_tokens; }
  // The whole abstract, box and signs, in 4-byte slots.
  int64_t abstract_floats() const { return box_floats() + sign_words(); }
  size_t abstract_bytes() const { return static_cast<size_t>(abstract_floats()) * sizeof(float); }
};

// abstract = the empty abstract (min +inf, max -inf, no sign set).
void reset_abstract(const ChunkGeometry& g, float* abstract);

// Widens `abstract`'s box to cover rows [t0, t1) of the K half of `chunk` (the layout above),
// 0 <= t0 <= t1 <= C, and sets those rows' signs. Updating [0, a) then [a, b) gives the same
// abstract as [0, b).
void update_abstract(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract);

// Widens `abstract`'s box, and only its box, to cover rows [t0, t1) of the K half of `chunk`:
// the decoded form of a chunk whose signs the abstract already holds (kv_codec.h keeps them).
void widen_abstract_box(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract);

// box = the box of rows [0, n_rows) of the K half of `chunk`: [2][n_kv_heads][head_dim] floats,
// as update_abstract makes it (n_rows 0: the empty box).
void chunk_key_box(const ChunkGeometry& g, const void* chunk, int64_t n_rows, float* box);

// dst = the key sign sketch of rows [0, n_rows) of `chunk` as update_abstract sets it, rows past
// them 0: [C][n_kv_heads][sign_words_per_head].
void chunk_key_signs(const ChunkGeometry& g, const void* chunk, int64_t n_rows, uint32_t* dst);

// True when a and b are equal element for element (both empty counts as equal).
bool abstracts_equal(const ChunkGeometry& g, const float* a, const float* b);

// dst = the sign words of `abstract`: [C][n_kv_heads][sign_words_per_head].
void abstract_signs(const ChunkGeometry& g, const float* abstract, uint32_t* dst);

}  // namespace leoam
