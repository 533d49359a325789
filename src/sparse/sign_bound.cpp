// The sign-refined bound kernel (sign_bound.h): a double reference, a float scalar path and an
// AVX2+FMA path over rows' sign words; over the chunk tree's channel slices, an AVX2 and an
// AVX-512 path; picked at run time (core/cpu_features.h).
// The rows path puts a row's channels in the lanes: the sign bits pick the lanes of d to add, and
// each row ends in a horizontal sum. The slices paths put rows in the lanes (AVX-512: 32 int16
// lanes, a channel's 32 bits the mask of one masked add), so no row needs a horizontal sum. The
// AVX-512 path adds whole steps in int16 (an integer add waits one cycle on the one before it, a
// float add more), 64 rows a pass where a run covers them (one broadcast term serves two masked
// adds), widening each partial by vpmaddwd.
// Why these layouts, and the ones measured and not kept: docs/selection.md#sign-bound-kernels
#include "sparse/sign_bound.h"

// GCC 12 reports the _mm512_undefined_* placeholders inside its own intrinsics as uninitialized
// (as in kernels/cpu/flash_attention_avx512.cpp): before any include of immintrin.h.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <bit>
#include <limits>
#include <type_traits>
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

// Query parts whose terms below are the rows' midpoint estimates (RowScore::kMidpoint): with both
// parts q / 2, P_c = q_c * (max_c + max(0, min_c)) / 2 and N_c = q_c * (min(0, max_c) + min_c) / 2,
// q_c times the middle of the cut interval, through the same kernels as the bound.
QueryParts midpoint_parts(const float* q, int hd) {
  QueryParts parts{std::vector<float>(q, q + hd), {}};
  for (float& x : parts.pos) x *= 0.5f;
  parts.neg = parts.pos;
  return parts;
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

// The most query heads scored together against one kv head's rows. The vector kernels' loops over
// a group's heads carry `#pragma GCC unroll 4` (kMaxGroup): without it GCC at -O2 left the loop
// of 4 heads rolled, their accumulators on the stack, and far slower per head than a group of 2.
constexpr int kMaxGroup = 4;

// Independent float sums the AVX2 sliced kernel keeps per query head: a masked add waits for the
// one before it in its sum, so a group of 1 or 2 heads sums even and odd channels apart and adds
// the two at the end (faster for one head, Llama 2's multi-head attention, and for two); 3 or 4
// heads are enough sums as they are. The int16 AVX-512 kernel's integer adds wait one cycle and
// need no such split.
constexpr int chains_for(int g) { return g <= 2 ? 2 : 1; }

// Calls kernel(std::integral_constant<int, G>{}) for the group of 1 <= g <= kMaxGroup heads: each
// vector kernel is a template on G, so that its accumulators stay in registers.
template <typename Kernel>
void for_group(int g, Kernel kernel) {
  switch (g) {
    case 1: return kernel(std::integral_constant<int, 1>{});
    case 2: return kernel(std::integral_constant<int, 2>{});
    case 3: return kernel(std::integral_constant<int, 3>{});
    default: return kernel(std::integral_constant<int, 4>{});
  }
}

// The terms of a group of g <= kMaxGroup query heads of one kv head against one box: head j's
// base[j] (sum_c P_c) and d[j * hd + c] (N_c - P_c), as channel_terms_scalar makes them. Where
// `quantized` (the AVX-512 sliced path), dq holds each d rounded up to whole steps of
// step[j] = the head's largest |d| over kQuantSteps, twice in a 32-bit word (low and high int16:
// a dword broadcast from memory is a load alone, a word broadcast a load and a shuffle):
// step[j] * int16(dq[j * hd + c]) >= d[j * hd + c].
constexpr float kQuantSteps = kSignTermSteps;  // |dq| <= 4095 after rounding: 8 channels sum in int16
constexpr int kInt16Channels = 8;               // the channels an int16 partial sum takes
struct GroupTerms {
  explicit GroupTerms(int hd)
      : d(static_cast<size_t>(kMaxGroup * hd)), dq(static_cast<size_t>(kMaxGroup * hd)) {}
  float base[kMaxGroup] = {};
  std::vector<float> d;
  bool quantized = false;
  float step[kMaxGroup] = {};
  std::vector<uint32_t> dq;
};

// The group's terms head by head, with one head's channel_terms (scalar or AVX2).
template <float (*kTerms)(const float*, const float*, const uint16_t*, const uint16_t*, int, float*)>
void group_terms(const QueryParts* parts, int g, const uint16_t* mn, const uint16_t* mx, int hd, GroupTerms& t) {
  for (int j = 0; j < g; ++j) {
    t.base[j] = kTerms(parts[j].pos.data(), parts[j].neg.data(), mn, mx, hd, t.d.data() + static_cast<int64_t>(j) * hd);
  }
  t.quantized = false;
}

// A row's sign bit of channel c of kv head `kv_head`, in either layout.
bool sign_bit(const SignSketch& s, int64_t row, int kv_head, int c) { return bit(row_words(s, row, kv_head), c); }
bool sign_bit(const SignSlices& s, int64_t row, int kv_head, int c) { return s.bit(row, kv_head, c); }

// The group kernels score a run of units that share one box (the blocks of a chunk tree: the
// leaves that meet a block, cut at its edges) against g query heads of one kv head: the box's
// terms are made once for the run, and each row's sum serves the unit that holds it. For unit u
// of the run and head j, best[j * run.size() + u] is the largest row bound over u's rows: base[j]
// plus the d of head j (hd floats at d + j * hd) at each row's set bits.

template <typename Sketch>
void group_bound_scalar(const GroupTerms& terms, int g, const Sketch& signs, std::span<const SignUnit> run,
                        int kv_head, int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  for (int j = 0; j < g; ++j) {
    const float* dj = terms.d.data() + static_cast<int64_t>(j) * hd;
    for (int64_t u = 0; u < n; ++u) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t t = run[u].rows.begin; t < run[u].rows.end; ++t) {
        float sum = terms.base[j];
        for (int c = 0; c < hd; ++c) sum += sign_bit(signs, t, kv_head, c) ? dj[c] : 0.0f;
        top = std::max(top, sum);
      }
      best[j * n + u] = top;
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
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) top[j] = -std::numeric_limits<float>::infinity();
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    const uint32_t* words = row_words(signs, t, kv_head);
    __m256 acc0[G];
    __m256 acc1[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
      const __m256i w = _mm256_set1_epi32(static_cast<int>(words[c / 32]));
      const int k = (c % 32) / 8;
      const __m256 m0 = lane_mask(w, bits[k]);
      const __m256 m1 = lane_mask(w, bits[k + 1]);
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        const float* dj = d + static_cast<int64_t>(j) * hd + c;
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(dj)));
        acc1[j] = _mm256_add_ps(acc1[j], _mm256_and_ps(m1, _mm256_loadu_ps(dj + 8)));
      }
    }
    if (c < hd) {
      const __m256 m0 = lane_mask(_mm256_set1_epi32(static_cast<int>(words[c / 32])), bits[(c % 32) / 8]);
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        acc0[j] = _mm256_add_ps(acc0[j], _mm256_and_ps(m0, _mm256_loadu_ps(d + static_cast<int64_t>(j) * hd + c)));
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = std::max(top[j], base[j] + kernels::hsum(_mm256_add_ps(acc0[j], acc1[j])));
  }
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) best[j] = top[j];
}

