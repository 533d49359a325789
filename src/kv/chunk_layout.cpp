#include "kv/chunk_layout.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"

namespace leoam {

void reset_abstract(const ChunkGeometry& g, float* abstract) {
  const int64_t n = g.row_elements();
  std::fill_n(abstract, n, std::numeric_limits<float>::infinity());
  std::fill_n(abstract + n, n, -std::numeric_limits<float>::infinity());
  std::memset(abstract + g.box_floats(), 0, static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
}

void update_abstract(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract) {
  assert(0 <= t0 && t0 <= t1 && t1 <= g.chunk_tokens);
  const int64_t n = g.row_elements();
  float* min = abstract;      // [n_kv_heads][head_dim]
  float* max = abstract + n;  // [n_kv_heads][head_dim]
  const uint8_t* k = static_cast<const uint8_t*>(chunk);  // K half: rows [0, C)
  const size_t row_bytes = g.row_bytes();
  const int wph = g.sign_words_per_head();
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = k + static_cast<size_t>(t) * row_bytes;
    float* sign_row = abstract + g.box_floats() + t * g.sign_words_per_row();
    for (int h = 0; h < g.n_kv_heads; ++h) {
      for (int w = 0; w < wph; ++w) {
        uint32_t word = 0;
        const int c1 = std::min(g.head_dim, 32 * (w + 1));
        for (int c = 32 * w; c < c1; ++c) {
          const int64_t i = static_cast<int64_t>(h) * g.head_dim + c;
          const float v = g.dtype == KvDtype::kF32 ? reinterpret_cast<const float*>(row)[i]
                                                   : f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
          min[i] = std::min(min[i], v);
          max[i] = std::max(max[i], v);
          if (std::signbit(v)) word |= uint32_t{1} << (c - 32 * w);
        }
        std::memcpy(sign_row + h * wph + w, &word, sizeof(word));
      }
    }
  }
}

void widen_abstract_box(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract) {
  assert(0 <= t0 && t0 <= t1 && t1 <= g.chunk_tokens);
  const int64_t n = g.row_elements();
  float* min = abstract;
  float* max = abstract + n;
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t t = t0; t < t1; ++t) {
    load_kv_values(g.dtype, static_cast<const uint8_t*>(chunk) + static_cast<size_t>(t) * g.row_bytes(), n, row.data());
    for (int64_t i = 0; i < n; ++i) {
      min[i] = std::min(min[i], row[i]);
      max[i] = std::max(max[i], row[i]);
    }
  }
}

bool abstracts_equal(const ChunkGeometry& g, const float* a, const float* b) {
  // == rather than memcmp for the box: -0 and +0 bound a dot product the same way. The signs are bits.
  return std::equal(a, a + g.box_floats(), b) &&
         std::memcmp(a + g.box_floats(), b + g.box_floats(), static_cast<size_t>(g.sign_words()) * sizeof(uint32_t)) == 0;
}

void abstract_signs(const ChunkGeometry& g, const float* abstract, uint32_t* dst) {
  std::memcpy(dst, abstract + g.box_floats(), static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
}

}  // namespace leoam
