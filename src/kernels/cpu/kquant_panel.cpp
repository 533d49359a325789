// Unpacking Q4_K and Q6_K rows into panels (layout in kquant_panel.h).
#include "kernels/cpu/kquant_panel.h"

#include <cassert>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels {
namespace {

struct SuperView {
  float* d;
  float* dmin;
  int16_t* mp;  // [8][16][2]
  int32_t* sc;  // [n_sub][16]
  uint8_t* q;   // [64][16][4]
};

SuperView view(uint8_t* super, int n_sub) {
  return {reinterpret_cast<float*>(super + kPanelD), reinterpret_cast<float*>(super + kPanelDmin),
          reinterpret_cast<int16_t*>(super + kPanelOffsetPairs), reinterpret_cast<int32_t*>(super + kPanelScales),
          super + kpanel_quants(n_sub)};
}

void pack_q4_k(const BlockQ4_K& b, int r, const SuperView& p) {
  p.d[r] = f16_to_f32(b.d);
  p.dmin[r] = f16_to_f32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    q4_k_scale_min(s, b.scales, &sc, &m);
    p.sc[s * kPanelRows + r] = sc;
    p.mp[(s * kPanelRows + r) * 2] = m;
    p.mp[(s * kPanelRows + r) * 2 + 1] = m;
  }
  // qs[32 g + 4 i ..]: low nibbles are chunk 16 g + i, high nibbles chunk 16 g + 8 + i.
  for (int g = 0; g < 4; ++g) {
    for (int i = 0; i < 8; ++i) {
      uint32_t v;
      std::memcpy(&v, b.qs + 32 * g + 4 * i, 4);
      const uint32_t lo = v & 0x0F0F0F0Fu, hi = (v >> 4) & 0x0F0F0F0Fu;
      std::memcpy(p.q + ((16 * g + i) * kPanelRows + r) * 4, &lo, 4);
      std::memcpy(p.q + ((16 * g + 8 + i) * kPanelRows + r) * 4, &hi, 4);
    }
  }
}

void pack_q6_k(const BlockQ6_K& b, int r, const SuperView& p) {
  p.d[r] = f16_to_f32(b.d);
  p.dmin[r] = p.d[r];
  for (int s = 0; s < 16; ++s) p.sc[s * kPanelRows + r] = b.scales[s];
  for (int k = 0; k < 8; ++k) {
    p.mp[(k * kPanelRows + r) * 2] = static_cast<int16_t>(32 * b.scales[2 * k]);
    p.mp[(k * kPanelRows + r) * 2 + 1] = static_cast<int16_t>(32 * b.scales[2 * k + 1]);
  }
  auto put = [&](int e, int q) { p.q[((e / 4) * kPanelRows + r) * 4 + e % 4] = static_cast<uint8_t>(q); };
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      put(128 * h + l, (ql[l] & 0xF) | ((qh[l] & 3) << 4));
      put(128 * h + 32 + l, (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      put(128 * h + 64 + l, (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      put(128 * h + 96 + l, (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

}  // namespace

int kpanel_n_sub(GgmlType type) { return type == GgmlType::kQ4_K ? 8 : 16; }

size_t kpanel_super_bytes(GgmlType type) { return kpanel_quants(kpanel_n_sub(type)) + 64 * 64; }

void kpanel_pack(GgmlType type, const void* rows, size_t row_bytes, int n_rows, int64_t n, void* dst) {
  assert(type == GgmlType::kQ4_K || type == GgmlType::kQ6_K);
  assert(n_rows >= 1 && n_rows <= kPanelRows && n % kQK_K == 0);
  const int n_sub = kpanel_n_sub(type);
  const size_t super_bytes = kpanel_super_bytes(type);
  const int64_t n_super = n / kQK_K;
  auto* out = static_cast<uint8_t*>(dst);
  if (n_rows < kPanelRows) std::memset(out, 0, static_cast<size_t>(n_super) * super_bytes);
  for (int64_t b = 0; b < n_super; ++b) {
    const SuperView p = view(out + b * super_bytes, n_sub);
    for (int r = 0; r < n_rows; ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(rows) + r * row_bytes;
      if (type == GgmlType::kQ4_K) {
        pack_q4_k(reinterpret_cast<const BlockQ4_K*>(row)[b], r, p);
      } else {
        pack_q6_k(reinterpret_cast<const BlockQ6_K*>(row)[b], r, p);
      }
    }
  }
}

}  // namespace leoam::kernels