// group_bound_avx2 for 1 <= g <= kMaxGroup heads, unit by unit.
LEOAM_AVX2 void group_bounds_avx2(const GroupTerms& terms, int g, const SignSketch& signs,
                                  std::span<const SignUnit> run, int kv_head, int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  float top[kMaxGroup];
  for (int64_t u = 0; u < n; ++u) {
    for_group(g, [&](auto G) {
      group_bound_avx2<G>(terms.base, terms.d.data(), signs, run[u].rows, kv_head, hd, top);
    });
    for (int j = 0; j < g; ++j) best[j * n + u] = top[j];
  }
}

// Over sliced signs (SignSlices): 8 rows in the lanes, a channel's 8 bits tested lane by lane
// pick the lanes that get its d; the rows' sums need no horizontal add, only each unit's max.
// The run's rows are summed once, 8 at a time: the units that share a run of 8 take its lanes.
template <int G>
LEOAM_AVX2 void slices_bound_avx2(const float* base, const float* d, const SignSlices& signs,
                                  std::span<const SignUnit> run, int kv_head, int hd, float* best) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 none = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const auto n = static_cast<int64_t>(run.size());
  __m256 acc[G];
  int64_t summed = -1;  // the first row of the 8 whose sums are in acc
  for (int64_t u = 0; u < n; ++u) {
    const TokenRange rows = run[u].rows;
    __m256 top[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = none;
    for (int64_t r0 = rows.begin / 8 * 8; r0 < rows.end; r0 += 8) {
      if (r0 != summed) {
        const uint64_t* slice = signs.slice(r0 / 64, kv_head);
        const int shift = static_cast<int>(r0 % 64);
        constexpr int kChains = chains_for(G);
        __m256 chain[kChains][G];
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) {
          chain[0][j] = _mm256_set1_ps(base[j]);
          if constexpr (kChains == 2) chain[1][j] = _mm256_setzero_ps();
        }
        const auto add_channel = [&](int k, int c) LEOAM_AVX2 {
          const __m256 m = lane_mask(_mm256_set1_epi32(static_cast<int>((slice[c] >> shift) & 0xffu)), lane_bit);
          #pragma GCC unroll 4
          for (int j = 0; j < G; ++j) {
            chain[k][j] =
                _mm256_add_ps(chain[k][j], _mm256_and_ps(m, _mm256_broadcast_ss(d + static_cast<int64_t>(j) * hd + c)));
          }
        };
        int c = 0;
        for (; c + kChains <= hd; c += kChains) {
          #pragma GCC unroll 2
          for (int k = 0; k < kChains; ++k) add_channel(k, c + k);
        }
        for (; c < hd; ++c) add_channel(0, c);
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) acc[j] = kChains == 2 ? _mm256_add_ps(chain[0][j], chain[kChains - 1][j]) : chain[0][j];
        summed = r0;
      }
      // Only the lanes of rows inside the unit count.
      const int64_t lo = std::max<int64_t>(rows.begin - r0, 0);
      const int64_t hi = std::min<int64_t>(rows.end - r0, 8);
      const __m256 in = _mm256_castsi256_ps(
          _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(lo) - 1)),
                           _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), lane)));
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) top[j] = _mm256_max_ps(top[j], _mm256_blendv_ps(none, acc[j], in));
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) best[j * n + u] = kernels::hmax(top[j]);
  }
}

