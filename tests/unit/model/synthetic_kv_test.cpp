#include "model/synthetic_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace leoam {
namespace {

constexpr int kHeads = 2;
constexpr int kDim = 64;

Rope make_rope() {
  RopeParams p;
  p.n_rot = kDim;
  p.freq_base = 10000.0f;
  Result<Rope> r = Rope::create(p, kDim, nullptr);
  EXPECT_TRUE(r.is_ok());
  return *r;
}

SyntheticKvOptions options(int64_t n_ctx, uint64_t seed = 7) {
  SyntheticKvOptions o;
  o.n_layer = 2;
  o.n_kv_heads = kHeads;
  o.head_dim = kDim;
  o.n_ctx = n_ctx;
  o.seed = seed;
  return o;
}

struct Kv {
  std::vector<float> k, v;  // [n][kHeads][kDim]
};

Kv generate(const SyntheticKv& gen, int layer, int64_t pos0, int64_t n) {
  Kv kv{std::vector<float>(n * kHeads * kDim), std::vector<float>(n * kHeads * kDim)};
  gen.generate(layer, pos0, n, kv.k.data(), kv.v.data());
  return kv;
}

float pair_norm(const float* key, int c, int partner) { return std::sqrt(key[c] * key[c] + key[partner] * key[partner]); }

TEST(SyntheticKv, SameSeedSameKvWhateverTheBlocksOtherSeedOther) {
  const Rope rope = make_rope();
  Result<SyntheticKv> a = SyntheticKv::create(options(1000), rope);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  const Kv whole = generate(*a, 1, 0, 300);
  Kv split = generate(*a, 1, 0, 100);
  const Kv rest = generate(*a, 1, 100, 200);
  split.k.insert(split.k.end(), rest.k.begin(), rest.k.end());
  split.v.insert(split.v.end(), rest.v.begin(), rest.v.end());
  EXPECT_EQ(whole.k, split.k);
  EXPECT_EQ(whole.v, split.v);
  EXPECT_NE(generate(*a, 0, 0, 300).k, whole.k);  // layers differ

  Result<SyntheticKv> again = SyntheticKv::create(options(1000), rope);
  EXPECT_EQ(generate(*again, 1, 0, 300).k, whole.k);
  Result<SyntheticKv> other = SyntheticKv::create(options(1000, 8), rope);
  EXPECT_NE(generate(*other, 1, 0, 300).k, whole.k);
}

TEST(SyntheticKv, SinkAndHeavyHittersStandOutOutlierChannelsAreLarge) {
  const Rope rope = make_rope();
  SyntheticKvOptions o = options(4096);
  o.heavy_hitter_fraction = 0.01;
  Result<SyntheticKv> gen = SyntheticKv::create(o, rope);
  ASSERT_TRUE(gen.is_ok());
  ASSERT_EQ(gen->outlier_channels().size(), 2u);
  const Kv kv = generate(*gen, 0, 0, 4096);
  for (int h = 0; h < kHeads; ++h) {
    std::vector<float> norms, hitter_norms;
    std::vector<double> pair_mass(kDim, 0.0);
    for (int64_t p = 0; p < 4096; ++p) {
      const float* key = kv.k.data() + (p * kHeads + h) * kDim;
      // The outlier channels' offset is removed first: the sink and hitters stand out on their own.
      float sq = 0;
      for (int c = 0; c < kDim; ++c) {
        const bool rotated_outlier = std::count(gen->outlier_channels().begin(), gen->outlier_channels().end(), c) +
                                         std::count(gen->outlier_channels().begin(), gen->outlier_channels().end(),
                                                    gen->rope_partner(c)) > 0;
        if (!rotated_outlier) sq += key[c] * key[c];
        if (c <= gen->rope_partner(c)) pair_mass[c] += pair_norm(key, c, gen->rope_partner(c));
      }
      (p > 0 && gen->is_heavy_hitter(0, h, p) ? hitter_norms : norms).push_back(std::sqrt(sq));
    }
    const float sink = norms.front();
    ASSERT_GT(hitter_norms.size(), 10u);  // ~1% of 4096
    std::sort(norms.begin(), norms.end());
    std::sort(hitter_norms.begin(), hitter_norms.end());
    const float median = norms[norms.size() / 2];
    EXPECT_GT(sink, 2.5f * median) << "head " << h;
    EXPECT_GT(hitter_norms[hitter_norms.size() / 2], 1.5f * median) << "head " << h;

    double others = 0;
    int n_others = 0;
    for (int c = 0; c < kDim; ++c) {
      if (c > gen->rope_partner(c)) continue;
      const bool outlier = std::count(gen->outlier_channels().begin(), gen->outlier_channels().end(), c) > 0;
      if (!outlier) {
        others += pair_mass[c];
        ++n_others;
      }
    }
    for (int c : gen->outlier_channels()) {
      EXPECT_GT(pair_mass[c], 4.0 * others / n_others) << "head " << h << " channel " << c;
    }
  }
}

// With hitters_per_head each layer and KV head has its own heavy hitters (an importance that is
// not one set of positions everywhere), and its keys stand out there; without, one set for all.
TEST(SyntheticKv, HittersPerHeadDifferByLayerAndHead) {
  const Rope rope = make_rope();
  for (const bool per_head : {false, true}) {
    SyntheticKvOptions o = options(4096);
    o.heavy_hitter_fraction = 0.01;
    o.hitters_per_head = per_head;
    Result<SyntheticKv> gen = SyntheticKv::create(o, rope);
    ASSERT_TRUE(gen.is_ok());
    int n00 = 0, n01 = 0, n10 = 0, both01 = 0, both10 = 0;
    for (int64_t p = 1; p < 4096; ++p) {
      const bool a = gen->is_heavy_hitter(0, 0, p), b = gen->is_heavy_hitter(0, 1, p), c = gen->is_heavy_hitter(1, 0, p);
      n00 += a;
      n01 += b;
      n10 += c;
      both01 += a && b;
      both10 += a && c;
    }
    ASSERT_GT(n00, 20);  // ~41 of 4095
    if (!per_head) {
      EXPECT_EQ(both01, n00);
      EXPECT_EQ(both10, n00);
      continue;
    }
    EXPECT_GT(n01, 20);
    EXPECT_GT(n10, 20);
    EXPECT_LT(both01, 8);  // ~0.4 expected by chance
    EXPECT_LT(both10, 8);
    // Layer 1, head 1's hitters stand out in its keys (outlier channels aside).
    const Kv kv = generate(*gen, 1, 0, 4096);
    std::vector<float> norms, hitter_norms;
    for (int64_t p = 1; p < 4096; ++p) {
      const float* key = kv.k.data() + (p * kHeads + 1) * kDim;
      float sq = 0;
      for (int c = 0; c < kDim; ++c) {
        const auto& out = gen->outlier_channels();
        if (std::count(out.begin(), out.end(), c) + std::count(out.begin(), out.end(), gen->rope_partner(c)) == 0) {
          sq += key[c] * key[c];
        }
      }
      (gen->is_heavy_hitter(1, 1, p) ? hitter_norms : norms).push_back(std::sqrt(sq));
    }
    std::sort(norms.begin(), norms.end());
    std::sort(hitter_norms.begin(), hitter_norms.end());
    EXPECT_GT(hitter_norms[hitter_norms.size() / 2], 1.5f * norms[norms.size() / 2]);
  }
}

// The share of softmax mass in the top 10% of 64-token chunks, averaged over random queries at
// the last position (head 0 of layer 0).
// The softmax mass (scale 1/sqrt(kDim)) of query q (pre-RoPE; rotated to position n - 1) over the
// keys [0, n) of (layer 0, head 0), summed per chunk of 64 positions.
std::vector<double> chunk_attention(const SyntheticKv& gen, int64_t n, const float* q) {
  const Rope rope = make_rope();
  std::vector<float> qr(q, q + kDim), cos(kDim / 2), sin(kDim / 2);
  rope.fill_tables(n - 1, 1, cos.data(), sin.data());
  rope.apply(qr.data(), 1, 1, cos.data(), sin.data());
  const Kv kv = generate(gen, 0, 0, n);
  std::vector<double> logit(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    const float* key = kv.k.data() + p * kHeads * kDim;
    logit[p] = std::inner_product(qr.begin(), qr.end(), key, 0.0) / std::sqrt(static_cast<double>(kDim));
  }
  const double top = *std::max_element(logit.begin(), logit.end());
  std::vector<double> mass((n + 63) / 64, 0.0);
  double total = 0;
  for (int64_t p = 0; p < n; ++p) {
    const double e = std::exp(logit[p] - top);
    mass[p / 64] += e;
    total += e;
  }
  for (double& m : mass) m /= total;
  return mass;
}

double top_chunk_share(const SyntheticKv& gen, int64_t n) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  constexpr int kQueries = 32;
  double share = 0;
  for (int qi = 0; qi < kQueries; ++qi) {
    std::vector<float> q(kDim);
    for (float& x : q) x = normal(rng);
    std::vector<double> mass = chunk_attention(gen, n, q.data());
    EXPECT_NEAR(std::accumulate(mass.begin(), mass.end(), 0.0), 1.0, 1e-9);
    std::sort(mass.begin(), mass.end(), std::greater<>());
    share += std::accumulate(mass.begin(), mass.begin() + static_cast<int64_t>(mass.size()) / 10, 0.0);
  }
  return share / kQueries;
}

