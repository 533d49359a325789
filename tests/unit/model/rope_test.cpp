#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace leoam {
namespace {

RopeParams params(int n_rot, RopePairing pairing) {
  RopeParams p;
  p.n_rot = n_rot;
  p.pairing = pairing;
  p.freq_base = 10000.0f;
  return p;
}

// Rotates one head directly from the formula: angle theta_i for pair i, magnitude mscale.
std::vector<float> rotate_direct(const std::vector<float>& x, int n_rot, bool neox, const std::vector<double>& theta,
                                 double mscale) {
  std::vector<float> y = x;
  for (int i = 0; i < n_rot / 2; ++i) {
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + n_rot / 2 : 2 * i + 1;
    const double c = std::cos(theta[i]) * mscale, s = std::sin(theta[i]) * mscale;
    y[a] = static_cast<float>(x[a] * c - x[b] * s);
    y[b] = static_cast<float>(x[a] * s + x[b] * c);
  }
  return y;
}

std::vector<float> head(int head_dim, int seed) {
  std::vector<float> x(head_dim);
  for (int d = 0; d < head_dim; ++d) x[d] = std::sin(0.7 * d + seed) + 0.1f * d;
  return x;
}

std::vector<float> apply_at(const Rope& rope, std::vector<float> x, int64_t pos) {
  const int n_pairs = rope.n_rot() / 2;
  std::vector<float> cos(n_pairs), sin(n_pairs);
  rope.fill_tables(pos, 1, cos.data(), sin.data());
  rope.apply(x.data(), 1, 1, cos.data(), sin.data());
  return x;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST(Rope, PlainBothPairingsAndPartialRotation) {
  for (RopePairing pairing : {RopePairing::kNormal, RopePairing::kNeox}) {
    for (int n_rot : {16, 8}) {  // head_dim 16: full and half rotation
      auto rope = Rope::create(params(n_rot, pairing), 16, nullptr);
      ASSERT_TRUE(rope.is_ok());
      for (int64_t pos : {0, 1, 7, 1000}) {
        std::vector<double> theta(n_rot / 2);
        for (int i = 0; i < n_rot / 2; ++i) theta[i] = pos * std::pow(10000.0, -2.0 * i / n_rot);
        const auto x = head(16, static_cast<int>(pos));
        expect_near(apply_at(*rope, x, pos), rotate_direct(x, n_rot, pairing == RopePairing::kNeox, theta, 1.0), 2e-5f);
      }
    }
  }
}

TEST(Rope, AdjacentPairsVersusHalves) {
  // Position 1, n_rot 4: pair 0 turns by 1 radian, pair 1 by 0.01.
  RopeParams p = params(4, RopePairing::kNormal);
  p.freq_base = 10000.0f;
  auto normal = Rope::create(p, 4, nullptr);
  p.pairing = RopePairing::kNeox;
  auto neox = Rope::create(p, 4, nullptr);
  ASSERT_TRUE(normal.is_ok() && neox.is_ok());
  const std::vector<float> e0 = {1, 0, 0, 0};
  // normal: x0 pairs with x1; NeoX: x0 pairs with x2.
  expect_near(apply_at(*normal, e0, 1), {std::cos(1.0f), std::sin(1.0f), 0, 0}, 1e-6f);
  expect_near(apply_at(*neox, e0, 1), {std::cos(1.0f), 0, std::sin(1.0f), 0}, 1e-6f);
}

TEST(Rope, LinearScalingDividesThePosition) {
  RopeParams p = params(16, RopePairing::kNormal);
  p.scaling = RopeScalingType::kLinear;
  p.freq_scale = 0.25f;
  auto scaled = Rope::create(p, 16, nullptr);
  auto plain = Rope::create(params(16, RopePairing::kNormal), 16, nullptr);
  ASSERT_TRUE(scaled.is_ok() && plain.is_ok());
  const auto x = head(16, 3);
  expect_near(apply_at(*scaled, x, 40), apply_at(*plain, x, 10), 2e-5f);
}

TEST(Rope, FreqFactorsDivideTheta) {
  std::vector<float> factors = {1, 2, 4, 8, 1, 1, 3, 5};
  auto rope = Rope::create(params(16, RopePairing::kNormal), 16, factors.data());
  ASSERT_TRUE(rope.is_ok());
  std::vector<double> theta(8);
  for (int i = 0; i < 8; ++i) theta[i] = 37 * std::pow(10000.0, -2.0 * i / 16) / factors[i];
  const auto x = head(16, 1);
  expect_near(apply_at(*rope, x, 37), rotate_direct(x, 16, false, theta, 1.0), 2e-5f);

  std::vector<float> bad = {1, 0, 1, 1, 1, 1, 1, 1};
  EXPECT_FALSE(Rope::create(params(16, RopePairing::kNormal), 16, bad.data()).is_ok());
}

TEST(Rope, YarnRampsFromExtrapolationToInterpolation) {
  // n_rot 32, base 10000, n_ctx_orig 64, beta 32/1: ggml's correction dims are
  // low = max(0, floor(32 ln(64 / (2 pi 32)) / (2 ln 1e4))) = max(0, floor(-1.99)) = 0 and
  // high = min(31, ceil(32 ln(64 / (2 pi)) / (2 ln 1e4))) = ceil(4.03) = 5.
  RopeParams p = params(32, RopePairing::kNeox);
  p.scaling = RopeScalingType::kYarn;
  p.freq_scale = 0.25f;
  p.n_ctx_orig = 64;
  p.yarn_ext_factor = 1.0f;
  p.yarn_attn_factor = 0.8f;
  auto rope = Rope::create(p, 32, nullptr);
  ASSERT_TRUE(rope.is_ok());
  const int64_t pos = 50;
  const double low = 0, high = 5;
  std::vector<double> theta(16);
  for (int i = 0; i < 16; ++i) {
    const double extrap = pos * std::pow(10000.0, -2.0 * i / 32);
    const double interp = 0.25 * extrap;
    const double mix = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    theta[i] = interp * (1 - mix) + extrap * mix;
  }
  const double mscale = 0.8 * (1.0 + 0.1 * std::log(4.0));
  const auto x = head(32, 5);
  expect_near(apply_at(*rope, x, pos), rotate_direct(x, 32, true, theta, mscale), 5e-5f);

  // Pair 0 is pure extrapolation (angle = pos), pairs >= 5 pure interpolation.
  std::vector<float> cos(16), sin(16);
  rope->fill_tables(pos, 1, cos.data(), sin.data());
  EXPECT_NEAR(cos[0], std::cos(50.0) * mscale, 1e-5);
  EXPECT_NEAR(sin[9], std::sin(0.25 * 50 * std::pow(10000.0, -18.0 / 32)) * mscale, 1e-5);

  // ext_factor 0: plain interpolation, no magnitude change beyond attn_factor.
  p.yarn_ext_factor = 0.0f;
  auto interp_only = Rope::create(p, 32, nullptr);
  ASSERT_TRUE(interp_only.is_ok());
  interp_only->fill_tables(pos, 1, cos.data(), sin.data());
  EXPECT_NEAR(cos[0], std::cos(0.25 * 50) * 0.8, 1e-5);
}

TEST(Rope, TablesForSeveralPositionsAndHeads) {
  auto rope = Rope::create(params(8, RopePairing::kNormal), 8, nullptr);
  ASSERT_TRUE(rope.is_ok());
  // [3 tokens][2 heads][8] at positions 5, 6, 7 equals rotating each head alone.
  std::vector<float> x;
  for (int i = 0; i < 6; ++i) {
    auto h = head(8, i);
    x.insert(x.end(), h.begin(), h.end());
  }
  std::vector<float> cos(3 * 4), sin(3 * 4);
  rope->fill_tables(5, 3, cos.data(), sin.data());
  std::vector<float> y = x;
  rope->apply(y.data(), 3, 2, cos.data(), sin.data());
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) {
      const std::vector<float> one(x.begin() + (t * 2 + h) * 8, x.begin() + (t * 2 + h + 1) * 8);
      const std::vector<float> got(y.begin() + (t * 2 + h) * 8, y.begin() + (t * 2 + h + 1) * 8);
      expect_near(got, apply_at(*rope, one, 5 + t), 0.0f);
    }
  }
}

TEST(Rope, RejectsBadParameters) {
  EXPECT_FALSE(Rope::create(params(7, RopePairing::kNormal), 8, nullptr).is_ok());
  EXPECT_FALSE(Rope::create(params(16, RopePairing::kNormal), 8, nullptr).is_ok());
  EXPECT_FALSE(Rope::create(params(-2, RopePairing::kNormal), 8, nullptr).is_ok());
}

// n_rot 0 (opt's learned positions) rotates nothing.
TEST(Rope, NoRotatedDimensionsLeaveTheHeadsAsTheyAre) {
  Result<Rope> rope = Rope::create(params(0, RopePairing::kNormal), 8, nullptr);
  ASSERT_TRUE(rope.is_ok()) << rope.status().message();
  std::vector<float> x(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 3.5f;
  const std::vector<float> before = x;
  float no_table = 0.0f;
  rope->apply(x.data(), 1, 2, &no_table, &no_table);
  EXPECT_EQ(x, before);
}

}  // namespace
}  // namespace leoam