LEOAM_AVX2 void slices_bounds_avx2(const GroupTerms& terms, int g, const SignSlices& signs,
                                   std::span<const SignUnit> run, int kv_head, int hd, float* best) {
  for_group(g, [&](auto G) { slices_bound_avx2<G>(terms.base, terms.d.data(), signs, run, kv_head, hd, best); });
}

#define LEOAM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

// Calls fn(c, lanes) for channels [c, c + 16) of hd: each whole block with all 16 lanes, then the
// tail's first hd % 16.
template <typename Fn>
[[gnu::always_inline]] LEOAM_AVX512 inline void for_channel_blocks(int hd, Fn fn) {
  int c = 0;
  for (; c + 16 <= hd; c += 16) fn(c, static_cast<__mmask16>(0xffff));
  if (c < hd) fn(c, static_cast<__mmask16>((1u << (hd - c)) - 1u));
}

// group_terms over AVX-512 for G heads: the box's 16 channels a step made once for the G heads,
// then each head's d rounded up to whole steps (GroupTerms) for slices_bound_avx512. A head
// whose largest |d| is not finite (a box past f16's range) leaves the group unquantized.
template <int G>
LEOAM_AVX512 void heads_terms_avx512(const QueryParts* parts, const uint16_t* mn16, const uint16_t* mx16, int hd,
                                     GroupTerms& t) {
  const __m512 zero = _mm512_setzero_ps();
  const float* qp[G];
  const float* qn[G];
  float* d[G];
  __m512 base[G];
  __m512 largest[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    qp[j] = parts[j].pos.data();
    qn[j] = parts[j].neg.data();
    d[j] = t.d.data() + static_cast<int64_t>(j) * hd;
    base[j] = largest[j] = zero;
  }
  // Channels [c, c + 16) where `in` (all of them but in the tail).
  const auto terms = [&](int c, __mmask16 in) LEOAM_AVX512 {
    const __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, mn16 + c));
    const __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(in, mx16 + c));
    const __m512 lo_pos = _mm512_max_ps(zero, lo);
    const __m512 hi_neg = _mm512_min_ps(zero, hi);
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const __m512 p = _mm512_maskz_loadu_ps(in, qp[j] + c);
      const __m512 n = _mm512_maskz_loadu_ps(in, qn[j] + c);
      const __m512 pos = _mm512_fmadd_ps(p, hi, _mm512_mul_ps(n, lo_pos));
      const __m512 neg = _mm512_fmadd_ps(p, hi_neg, _mm512_mul_ps(n, lo));
      const __m512 dj = _mm512_sub_ps(neg, pos);
      base[j] = _mm512_add_ps(base[j], pos);
      largest[j] = _mm512_max_ps(largest[j], _mm512_abs_ps(dj));
      _mm512_mask_storeu_ps(d[j] + c, in, dj);
    }
  };
  for_channel_blocks(hd, terms);
  t.quantized = true;
  float most[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    t.base[j] = _mm512_reduce_add_ps(base[j]);
    most[j] = _mm512_reduce_max_ps(largest[j]);
    if (!(most[j] < std::numeric_limits<float>::infinity())) t.quantized = false;
    t.step[j] = most[j] / kQuantSteps;
  }
  if (!t.quantized) return;
  // Each d in whole steps, rounded up, twice in a 32-bit word.
  __m512 per_step[G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) per_step[j] = _mm512_set1_ps(most[j] > 0.0f ? kQuantSteps / most[j] : 0.0f);
  for_channel_blocks(hd, [&](int c, __mmask16 in) LEOAM_AVX512 {
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      const __m512 steps = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, d[j] + c), per_step[j]);
      const __m512i up = _mm512_cvt_roundps_epi32(steps, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
      const __m512i twice = _mm512_or_si512(_mm512_and_si512(up, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(up, 16));
      _mm512_mask_storeu_epi32(t.dq.data() + static_cast<int64_t>(j) * hd + c, in, twice);
    }
  });
}

