// The dispatched elementwise kernels against their scalar references on each path (scalar, and
// AVX2 where the CPU has it; forced with set_cpu_path_cap), on random inputs of ragged lengths so
// that vector bodies and scalar tails both run; plus the exp error bound against double exp.
#include "kernels/cpu/ops.h"

#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "../cpu_path_test.h"

namespace leoam::kernels {
namespace {

const int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 257, 1000, 4099};

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// ||a - b|| / ||b||.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// max_i |a_i - b_i| / max(|b_i|, floor).
double max_rel(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-30) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    worst = std::max(worst, d / std::max<double>(std::fabs(b[i]), floor));
  }
  return worst;
}

// Each test runs once per path: the dispatched functions then take that path.
class Ops : public testing_util::CpuPathTest {};

TEST_P(Ops, RmsnormMatchesReference) {
  for (int64_t n : kLengths) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x = random_floats(n, 1, 3.0f);
    const std::vector<float> w = random_floats(n, 2);
    std::vector<float> got(x.size()), want(x.size());
    rmsnorm(x.data(), w.data(), n, 1e-5f, got.data());
    ref::rmsnorm(x.data(), w.data(), n, 1e-5f, want.data());
    EXPECT_LE(max_rel(got, want), 4e-7);
    // In place.
    std::vector<float> in_place = x;
    rmsnorm(in_place.data(), w.data(), n, 1e-5f, in_place.data());
    EXPECT_EQ(in_place, got);
  }
}

TEST_P(Ops, RmsnormOfAKnownRow) {
  // mean(x^2) = (9 + 16) / 2 = 12.5; eps 0 -> x / sqrt(12.5).
  const float x[] = {3.0f, -4.0f};
  const float w[] = {1.0f, 2.0f};
  float out[2];
  rmsnorm(x, w, 2, 0.0f, out);
  EXPECT_NEAR(out[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(out[1], -8.0 / std::sqrt(12.5), 1e-6);
}

TEST_P(Ops, AddRmsnormAddsThenNormalizes) {
  for (int64_t n : kLengths) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x0 = random_floats(n, 3);
    const std::vector<float> delta = random_floats(n, 4);
    const std::vector<float> w = random_floats(n, 5);
    std::vector<float> x_got = x0, x_want = x0;
    std::vector<float> got(x0.size()), want(x0.size());
    add_rmsnorm(x_got.data(), delta.data(), w.data(), n, 1e-6f, got.data());
    ref::add_rmsnorm(x_want.data(), delta.data(), w.data(), n, 1e-6f, want.data());
    EXPECT_EQ(x_got, x_want);  // one float add per element: exact
    EXPECT_LE(max_rel(got, want), 4e-7);
    // The same as the unfused add, then rmsnorm.
    std::vector<float> x_sep = x0, sep(x0.size());
    add(x_sep.data(), delta.data(), n);
    rmsnorm(x_sep.data(), w.data(), n, 1e-6f, sep.data());
    EXPECT_EQ(x_sep, x_got);
    EXPECT_LE(max_rel(sep, got), 4e-7);
  }
}

TEST_P(Ops, RopeMatchesReferenceBothPairings) {
  struct Case {
    int n_heads, head_dim, n_rot;
  };
  for (const Case c : {Case{1, 2, 2}, Case{3, 8, 8}, Case{2, 10, 6}, Case{8, 64, 64}, Case{4, 64, 32},
                       Case{5, 128, 128}, Case{2, 80, 80}, Case{3, 96, 40}}) {
    for (bool neox : {false, true}) {
      SCOPED_TRACE("heads " + std::to_string(c.n_heads) + " head_dim " + std::to_string(c.head_dim) + " n_rot " +
                   std::to_string(c.n_rot) + (neox ? " neox" : " normal"));
      const RopeShape shape{.n_heads = c.n_heads, .head_dim = c.head_dim, .n_rot = c.n_rot, .neox = neox};
      const std::vector<float> x = random_floats(int64_t{c.n_heads} * c.head_dim, 6);
      const std::vector<float> theta = random_floats(c.n_rot / 2, 7, 3.0f);
      std::vector<float> cos(theta.size()), sin(theta.size());
      for (size_t i = 0; i < theta.size(); ++i) {
        cos[i] = std::cos(theta[i]);
        sin[i] = std::sin(theta[i]);
      }
      std::vector<float> got = x, want = x;
      rope(got.data(), shape, cos.data(), sin.data());
      ref::rope(want.data(), shape, cos.data(), sin.data());
      EXPECT_LE(rel_l2(got, want), 1e-7);
      for (int h = 0; h < c.n_heads; ++h) {  // the unrotated tail is untouched
        for (int d = c.n_rot; d < c.head_dim; ++d) {
          const size_t i = static_cast<size_t>(h) * c.head_dim + d;
          EXPECT_EQ(got[i], x[i]);
        }
      }
    }
  }
}

TEST_P(Ops, RopeRotatesTheRightPairs) {
  // One head of 8, all rotated by 90 degrees: (x0, x1) -> (-x1, x0).
  const float cos[] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float sin[] = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> normal = {1, 2, 3, 4, 5, 6, 7, 8};
  rope(normal.data(), {.n_heads = 1, .head_dim = 8, .n_rot = 8, .neox = false}, cos, sin);
  EXPECT_EQ(normal, (std::vector<float>{-2, 1, -4, 3, -6, 5, -8, 7}));
  std::vector<float> neox = {1, 2, 3, 4, 5, 6, 7, 8};
  rope(neox.data(), {.n_heads = 1, .head_dim = 8, .n_rot = 8, .neox = true}, cos, sin);
  EXPECT_EQ(neox, (std::vector<float>{-5, -6, -7, -8, 1, 2, 3, 4}));
}

TEST_P(Ops, ExpErrorBound) {
  // Every 997th float bit pattern of [-87.3, 88.3] (dense near 0, like the inputs softmax and
  // SwiGLU see), against double exp: the max relative error.
  double worst = 0.0;
  float worst_x = 0.0f;
  std::vector<float> xs;
  const auto bits_of = [](float f) { return std::bit_cast<uint32_t>(f); };
  for (uint32_t b = 0; b <= bits_of(88.3f); b += 997) xs.push_back(std::bit_cast<float>(b));
  for (uint32_t b = bits_of(-0.0f); b <= bits_of(-87.3f); b += 997) xs.push_back(std::bit_cast<float>(b));
  std::vector<float> ys(xs.size());
  exp(xs.data(), static_cast<int64_t>(xs.size()), ys.data());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(static_cast<double>(xs[i]));
    const double err = std::fabs(ys[i] - want) / want;
    if (err > worst) {
      worst = err;
      worst_x = xs[i];
    }
  }
  std::printf("[ measured ] exp: %zu points, max relative error %.3g at x = %.9g\n", xs.size(), worst, worst_x);
  EXPECT_LE(worst, 1.5e-7);
}

