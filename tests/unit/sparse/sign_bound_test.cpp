// The sign-refined bound kernel: a hand-computed case; the dispatched paths (scalar, AVX2 and
// AVX-512 where the CPU has them) against the double reference over head_dims with and without a
// 32-channel word boundary and an 8-channel tail, one query head a kv head and GQA groups; a
// pool's split of the units, which changes no bound; a term past float's range; and the property
// that makes the bound sound and worth having: over f16-stored random keys whose abstract
// update_abstract built, the bound is at least every row's q.k, at most the box bound, and equal
// to q.k for a one-row unit whose box is the row itself. The AVX-512 sliced path sums in steps
// (sign_bound.h): its bounds may lie up to head_dim steps above those (step_slack), never below.
// The rows' midpoint estimates (RowScore::kMidpoint) against the same reference, under the bound,
// nearer the keys than the bound, and exact for a one-row box.
// Units' boxes are f16 (box_f16.h); those of f16 keys hold their exact extremes.
#include "sparse/sign_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../cpu_path_test.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kv/chunk_layout.h"
#include "kv/box_f16.h"
#include "sparse/chunk_bound.h"

namespace leoam::sparse {
namespace {

constexpr double kSignRelTol = 1e-5;  // as chunk_bound_test: relative to sum_c |q_c| * max(|min_c|, |max_c|)

double magnitude(const float* q, const uint16_t* box, int kv_head, const BoundLayout& layout) {
  const uint16_t* mn = box + static_cast<int64_t>(kv_head) * layout.head_dim;
  const uint16_t* mx = mn + static_cast<int64_t>(layout.n_kv_heads) * layout.head_dim;
  double m = 0.0;
  for (int c = 0; c < layout.head_dim; ++c) {
    m += std::fabs(q[c]) * std::max(std::fabs(f16_to_f32(mn[c])), std::fabs(f16_to_f32(mx[c])));
  }
  return m;
}

// Random f16 chunks, each with the abstract the store builds: keys[i][t][kv][c] as stored, boxes
// [i][2][kv][hd] (f32, and f16 for the units) and signs [i * C + t][kv][words] (token-major, as
// the chunk tree keeps them).
struct Chunks {
  ChunkGeometry g;
  std::vector<float> keys;
  std::vector<float> boxes;
  std::vector<uint16_t> boxes16;
  std::vector<uint32_t> signs;

