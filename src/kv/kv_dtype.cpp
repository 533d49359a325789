#include "kv/kv_dtype.h"

#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/quant.h"

namespace leoam {

void store_kv_values(KvDtype dtype, const float* src, int64_t n, void* dst) {
  if (dtype == KvDtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(src[i]);
}

void load_kv_values(KvDtype dtype, const void* src, int64_t n, float* dst) {
  if (dtype == KvDtype::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  kernels::dequantize_row(GgmlType::kF16, src, dst, n);  // exact, vectorized
}

}  // namespace leoam