TEST(SyntheticKv, TopChunksHoldMostOfTheAttentionUnlikeIidKeys) {
  const Rope rope = make_rope();
  constexpr int64_t kN = 8192;
  Result<SyntheticKv> skewed = SyntheticKv::create(options(kN), rope);
  SyntheticKvOptions iid_options = options(kN);
  iid_options.centre_scale = 0;
  iid_options.heavy_hitter_fraction = 0;
  iid_options.sink_gain = 0;
  iid_options.n_outlier_channels = 0;
  Result<SyntheticKv> iid = SyntheticKv::create(iid_options, rope);
  ASSERT_TRUE(skewed.is_ok() && iid.is_ok());
  const double skewed_share = top_chunk_share(*skewed, kN);
  const double iid_share = top_chunk_share(*iid, kN);
  std::printf("top 10%% of chunks: %.3f of the mass (i.i.d. keys: %.3f)\n", skewed_share, iid_share);
  EXPECT_GT(skewed_share, 0.6);  // 0.70 measured
  EXPECT_LT(iid_share, 0.2);  // 0.13 measured
  EXPECT_GT(skewed_share, 3.0 * iid_share);
}

TEST(SyntheticKv, RejectsBadOptions) {
  const Rope rope = make_rope();
  SyntheticKvOptions o = options(100);
  o.n_outlier_channels = kDim / 8 + 1;
  EXPECT_FALSE(SyntheticKv::create(o, rope).is_ok());
  o = options(0);
  EXPECT_FALSE(SyntheticKv::create(o, rope).is_ok());
  o = options(100);
  o.head_dim = 128;
  const Result<SyntheticKv> wrong_dim = SyntheticKv::create(o, rope);
  ASSERT_FALSE(wrong_dim.is_ok());
  EXPECT_EQ(wrong_dim.status().message(), "synthetic KV: RoPE head dim 64 is not the KV's 128");
}

}  // namespace
}  // namespace leoam