TEST_P(Ops, ExpEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -inf, -100.0f, -87.4f, 100.0f, inf, 1.0f, -1.0f, 88.0f};
  std::vector<float> y(x.size());
  exp(x.data(), static_cast<int64_t>(x.size()), y.data());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_LT(y[2], std::numeric_limits<float>::min());  // the reference keeps denormals; AVX2 gives 0
  EXPECT_LT(y[3], std::numeric_limits<float>::min());
  EXPECT_EQ(y[4], inf);
  EXPECT_EQ(y[5], inf);
  EXPECT_NEAR(y[6], std::exp(1.0), 4e-7 * std::exp(1.0));
  EXPECT_NEAR(y[7], std::exp(-1.0), 4e-7 * std::exp(-1.0));
  EXPECT_NEAR(y[8], std::exp(88.0), 4e-7 * std::exp(88.0));
}

TEST_P(Ops, SwigluMatchesReference) {
  for (int64_t n : kLengths) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> gate = random_floats(n, 8, 4.0f);
    const std::vector<float> up = random_floats(n, 9);
    std::vector<float> got(gate.size()), want(gate.size());
    swiglu(gate.data(), up.data(), n, got.data());
    ref::swiglu(gate.data(), up.data(), n, want.data());
    EXPECT_LE(max_rel(got, want), 1e-6);
    std::vector<float> in_place = gate;  // out aliases gate, as the forward pass uses it
    swiglu(in_place.data(), up.data(), n, in_place.data());
    EXPECT_EQ(in_place, got);
  }
  // Saturated gates: silu(-200) = 0 (to float), silu(200) = 200.
  const float gate[] = {-200, -100, -50, 0, 50, 100, 200, -90};
  const float up[] = {1, 1, 1, 1, 1, 1, 1, 1};
  float out[8];
  swiglu(gate, up, 8, out);
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  EXPECT_NEAR(out[1], 0.0f, 1e-30f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 50.0f);
  EXPECT_EQ(out[5], 100.0f);
  EXPECT_EQ(out[6], 200.0f);
  EXPECT_NEAR(out[7], 0.0f, 1e-30f);
}

