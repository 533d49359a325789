// The sign-refined bound kernel (sign_bound.h): a double reference, a float scalar path and an
// AVX2+FMA path, picked at run time (core/cpu_features.h).
//
// The AVX2 path puts a row's channels in the lanes: per 8 channels the sign bits, tested lane by
// lane, pick the lanes of d to add, and each row ends in a horizontal sum. Tried and dropped:
// - (2026-12-01, 2-core Xeon VM with AVX-512, bench/sign_bound_bench.cpp) an AVX-512 path with 16
//   rows in the lanes, per channel a vptestmd and a masked add, or per nibble a lookup in a
//   16-entry table with one vpermps. Both ran at the AVX2 path's rate: the rows' words of one kv
//   head are strided, and the gather that collects them for 16 rows stalls each block (gathers
//   are slow on this CPU).
// - (2026-12-02, 2-core EPYC with AVX-512) an AVX-512 path with a row's channels in the lanes,
//   16 sign bits the mask of one masked add, in the AVX2 path's summation order (bit for bit its
//   bounds): 164 / 266 M rows x heads a second in units of 8 / 64 rows, against AVX2's 161 / 272.
//   Each row's horizontal sum, and its max into the unit's bound, bound both paths alike.
#include "sparse/sign_bound.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
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
float channel_terms_scalar(const float* qp, const float* qn, const uint16_t* mn16, const uint16_t* mx16, int hd,
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

// The most query heads scored together against one kv head's rows.
constexpr int kMaxGroup = 4;

// The largest row bound over `rows` for each of g query heads of one kv head: base[j] plus the
// d of head j (hd floats at d + j * hd) at each row's set bits, into best[j].
void group_bound_scalar(const float* base, const float* d, int g, const SignSketch& signs, TokenRange rows,
                        int kv_head, int hd, float* best) {
  for (int j = 0; j < g; ++j) {
    const float* dj = d + static_cast<int64_t>(j) * hd;
    best[j] = -std::numeric_limits<float>::infinity();
    for (int64_t t = rows.begin; t < rows.end; ++t) {
      const uint32_t* words = row_words(signs, t, kv_head);
      float sum = base[j];
      for (int c = 0; c < hd; ++c) sum += bit(words, c) ? dj[c] : 0.0f;
      best[j] = std::max(best[j], sum);
    }
  }
}

#ifdef LEOAM_HAVE_X86
// channel_terms_scalar 8 channels a step (both vector paths: a unit of 8 rows costs as much here
// as in its rows), then a scalar tail.
LEOAM_AVX2 float channel_terms_avx2(const float* qp, const float* qn, const uint16_t* mn, const uint16_t* mx,
                                    int hd, float* d) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 base = zero;
  int c = 0;
  for (; c + 8 <= hd; c += 8) {
    const __m256 p = _mm256_loadu_ps(qp + c);
    const __m256 n = _mm256_loadu_ps(qn + c);
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mn + c)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mx + c)));
    const __m256 pos = _mm256_fmadd_ps(p, hi, _mm256_mul_ps(n, _mm256_max_ps(zero, lo)));
    const __m256 neg = _mm256_fmadd_ps(p, _mm256_min_ps(zero, hi), _mm256_mul_ps(n, lo));
    base = _mm256_add_ps(base, pos);
    _mm256_storeu_ps(d + c, _mm256_sub_ps(neg, pos));
  }
  return kernels::hsum(base) + channel_terms_scalar(qp + c, qn + c, mn + c, mx + c, hd - c, d + c);
}

// kLaneBits.lanes[k][j] = 1 << (8k + j): the bit of channel 8k + j within its 32-bit word.
struct LaneBits {
  alignas(32) uint32_t lanes[4][8];
};
constexpr LaneBits make_lane_bits() {
  LaneBits b{};
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 8; ++j) b.lanes[k][j] = 1u << (8 * k + j);
  }
  return b;
}
constexpr LaneBits kLaneBits = make_lane_bits();

// All ones in the lanes whose bit (`bits`, one per lane) is set in `word` (in every lane).
LEOAM_AVX2 inline __m256 lane_mask(__m256i word, __m256i bits) {
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(word, bits), bits));
}

