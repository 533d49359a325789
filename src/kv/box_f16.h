// Key boxes kept in f16, half the bytes of f32 (LeoAM's LKA keeps f16 min/max per chunk): the
// disk tier's abstract records (disk_tier.h) and leoam's chunk trees (sparse/chunk_tree.h). A box
// ([2][n_kv_heads][head_dim], [0] = min, [1] = max, as chunk_bound.h lays it out) is rounded
// outward: each minimum to the largest f16 <= it, each maximum to the smallest f16 >= it, so the
// f16 box holds every key the f32 box held and its bounds stay bounds. Keys stored as f16 (the
// default KV dtype) have f16 extremes, which round to themselves.
#pragma once

#include <cstdint>

#include "core/fp16.h"
#include "kv/kv_dtype.h"

namespace leoam {

// The largest f16 <= x (x not NaN; -inf below -65504, +inf stays +inf).
inline uint16_t f16_round_down(float x) {
  const uint16_t h = f32_to_f16(x);
  if (!(f16_to_f32(h) > x)) return h;
  // One step toward -inf (-0 steps to the least negative f16).
  return static_cast<uint16_t>((h & 0x8000u) ? h + 1 : h - 1);
}

// The smallest f16 >= x (x not NaN; +inf above 65504, -inf stays -inf).
inline uint16_t f16_round_up(float x) {
  const uint16_t h = f32_to_f16(x);
  if (!(f16_to_f32(h) < x)) return h;
  // One step toward +inf (+0 steps to the least positive f16).
  return static_cast<uint16_t>((h & 0x8000u) ? h - 1 : h + 1);
}

// dst = box `src` (box_elements = 2 * n_kv_heads * head_dim floats) in f16, rounded outward.
inline void round_box_outward(const float* src, int64_t box_elements, uint16_t* dst) {
  const int64_t half = box_elements / 2;
  for (int64_t e = 0; e < half; ++e) dst[e] = f16_round_down(src[e]);
  for (int64_t e = half; e < box_elements; ++e) dst[e] = f16_round_up(src[e]);
}

// dst = f16 box `src` as f32, exactly (the vectorized f16 row conversion).
inline void decode_box(const uint16_t* src, int64_t box_elements, float* dst) {
  load_kv_values(KvDtype::kF16, src, box_elements, dst);
}

}  // namespace leoam
