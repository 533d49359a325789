#include "kv/chunk_layout.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include "core/fp16.h"

namespace leoam {

void reset_abstract(const ChunkGeometry& g, float* abstract) {
  const int64_t n = g.row_elements();
  std::fill_n(abstract, n, std::numeric_limits<float>::infinity());
  std::fill_n(abstract + n, n, -std::numeric_limits<float>::infinity());
}

void update_abstract(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract) {
  assert(0 <= t0 && t0 <= t1 && t1 <= g.chunk_tokens);
  const int64_t n = g.row_elements();
  float* min = abstract;      // [n_kv_heads][head_dim]
  float* max = abstract + n;  // [n_kv_heads][head_dim]
  const uint8_t* k = static_cast<const uint8_t*>(chunk);  // K half: rows [0, C)
  const size_t row_bytes = g.row_bytes();
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = k + static_cast<size_t>(t) * row_bytes;
    if (g.dtype == KvDtype::kF32) {
      const float* x = reinterpret_cast<const float*>(row);
      for (int64_t i = 0; i < n; ++i) {
        min[i] = std::min(min[i], x[i]);
        max[i] = std::max(max[i], x[i]);
      }
    } else {
      const uint16_t* x = reinterpret_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) {
        const float v = f16_to_f32(x[i]);
        min[i] = std::min(min[i], v);
        max[i] = std::max(max[i], v);
      }
    }
  }
}

bool abstracts_equal(const ChunkGeometry& g, const float* a, const float* b) {
  // == rather than memcmp: -0 and +0 bound a dot product the same way.
  return std::equal(a, a + g.abstract_floats(), b);
}

}  // namespace leoam
