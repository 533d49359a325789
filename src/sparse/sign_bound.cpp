// The sign-refined bound kernel (sign_bound.h): a double reference, a float scalar path and an
// AVX2+FMA path, picked at run time (core/cpu_features.h).
//
// The AVX2 path puts a row's channels in the lanes: per 8 channels a byte of sign bits picks the
// lanes of d to add, and each row ends in a horizontal sum. Tried and dropped (2026-12-01, 2-core
// Xeon VM with AVX-512, bench/sign_bound_bench.cpp): an AVX-512 path with 16 rows in the lanes,
// per channel a vptestmd and a masked add, or per nibble a lookup in a 16-entry table with one
// vpermps. Both ran at the AVX2 path's rate: the rows' words of one kv head are strided, and the
// gather that collects them for 16 rows stalls each block (gathers are slow on this CPU).
#include "sparse/sign_bound.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/avx2_util.h"

namespace leoam::sparse {
namespace {

bool bit(const uint32_t* head_words, int c) { return (head_words[c / 32] >> (c % 32)) & 1u; }

const uint32_t* row_words(const SignSketch& s, int64_t pos, int kv_head) {
  return s.words + (pos - s.pos0) * s.words_per_row + static_cast<int64_t>(kv_head) * s.words_per_head;
}

// The two terms of each channel for one box (the header comment), from the query's positive and
// negative parts qp, qn (split_query, chunk_bound.h: each term exact without a compare):
//
//   P_c = qp_c * max_c + qn_c * max(0, min_c)        N_c = qp_c * min(0, max_c) + qn_c * min_c
//
// Returns sum_c P_c, the bound of a row with no bit set, and stores d[c] = N_c - P_c, added
// where bit c is set.
float channel_terms_scalar(const float* qp, const float* qn, const float* mn, const float* mx, int hd, float* d) {
  float base = 0.0f;
  for (int c = 0; c < hd; ++c) {
    const float pos = qp[c] * mx[c] + qn[c] * std::max(0.0f, mn[c]);
    const float neg = qp[c] * std::min(0.0f, mx[c]) + qn[c] * mn[c];
    base += pos;
    d[c] = neg - pos;
  }
  return base;
}

// The largest row bound over `rows`: base plus each row's set bits' d.
float unit_bound_scalar(float base, const float* d, const SignSketch& signs, TokenRange rows, int kv_head, int hd) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    const uint32_t* words = row_words(signs, t, kv_head);
    float sum = base;
    for (int c = 0; c < hd; ++c) sum += bit(words, c) ? d[c] : 0.0f;
    best = std::max(best, sum);
  }
  return best;
}

#ifdef LEOAM_HAVE_X86
// channel_terms_scalar 8 channels a step (both vector paths: a unit of 8 rows costs as much here
// as in its rows), then a scalar tail.
LEOAM_AVX2 float channel_terms_avx2(const float* qp, const float* qn, const float* mn, const float* mx, int hd,
                                    float* d) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 base = zero;
  int c = 0;
  for (; c + 8 <= hd; c += 8) {
    const __m256 p = _mm256_loadu_ps(qp + c);
    const __m256 n = _mm256_loadu_ps(qn + c);
    const __m256 lo = _mm256_loadu_ps(mn + c);
    const __m256 hi = _mm256_loadu_ps(mx + c);
    const __m256 pos = _mm256_fmadd_ps(p, hi, _mm256_mul_ps(n, _mm256_max_ps(zero, lo)));
    const __m256 neg = _mm256_fmadd_ps(p, _mm256_min_ps(zero, hi), _mm256_mul_ps(n, lo));
    base = _mm256_add_ps(base, pos);
    _mm256_storeu_ps(d + c, _mm256_sub_ps(neg, pos));
  }
  return kernels::hsum(base) + channel_terms_scalar(qp + c, qn + c, mn + c, mx + c, hd - c, d + c);
}

// kByteMasks[b]: lane j all ones where bit j of b is set, so that one load turns a byte of sign
// bits into the mask that picks 8 channels' d.
struct ByteMasks {
  alignas(32) uint32_t lanes[256][8];
};
constexpr ByteMasks make_byte_masks() {
  ByteMasks m{};
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 8; ++j) m.lanes[b][j] = (b >> j) & 1 ? 0xffffffffu : 0u;
  }
  return m;
}
constexpr ByteMasks kByteMasks = make_byte_masks();

LEOAM_AVX2 inline __m256 masked_d(uint32_t byte, const float* d) {
  const __m256 mask = _mm256_load_ps(reinterpret_cast<const float*>(kByteMasks.lanes[byte]));
  return _mm256_and_ps(mask, _mm256_loadu_ps(d));
}

// 16 channels a step into two accumulators (head_dim % 8 == 0; an 8-channel step ends an odd count).
LEOAM_AVX2 float unit_bound_avx2(float base, const float* d, const SignSketch& signs, TokenRange rows, int kv_head,
                                 int hd) {
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    const uint32_t* words = row_words(signs, t, kv_head);
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
      const uint32_t bits = words[c / 32] >> (c % 32);
      acc0 = _mm256_add_ps(acc0, masked_d(bits & 0xffu, d + c));
      acc1 = _mm256_add_ps(acc1, masked_d((bits >> 8) & 0xffu, d + c + 8));
    }
    if (c < hd) acc0 = _mm256_add_ps(acc0, masked_d((words[c / 32] >> (c % 32)) & 0xffu, d + c));
    best = std::max(best, base + kernels::hsum(_mm256_add_ps(acc0, acc1)));
  }
  return best;
}

#endif

template <typename Terms, typename UnitBound>
void bounds_of_units(const float* q, int kv_head, std::span<const SignUnit> units, const BoundLayout& layout,
                     const SignSketch& signs, float* bounds, Terms terms, UnitBound unit_bound) {
  const int hd = layout.head_dim;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  const QueryParts parts = split_query(q, hd);
  std::vector<float> d(static_cast<size_t>(hd));
  for (size_t i = 0; i < units.size(); ++i) {
    const float* mn = units[i].box + static_cast<int64_t>(kv_head) * hd;
    const float base = terms(parts.pos.data(), parts.neg.data(), mn, mn + max_offset, hd, d.data());
    bounds[i] = unit_bound(base, d.data(), signs, units[i].rows, kv_head, hd);
  }
}

}  // namespace

namespace ref {

void sign_bounds(const float* q, int kv_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds) {
  const int hd = layout.head_dim;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  for (size_t i = 0; i < units.size(); ++i) {
    const float* mn = units[i].box + static_cast<int64_t>(kv_head) * hd;
    const float* mx = mn + max_offset;
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t t = units[i].rows.begin; t < units[i].rows.end; ++t) {
      const uint32_t* words = row_words(signs, t, kv_head);
      double b = 0.0;
      for (int c = 0; c < hd; ++c) {
        const double lo = bit(words, c) ? mn[c] : std::max(0.0f, mn[c]);
        const double hi = bit(words, c) ? std::min(0.0f, mx[c]) : mx[c];
        b += std::max(q[c] * lo, q[c] * hi);
      }
      best = std::max(best, b);
    }
    bounds[i] = static_cast<float>(best);
  }
}

}  // namespace ref

void sign_bounds(const float* q, int kv_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2 && layout.head_dim % 8 == 0) {
    bounds_of_units(q, kv_head, units, layout, signs, bounds, channel_terms_avx2, unit_bound_avx2);
    return;
  }
#endif
  bounds_of_units(q, kv_head, units, layout, signs, bounds, channel_terms_scalar, unit_bound_scalar);
}

}  // namespace leoam::sparse
