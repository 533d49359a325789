// quantize_row: F32 -> each stored type, round-to-nearest, no importance weighting. Used to make
// test models and by the GGUF writer, so clarity beats speed here. The K-quant scale choices are
// our own (not ggml's iterative search), but every block written is an ordinary ggml block that
// any ggml-compatible decoder turns into the values our dequantize_row gives.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels {
namespace {

int clamp_int(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// Nearest integer of v (ties away from zero), clamped to [lo, hi]; NaN -> 0.
int round_clamp(float v, int lo, int hi) {
  if (!(v == v)) return clamp_int(0, lo, hi);
  if (v <= static_cast<float>(lo)) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::lround(v));
}

// The element with the largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Q8_0: d = amax / 127, rounded to f16 first so that x / d uses the scale the decoder will see.
void quantize_q8_0(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  y->d = f32_to_f16(amax / 127.0f);
  const float d = f16_to_f32(y->d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK8_0; ++j) y->qs[j] = static_cast<int8_t>(round_clamp(x[j] * id, -127, 127));
}

// Q4_0: the largest-magnitude element maps to q - 8 = -8 exactly (d = max / -8), as ggml does,
// which leaves [-7, 7] of d for the opposite sign (one step is clamped to 7).
void quantize_q4_0(const float* x, BlockQ4_0* y) {
  y->d = f32_to_f16(signed_absmax(x, kQK4_0) / -8.0f);
  const float d = f16_to_f32(y->d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const int q0 = round_clamp(x[j] * id, -8, 7) + 8;
    const int q1 = round_clamp(x[j + kQK4_0 / 2] * id, -8, 7) + 8;
    y->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q4_K: per 32-element sub-block, min_j = min(0, min x) and scale_j = (max x - min_j) / 15, so
// that x ~ scale_j * q - (-min_j) with q in [0, 15]. The 8 scales and 8 (negated) mins are then
// quantized to 6 bits against the super-block's d = max scale / 63 and dmin = max min / 63.
// Scales round up so a sub-block's range always fits in 15 steps; mins round to nearest.
void quantize_q4_k(const float* x, BlockQ4_K* y) {
  float scale[8];
  float neg_min[8];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float lo = 0.0f;
    float hi = xs[0];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, xs[l]);
      hi = std::max(hi, xs[l]);
    }
    scale[j] = std::max(0.0f, (hi - lo) / 15.0f);
    neg_min[j] = -lo;
  }
  const float max_scale = *std::max_element(scale, scale + 8);
  const float max_min = *std::max_element(neg_min, neg_min + 8);
  y->d = f32_to_f16(max_scale / 63.0f);
  y->dmin = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(y->d);
  const float dmin = f16_to_f32(y->dmin);

  uint8_t sc[8];
  uint8_t m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0.0f ? clamp_int(static_cast<int>(std::ceil(scale[j] / d)), 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0.0f ? round_clamp(neg_min[j] / dmin, 0, 63) : 0);
  }
  q4_k_pack_scales(sc, m, y->scales);

  for (int g = 0; g < 4; ++g) {
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * g + half;
      const float d1 = d * static_cast<float>(sc[j]);
      const float m1 = dmin * static_cast<float>(m[j]);
      const float id1 = d1 > 0.0f ? 1.0f / d1 : 0.0f;
      for (int l = 0; l < 32; ++l) {
        const int q = round_clamp((x[32 * j + l] + m1) * id1, 0, 15);
        uint8_t& byte = y->qs[32 * g + l];
        byte = half == 0 ? static_cast<uint8_t>((byte & 0xF0) | q) : static_cast<uint8_t>((byte & 0x0F) | (q << 4));
      }
    }
  }
}

// Q6_K: per 16-element sub-block the largest-magnitude element maps to q = -32 (scale_j =
// max / -32); the 16 scales are quantized to int8 against d = max |scale_j| / 127.
void quantize_q6_k(const float* x, BlockQ6_K* y) {
  float scale[16];
  float max_abs_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scale[j] = signed_absmax(x + 16 * j, 16) / -32.0f;
    max_abs_scale = std::max(max_abs_scale, std::fabs(scale[j]));
  }
  y->d = f32_to_f16(max_abs_scale / 127.0f);
  const float d = f16_to_f32(y->d);
  int q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    const int sc = d > 0.0f ? round_clamp(scale[j] / d, -127, 127) : 0;
    y->scales[j] = static_cast<int8_t>(sc);
    const float d1 = d * static_cast<float>(sc);
    const float id1 = d1 != 0.0f ? 1.0f / d1 : 0.0f;
    for (int l = 0; l < 16; ++l) q[16 * j + l] = round_clamp(x[16 * j + l] * id1, -32, 31) + 32;
  }
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int h = 0; h < 2; ++h) {
    const int* qq = q + 128 * h;
    uint8_t* ql = y->ql + 64 * h;
    uint8_t* qh = y->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                   ((qq[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  assert(n % ggml_block_size(type) == 0);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::kQ4_0: {
      auto* y = static_cast<BlockQ4_0*>(dst);
      for (int64_t b = 0; b < n / kQK4_0; ++b) quantize_q4_0(src + b * kQK4_0, y + b);
      return;
    }
    case GgmlType::kQ8_0: {
      auto* y = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < n / kQK8_0; ++b) quantize_q8_0(src + b * kQK8_0, y + b);
      return;
    }
    case GgmlType::kQ4_K: {
      auto* y = static_cast<BlockQ4_K*>(dst);
      for (int64_t b = 0; b < n / kQK_K; ++b) quantize_q4_k(src + b * kQK_K, y + b);
      return;
    }
    case GgmlType::kQ6_K: {
      auto* y = static_cast<BlockQ6_K*>(dst);
      for (int64_t b = 0; b < n / kQK_K; ++b) quantize_q6_k(src + b * kQK_K, y + b);
      return;
    }
  }
  assert(false && "quantize_row: unsupported type");
}

}  // namespace leoam::kernels