  Chunks(int n_kv_heads, int head_dim, int chunk_tokens, int n_chunks, std::mt19937& rng)
      : g{n_kv_heads, head_dim, chunk_tokens, KvDtype::kF16} {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> chunk(g.chunk_bytes() / sizeof(uint16_t));
    std::vector<float> abstract(static_cast<size_t>(g.abstract_floats()));
    for (int i = 0; i < n_chunks; ++i) {
      for (int64_t e = 0; e < chunk_tokens * g.row_elements(); ++e) {
        chunk[static_cast<size_t>(e)] = f32_to_f16(dist(rng) + 0.3f);  // off-centre: boxes straddle 0 unevenly
        keys.push_back(f16_to_f32(chunk[static_cast<size_t>(e)]));
      }
      reset_abstract(g, abstract.data());
      update_abstract(g, chunk.data(), 0, chunk_tokens, abstract.data());
      boxes.insert(boxes.end(), abstract.begin(), abstract.begin() + g.box_floats());
      boxes16.resize(boxes.size());
      round_box_outward(abstract.data(), g.box_floats(), boxes16.data() + boxes.size() - g.box_floats());
      const size_t at = signs.size();
      signs.resize(at + static_cast<size_t>(g.sign_words()));
      abstract_signs(g, abstract.data(), signs.data() + at);
    }
  }
  BoundLayout layout() const { return {g.n_kv_heads, g.head_dim, g.box_floats()}; }
  SignSketch sketch() const { return {signs.data(), 0, g.sign_words_per_row(), g.sign_words_per_head()}; }
  // The same signs sliced by channel (the chunk tree's layout), made on first use.
  SignSlices sliced() const {
    const int64_t n_rows = static_cast<int64_t>(signs.size()) / g.sign_words_per_row();
    if (slices.empty()) {
      slices.assign(static_cast<size_t>(sign_slice_words(n_rows, g.n_kv_heads, g.head_dim)), 0);
      slice_signs(signs.data(), 0, n_rows, g.n_kv_heads, g.head_dim, slices.data());
    }
    return {slices.data(), g.n_kv_heads, g.head_dim};
  }
  mutable std::vector<uint64_t> slices;
  const float* box(int i) const { return boxes.data() + i * g.box_floats(); }
  const uint16_t* box16(int i) const { return boxes16.data() + i * g.box_floats(); }
  // The f16 box of chunks [i0, i1): every channel's smallest min and largest max.
  std::vector<uint16_t> union_box(int i0, int i1) const {
    const int64_t half = g.box_floats() / 2;
    std::vector<float> u(box(i0), box(i0) + g.box_floats());
    for (int i = i0 + 1; i < i1; ++i) {
      for (int64_t e = 0; e < half; ++e) {
        u[e] = std::min(u[e], box(i)[e]);
        u[half + e] = std::max(u[half + e], box(i)[half + e]);
      }
    }
    std::vector<uint16_t> u16(u.size());
    round_box_outward(u.data(), g.box_floats(), u16.data());
    return u16;
  }
  double dot(const float* q, int64_t pos, int kv) const {
    const float* k = keys.data() + pos * g.row_elements() + static_cast<int64_t>(kv) * g.head_dim;
    double s = 0.0;
    for (int c = 0; c < g.head_dim; ++c) s += static_cast<double>(q[c]) * k[c];
    return s;
  }
};

// The most the AVX-512 sliced path's steps (sign_bound.h) may add to query head q's value
// against kv head `kv_head` of `box`: head_dim steps of its largest term |N_c - P_c| over
// kSignTermSteps, the terms of `score`. Every other path and layout sums exactly (0).
double step_slack(bool sliced, const float* q, const uint16_t* box, int kv_head, const BoundLayout& layout,
                  RowScore score = RowScore::kUpper) {
  if (!sliced || cpu_path() < CpuPath::kAvx512) return 0.0;
  const uint16_t* mn = box + static_cast<int64_t>(kv_head) * layout.head_dim;
  const uint16_t* mx = mn + static_cast<int64_t>(layout.n_kv_heads) * layout.head_dim;
  double largest = 0.0;
  for (int c = 0; c < layout.head_dim; ++c) {
    const double lo = f16_to_f32(mn[c]);
    const double hi = f16_to_f32(mx[c]);
    // The bit-clear interval [max(0, lo), hi] and the bit-set one [lo, min(0, hi)].
    const double clear_lo = std::max(0.0, lo), set_hi = std::min(0.0, hi);
    const double p = score == RowScore::kUpper ? std::max(q[c] * clear_lo, q[c] * hi) : q[c] * (clear_lo + hi) / 2;
    const double n = score == RowScore::kUpper ? std::max(q[c] * lo, q[c] * set_hi) : q[c] * (lo + set_hi) / 2;
    largest = std::max(largest, std::fabs(n - p));
  }
  return layout.head_dim * largest / kSignTermSteps;
}

class SignBound : public testing_util::CpuPathTest {};

// Both layouts of the sketch: the dispatched kernels of each must give the same bounds.
enum class Layout { kRows, kSlices };
constexpr Layout kLayouts[] = {Layout::kRows, Layout::kSlices};
const char* name(Layout l) { return l == Layout::kRows ? "rows" : "slices"; }

void bounds_of(const Chunks& c, Layout l, const float* q, int n_head, std::span<const SignUnit> units, float* out,
               ThreadPool* pool = nullptr, KvHeadGroups heads = KvHeadGroups::all(),
               RowScore score = RowScore::kUpper) {
  if (l == Layout::kRows) {
    sign_bounds(q, n_head, units, c.layout(), c.sketch(), out, pool, heads, score);
  } else {
    sign_bounds(q, n_head, units, c.layout(), c.sliced(), out, pool, heads, score);
  }
}

TEST_P(SignBound, HandComputedBound) {
  // head_dim 2, box min = (-1, -2), max = (3, 1), q = (1, -2).
  //   row 0 signs (+, -): k0 in [0, 3], k1 in [-2, 0]: max(0, 3) + max(4, 0) = 7
  //   row 1 signs (-, +): k0 in [-1, 0], k1 in [0, 1]: max(-1, 0) + max(0, -2) = 0
  // The box bound is max(-1, 3) + max(4, -2) = 7: row 0 reaches it, row 1 is far below.
  const float q[] = {1.0f, -2.0f};
  const uint16_t box[] = {f32_to_f16(-1.0f), f32_to_f16(-2.0f), f32_to_f16(3.0f), f32_to_f16(1.0f)};
  const uint32_t signs[] = {0b10u, 0b01u};  // bit c set: channel c <= 0
  const BoundLayout layout{1, 2, 4};
  const SignSketch sketch{signs, 0, 1, 1};
  const SignUnit both{{0, 2}, box};
  const SignUnit second{{1, 2}, box};
  float b = 0.0f;
  sign_bounds(q, 1, {&both, 1}, layout, sketch, &b);
  EXPECT_EQ(b, 7.0f);
  sign_bounds(q, 1, {&second, 1}, layout, sketch, &b);
  EXPECT_EQ(b, 0.0f);
  // Sliced: channel 0's bit is set in row 1, channel 1's in row 0. The AVX-512 path's steps are
  // 4 / kSignTermSteps (the largest term, channel 1's): channel 0's -3, set in row 1, rounds up by
  // half a step.
  const uint64_t slices[] = {0b10u, 0b01u};
  const SignSlices sliced{slices, 1, 2};
  const double slack = step_slack(true, q, box, 0, layout);
  sign_bounds(q, 1, {&both, 1}, layout, sliced, &b);
  EXPECT_EQ(b, 7.0f);
  sign_bounds(q, 1, {&second, 1}, layout, sliced, &b);
  EXPECT_GE(b, 0.0f);
  EXPECT_LE(b, slack);
  if (cpu_path() >= CpuPath::kAvx512) {
    EXPECT_GT(b, 0.0f);  // the steps are in use
  }
}

// A term past float's range gives an infinite bound on every path, not a garbage one (the AVX-512
// path sums such a box in float).
TEST_P(SignBound, ATermPastFloatGivesAnInfiniteBound) {
  const float q[] = {3e34f, -3e34f};
  const uint16_t box[] = {f32_to_f16(-65504.0f), f32_to_f16(-65504.0f), f32_to_f16(65504.0f), f32_to_f16(65504.0f)};
  const uint32_t signs[] = {0u};  // every channel > 0: the bound is q.max of the box, past float
  const uint64_t slices[] = {0u, 0u};
  const BoundLayout layout{1, 2, 4};
  const SignUnit row{{0, 1}, box};
  float b = 0.0f;
  sign_bounds(q, 1, {&row, 1}, layout, SignSketch{signs, 0, 1, 1}, &b);
  EXPECT_EQ(b, std::numeric_limits<float>::infinity());
  sign_bounds(q, 1, {&row, 1}, layout, SignSlices{slices, 1, 2}, &b);
  EXPECT_EQ(b, std::numeric_limits<float>::infinity());
}

// slice_signs puts each row's bit of each channel in its place, and a row at an offset lands
// past the rows before it.
TEST(SignSlices, SliceSignsMovesEveryBit) {
  std::mt19937 rng(3);
  const int kv = 3, hd = 40;  // two words a head, the second partly used
  const int per_head = sign_words_per_head(hd);
  const int64_t n_rows = 150, row0 = 70;
  std::vector<uint32_t> rows(static_cast<size_t>(n_rows * kv * per_head));
  for (uint32_t& w : rows) w = rng();
  std::vector<uint64_t> slices(static_cast<size_t>(sign_slice_words(row0 + n_rows, kv, hd)), 0);
  slice_signs(rows.data(), row0, n_rows, kv, hd, slices.data());
  const SignSlices s{slices.data(), kv, hd};
  for (int64_t t = 0; t < row0 + n_rows; ++t) {
    for (int h = 0; h < kv; ++h) {
      for (int c = 0; c < hd; ++c) {
        const bool want = t >= row0 && ((rows[((t - row0) * kv + h) * per_head + c / 32] >> (c % 32)) & 1u);
        ASSERT_EQ(s.bit(t, h, c), want) << "row " << t << " head " << h << " channel " << c;
      }
    }
  }
}

TEST_P(SignBound, MatchesReference) {
  std::mt19937 rng(5);
  for (int head_dim : {8, 40, 64, 128, 12, 3}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const Chunks c(2, head_dim, 8, 9, rng);
    // Units of every shape: a whole chunk, one row, a run across two chunks' rows with one box.
    std::vector<SignUnit> units;
    for (int i = 0; i < 9; ++i) units.push_back({{i * 8, i * 8 + 8}, c.box16(i)});
    units.push_back({{13, 14}, c.box16(1)});
    units.push_back({{3, 5}, c.box16(0)});
    // Long runs across chunks, against the box of all 9 chunks.
    const std::vector<uint16_t> all = c.union_box(0, 9);
    units.push_back({{2, 69}, all.data()});
    units.push_back({{8, 24}, all.data()});
    // Runs of units that follow on with one box (a tree's leaves cut at a block), which the
    // kernels score together: units that share a run of 8 or 16 rows, and one inside 8 rows.
    for (TokenRange r : {TokenRange{0, 5}, {5, 8}, {8, 21}, {21, 40}, {40, 72}}) units.push_back({r, all.data()});
    for (TokenRange r : {TokenRange{16, 19}, {19, 24}}) units.push_back({r, c.box16(2)});
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int n_head : {2, 4, 6, 8}) {  // groups of one to four query heads a kv head
      std::vector<float> q(static_cast<size_t>(n_head * head_dim));
      for (float& x : q) x = dist(rng);
      const size_t n = units.size();
      for (RowScore score : {RowScore::kUpper, RowScore::kMidpoint}) {
        const char* what = score == RowScore::kUpper ? "upper" : "midpoint";
        std::vector<float> want(n_head * n), want_sliced(n_head * n);
        ref::sign_bounds(q.data(), n_head, units, c.layout(), c.sketch(), want.data(), KvHeadGroups::all(), score);
        ref::sign_bounds(q.data(), n_head, units, c.layout(), c.sliced(), want_sliced.data(), KvHeadGroups::all(),
                         score);
        ASSERT_EQ(want_sliced, want);  // the same bits, either layout
        for (Layout l : kLayouts) {
          std::vector<float> got(n_head * n);
          bounds_of(c, l, q.data(), n_head, units, got.data(), nullptr, KvHeadGroups::all(), score);
          for (int h = 0; h < n_head; ++h) {
            const float* qh = q.data() + h * head_dim;
            const int kv = h / (n_head / 2);
            for (size_t u = 0; u < n; ++u) {
              const double tol = kSignRelTol * magnitude(qh, units[u].box, kv, c.layout());
              const double slack = step_slack(l == Layout::kSlices, qh, units[u].box, kv, c.layout(), score);
              ASSERT_GE(got[h * n + u], want[h * n + u] - tol)
                  << what << ", " << name(l) << ", " << n_head << " heads: head " << h << " unit " << u;
              ASSERT_LE(got[h * n + u], want[h * n + u] + tol + slack)
                  << what << ", " << name(l) << ", " << n_head << " heads: head " << h << " unit " << u;
            }
          }
        }
      }
    }
  }
}

TEST_P(SignBound, APoolSplitsTheUnitsAndChangesNoBound) {
  std::mt19937 rng(17);
  const Chunks c(2, 64, 8, 40, rng);
  // Runs of one-chunk units and of long units, so that a split by rows differs from one by count.
  const std::vector<uint16_t> all = c.union_box(0, 40);
  std::vector<SignUnit> units;
  for (int i = 0; i < 20; ++i) units.push_back({{i * 8, i * 8 + 8}, c.box16(i)});
  for (int i = 20; i < 40; i += 5) units.push_back({{i * 8, i * 8 + 40}, all.data()});
  units.push_back({{3, 4}, c.box16(0)});
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(4 * 64);
  for (float& x : q) x = dist(rng);
  const size_t n = units.size();
  for (Layout l : kLayouts) {
    std::vector<float> alone(4 * n);
    bounds_of(c, l, q.data(), 4, units, alone.data());
    for (int threads : {2, 3}) {
      ThreadPoolOptions o;
      o.n_threads = threads;
      o.min_cost_per_thread = 1;  // split even this small a call
      ThreadPool pool(o);
      std::vector<float> split(4 * n, std::numeric_limits<float>::quiet_NaN());
      bounds_of(c, l, q.data(), 4, units, split.data(), &pool);
      for (size_t e = 0; e < split.size(); ++e) {
        ASSERT_EQ(split[e], alone[e]) << name(l) << ", " << threads << " threads: bound " << e;
      }
    }
  }
}

// One kv head's group alone: its rows of the bounds of every head, from the dispatched kernels
// (alone and in a pool) and from the reference.
TEST_P(SignBound, OneGroupGivesItsRowsOfEveryHeads) {
  std::mt19937 rng(23);
  constexpr int kKvHeads = 3, kGroup = 2, kHeads = kKvHeads * kGroup;
  const Chunks c(kKvHeads, 64, 8, 12, rng);
  const std::vector<uint16_t> all = c.union_box(0, 12);
  std::vector<SignUnit> units;
  for (int i = 0; i < 6; ++i) units.push_back({{i * 8, i * 8 + 8}, c.box16(i)});
  for (TokenRange r : {TokenRange{48, 53}, {53, 80}, {80, 96}}) units.push_back({r, all.data()});
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(kHeads * 64));
  for (float& x : q) x = dist(rng);
  const size_t n = units.size();
  std::vector<float> want_all(kHeads * n);
  ref::sign_bounds(q.data(), kHeads, units, c.layout(), c.sketch(), want_all.data());
  ThreadPoolOptions o;
  o.n_threads = 2;
  o.min_cost_per_thread = 1;
  ThreadPool pool(o);
  for (Layout l : kLayouts) {
    std::vector<float> every(kHeads * n);
    bounds_of(c, l, q.data(), kHeads, units, every.data());
    for (int g = 0; g < kKvHeads; ++g) {
      std::vector<float> want(kGroup * n);
      ref::sign_bounds(q.data(), kHeads, units, c.layout(), c.sketch(), want.data(), KvHeadGroups::of(g));
      const std::vector<float> want_rows(want_all.begin() + g * kGroup * n, want_all.begin() + (g + 1) * kGroup * n);
      ASSERT_EQ(want, want_rows) << "reference, kv head " << g;
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> got(kGroup * n, std::numeric_limits<float>::quiet_NaN());
        bounds_of(c, l, q.data(), kHeads, units, got.data(), p, KvHeadGroups::of(g));
        for (size_t e = 0; e < got.size(); ++e) {
          ASSERT_EQ(got[e], every[g * kGroup * n + e]) << name(l) << ", kv head " << g << (p ? ", pool" : "");
        }
      }
    }
  }
}