TEST_P(Ops, SoftmaxMatchesReference) {
  for (int64_t n : kLengths) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> got = random_floats(n, 10, 5.0f);
    got[static_cast<size_t>(n / 2)] = 30.0f;  // a dominant score
    std::vector<float> want = got;
    softmax(got.data(), n);
    ref::softmax(want.data(), n);
    EXPECT_LE(max_rel(got, want, 1e-20), 1e-6);
    double sum = 0.0;
    for (float p : got) sum += p;
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST_P(Ops, SoftmaxMaskedEntriesGetZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : kLengths) {
    std::vector<float> x = random_floats(n, 11);
    for (int64_t i = 1; i < n; i += 3) x[static_cast<size_t>(i)] = -inf;
    softmax(x.data(), n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      if (i % 3 == 1) {
        EXPECT_EQ(x[static_cast<size_t>(i)], 0.0f);
      }
      sum += x[static_cast<size_t>(i)];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST_P(Ops, AddMatchesReferenceExactly) {
  for (int64_t n : kLengths) {
    std::vector<float> got = random_floats(n, 12);
    std::vector<float> want = got;
    const std::vector<float> y = random_floats(n, 13);
    add(got.data(), y.data(), n);
    ref::add(want.data(), y.data(), n);
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Ops, testing_util::kCpuPaths, testing_util::cpu_path_name);

// LayerNorm against its statistics in double, in place too, and add_layernorm as the add then
// the norm.
TEST(Ops, LayernormMatchesDouble) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.5f, 2.0f);
  const int n = 200;
  std::vector<float> x(n), w(n), b(n), delta(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = dist(rng);
    w[i] = dist(rng);
    b[i] = dist(rng);
    delta[i] = dist(rng);
  }
  const auto want = [&](const std::vector<float>& v, int i) {
    double mean = 0.0, var = 0.0;
    for (float e : v) mean += e;
    mean /= n;
    for (float e : v) var += (e - mean) * (e - mean);
    var /= n;
    return (v[i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
  };
  layernorm(x.data(), w.data(), b.data(), n, 1e-5f, out.data());
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], want(x, i), 1e-5 * std::max(1.0, std::fabs(want(x, i)))) << i;
  std::vector<float> in_place = x;
  layernorm(in_place.data(), w.data(), b.data(), n, 1e-5f, in_place.data());
  EXPECT_EQ(in_place, out);
  std::vector<float> sum = x;
  for (int i = 0; i < n; ++i) sum[i] += delta[i];
  std::vector<float> added = x;
  add_layernorm(added.data(), delta.data(), w.data(), b.data(), n, 1e-5f, out.data());
  EXPECT_EQ(added, sum);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], want(sum, i), 1e-5 * std::max(1.0, std::fabs(want(sum, i)))) << i;
}

// GeGLU against the tanh-form GELU in double, and its known values: gelu(0) = 0, gelu(1) =
// 0.841192, gelu(-1) = -0.158808; in place too.
TEST(Ops, GegluMatchesTheTanhFormInDouble) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> gate(257), up(257), out(257);
  for (size_t i = 0; i < gate.size(); ++i) {
    gate[i] = dist(rng);
    up[i] = dist(rng);
  }
  geglu(gate.data(), up.data(), 257, out.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double want = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g))) * up[i];
    EXPECT_NEAR(out[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
  }
  float g3[3] = {0.0f, 1.0f, -1.0f};
  const float ones[3] = {1.0f, 1.0f, 1.0f};
  geglu(g3, ones, 3, g3);
  EXPECT_EQ(g3[0], 0.0f);
  EXPECT_NEAR(g3[1], 0.841192f, 1e-6);
  EXPECT_NEAR(g3[2], -0.158808f, 1e-6);
}

}  // namespace
}  // namespace leoam::kernels
