// The box bound's dispatched kernel against its scalar reference on each CPU path, over head
// sizes that run the 16-channel body, the 8-channel step and the scalar tail.
#include "kernels/cpu/box_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../cpu_path_test.h"

namespace leoam::kernels {
namespace {

class BoxBound : public testing_util::CpuPathTest {};

TEST_P(BoxBound, MatchesTheReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int n : {1, 7, 8, 9, 15, 16, 17, 24, 31, 64, 100, 128, 130}) {
    std::vector<float> q(static_cast<size_t>(n)), mn(q.size()), mx(q.size()), pos(q.size()), neg(q.size());
    double scale = 0.0;  // the terms' magnitudes: the tolerance's unit
    for (int c = 0; c < n; ++c) {
      q[c] = dist(rng);
      const float a = dist(rng), b = dist(rng);
      mn[c] = std::min(a, b);
      mx[c] = std::max(a, b);
      pos[c] = std::max(q[c], 0.0f);
      neg[c] = std::min(q[c], 0.0f);
      scale += std::abs(pos[c] * mx[c]) + std::abs(neg[c] * mn[c]);
    }
    const float want = ref::box_bound(pos.data(), neg.data(), mx.data(), mn.data(), n);
    const float got = box_bound_kernel()(pos.data(), neg.data(), mx.data(), mn.data(), n);
    EXPECT_NEAR(got, want, 1e-6 * scale) << "n = " << n;
    double exact = 0.0;  // the upper bound of q . k over the box, in double
    for (int c = 0; c < n; ++c) exact += std::max(static_cast<double>(q[c]) * mn[c], static_cast<double>(q[c]) * mx[c]);
    EXPECT_NEAR(got, exact, 1e-6 * scale) << "n = " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, BoxBound, testing_util::kCpuPaths, testing_util::cpu_path_name);

}  // namespace
}  // namespace leoam::kernels