// group_bound_scalar for G heads (head_dim % 8 == 0): a row's sign masks are built once for the
// G heads, 16 channels a step into two accumulators a head (an 8-channel step ends an odd count).
template <int G>
LEOAM_AVX2 void group_bound_avx2(const float* base, const float* d, const SignSketch& signs, TokenRange rows,
                                 int kv_head, int hd, float* best) {
  __m256i bits[4];
  for (int k = 0; k < 4; ++k) bits[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLaneBits.lanes[k]));
  float top[G];
  for (int j = 0; j < G; ++j) top[j] = -std::numeric_limits<float>::infinity();
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    const uint32_t* words = row_words(signs, t, kv_head);
    __m256 acc0[G];
    __m256 acc1[G];
    for (int j = 0; j < G; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
      const __m256i w = _mm256_set1_epi32(static_cast<int>(words[c / 32]));
      const int k = (c % 32) / 8;
      const __m256 m0 = lane_mask(w, bits[k]);
      const __m256 m1 = lane_mask(w, bits[k + 1]);
      for (int j = 0; j < G; ++j) {
        const float* dj = d + static_cast<int64_t>(j) * hd + c;
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(dj)));
        acc1[j] = _mm256_add_ps(acc1[j], _mm256_and_ps(m1, _mm256_loadu_ps(dj + 8)));
      }
    }
    if (c < hd) {
      const __m256 m0 = lane_mask(_mm256_set1_epi32(static_cast<int>(words[c / 32])), bits[(c % 32) / 8]);
      for (int j = 0; j < G; ++j) {
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(d + static_cast<int64_t>(j) * hd + c)));
      }
    }
    for (int j = 0; j < G; ++j) top[j] = std::max(top[j], base[j] + kernels::hsum(_mm256_add_ps(acc0[j], acc1[j])));
  }
  for (int j = 0; j < G; ++j) best[j] = top[j];
}

// group_bound_avx2 for 1 <= g <= kMaxGroup heads.
LEOAM_AVX2 void group_bounds_avx2(const float* base, const float* d, int g, const SignSketch& signs, TokenRange rows,
                                  int kv_head, int hd, float* best) {
  switch (g) {
    case 1: return group_bound_avx2<1>(base, d, signs, rows, kv_head, hd, best);
    case 2: return group_bound_avx2<2>(base, d, signs, rows, kv_head, hd, best);
    case 3: return group_bound_avx2<3>(base, d, signs, rows, kv_head, hd, best);
    default: return group_bound_avx2<4>(base, d, signs, rows, kv_head, hd, best);
  }
}

#endif

// Asks for the cache lines of a unit's box and rows' sign words ahead of their use.
void prefetch_unit(const SignUnit& u, const BoundLayout& layout, const SignSketch& signs) {
  const auto* box = reinterpret_cast<const char*>(u.box);
  const int64_t box_bytes = 2 * static_cast<int64_t>(layout.n_kv_heads) * layout.head_dim * sizeof(uint16_t);
  for (int64_t o = 0; o < box_bytes; o += 64) __builtin_prefetch(box + o);
  const auto* w0 = reinterpret_cast<const char*>(row_words(signs, u.rows.begin, 0));
  const auto* w1 = reinterpret_cast<const char*>(row_words(signs, u.rows.end, 0));
  for (const char* p = w0; p < w1; p += 64) __builtin_prefetch(p);
}

// The bounds of units [i0, i1) of `units`, into bounds[h * units.size() + i]. Unit by unit, kv
// head by kv head, the query heads of its group in pieces of up to kMaxGroup: the unit's box and
// sign words are fetched from memory once a step (their kv heads share cache lines; the next
// unit's are prefetched) and stay in L1 for the other heads, and a row's sign masks serve a
// piece's heads. Head by head, the whole sketch and every box were read once a head, from L3 or
// memory each time (bench/RESULTS.md, issue 6: the kernel 1.4x faster this way).
template <typename Terms, typename GroupBound>
void bounds_of_units(const float* q, int n_head, std::span<const SignUnit> units, int64_t i0, int64_t i1,
                     const BoundLayout& layout, const SignSketch& signs, float* bounds, Terms terms,
                     GroupBound group_bound) {
  const int hd = layout.head_dim;
  const int group = n_head / layout.n_kv_heads;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  const auto n = static_cast<int64_t>(units.size());
  std::vector<QueryParts> parts;
  parts.reserve(static_cast<size_t>(n_head));
  for (int h = 0; h < n_head; ++h) parts.push_back(split_query(q + static_cast<int64_t>(h) * hd, hd));
  std::vector<float> d(static_cast<size_t>(kMaxGroup * hd));
  float base[kMaxGroup];
  float best[kMaxGroup];
  for (int64_t i = i0; i < i1; ++i) {
    if (i + 1 < i1) prefetch_unit(units[i + 1], layout, signs);
    for (int kv_head = 0; kv_head < layout.n_kv_heads; ++kv_head) {
      const uint16_t* mn = units[i].box + static_cast<int64_t>(kv_head) * hd;
      for (int h0 = kv_head * group; h0 < (kv_head + 1) * group; h0 += kMaxGroup) {
        const int g = std::min(kMaxGroup, (kv_head + 1) * group - h0);
        for (int j = 0; j < g; ++j) {
          base[j] = terms(parts[h0 + j].pos.data(), parts[h0 + j].neg.data(), mn, mn + max_offset, hd,
                          d.data() + static_cast<int64_t>(j) * hd);
        }
        group_bound(base, d.data(), g, signs, units[i].rows, kv_head, hd, best);
        for (int j = 0; j < g; ++j) bounds[(h0 + j) * n + i] = best[j];
      }
    }
  }
}

