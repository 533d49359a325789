// The sign-refined chunk bound: the upper bound of chunk_bound.h, tightened with the key sign
// sketch (kv/chunk_layout.h: one bit a channel of every row, set where the stored key is <= 0).
// Within a box [min_c, max_c] that holds a row's key, the row's sign bit cuts channel c to
// [min_c, min(0, max_c)] (bit set) or [max(0, min_c), max_c] (bit clear), and a unit (a run of
// rows inside the box) is bounded by its largest row bound:
//   bound(q, unit) = max over rows t of  sum_c max(q_c * lo_tc, q_c * hi_tc)  >=  q.k_t
// It never exceeds the box bound, and tells apart the chunks of dense keys, whose boxes look
// alike. A row's term is P_c (bit clear) or N_c (bit set), so its bound is sum_c P_c plus a
// masked sum of (N_c - P_c) over its bits. Derivation: docs/selection.md#the-sign-refined-bound
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/sign_bound_kernels.h"  // kSignTermSteps, SignSliceWords
#include "kv/chunk_layout.h"  // sign_words_per_head
#include "kv/kv_cache.h"  // TokenRange
#include "sparse/chunk_bound.h"

namespace leoam {
class ThreadPool;
}

namespace leoam::sparse {

// Where the rows' sign words are: position p's words for kv head h at
// words + (p - pos0) * words_per_row + h * words_per_head (sign_words_per_head(head_dim) a head).
struct SignSketch {
  const uint32_t* words = nullptr;
  int64_t pos0 = 0;
  int64_t words_per_row = 0;
  int words_per_head = 0;

  // The sketch of rows from pos0 on, n_kv_heads heads of head_dim channels, at `words`.
  static SignSketch of(const uint32_t* words, int64_t pos0, int n_kv_heads, int head_dim) {
    const int per_head = sign_words_per_head(head_dim);
    return {words, pos0, static_cast<int64_t>(n_kv_heads) * per_head, per_head};
  }
};

// The same sketch sliced by channel, 64 rows a word (the chunk tree's layout): bit r of
// words[(g * n_kv_heads + h) * head_dim + c] is the sign bit of channel c of kv head h's key at
// row 64 g + r (rows from 0). A row's bits are spread over head_dim words, but 64 rows' bits of
// one channel sit together: the vector paths add a channel's term to 32 rows (AVX-512: one masked
// add in int16 lanes) or 8 (AVX2) at once, with no horizontal sum a row.
// Its words, n_kv_heads and head_dim, and slice(g, h) (the head_dim words of kv head h for rows
// [64 g, 64 g + 64)), are the kernels' view (kernels/cpu/sign_bound_kernels.h).
struct SignSlices : kernels::SignSliceWords {
  bool bit(int64_t row, int kv_head, int c) const { return (slice(row / 64, kv_head)[c] >> (row % 64)) & 1u; }
};

// What a unit's value is, per row the largest: each row's upper bound on q.k (the header comment),
// or its midpoint estimate, q.k with each channel of the row's key at the middle of its cut
// interval, (lo_tc + hi_tc) / 2. The midpoint is the key quantized to one bit a channel, the
// box's two halves the levels: not a bound, but without the bound's slack, which grows with each
// channel's interval and so ranks wide boxes above the keys that attention reads. It never
// exceeds the upper bound, and equals q.k where the box is the row itself.
enum class RowScore { kUpper, kMidpoint };

// Words of a SignSlices for n_rows rows: ceil(n_rows / 64) * n_kv_heads * head_dim.
inline int64_t sign_slice_words(int64_t n_rows, int n_kv_heads, int head_dim) {
  return (n_rows + 63) / 64 * n_kv_heads * static_cast<int64_t>(head_dim);
}

// Sets the slices' bits of rows [row0, row0 + n_rows) from row-major sign words
// ([n_rows][n_kv_heads][sign_words_per_head(head_dim)], kv/chunk_layout.h). The rows' bits must
// be clear before (new rows of zeroed words).
void slice_signs(const uint32_t* row_words, int64_t row0, int64_t n_rows, int n_kv_heads, int head_dim,
                 uint64_t* slices);

// A run of rows and the box that holds their keys: [2][n_kv_heads][head_dim] f16 ([0] = min,
// [1] = max, as chunk_bound.h lays out one chunk's abstract), rounded outward (box_f16.h).
struct SignUnit {
  TokenRange rows;  // non-empty, inside what the sketch covers
  const uint16_t* box = nullptr;
};

// Heads [begin, end).
struct HeadSpan {
  int begin = 0;
  int end = 0;
};

// The query heads a call scores: those of every kv head, or of one (its group).
struct KvHeadGroups {
  int kv_head = -1;  // -1: every kv head's

