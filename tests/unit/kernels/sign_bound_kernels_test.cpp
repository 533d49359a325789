// The sign-refined bound's kernels (sign_bound_kernels.h) on every path this CPU has, forced with
// set_cpu_path_cap, against the scalar references:
// - terms: base and d as ref::sign_terms up to float rounding; the AVX-512 slices terms in whole
//   steps cover d (step * int16(dq) >= d, up to rounding) by at most a step, or stay in float
//   past f16's range.
// - bounds: from the same terms, each unit's bound as ref's up to float rounding; the AVX-512
//   slices bound in steps at least ref's and at most head_dim steps above it.
// - dispatch: which table sign_bound_kernels picks for a path and head_dim.
#include "kernels/cpu/sign_bound_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../cpu_path_test.h"
#include "core/cpu_features.h"
#include "core/fp16.h"

namespace leoam::kernels {
namespace {

constexpr double kRelTol = 1e-5;  // of the sum of the terms' magnitudes

// Random signs of n_rows rows of one kv head of n_kv_heads, in both layouts, and a box.
struct Case {
  int n_kv_heads = 2;
  int hd = 0;
  int64_t n_rows = 200;
  std::vector<uint32_t> row_words;  // [n_rows][n_kv_heads][ceil(hd / 32)]
  std::vector<uint64_t> slices;     // [ceil(n_rows / 64)][n_kv_heads][hd]
  std::vector<uint16_t> mn, mx;     // [hd] f16, of kv head 1
  std::vector<float> pos, neg;      // [kSignMaxGroup][hd]
  std::vector<SignRows> run;        // units of one box, rows following on