LEOAM_AVX512 void group_terms_avx512(const QueryParts* parts, int g, const uint16_t* mn, const uint16_t* mx, int hd,
                                     GroupTerms& t) {
  for_group(g, [&](auto G) { heads_terms_avx512<G>(parts, mn, mx, hd, t); });
}

// Over sliced signs with AVX-512 and the terms in whole steps (GroupTerms::dq): rows in the int16
// lanes, 32 a vector, a channel's 32 bits the mask of one masked add of its steps (broadcast) per
// query head, kInt16Channels channels a partial sum widened into int32 (which cannot overflow: 8
// terms of at most 4095 steps); a row's bound is base + step * its steps. The run's rows are
// summed once, as in the AVX2 path, H halves of a slice word at a time: both (64 rows, one
// broadcast serves two adds) where the run covers both, else the one it covers (a fine layer's
// 32-row box).
//
// sum_rows: rows [r0, r0 + 32 H) of `slice` (r0 % 64 == shift; shift 0 when H == 2) into
// acc[2 h] (the even rows of half h) and acc[2 h + 1] (its odd rows): vpmaddwd widens a partial's
// even and odd lanes, each in one step.
template <int G, int H>
[[gnu::always_inline]] LEOAM_AVX512 inline void sum_rows(const GroupTerms& t, const uint64_t* slice, int shift, int hd,
                                                          __m512 (&acc)[4][G]) {
  const __m512i even = _mm512_set1_epi32(1);
  const __m512i odd = _mm512_set1_epi32(1 << 16);
  __m512i sum[2 * H][G];
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    #pragma GCC unroll 4
    for (int k = 0; k < 2 * H; ++k) sum[k][j] = _mm512_setzero_si512();
  }
  for (int c0 = 0; c0 < hd; c0 += kInt16Channels) {
    const int c1 = std::min(hd, c0 + kInt16Channels);
    __m512i part[H][G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      #pragma GCC unroll 2
      for (int h = 0; h < H; ++h) part[h][j] = _mm512_setzero_si512();
    }
    #pragma GCC unroll 8
    for (int c = c0; c < c1; ++c) {
      const uint64_t w = slice[c] >> shift;
      const __mmask32 m[2] = {static_cast<__mmask32>(w), static_cast<__mmask32>(w >> 32)};
      #pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        const __m512i steps = _mm512_set1_epi32(static_cast<int>(t.dq[static_cast<int64_t>(j) * hd + c]));
        #pragma GCC unroll 2
        for (int h = 0; h < H; ++h) part[h][j] = _mm512_mask_add_epi16(part[h][j], m[h], part[h][j], steps);
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      #pragma GCC unroll 2
      for (int h = 0; h < H; ++h) {
        sum[2 * h][j] = _mm512_add_epi32(sum[2 * h][j], _mm512_madd_epi16(part[h][j], even));
        sum[2 * h + 1][j] = _mm512_add_epi32(sum[2 * h + 1][j], _mm512_madd_epi16(part[h][j], odd));
      }
    }
  }
  #pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    const __m512 step = _mm512_set1_ps(t.step[j]);
    const __m512 base = _mm512_set1_ps(t.base[j]);
    #pragma GCC unroll 4
    for (int k = 0; k < 2 * H; ++k) acc[k][j] = _mm512_fmadd_ps(step, _mm512_cvtepi32_ps(sum[k][j]), base);
  }
}

