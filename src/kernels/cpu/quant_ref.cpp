// Plain scalar references: the definition of what each block decodes to. The fast paths in
// quant.cpp must produce the same dequantized floats bit for bit; every multiply-add that could
// be contracted is written as an explicit std::fma (or kept as separate multiplies) so that the
// result does not depend on the compiler's -ffp-contract choice.
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels::ref {
namespace {

void dequantize_q4_0(const BlockQ4_0* blocks, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ4_0& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((blk.qs[j] & 0xF) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* blocks, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ8_0& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    float* y = dst + b * kQK8_0;
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(blk.qs[j]) * d;
  }
}

void dequantize_q4_k(const BlockQ4_K* blocks, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    const float dmin = f16_to_f32(blk.dmin);
    float* y = dst + b * kQK_K;
    for (int g = 0; g < 4; ++g) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      q4_k_scale_min(2 * g, blk.scales, &sc_lo, &m_lo);
      q4_k_scale_min(2 * g + 1, blk.scales, &sc_hi, &m_hi);
      const float d_lo = d * static_cast<float>(sc_lo);
      const float min_lo = dmin * static_cast<float>(m_lo);
      const float d_hi = d * static_cast<float>(sc_hi);
      const float min_hi = dmin * static_cast<float>(m_hi);
      const uint8_t* q = blk.qs + 32 * g;
      for (int l = 0; l < 32; ++l) {
        y[64 * g + l] = std::fma(d_lo, static_cast<float>(q[l] & 0xF), -min_lo);
        y[64 * g + 32 + l] = std::fma(d_hi, static_cast<float>(q[l] >> 4), -min_hi);
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* blocks, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      float* y = dst + b * kQK_K + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = (d * static_cast<float>(sc[is + 0])) * static_cast<float>(q1);
        y[l + 32] = (d * static_cast<float>(sc[is + 2])) * static_cast<float>(q2);
        y[l + 64] = (d * static_cast<float>(sc[is + 4])) * static_cast<float>(q3);
        y[l + 96] = (d * static_cast<float>(sc[is + 6])) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  assert(n % ggml_block_size(type) == 0);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case GgmlType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::kQ4_0:
      dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / kQK4_0);
      return;
    case GgmlType::kQ8_0:
      dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / kQK8_0);
      return;
    case GgmlType::kQ4_K:
      dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K);
      return;
    case GgmlType::kQ6_K:
      dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K);
      return;
  }
  assert(false && "dequantize_row: unsupported type");
}

float dot_row(GgmlType type, const void* row, const float* x, int64_t n) {
  // Decode one block (at most kQK_K elements) at a time and accumulate in double.
  const int64_t block = ggml_block_size(type) == 1 ? kQK_K : ggml_block_size(type);
  const size_t block_bytes = ggml_row_size(type, block);
  const auto* src = static_cast<const uint8_t*>(row);
  float buf[kQK_K];
  double sum = 0.0;
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t len = n - i0 < block ? n - i0 : block;  // only F32/F16/BF16 can be ragged
    dequantize_row(type, src, buf, len);
    for (int64_t i = 0; i < len; ++i) sum += static_cast<double>(buf[i]) * static_cast<double>(x[i0 + i]);
    src += block_bytes;
  }
  return static_cast<float>(sum);
}

}  // namespace leoam::kernels::ref
