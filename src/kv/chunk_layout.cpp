#include "kv/chunk_layout.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"

namespace leoam {

void reset_abstract(const ChunkGeometry& g, float* abstract) {
  const int64_t n = g.row_elements();
  std::fill_n(abstract, n, std::numeric_limits<float>::infinity());
  std::fill_n(abstract + n, n, -std::numeric_limits<float>::infinity());
  std::memset(abstract + g.box_floats(), 0, static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
}

namespace {

// The sign bit of element i of a row of keys in `dtype` (f16: its top bit, as std::signbit of
// its f32 value would be).
uint32_t sign_bit(KvDtype dtype, const uint8_t* row, int64_t i) {
  if (dtype == KvDtype::kF32) {
    uint32_t bits;
    std::memcpy(&bits, row + i * sizeof(float), sizeof(bits));
    return bits >> 31;
  }
  return reinterpret_cast<const uint16_t*>(row)[i] >> 15;
}

// The sign words of rows [t0, t1) of the K half of `chunk` into `signs`, the sketch's slots
// ([C][n_kv_heads][sign_words_per_head] 4-byte words, written with memcpy: they may be floats).
void set_row_signs(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, void* signs) {
  const int wph = g.sign_words_per_head();
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = static_cast<const uint8_t*>(chunk) + static_cast<size_t>(t) * g.row_bytes();
    auto* out = static_cast<uint8_t*>(signs) + static_cast<size_t>(t * g.sign_words_per_row()) * sizeof(uint32_t);
    for (int h = 0; h < g.n_kv_heads; ++h) {
      for (int w = 0; w < wph; ++w) {
        uint32_t word = 0;
        const int c1 = std::min(g.head_dim, 32 * (w + 1));
        for (int c = 32 * w; c < c1; ++c) {
          word |= sign_bit(g.dtype, row, static_cast<int64_t>(h) * g.head_dim + c) << (c - 32 * w);
        }
        std::memcpy(out + static_cast<size_t>(h * wph + w) * sizeof(word), &word, sizeof(word));
      }
    }
  }
}

}  // namespace

void update_abstract(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract) {
  assert(0 <= t0 && t0 <= t1 && t1 <= g.chunk_tokens);
  widen_abstract_box(g, chunk, t0, t1, abstract);
  set_row_signs(g, chunk, t0, t1, abstract + g.box_floats());
}

void widen_abstract_box(const ChunkGeometry& g, const void* chunk, int64_t t0, int64_t t1, float* abstract) {
  assert(0 <= t0 && t0 <= t1 && t1 <= g.chunk_tokens);
  const int64_t n = g.row_elements();
  float* min = abstract;
  float* max = abstract + n;
  constexpr int64_t kPiece = 256;  // values converted at a time, on the stack
  float values[kPiece];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = static_cast<const uint8_t*>(chunk) + static_cast<size_t>(t) * g.row_bytes();
    for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
      const int64_t m = std::min(kPiece, n - i0);
      load_kv_values(g.dtype, row + static_cast<size_t>(i0) * kv_dtype_size(g.dtype), m, values);
      for (int64_t i = 0; i < m; ++i) {
        min[i0 + i] = std::min(min[i0 + i], values[i]);
        max[i0 + i] = std::max(max[i0 + i], values[i]);
      }
    }
  }
}

void chunk_key_box(const ChunkGeometry& g, const void* chunk, int64_t n_rows, float* box) {
  const int64_t n = g.row_elements();
  std::fill_n(box, n, std::numeric_limits<float>::infinity());
  std::fill_n(box + n, n, -std::numeric_limits<float>::infinity());
  widen_abstract_box(g, chunk, 0, n_rows, box);
}

void chunk_key_signs(const ChunkGeometry& g, const void* chunk, int64_t n_rows, uint32_t* dst) {
  assert(0 <= n_rows && n_rows <= g.chunk_tokens);
  std::memset(dst, 0, static_cast<size_t>(g.sign_words()) * sizeof(uint32_t));
  set_row_signs(g, chunk, 0, n_rows, dst);
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