template <int G>
LEOAM_AVX512 void slices_bound_avx512(const GroupTerms& t, const SignSlices& signs, std::span<const SignUnit> run,
                                      int kv_head, int hd, float* best) {
  const auto n = static_cast<int64_t>(run.size());
  const int64_t run_end = run.back().rows.end;
  __m512 acc[4][G];  // rows [summed, summed + 32 halves), as sum_rows leaves them
  int64_t summed = -1;
  int halves = 0;
  for (int64_t u = 0; u < n; ++u) {
    const TokenRange rows = run[u].rows;
    __m512 top[G];
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) top[j] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t r0 = rows.begin / 32 * 32; r0 < rows.end; r0 += 32) {
      if (summed < 0 || r0 < summed || r0 >= summed + 32 * halves) {
        const uint64_t* slice = signs.slice(r0 / 64, kv_head);
        halves = r0 % 64 == 0 && run_end > r0 + 32 ? 2 : 1;
        if (halves == 2) {
          sum_rows<G, 2>(t, slice, 0, hd, acc);
        } else {
          sum_rows<G, 1>(t, slice, static_cast<int>(r0 % 64), hd, acc);
        }
        summed = r0;
      }
      const auto k0 = static_cast<int>((r0 - summed) / 32 * 2);
      // Only the lanes of rows inside the unit count: of rows [r0 + p, r0 + p + 2, ...) (p = 0
      // even, 1 odd), lanes [ceil((first - p) / 2), ceil((end - p) / 2)).
      const int64_t first = std::max<int64_t>(rows.begin - r0, 0);
      const int64_t end = std::min<int64_t>(rows.end - r0, 32);
      #pragma GCC unroll 2
      for (int p = 0; p < 2; ++p) {
        const int64_t a = std::max<int64_t>((first - p + 1) >> 1, 0);
        const int64_t b = (end - p + 1) >> 1;
        const auto in = static_cast<__mmask16>(a < b ? ((1u << b) - 1u) & ~((1u << a) - 1u) : 0u);
        #pragma GCC unroll 4
        for (int j = 0; j < G; ++j) top[j] = _mm512_mask_max_ps(top[j], in, top[j], acc[k0 + p][j]);
      }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < G; ++j) best[j * n + u] = _mm512_reduce_max_ps(top[j]);
  }
}

