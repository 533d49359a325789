// MovingTargets (moving_targets.h): targets drawn anew each epoch inside their range, and a steer
// that lifts each target's logit by the lean on average, far above the other keys'.
#include "model/moving_targets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

namespace leoam {
namespace {
namespace moving_targets_test {  // apart from the unity build's other tests

constexpr int kKvHeads = 2, kHeads = 4, kDim = 64, kLayers = 2;
constexpr int64_t kN = 2048;

struct Fixture {
  Fixture() {
    RopeParams p;
    p.n_rot = kDim;
    p.freq_base = 10000.0f;
    rope = std::make_unique<Rope>(std::move(Rope::create(p, kDim, nullptr)).value());
    SyntheticKvOptions o;
    o.n_layer = kLayers;
    o.n_kv_heads = kKvHeads;
    o.head_dim = kDim;
    o.n_ctx = kN;
    kv = std::make_unique<SyntheticKv>(std::move(SyntheticKv::create(o, *rope)).value());
  }
  MovingTargetsOptions options() const {
    return {.n_head = kHeads, .scale = 0.125f, .n_targets = 4, .period = 3, .lean = 10.0f, .first = 64, .last = kN - 256};
  }
  std::unique_ptr<Rope> rope;
  std::unique_ptr<SyntheticKv> kv;
};

TEST(MovingTargets, TargetsMoveEachEpochInsideTheirRange) {
  Fixture f;
  auto m = MovingTargets::create(*f.kv, f.options());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t step = 0; step < 9; ++step) {
    m->prepare(step);
    const std::span<const int64_t> t = m->targets(1, 1);
    ASSERT_EQ(t.size(), 4u);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
    for (int64_t p : t) {
      EXPECT_GE(p, 64);
      EXPECT_LT(p, kN - 256);
    }
    if (step % 3 == 0) {
      epochs.emplace_back(t.begin(), t.end());
    } else {
      EXPECT_EQ(std::vector<int64_t>(t.begin(), t.end()), epochs.back()) << "step " << step;  // within an epoch
    }
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(std::vector<int64_t>(m->targets(0, 0).begin(), m->targets(0, 0).end()), epochs[2]);  // by layer and head
}

TEST(MovingTargets, SteerLiftsTheTargetsLogitsByTheLean) {
  Fixture f;
  auto m = MovingTargets::create(*f.kv, f.options());
  ASSERT_TRUE(m.is_ok());
  m->prepare(0);
  std::vector<float> k(kN * kKvHeads * kDim), v(k.size());
  f.kv->generate(1, 0, kN, k.data(), v.data());
  std::vector<float> q(kHeads * kDim, 0.0f);
  m->steer(1, q.data());
  for (int hq = 0; hq < kHeads; ++hq) {
    const int h = hq / (kHeads / kKvHeads);
    const auto logit = [&](int64_t p) {
      double dot = 0;
      for (int c = 0; c < kDim; ++c) dot += q[hq * kDim + c] * k[(p * kKvHeads + h) * kDim + c];
      return 0.125 * dot;
    };
    const std::span<const int64_t> t = m->targets(1, h);
    double on = 0;
    for (int64_t p : t) on += logit(p) / t.size();
    EXPECT_NEAR(on, 10.0, 1e-3) << "query head " << hq;
    // The other keys: a logit near 0 but for the outlier channels (left out of the steer) and
    // those that share a target's topic; their median far below the targets'.
    std::vector<double> others;
    for (int64_t p = 0; p < kN; ++p) {
      if (std::find(t.begin(), t.end(), p) == t.end()) others.push_back(logit(p));
    }
    std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
    EXPECT_LT(others[others.size() / 2], 3.0) << "query head " << hq;
  }
}

TEST(MovingTargets, RefusesBadOptions) {
  Fixture f;
  MovingTargetsOptions o = f.options();
  o.n_head = 3;
  EXPECT_FALSE(MovingTargets::create(*f.kv, o).is_ok());
  o = f.options();
  o.last = kN + 1;
  EXPECT_FALSE(MovingTargets::create(*f.kv, o).is_ok());
  o = f.options();
  o.first = o.last - 2;
  EXPECT_FALSE(MovingTargets::create(*f.kv, o).is_ok());
  o = f.options();
  o.period = 0;
  EXPECT_FALSE(MovingTargets::create(*f.kv, o).is_ok());
  o = f.options();
  o.lean = 0;
  EXPECT_FALSE(MovingTargets::create(*f.kv, o).is_ok());
}

}  // namespace moving_targets_test
}  // namespace
}  // namespace leoam