TEST_P(SignBound, BoundsEveryRowAndTightensTheBox) {
  std::mt19937 rng(9);
  constexpr int kChunks = 12;
  for (int head_dim : {12, 64}) {
    for (int chunk_tokens : {8, 64}) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + " chunk_tokens " + std::to_string(chunk_tokens));
      const Chunks c(2, head_dim, chunk_tokens, kChunks, rng);
      std::vector<SignUnit> units;
      for (int i = 0; i < kChunks; ++i) units.push_back({{i * chunk_tokens, (i + 1) * chunk_tokens}, c.box16(i)});
      std::normal_distribution<float> dist(0.0f, 1.0f);
      double refined_sum = 0.0, box_sum = 0.0;
      for (int trial = 0; trial < 4; ++trial) {
        // Four query heads, two a kv head: head h is bounded against the keys of kv head h / 2.
        constexpr int kHeads = 4;
        std::vector<float> q(static_cast<size_t>(kHeads * head_dim));
        for (float& x : q) x = dist(rng);
        std::vector<float> refined(kHeads * kChunks), box(kChunks);
        const Layout l = trial % 2 == 0 ? Layout::kRows : Layout::kSlices;
        bounds_of(c, l, q.data(), kHeads, units, refined.data());
        for (int h = 0; h < kHeads; ++h) {
          const float* qh = q.data() + h * head_dim;
          const int kv = h / 2;
          chunk_bounds(qh, kv, c.boxes.data(), kChunks, c.layout(), box.data());
          for (int i = 0; i < kChunks; ++i) {
            const float r = refined[h * kChunks + i];
            const double slack = kSignRelTol * magnitude(qh, c.box16(i), kv, c.layout());
            double best = -std::numeric_limits<double>::infinity();
            for (int64_t t = units[i].rows.begin; t < units[i].rows.end; ++t) best = std::max(best, c.dot(qh, t, kv));
            ASSERT_GE(r + slack, best) << "head " << h << " chunk " << i;
            ASSERT_LE(r, box[i] + slack + step_slack(l == Layout::kSlices, qh, c.box16(i), kv, c.layout()))
                << "head " << h << " chunk " << i;
            refined_sum += r - best;
            box_sum += box[i] - best;
          }
        }
      }
      // The point of the signs: even on these Gaussian keys they cut the box bound's slack over
      // the best row (by a third at head_dim 64; 18% at 12 and chunks of 64, the least here).
      EXPECT_LT(refined_sum, 0.9 * box_sum);
    }
  }
}