LEOAM_AVX512 void slices_bounds_avx512(const GroupTerms& terms, int g, const SignSlices& signs,
                                       std::span<const SignUnit> run, int kv_head, int hd, float* best) {
  if (!terms.quantized) return slices_bounds_avx2(terms, g, signs, run, kv_head, hd, best);
  for_group(g, [&](auto G) { slices_bound_avx512<G>(terms, signs, run, kv_head, hd, best); });
}

#endif

// Asks for the cache lines of [p0, p1). noipa: GCC 12's modref found this loop of prefetches
// free of side effects and at -O1 and up dropped every call of it, so that no prefetch reached
// the bounds (they come back with -fno-ipa-modref; a call per range costs nothing beside a run's
// work).
[[gnu::noipa]] void prefetch_bytes(const void* p0, const void* p1) {
  for (const char* p = static_cast<const char*>(p0); p < p1; p += 64) __builtin_prefetch(p);
}

// Asks for the cache lines of a unit's sign words of kv heads `kv` ahead of their use: rows'
// words, or the slices of the groups its rows meet.
void prefetch_signs(const SignSketch& signs, TokenRange rows, HeadSpan kv) {
  for (int64_t t = rows.begin; t < rows.end; ++t) prefetch_bytes(row_words(signs, t, kv.begin), row_words(signs, t, kv.end));
}
void prefetch_signs(const SignSlices& signs, TokenRange rows, HeadSpan kv) {
  for (int64_t g = rows.begin / 64; g < (rows.end + 63) / 64; ++g) {
    prefetch_bytes(signs.slice(g, kv.begin), signs.slice(g, kv.end));
  }
}

// Asks for the cache lines of a run's box and sign words of kv heads `kv` ahead of their use.
template <typename Sketch>
void prefetch_run(std::span<const SignUnit> run, const BoundLayout& layout, const Sketch& signs, HeadSpan kv) {
  const int64_t hd = layout.head_dim;
  const uint16_t* mn = run.front().box;
  const uint16_t* mx = mn + static_cast<int64_t>(layout.n_kv_heads) * hd;
  prefetch_bytes(mn + kv.begin * hd, mn + kv.end * hd);
  prefetch_bytes(mx + kv.begin * hd, mx + kv.end * hd);
  prefetch_signs(signs, {run.front().rows.begin, run.back().rows.end}, kv);
}

// The end of the run of units that starts at i, before i1: the units after i whose rows follow
// on and share its box (a chunk tree's leaves cut at one block).
int64_t run_end(std::span<const SignUnit> units, int64_t i, int64_t i1) {
  int64_t k = i + 1;
  while (k < i1 && units[k].box == units[i].box && units[k].rows.begin == units[k - 1].rows.end) ++k;
  return k;
}

