// The sign-refined bound's scalar kernels (sign_bound_kernels.h) and the choice of a table by
// cpu_path().
#include <algorithm>
#include <limits>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/sign_bound_kernels.h"

namespace leoam::kernels {
namespace {

bool row_bit(const SignRowWords& s, int64_t row, int kv_head, int c) {
  const uint32_t* words = s.row(row, kv_head);
  return (words[c / 32] >> (c % 32)) & 1u;
}
bool row_bit(const SignSliceWords& s, int64_t row, int kv_head, int c) {
  return (s.slice(row / 64, kv_head)[c] >> (row % 64)) & 1u;
}

template <typename Signs>
void group_bound_scalar(const SignTerms& terms, int g, const Signs& signs, std::span<const SignRows> run, int kv_head,
                        int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  for (int j = 0; j < g; ++j) {
    const float* dj = terms.d.data() + static_cast<int64_t>(j) * hd;
    for (int64_t u = 0; u < n; ++u) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t t = run[u].begin; t < run[u].end; ++t) {
        float sum = terms.base[j];
        for (int c = 0; c < hd; ++c) sum += row_bit(signs, t, kv_head, c) ? dj[c] : 0.0f;
        top = std::max(top, sum);
      }
      best[j * n + u] = top;
    }
  }
}

constexpr SignBoundKernels kScalarKernels = {ref::sign_terms, ref::sign_rows_bound, ref::sign_terms,
                                             ref::sign_slices_bound};

}  // namespace

namespace ref {

float sign_channel_terms(const float* qp, const float* qn, const uint16_t* mn16, const uint16_t* mx16, int hd,
                         float* d) {
  float base = 0.0f;
  for (int c = 0; c < hd; ++c) {
    const float mn = f16_to_f32(mn16[c]);
    const float mx = f16_to_f32(mx16[c]);
    const float pos = qp[c] * mx + qn[c] * std::max(0.0f, mn);
    const float neg = qp[c] * std::min(0.0f, mx) + qn[c] * mn;
    base += pos;
    d[c] = neg - pos;
  }
  return base;
}

void sign_terms(const SignQuery* heads, int g, const uint16_t* mn, const uint16_t* mx, int hd, SignTerms& terms) {
  for (int j = 0; j < g; ++j) {
    terms.base[j] =
        sign_channel_terms(heads[j].pos, heads[j].neg, mn, mx, hd, terms.d.data() + static_cast<int64_t>(j) * hd);
  }
  terms.quantized = false;
}

void sign_rows_bound(const SignTerms& terms, int g, const SignRowWords& signs, std::span<const SignRows> run,
                     int kv_head, int hd, float* best) {
  group_bound_scalar(terms, g, signs, run, kv_head, hd, best);
}

void sign_slices_bound(const SignTerms& terms, int g, const SignSliceWords& signs, std::span<const SignRows> run,
                       int kv_head, int hd, float* best) {
  group_bound_scalar(terms, g, signs, run, kv_head, hd, best);
}

}  // namespace ref

SignBoundKernels sign_bound_kernels(int head_dim) {
  const SignBoundKernels* avx2 = detail::sign_bound_kernels_avx2();
  const SignBoundKernels* avx512 = detail::sign_bound_kernels_avx512();
  if (cpu_path() >= CpuPath::kAvx512 && avx512 != nullptr) {
    SignBoundKernels k = *avx512;
    if (head_dim % 8 != 0) {  // the row-words kernel sums 8 channels a step
      k.rows_terms = kScalarKernels.rows_terms;
      k.rows_bound = kScalarKernels.rows_bound;
    }
    return k;
  }
  if (cpu_path() >= CpuPath::kAvx2 && avx2 != nullptr && head_dim % 8 == 0) return *avx2;
  return kScalarKernels;
}

}  // namespace leoam::kernels