// The midpoint estimate never exceeds the bound, and it lies nearer the keys q.k than the bound
// does: on Gaussian keys in 8-token boxes, its error against the best row's q.k is a fraction
// of the bound's slack.
TEST_P(SignBound, MidpointLiesUnderTheBoundAndNearerTheKeys) {
  std::mt19937 rng(21);
  constexpr int kChunks = 16, kTokens = 8, kHeadDim = 64, kHeads = 4;
  const Chunks c(2, kHeadDim, kTokens, kChunks, rng);
  std::vector<SignUnit> units;
  for (int i = 0; i < kChunks; ++i) units.push_back({{i * kTokens, (i + 1) * kTokens}, c.box16(i)});
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(kHeads * kHeadDim));
  for (float& x : q) x = dist(rng);
  for (Layout l : kLayouts) {
    std::vector<float> upper(kHeads * kChunks), mid(kHeads * kChunks);
    bounds_of(c, l, q.data(), kHeads, units, upper.data());
    bounds_of(c, l, q.data(), kHeads, units, mid.data(), nullptr, KvHeadGroups::all(), RowScore::kMidpoint);
    double mid_error = 0.0, upper_slack = 0.0;
    for (int h = 0; h < kHeads; ++h) {
      const float* qh = q.data() + h * kHeadDim;
      for (int i = 0; i < kChunks; ++i) {
        const double slack = step_slack(l == Layout::kSlices, qh, c.box16(i), h / 2, c.layout(), RowScore::kMidpoint);
        EXPECT_LE(mid[h * kChunks + i], upper[h * kChunks + i] + slack) << name(l) << " head " << h << " chunk " << i;
        double best = -std::numeric_limits<double>::infinity();
        for (int64_t t = units[i].rows.begin; t < units[i].rows.end; ++t) best = std::max(best, c.dot(qh, t, h / 2));
        mid_error += std::fabs(mid[h * kChunks + i] - best);
        upper_slack += upper[h * kChunks + i] - best;
      }
    }
    EXPECT_LT(mid_error, 0.5 * upper_slack) << name(l);
  }
}

TEST_P(SignBound, OneRowWithItsOwnBoxIsExact) {
  std::mt19937 rng(13);
  const Chunks c(1, 64, 1, 5, rng);  // chunks of one row: each box is that row's key
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(64);
  for (float& x : q) x = dist(rng);
  for (int i = 0; i < 5; ++i) {
    const SignUnit u{{i, i + 1}, c.box16(i)};
    for (Layout l : kLayouts) {
      for (RowScore score : {RowScore::kUpper, RowScore::kMidpoint}) {
        float b = 0.0f;
        bounds_of(c, l, q.data(), 1, {&u, 1}, &b, nullptr, KvHeadGroups::all(), score);
        const double tol = kSignRelTol * magnitude(q.data(), c.box16(i), 0, c.layout());
        const double exact = c.dot(q.data(), i, 0);
        EXPECT_GE(b, exact - tol) << name(l) << " " << i;
        EXPECT_LE(b, exact + tol + step_slack(l == Layout::kSlices, q.data(), c.box16(i), 0, c.layout(), score))
            << name(l) << " " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SignBound, testing_util::kCpuPathsWithAvx512, testing_util::cpu_path_name);

}  // namespace
}  // namespace leoam::sparse