// The bounds of units [i0, i1) of `units` for the query heads of kv heads `kv`, into
// bounds[(h - the first of those heads) * units.size() + i]. Run by run (the
// group kernels' comment), kv head by kv head, the query heads of its group in pieces of up to
// kMaxGroup: the run's box and sign words are fetched from memory once a step (their kv heads
// share cache lines; the next run's are prefetched) and stay in L1 for the other heads, and a
// row's sign masks serve a piece's heads: faster than head by head, which read the whole sketch
// and every box once a head, from L3 or memory each time.
template <typename Sketch, typename Terms, typename GroupBound>
void bounds_of_units(const float* q, int n_head, HeadSpan kv, std::span<const SignUnit> units, int64_t i0,
                     int64_t i1, const BoundLayout& layout, const Sketch& signs, float* bounds, RowScore score,
                     Terms terms, GroupBound group_bound) {
  const int hd = layout.head_dim;
  const int group = n_head / layout.n_kv_heads;
  const int h_first = kv.begin * group;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  const auto n = static_cast<int64_t>(units.size());
  std::vector<QueryParts> parts;  // of heads [h_first, kv.end * group)
  parts.reserve(static_cast<size_t>((kv.end - kv.begin) * group));
  for (int h = h_first; h < kv.end * group; ++h) {
    parts.push_back(score == RowScore::kUpper ? split_query(q + static_cast<int64_t>(h) * hd, hd)
                                              : midpoint_parts(q + static_cast<int64_t>(h) * hd, hd));
  }
  GroupTerms box_terms(hd);
  std::vector<float> best;  // [kMaxGroup][the run's units]
  for (int64_t i = i0, k = i0 < i1 ? run_end(units, i0, i1) : i1; i < i1;) {
    const std::span<const SignUnit> run = units.subspan(static_cast<size_t>(i), static_cast<size_t>(k - i));
    const int64_t next = k < i1 ? run_end(units, k, i1) : i1;
    if (k < i1) prefetch_run(units.subspan(static_cast<size_t>(k), static_cast<size_t>(next - k)), layout, signs, kv);
    const auto n_run = static_cast<int64_t>(run.size());
    if (best.size() < static_cast<size_t>(kMaxGroup * n_run)) best.resize(static_cast<size_t>(kMaxGroup * n_run));
    for (int kv_head = kv.begin; kv_head < kv.end; ++kv_head) {
      const uint16_t* mn = run.front().box + static_cast<int64_t>(kv_head) * hd;
      for (int h0 = kv_head * group; h0 < (kv_head + 1) * group; h0 += kMaxGroup) {
        const int g = std::min(kMaxGroup, (kv_head + 1) * group - h0);
        terms(parts.data() + (h0 - h_first), g, mn, mn + max_offset, hd, box_terms);
        group_bound(box_terms, g, signs, run, kv_head, hd, best.data());
        for (int j = 0; j < g; ++j) {
          std::copy_n(best.data() + j * n_run, n_run, bounds + (h0 - h_first + j) * n + i);
        }
      }
    }
    i = k;
    k = next;
  }
}

// bounds_of_units over every unit: alone, or split among the pool's threads. A thread's run of
// units is cut where the running count of rows crosses its share, so that runs of 8-row units
// and runs of 64-row blocks cost alike.
template <typename Sketch, typename Terms, typename GroupBound>
void bounds_of_all(const float* q, int n_head, KvHeadGroups heads, RowScore score, std::span<const SignUnit> units,
                   const BoundLayout& layout, const Sketch& signs, float* bounds, ThreadPool* pool, Terms terms,
                   GroupBound group_bound) {
  const HeadSpan kv = heads.kv_heads(layout.n_kv_heads);
  const auto n = static_cast<int64_t>(units.size());
  std::vector<int64_t> rows_before(static_cast<size_t>(n + 1), 0);  // rows of units [0, i)
  for (int64_t i = 0; i < n; ++i) rows_before[i + 1] = rows_before[i] + units[i].rows.size();
  // About one multiply-add (ThreadPool's cost unit) a channel, a row and a query head.
  const int64_t cost_per_row =
      static_cast<int64_t>(kv.end - kv.begin) * (n_head / layout.n_kv_heads) * layout.head_dim;
  if (pool == nullptr || pool->n_ranges_for(rows_before[n], cost_per_row) <= 1) {
    bounds_of_units(q, n_head, kv, units, 0, n, layout, signs, bounds, score, terms, group_bound);
    return;
  }
  // The first unit whose rows start at or after row r.
  const auto unit_at = [&](int64_t r) {
    return std::lower_bound(rows_before.begin(), rows_before.end() - 1, r) - rows_before.begin();
  };
  pool->parallel_for(rows_before[n], cost_per_row, [&](int64_t r0, int64_t r1, int) {
    bounds_of_units(q, n_head, kv, units, unit_at(r0), r1 == rows_before[n] ? n : unit_at(r1), layout, signs,
                    bounds, score, terms, group_bound);
  });
}

}  // namespace

