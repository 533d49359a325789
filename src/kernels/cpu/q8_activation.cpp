// The activation quantizers' scalar reference and dispatch (formats in q8_activation.h).
#include "kernels/cpu/q8_activation.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/cpu/q8_kernels.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels {
namespace {

// One block of `len` elements: d = amax / 127, qs = nearbyint(x * (127 / amax)). The vector
// paths compute exactly these float operations (max is exact, one division, one multiply per
// element, round-to-nearest-even), so they write the same bits.
inline float quantize_block(const float* x, int len, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < len; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < len; ++j) qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  return amax / 127.0f;
}

}  // namespace

ActivationFormat activation_format(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      return ActivationFormat::kQ8A32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return ActivationFormat::kQ8K;
    default:
      return ActivationFormat::kF32;
  }
}

size_t activation_bytes(GgmlType weight_type, int64_t n) {
  switch (activation_format(weight_type)) {
    case ActivationFormat::kQ8A32:
      return static_cast<size_t>(n / 32) * sizeof(BlockQ8A32);
    case ActivationFormat::kQ8K:
      return static_cast<size_t>(n / kQK_K) * sizeof(BlockQ8K);
    case ActivationFormat::kF32:
      break;
  }
  return 0;
}

void quantize_activation(GgmlType weight_type, const float* x, int64_t n, void* dst) {
  const detail::Q8Kernels& k = detail::q8_kernels();
  switch (activation_format(weight_type)) {
    case ActivationFormat::kQ8A32:
      assert(n % 32 == 0);
      k.quantize_q8a32(x, n, dst);
      return;
    case ActivationFormat::kQ8K:
      assert(n % kQK_K == 0);
      k.quantize_q8k(x, n, dst);
      return;
    case ActivationFormat::kF32:
      break;
  }
  assert(false && "quantize_activation: type has no 8-bit activation format");
}

namespace ref {

void quantize_q8a32(const float* x, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8A32*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    y[b].d = quantize_block(x + b * 32, 32, y[b].qs);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += y[b].qs[j];
    y[b].s = y[b].d * static_cast<float>(sum);
  }
}

void quantize_q8k(const float* x, int64_t n, void* dst) {
  auto* y = static_cast<BlockQ8K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    y[b].d = quantize_block(x + b * kQK_K, kQK_K, y[b].qs);
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[b].qs[16 * k + j];
      y[b].bsums[k] = static_cast<int16_t>(sum);
    }
  }
}

void quantize_activation(GgmlType weight_type, const float* x, int64_t n, void* dst) {
  switch (activation_format(weight_type)) {
    case ActivationFormat::kQ8A32:
      quantize_q8a32(x, n, dst);
      return;
    case ActivationFormat::kQ8K:
      quantize_q8k(x, n, dst);
      return;
    case ActivationFormat::kF32:
      break;
  }
  assert(false && "ref::quantize_activation: type has no 8-bit activation format");
}

}  // namespace ref
}  // namespace leoam::kernels
