// The integer dots' scalar reference and dispatch (see dot_q8.h).
#include "kernels/cpu/dot_q8.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/q8_kernels.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"

namespace leoam::kernels {
namespace {

double dot_q4_0_ref(const BlockQ4_0* w, const BlockQ8A32* x, int64_t n_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
    }
    sum += static_cast<double>(f16_to_f32(w[b].d)) * static_cast<double>(x[b].d) * isum;
  }
  return sum;
}

double dot_q8_0_ref(const BlockQ8_0* w, const BlockQ8A32* x, int64_t n_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<double>(f16_to_f32(w[b].d)) * static_cast<double>(x[b].d) * isum;
  }
  return sum;
}

// (d sc_j q - dmin m_j) * dx qx summed: d dx sum_j sc_j sum(q qx) - dmin dx sum_j m_j sum(qx).
double dot_q4_k_ref(const BlockQ4_K* w, const BlockQ8K* x, int64_t n_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int64_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4_k_scale_min(j, w[b].scales, &sc, &m);
      const uint8_t* q = w[b].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 0xF) * x[b].qs[32 * j + l];
      isum += static_cast<int64_t>(sc) * s;
      imin += static_cast<int64_t>(m) * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    const double dx = x[b].d;
    sum += static_cast<double>(f16_to_f32(w[b].d)) * dx * static_cast<double>(isum) -
           static_cast<double>(f16_to_f32(w[b].dmin)) * dx * static_cast<double>(imin);
  }
  return sum;
}

double dot_q6_k_ref(const BlockQ6_K* w, const BlockQ8K* x, int64_t n_blocks) {
  double sum = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int64_t isum = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      const int8_t* xq = x[b].qs + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q[4] = {((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
                          ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
                          ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                          ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32};
        for (int k = 0; k < 4; ++k) {
          const int e = l + 32 * k;  // element within the half; its scale is e / 16
          isum += static_cast<int64_t>(w[b].scales[8 * h + e / 16]) * q[k] * xq[e];
        }
      }
    }
    sum += static_cast<double>(f16_to_f32(w[b].d)) * static_cast<double>(x[b].d) * static_cast<double>(isum);
  }
  return sum;
}

template <typename Fn>
void rows_ref(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out, Fn fn) {
  for (int r = 0; r < n_rows; ++r) out[r] = fn(static_cast<const uint8_t*>(rows) + r * row_bytes, xq, n);
}

void dot_rows_q4_0_ref(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  rows_ref(rows, row_bytes, n_rows, xq, n, out, [](const void* row, const void* x, int64_t len) {
    return ref::dot_row_q8(GgmlType::kQ4_0, row, x, len);
  });
}
void dot_rows_q8_0_ref(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  rows_ref(rows, row_bytes, n_rows, xq, n, out, [](const void* row, const void* x, int64_t len) {
    return ref::dot_row_q8(GgmlType::kQ8_0, row, x, len);
  });
}
void dot_rows_q4_k_ref(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  rows_ref(rows, row_bytes, n_rows, xq, n, out, [](const void* row, const void* x, int64_t len) {
    return ref::dot_row_q8(GgmlType::kQ4_K, row, x, len);
  });
}
void dot_rows_q6_k_ref(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  rows_ref(rows, row_bytes, n_rows, xq, n, out, [](const void* row, const void* x, int64_t len) {
    return ref::dot_row_q8(GgmlType::kQ6_K, row, x, len);
  });
}

// Each row of each group taken out to GGUF's layout, then ref::dot_row_q8.
template <GgmlType kType>
void dot_groups_ref(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq, int64_t n, float* out) {
  std::vector<uint8_t> row(row_bytes);
  for (int64_t g = 0; g < n_groups; ++g) {
    const auto* group = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * kRowGroup * row_bytes;
    for (int64_t i = 0; i < kRowGroup; ++i) {
      ungroup_rows(kType, group, row_bytes, kRowGroup, i, 1, row.data());
      out[g * kRowGroup + i] = ref::dot_row_q8(kType, row.data(), xq, n);
    }
  }
}

constexpr detail::Q8Kernels kScalarKernels = {ref::quantize_q8a32,
                                              ref::quantize_q8k,
                                              dot_rows_q4_0_ref,
                                              dot_rows_q8_0_ref,
                                              dot_rows_q4_k_ref,
                                              dot_rows_q6_k_ref,
                                              dot_groups_ref<GgmlType::kQ4_0>,
                                              dot_groups_ref<GgmlType::kQ8_0>,
                                              nullptr,
                                              nullptr,
                                              nullptr,
                                              nullptr};