namespace ref {

namespace {

template <typename Sketch>
void sign_bounds_ref(const float* q_heads, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                     const Sketch& signs, float* bounds, KvHeadGroups heads, RowScore score) {
  const int hd = layout.head_dim;
  const int group = n_head / layout.n_kv_heads;
  const int64_t max_offset = static_cast<int64_t>(layout.n_kv_heads) * hd;
  const auto n = static_cast<int64_t>(units.size());
  const HeadSpan qh = heads.query_heads(n_head, layout.n_kv_heads);
  for (int h = qh.begin; h < qh.end; ++h) {
    const float* q = q_heads + static_cast<int64_t>(h) * hd;
    const int kv_head = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t* mn = units[i].box + static_cast<int64_t>(kv_head) * hd;
      const uint16_t* mx = mn + max_offset;
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t t = units[i].rows.begin; t < units[i].rows.end; ++t) {
        double b = 0.0;
        for (int c = 0; c < hd; ++c) {
          const float mnc = f16_to_f32(mn[c]);
          const float mxc = f16_to_f32(mx[c]);
          const bool set = sign_bit(signs, t, kv_head, c);
          const double lo = set ? mnc : std::max(0.0f, mnc);
          const double hi = set ? std::min(0.0f, mxc) : mxc;
          b += score == RowScore::kUpper ? std::max(q[c] * lo, q[c] * hi) : q[c] * (lo + hi) / 2.0;
        }
        best = std::max(best, b);
      }
      bounds[(h - qh.begin) * n + i] = static_cast<float>(best);
    }
  }
}

}  // namespace

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, KvHeadGroups heads, RowScore score) {
  sign_bounds_ref(q, n_head, units, layout, signs, bounds, heads, score);
}

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSlices& signs, float* bounds, KvHeadGroups heads, RowScore score) {
  sign_bounds_ref(q, n_head, units, layout, signs, bounds, heads, score);
}

}  // namespace ref

void slice_signs(const uint32_t* row_words, int64_t row0, int64_t n_rows, int n_kv_heads, int head_dim,
                 uint64_t* slices) {
  const int per_head = sign_words_per_head(head_dim);
  for (int64_t t = 0; t < n_rows; ++t) {
    const int64_t row = row0 + t;
    for (int h = 0; h < n_kv_heads; ++h) {
      const uint32_t* words = row_words + (t * n_kv_heads + h) * per_head;
      uint64_t* slice = slices + ((row / 64) * n_kv_heads + h) * static_cast<int64_t>(head_dim);
      const uint64_t at = uint64_t{1} << (row % 64);
      for (int w = 0; w < per_head; ++w) {
        const int n_bits = std::min(32, head_dim - 32 * w);  // the last word's channels only
        const uint32_t used = n_bits == 32 ? ~0u : (1u << n_bits) - 1u;
        for (uint32_t set = words[w] & used; set != 0; set &= set - 1) slice[32 * w + std::countr_zero(set)] |= at;
      }
    }
  }
}

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSlices& signs, float* bounds, ThreadPool* pool, KvHeadGroups heads, RowScore score) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx512) {
    bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, group_terms_avx512,
                  slices_bounds_avx512);
    return;
  }
  if (cpu_path() >= CpuPath::kAvx2 && layout.head_dim % 8 == 0) {
    bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, group_terms<channel_terms_avx2>,
                  slices_bounds_avx2);
    return;
  }
#endif
  bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, group_terms<channel_terms_scalar>,
                group_bound_scalar<SignSlices>);
}

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, ThreadPool* pool, KvHeadGroups heads, RowScore score) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2 && layout.head_dim % 8 == 0) {
    bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, group_terms<channel_terms_avx2>,
                  group_bounds_avx2);
    return;
  }
#endif
  bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, group_terms<channel_terms_scalar>,
                group_bound_scalar<SignSketch>);
}

}  // namespace leoam::sparse