  static KvHeadGroups all() { return {}; }
  static KvHeadGroups of(int kv_head) { return {kv_head}; }

  // The kv heads named, of n_kv_heads.
  HeadSpan kv_heads(int n_kv_heads) const { return kv_head < 0 ? HeadSpan{0, n_kv_heads} : HeadSpan{kv_head, kv_head + 1}; }
  // The query heads named, of n_head shared evenly by n_kv_heads.
  HeadSpan query_heads(int n_head, int n_kv_heads) const {
    const HeadSpan kv = kv_heads(n_kv_heads);
    const int group = n_head / n_kv_heads;
    return {kv.begin * group, kv.end * group};
  }
};

// bounds[h * units.size() + i]: the sign-refined upper bound of query head h (head_dim floats
// at q + h * head_dim, h < n_head) against kv head h / (n_head / layout.n_kv_heads) of the rows
// and box of units[i] (layout.chunk_stride is not used; n_head is a multiple of n_kv_heads).
// With KvHeadGroups::of(g), only the query heads of kv head g, bounds[j * units.size() + i] for
// its j-th (query head g * group + j): a caller that takes the heads group by group holds a
// group's bounds at a time, not every head's.
// Every query head is scored in one pass over the units: a unit's box and its rows' sign words
// (whose kv heads share cache lines) are read once a step, not once a head. With a pool, the
// units are split among its threads in runs of about equal rows (the bounds are the same
// either way). The dispatched path sums in float (AVX2+FMA where the CPU has it and
// head_dim % 8 == 0, else scalar). RowScore::kMidpoint gives the rows' midpoint estimates instead.
void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, ThreadPool* pool = nullptr,
                 KvHeadGroups heads = KvHeadGroups::all(), RowScore score = RowScore::kUpper);

// The AVX-512 path over sliced signs sums in whole steps: per query head and box, each channel's
// term N_c - P_c (the header comment) is rounded up to a multiple of the head's largest |N_c - P_c|
// on the box over kSignTermSteps, so that 32 rows' terms add in int16 lanes. Its bounds stay
// sound, and lie at most head_dim such steps (a kSignTermSteps-th of head_dim times the largest
// term) above the exact ones: about 3% of the largest channel's term at head_dim 128. A box whose
// terms overflow float is summed in float instead.
inline constexpr float kSignTermSteps = kernels::kSignTermSteps;

// The same over sliced signs (the units' rows inside what the slices cover): AVX-512 where the
// CPU has it (in steps, as above), AVX2+FMA (head_dim % 8 == 0), else scalar; these two the same
// bounds as the reference up to float rounding.
void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSlices& signs, float* bounds, ThreadPool* pool = nullptr,
                 KvHeadGroups heads = KvHeadGroups::all(), RowScore score = RowScore::kUpper);

namespace ref {
// Plain loops in double, head by head, each row's interval cut from its bits: what the
// dispatched versions are tested against.
void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, KvHeadGroups heads = KvHeadGroups::all(),
                 RowScore score = RowScore::kUpper);
void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSlices& signs, float* bounds, KvHeadGroups heads = KvHeadGroups::all(),
                 RowScore score = RowScore::kUpper);
}  // namespace ref

}  // namespace leoam::sparse