// bounds_of_units over every unit: alone, or split among the pool's threads. A thread's run of
// units is cut where the running count of rows crosses its share, so that runs of 8-row units
// and runs of 64-row blocks cost alike.
template <typename Terms, typename GroupBound>
void bounds_of_all(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                   const SignSketch& signs, float* bounds, ThreadPool* pool, Terms terms, GroupBound group_bound) {
  const auto n = static_cast<int64_t>(units.size());
  std::vector<int64_t> rows_before(static_cast<size_t>(n + 1), 0);  // rows of units [0, i)
  for (int64_t i = 0; i < n; ++i) rows_before[i + 1] = rows_before[i] + units[i].rows.size();
  // About one multiply-add (ThreadPool's cost unit) a channel, a row and a query head.
  const int64_t cost_per_row = static_cast<int64_t>(n_head) * layout.head_dim;
  if (pool == nullptr || pool->n_ranges_for(rows_before[n], cost_per_row) <= 1) {
    bounds_of_units(q, n_head, units, 0, n, layout, signs, bounds, terms, group_bound);
    return;
  }
  // The first unit whose rows start at or after row r.
  const auto unit_at = [&](int64_t r) {
    return std::lower_bound(rows_before.begin(), rows_before.end() - 1, r) - rows_before.begin();
  };
  pool->parallel_for(rows_before[n], cost_per_row, [&](int64_t r0, int64_t r1, int) {
    bounds_of_units(q, n_head, units, unit_at(r0), r1 == rows_before[n] ? n : unit_at(r1), layout, signs, bounds,
                    terms, group_bound);
  });
}

}  // namespace

namespace ref {

void sign_bounds(const float* q_heads, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds) {
  const int hd = layout.head_dim;
  const int group = n_head / layout.n_kv_heads;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  const auto n = static_cast<int64_t>(units.size());
  for (int h = 0; h < n_head; ++h) {
    const float* q = q_heads + static_cast<int64_t>(h) * hd;
    const int kv_head = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t* mn = units[i].box + static_cast<int64_t>(kv_head) * hd;
      const uint16_t* mx = mn + max_offset;
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t t = units[i].rows.begin; t < units[i].rows.end; ++t) {
        const uint32_t* words = row_words(signs, t, kv_head);
        double b = 0.0;
        for (int c = 0; c < hd; ++c) {
          const float mnc = f16_to_f32(mn[c]);
          const float mxc = f16_to_f32(mx[c]);
          const double lo = bit(words, c) ? mnc : std::max(0.0f, mnc);
          const double hi = bit(words, c) ? std::min(0.0f, mxc) : mxc;
          b += std::max(q[c] * lo, q[c] * hi);
        }
        best = std::max(best, b);
      }
      bounds[h * n + i] = static_cast<float>(best);
    }
  }
}

}  // namespace ref

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, ThreadPool* pool) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2 && layout.head_dim % 8 == 0) {
    bounds_of_all(q, n_head, units, layout, signs, bounds, pool, channel_terms_avx2, group_bounds_avx2);
    return;
  }
#endif
  bounds_of_all(q, n_head, units, layout, signs, bounds, pool, channel_terms_scalar, group_bound_scalar);
}

}  // namespace leoam::sparse