detail::DotRowsQ8Fn select_dot(const detail::Q8Kernels& k, GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return k.dot_q4_0;
    case GgmlType::kQ8_0:
      return k.dot_q8_0;
    case GgmlType::kQ4_K:
      return k.dot_q4_k;
    case GgmlType::kQ6_K:
      return k.dot_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

namespace detail {
const Q8Kernels& q8_kernels() {
  const Q8Kernels* k = nullptr;
  switch (cpu_path()) {
    case CpuPath::kAvx512:
      k = q8_kernels_avx512();
      break;
    case CpuPath::kAvx2:
      k = q8_kernels_avx2();
      break;
    case CpuPath::kScalar:
      break;
  }
  return k != nullptr ? *k : kScalarKernels;
}
}  // namespace detail

bool has_dot_q8(GgmlType type) { return activation_format(type) != ActivationFormat::kF32; }

float dot_row_q8(GgmlType type, const void* row, const void* xq, int64_t n) {
  float out = 0.0f;
  dot_rows_q8(type, row, 0, 1, xq, n, &out);
  return out;
}

void dot_rows_q8(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const void* xq, int64_t n,
                 float* out) {
  assert(n % ggml_block_size(type) == 0);
  const detail::DotRowsQ8Fn fn = select_dot(detail::q8_kernels(), type);
  assert(fn != nullptr && "dot_rows_q8: type has no integer dot");
  const auto* base = static_cast<const uint8_t*>(rows);
  for (int64_t r = 0; r < n_rows; r += 4) {
    const int64_t m = n_rows - r < 4 ? n_rows - r : 4;
    fn(base + static_cast<size_t>(r) * row_bytes, row_bytes, static_cast<int>(m), xq, n, out + r);
  }
}

void dot_groups_q8(GgmlType type, const void* groups, size_t row_bytes, int64_t n_groups, const void* xq, int64_t n,
                   float* out) {
  assert(n % ggml_block_size(type) == 0 && has_row_groups(type));
  const detail::Q8Kernels& k = detail::q8_kernels();
  (type == GgmlType::kQ4_0 ? k.dot_groups_q4_0 : k.dot_groups_q8_0)(groups, row_bytes, n_groups, xq, n, out);
}

namespace {
detail::GemmGroupsQ8Fn select_gemm_groups(const detail::Q8Kernels& k, GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return k.gemm_groups_q4_0;
    case GgmlType::kQ8_0:
      return k.gemm_groups_q8_0;
    default:
      return nullptr;
  }
}
detail::GemmRowsQ8Fn select_gemm_rows(const detail::Q8Kernels& k, GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K:
      return k.gemm_rows_q4_k;
    case GgmlType::kQ6_K:
      return k.gemm_rows_q6_k;
    default:
      return nullptr;
  }
}

void dot_rows_per_token(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const uint8_t* xq,
                        size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n_tokens; ++t) dot_rows_q8(type, rows, row_bytes, n_rows, xq + t * xq_stride, n, y + t * ldy);
}
}  // namespace

void gemm_groups_q8(GgmlType type, const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                    size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy) {
  assert(n % ggml_block_size(type) == 0 && has_row_groups(type));
  if (const detail::GemmGroupsQ8Fn fn = select_gemm_groups(detail::q8_kernels(), type)) {
    fn(groups, row_bytes, n_groups, xq, xq_stride, n_tokens, n, y, ldy);
    return;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    dot_groups_q8(type, groups, row_bytes, n_groups, static_cast<const uint8_t*>(xq) + t * xq_stride, n, y + t * ldy);
  }
}

void gemm_rows_q8(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const void* xq,
                  size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy) {
  assert(n % ggml_block_size(type) == 0 && has_dot_q8(type));
  const detail::Q8Kernels& k = detail::q8_kernels();
  const auto* x = static_cast<const uint8_t*>(xq);
  if (const detail::GemmRowsQ8Fn fn = select_gemm_rows(k, type)) {
    fn(rows, row_bytes, n_rows, xq, xq_stride, n_tokens, n, y, ldy);
    return;
  }
  if (select_gemm_groups(k, type) == nullptr) {
    dot_rows_per_token(type, rows, row_bytes, n_rows, x, xq_stride, n_tokens, n, y, ldy);
    return;
  }
  // Q4_0 and Q8_0 rows as the file stores them (a tied output): two groups at a time, the groups
  // kernel's unit, put into row groups here; the last n_rows % 8 rows one token at a time.
  thread_local std::vector<uint8_t> grouped;  // reused across calls
  grouped.resize(2 * kRowGroup * row_bytes);
  const auto* src = static_cast<const uint8_t*>(rows);
  int64_t r0 = 0;
  while (r0 + kRowGroup <= n_rows) {
    const int64_t n_groups = std::min<int64_t>(2, (n_rows - r0) / kRowGroup);
    group_rows(type, src + r0 * row_bytes, row_bytes, n_groups * kRowGroup, grouped.data());
    gemm_groups_q8(type, grouped.data(), row_bytes, n_groups, xq, xq_stride, n_tokens, n, y + r0, ldy);
    r0 += n_groups * kRowGroup;
  }
  if (r0 < n_rows) {
    dot_rows_per_token(type, src + r0 * row_bytes, row_bytes, n_rows - r0, x, xq_stride, n_tokens, n, y + r0, ldy);
  }
}

bool gemm_q8_is_fast(GgmlType type) {
  const detail::Q8Kernels& k = detail::q8_kernels();
  return select_gemm_groups(k, type) != nullptr || select_gemm_rows(k, type) != nullptr;
}

namespace ref {
float dot_row_q8(GgmlType type, const void* row, const void* xq, int64_t n) {
  switch (type) {
    case GgmlType::kQ4_0:
      return static_cast<float>(
          dot_q4_0_ref(static_cast<const BlockQ4_0*>(row), static_cast<const BlockQ8A32*>(xq), n / kQK4_0));
    case GgmlType::kQ8_0:
      return static_cast<float>(
          dot_q8_0_ref(static_cast<const BlockQ8_0*>(row), static_cast<const BlockQ8A32*>(xq), n / kQK8_0));
    case GgmlType::kQ4_K:
      return static_cast<float>(
          dot_q4_k_ref(static_cast<const BlockQ4_K*>(row), static_cast<const BlockQ8K*>(xq), n / kQK_K));
    case GgmlType::kQ6_K:
      return static_cast<float>(
          dot_q6_k_ref(static_cast<const BlockQ6_K*>(row), static_cast<const BlockQ8K*>(xq), n / kQK_K));
    default:
      break;
  }
  assert(false && "ref::dot_row_q8: type has no integer dot");
  return 0.0f;
}
}  // namespace ref

}  // namespace leoam::kernels
