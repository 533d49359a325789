// The sign-refined bound (sign_bound.h): the double reference, and the dispatched bound, which
// scores units run by run and kv head by kv head, split among a pool's threads, through the
// per-CPU kernels of kernels/cpu/sign_bound_kernels.h.
// Why these layouts: docs/selection.md#sign-bound-kernels
#include "sparse/sign_bound.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/cpu/sign_bound_kernels.h"

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

// A row's sign bit of channel c of kv head `kv_head`, in either layout.
bool sign_bit(const SignSketch& s, int64_t row, int kv_head, int c) { return bit(row_words(s, row, kv_head), c); }
bool sign_bit(const SignSlices& s, int64_t row, int kv_head, int c) { return s.bit(row, kv_head, c); }

constexpr int kMaxGroup = kernels::kSignMaxGroup;  // query heads a kernel call scores

// The kernels' views of either layout.
kernels::SignRowWords words_of(const SignSketch& s) { return {s.words, s.pos0, s.words_per_row, s.words_per_head}; }
const kernels::SignSliceWords& words_of(const SignSlices& s) { return s; }

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
// bounds[(h - the first of those heads) * units.size() + i]. Run by run (units that share one
// box, such as a chunk tree's leaves cut at a block: the box's terms are made once for the run),
// kv head by kv head, the query heads of its group in pieces of up to kMaxGroup: the run's box
// and sign words are fetched from memory once a step (their kv heads share cache lines; the next
// run's are prefetched) and stay in L1 for the other heads, and a row's sign masks serve a
// piece's heads: faster than head by head, which read the whole sketch and every box once a
// head, from L3 or memory each time.
template <typename Sketch, typename GroupBound>
void bounds_of_units(const float* q, int n_head, HeadSpan kv, std::span<const SignUnit> units, int64_t i0,
                     int64_t i1, const BoundLayout& layout, const Sketch& signs, float* bounds, RowScore score,
                     kernels::SignTermsFn terms, GroupBound group_bound) {
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
  std::vector<kernels::SignQuery> query(parts.size());
  for (size_t h = 0; h < parts.size(); ++h) query[h] = {parts[h].pos.data(), parts[h].neg.data()};
  std::vector<kernels::SignRows> rows(static_cast<size_t>(std::max<int64_t>(i1 - i0, 0)));  // of units [i0, i1)
  for (int64_t i = i0; i < i1; ++i) rows[static_cast<size_t>(i - i0)] = {units[i].rows.begin, units[i].rows.end};
  const auto words = words_of(signs);
  kernels::SignTerms box_terms(hd);
  std::vector<float> best;  // [kSignMaxGroup][the run's units]
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
        terms(query.data() + (h0 - h_first), g, mn, mn + max_offset, hd, box_terms);
        group_bound(box_terms, g, words, std::span(rows).subspan(static_cast<size_t>(i - i0), run.size()), kv_head,
                    hd, best.data());
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
template <typename Sketch, typename GroupBound>
void bounds_of_all(const float* q, int n_head, KvHeadGroups heads, RowScore score, std::span<const SignUnit> units,
                   const BoundLayout& layout, const Sketch& signs, float* bounds, ThreadPool* pool,
                   kernels::SignTermsFn terms, GroupBound group_bound) {
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
  const kernels::SignBoundKernels k = kernels::sign_bound_kernels(layout.head_dim);
  bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, k.slices_terms, k.slices_bound);
}

void sign_bounds(const float* q, int n_head, std::span<const SignUnit> units, const BoundLayout& layout,
                 const SignSketch& signs, float* bounds, ThreadPool* pool, KvHeadGroups heads, RowScore score) {
  const kernels::SignBoundKernels k = kernels::sign_bound_kernels(layout.head_dim);
  bounds_of_all(q, n_head, heads, score, units, layout, signs, bounds, pool, k.rows_terms, k.rows_bound);
}

}  // namespace leoam::sparse