  Case(int head_dim, std::mt19937& rng, bool huge = false) : hd(head_dim) {
    const int per_head = (hd + 31) / 32;
    row_words.assign(static_cast<size_t>(n_rows * n_kv_heads * per_head), 0);
    slices.assign(static_cast<size_t>((n_rows + 63) / 64 * n_kv_heads * hd), 0);
    for (int64_t t = 0; t < n_rows; ++t) {
      for (int h = 0; h < n_kv_heads; ++h) {
        for (int c = 0; c < hd; ++c) {
          if (rng() % 2 == 0) continue;
          row_words[static_cast<size_t>((t * n_kv_heads + h) * per_head + c / 32)] |= 1u << (c % 32);
          slices[static_cast<size_t>(((t / 64) * n_kv_heads + h) * hd + c)] |= uint64_t{1} << (t % 64);
        }
      }
    }
    std::normal_distribution<float> dist(0.3f, 1.0f);
    for (int c = 0; c < hd; ++c) {
      const float a = dist(rng), b = dist(rng);
      mn.push_back(f32_to_f16(huge && c == 1 ? -65504.0f : std::min(a, b)));
      mx.push_back(f32_to_f16(huge && c == 1 ? 65504.0f : std::max(a, b)));
    }
    for (int i = 0; i < kSignMaxGroup * hd; ++i) {
      const float q = dist(rng) * (huge ? 3e34f : 1.0f);
      pos.push_back(std::max(q, 0.0f));
      neg.push_back(std::min(q, 0.0f));
    }
    // Units of 1 to 70 rows from row 3 on, some of them across a 32- and 64-row edge.
    std::uniform_int_distribution<int64_t> len(1, 70);
    for (int64_t r = 3; r < n_rows - 70;) {
      const int64_t l = len(rng);
      run.push_back({r, r + l});
      r += l;
    }
  }
  std::vector<SignQuery> heads() const {
    std::vector<SignQuery> q;
    for (int j = 0; j < kSignMaxGroup; ++j) q.push_back({pos.data() + j * hd, neg.data() + j * hd});
    return q;
  }
  SignRowWords rows() const {
    const int per_head = (hd + 31) / 32;
    return {row_words.data(), 0, static_cast<int64_t>(n_kv_heads) * per_head, per_head};
  }
  SignSliceWords sliced() const { return {slices.data(), n_kv_heads, hd}; }
  // The tolerance of head j's sums: kRelTol of its terms' magnitudes.
  double tol(const SignTerms& t, int j) const {
    double m = std::fabs(t.base[j]);
    for (int c = 0; c < hd; ++c) m += 2 * std::fabs(t.d[static_cast<size_t>(j * hd + c)]);
    return kRelTol * m + 1e-6;
  }
};

class SignBoundKernelsTest : public testing_util::CpuPathTest {};

constexpr int kHeadDims[] = {8, 16, 40, 64, 128};

TEST_P(SignBoundKernelsTest, TermsMatchTheReference) {
  std::mt19937 rng(1);
  for (int hd : kHeadDims) {
    const Case c(hd, rng);
    const std::vector<SignQuery> heads = c.heads();
    const SignBoundKernels k = sign_bound_kernels(hd);
    for (int g = 1; g <= kSignMaxGroup; ++g) {
      SignTerms want(hd), rows(hd), slices(hd);
      ref::sign_terms(heads.data(), g, c.mn.data(), c.mx.data(), hd, want);
      k.rows_terms(heads.data(), g, c.mn.data(), c.mx.data(), hd, rows);
      k.slices_terms(heads.data(), g, c.mn.data(), c.mx.data(), hd, slices);
      EXPECT_FALSE(rows.quantized);
      EXPECT_EQ(slices.quantized, cpu_path() >= CpuPath::kAvx512);
      for (int j = 0; j < g; ++j) {
        for (const SignTerms* got : {&rows, &slices}) {
          EXPECT_NEAR(got->base[j], want.base[j], c.tol(want, j)) << "hd " << hd << " g " << g << " head " << j;
          for (int ch = 0; ch < hd; ++ch) {
            const size_t e = static_cast<size_t>(j * hd + ch);
            ASSERT_NEAR(got->d[e], want.d[e], c.tol(want, j)) << "hd " << hd << " channel " << ch;
          }
        }
        if (!slices.quantized) continue;
        for (int ch = 0; ch < hd; ++ch) {
          const size_t e = static_cast<size_t>(j * hd + ch);
          const auto steps = static_cast<int16_t>(slices.dq[e] & 0xffffu);
          EXPECT_EQ(slices.dq[e] >> 16, slices.dq[e] & 0xffffu);  // twice in the word
          const double covered = static_cast<double>(slices.step[j]) * steps;  // up to float rounding
          EXPECT_GE(covered, slices.d[e] - c.tol(want, j));
          EXPECT_LE(covered, slices.d[e] + slices.step[j] + c.tol(want, j));
        }
      }
    }
  }
}

TEST_P(SignBoundKernelsTest, TermsPastF16StayInFloat) {
  std::mt19937 rng(2);
  const Case c(16, rng, /*huge=*/true);
  const std::vector<SignQuery> heads = c.heads();
  SignTerms t(16);
  sign_bound_kernels(16).slices_terms(heads.data(), 2, c.mn.data(), c.mx.data(), 16, t);
  EXPECT_FALSE(t.quantized);
}

TEST_P(SignBoundKernelsTest, BoundsMatchTheReference) {
  std::mt19937 rng(3);
  for (int hd : kHeadDims) {
    const Case c(hd, rng);
    const std::vector<SignQuery> heads = c.heads();
    const SignBoundKernels k = sign_bound_kernels(hd);
    const auto n = static_cast<int64_t>(c.run.size());
    for (int g = 1; g <= kSignMaxGroup; ++g) {
      SignTerms terms(hd), quantized(hd);
      ref::sign_terms(heads.data(), g, c.mn.data(), c.mx.data(), hd, terms);
      k.slices_terms(heads.data(), g, c.mn.data(), c.mx.data(), hd, quantized);
      std::vector<float> want(static_cast<size_t>(g * n)), rows(want.size()), slices(want.size()), steps(want.size());
      ref::sign_rows_bound(terms, g, c.rows(), c.run, 1, hd, want.data());
      k.rows_bound(terms, g, c.rows(), c.run, 1, hd, rows.data());
      k.slices_bound(terms, g, c.sliced(), c.run, 1, hd, slices.data());
      k.slices_bound(quantized, g, c.sliced(), c.run, 1, hd, steps.data());
      std::vector<float> want_sliced(want.size());
      ref::sign_slices_bound(terms, g, c.sliced(), c.run, 1, hd, want_sliced.data());
      for (int j = 0; j < g; ++j) {
        const double tol = c.tol(terms, j);
        const double slack = quantized.quantized ? hd * static_cast<double>(quantized.step[j]) : 0.0;
        for (int64_t u = 0; u < n; ++u) {
          const size_t e = static_cast<size_t>(j * n + u);
          EXPECT_EQ(want_sliced[e], want[e]);  // one sum, either layout
          EXPECT_NEAR(rows[e], want[e], tol) << "hd " << hd << " g " << g << " unit " << u;
          EXPECT_NEAR(slices[e], want[e], tol) << "hd " << hd << " g " << g << " unit " << u;
          EXPECT_GE(steps[e], want[e] - tol) << "hd " << hd << " g " << g << " unit " << u;
          EXPECT_LE(steps[e], want[e] + slack + tol) << "hd " << hd << " g " << g << " unit " << u;
        }
      }
    }
  }
}

TEST_P(SignBoundKernelsTest, DispatchFollowsThePathAndHeadDim) {
  const SignBoundKernels even = sign_bound_kernels(64);
  const SignBoundKernels odd = sign_bound_kernels(12);  // not a multiple of 8
  EXPECT_EQ(odd.rows_bound, &ref::sign_rows_bound);
  EXPECT_EQ(odd.rows_terms, &ref::sign_terms);
  if (cpu_path() == CpuPath::kScalar) {
    EXPECT_EQ(even.rows_bound, &ref::sign_rows_bound);
    EXPECT_EQ(even.slices_bound, &ref::sign_slices_bound);
  } else {
    EXPECT_EQ(even.rows_bound, detail::sign_bound_kernels_avx2()->rows_bound);
    const SignBoundKernels* slices =
        cpu_path() >= CpuPath::kAvx512 ? detail::sign_bound_kernels_avx512() : detail::sign_bound_kernels_avx2();
    EXPECT_EQ(even.slices_bound, slices->slices_bound);
    EXPECT_EQ(odd.slices_bound, cpu_path() >= CpuPath::kAvx512 ? slices->slices_bound : &ref::sign_slices_bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SignBoundKernelsTest, testing_util::kCpuPathsWithAvx512, testing_util::cpu_path_name);

}  // namespace
}  // namespace leoam::kernels
