// The fidelity probe (fidelity_probe.h) against attention computed here in plain loops: mass
// covered, output error and the top-10% chunk mass, for full attention and for fixed picks; what
// it passes through to the selector it wraps; its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "sparse/fidelity_probe.h"

namespace leoam::sparse {
namespace {
namespace probe_test {  // apart from the unity build's other tests

constexpr int kLayers = 3, kHeads = 4, kKvHeads = 2, kDim = 8;

// Picks fixed ranges (and the query's own position); counts the keys it was shown.
class FixedPicks final : public AttentionSelector {
 public:
  explicit FixedPicks(std::vector<TokenRange> picks, bool wants_keys) : picks_(std::move(picks)), wants_keys_(wants_keys) {}
  Result<std::vector<TokenRange>> select(int, int64_t pos, const float*, ThreadPool&) override {
    ++n_selects;
    std::vector<TokenRange> r = picks_;
    r.push_back({pos, pos + 1});
    return r;
  }
  SelectorNeeds needs() const override { return {.keys = wants_keys_, .attention_mass = true}; }
  Status observe_keys(int, int64_t, int64_t n, const float*) override {
    keys_seen += n;
    return Status::ok();
  }
  void truncate(int64_t n) override { truncated_to = n; }
  int n_selects = 0;
  int64_t keys_seen = 0;
  int64_t truncated_to = -1;

 private:
  std::vector<TokenRange> picks_;
  bool wants_keys_;
};

FidelityProbeOptions options() {
  return {.n_head = kHeads, .n_head_kv = kKvHeads, .head_dim = kDim, .scale = 0.5f, .layers = {1}, .kv_heads = {1}};
}

// Keys and values of n positions, every head; position `hot` (if any) aligned with the query.
struct Kv {
  std::vector<float> k, v, q;
};
Kv make_kv(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Kv kv;
  kv.k.resize(static_cast<size_t>(n) * kKvHeads * kDim);
  kv.v.resize(kv.k.size());
  kv.q.resize(static_cast<size_t>(kHeads) * kDim);
  for (float& x : kv.k) x = normal(rng);
  for (float& x : kv.v) x = normal(rng);
  for (float& x : kv.q) x = normal(rng);
  return kv;
}

float f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// Mass covered and output error of query head h over KV head 1, picks `picked`, in doubles.
void reference(const Kv& kv, int64_t n, int h, const std::vector<bool>& picked, double& mass, double& error) {
  std::vector<double> p(static_cast<size_t>(n));
  double top = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int c = 0; c < kDim; ++c) dot += kv.q[h * kDim + c] * f16(kv.k[(t * kKvHeads + 1) * kDim + c]);
    p[t] = 0.5 * dot;
    top = std::max(top, p[t]);
  }
  double total = 0, covered = 0;
  for (int64_t t = 0; t < n; ++t) {
    p[t] = std::exp(p[t] - top);
    total += p[t];
    if (picked[t]) covered += p[t];
  }
  double err = 0, norm = 0;
  for (int c = 0; c < kDim; ++c) {
    double full = 0, sel = 0;
    for (int64_t t = 0; t < n; ++t) {
      const double x = f16(kv.v[(t * kKvHeads + 1) * kDim + c]);
      full += p[t] / total * x;
      if (picked[t]) sel += p[t] / covered * x;
    }
    err += (sel - full) * (sel - full);
    norm += full * full;
  }
  mass = covered / total;
  error = std::sqrt(err / norm);
}

TEST(FidelityProbe, FullAttentionCoversEverything) {
  auto probe = FidelityProbe::create(nullptr, options(), kLayers);
  ASSERT_TRUE(probe.is_ok()) << probe.status().message();
  const int64_t n = 100;
  const Kv kv = make_kv(n, 1);
  ThreadPool pool(1);
  for (int l = 0; l < kLayers; ++l) {
    ASSERT_TRUE((*probe)->observe_keys(l, 0, n, kv.k.data()).is_ok());
    ASSERT_TRUE((*probe)->observe_values(l, 0, n, kv.v.data()).is_ok());
    auto r = (*probe)->select(l, n - 1, kv.q.data(), pool);
    ASSERT_TRUE(r.is_ok());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].begin, 0);
    EXPECT_EQ((*r)[0].end, n);
  }
  auto f = (*probe)->measure();
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->n_samples, 2);  // layer 1 only; the 2 query heads of KV head 1
  EXPECT_NEAR(f->mass_covered, 1.0, 1e-12);
  EXPECT_NEAR(f->output_error, 0.0, 1e-6);
  EXPECT_GT(f->top10_chunk_mass, 0.0);
  EXPECT_LE(f->top10_chunk_mass, 1.0 + 1e-12);
  // Measured once: the queries are forgotten.
  auto again = (*probe)->measure();
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->n_samples, 0);
}

TEST(FidelityProbe, PicksMatchPlainLoops) {
  FixedPicks inner({{0, 10}, {50, 70}}, /*wants_keys=*/true);
  auto probe = FidelityProbe::create(&inner, options(), kLayers);
  ASSERT_TRUE(probe.is_ok());
  const int64_t n = 200;
  const Kv kv = make_kv(n, 2);
  ThreadPool pool(1);
  // Appended in two batches, as a prompt and a decoded token are.
  ASSERT_TRUE((*probe)->observe_keys(1, 0, n - 1, kv.k.data()).is_ok());
  ASSERT_TRUE((*probe)->observe_values(1, 0, n - 1, kv.v.data()).is_ok());
  const size_t row = static_cast<size_t>(kKvHeads) * kDim;
  ASSERT_TRUE((*probe)->observe_keys(1, n - 1, 1, kv.k.data() + (n - 1) * row).is_ok());
  ASSERT_TRUE((*probe)->observe_values(1, n - 1, 1, kv.v.data() + (n - 1) * row).is_ok());
  EXPECT_EQ(inner.keys_seen, n);
  auto r = (*probe)->select(1, n - 1, kv.q.data(), pool);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(inner.n_selects, 1);
  auto f = (*probe)->measure();
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->n_samples, 2);
  std::vector<bool> picked(static_cast<size_t>(n), false);
  for (int64_t t = 0; t < 10; ++t) picked[t] = true;
  for (int64_t t = 50; t < 70; ++t) picked[t] = true;
  picked[n - 1] = true;
  double mass = 0, error = 0, m = 0, e = 0;
  for (int h : {2, 3}) {  // KV head 1's query heads
    reference(kv, n, h, picked, m, e);
    mass += m / 2;
    error += e / 2;
  }
  EXPECT_NEAR(f->mass_covered, mass, 1e-5);
  EXPECT_NEAR(f->output_error, error, 1e-4);
  EXPECT_LT(f->mass_covered, 0.9);  // 31 of 200 positions under random keys
  EXPECT_GT(f->output_error, 0.05);
}

TEST(FidelityProbe, TopChunksHoldAHotChunksMass) {
  auto probe = FidelityProbe::create(nullptr, options(), kLayers);
  ASSERT_TRUE(probe.is_ok());
  const int64_t n = 640;  // 10 chunks of 64: the top tenth is one chunk
  Kv kv = make_kv(n, 3);
  for (float& x : kv.k) x *= 0.01f;
  for (int64_t t = 128; t < 192; ++t) {  // chunk 2 aligned with query heads 2 and 3
    for (int c = 0; c < kDim; ++c) kv.k[(t * kKvHeads + 1) * kDim + c] = 4.0f * (kv.q[2 * kDim + c] + kv.q[3 * kDim + c]);
  }
  ThreadPool pool(1);
  ASSERT_TRUE((*probe)->observe_keys(1, 0, n, kv.k.data()).is_ok());
  ASSERT_TRUE((*probe)->observe_values(1, 0, n, kv.v.data()).is_ok());
  ASSERT_TRUE((*probe)->select(1, n - 1, kv.q.data(), pool).is_ok());
  auto f = (*probe)->measure();
  ASSERT_TRUE(f.is_ok());
  EXPECT_GT(f->top10_chunk_mass, 0.99);
}

TEST(FidelityProbe, PassesThroughAndAsksForKeysAndValues) {
  FixedPicks inner({}, /*wants_keys=*/false);
  auto probe = FidelityProbe::create(&inner, options(), kLayers);
  ASSERT_TRUE(probe.is_ok());
  const SelectorNeeds needs = (*probe)->needs();
  EXPECT_TRUE(needs.keys);
  EXPECT_TRUE(needs.values);
  EXPECT_TRUE(needs.attention_mass);  // the inner selector's
  const Kv kv = make_kv(4, 4);
  ASSERT_TRUE((*probe)->observe_keys(0, 0, 4, kv.k.data()).is_ok());
  EXPECT_EQ(inner.keys_seen, 0);  // it did not ask for keys
  (*probe)->truncate(2);
  EXPECT_EQ(inner.truncated_to, 2);
}

TEST(FidelityProbe, RefusesQueriesPastItsKvAndBadSamples) {
  auto probe = FidelityProbe::create(nullptr, options(), kLayers);
  ASSERT_TRUE(probe.is_ok());
  const Kv kv = make_kv(10, 5);
  ThreadPool pool(1);
  ASSERT_TRUE((*probe)->observe_keys(1, 0, 5, kv.k.data()).is_ok());
  ASSERT_TRUE((*probe)->observe_values(1, 0, 5, kv.v.data()).is_ok());
  ASSERT_TRUE((*probe)->select(1, 9, kv.q.data(), pool).is_ok());
  EXPECT_FALSE((*probe)->measure().is_ok());
  // A gap in the positions it is given.
  EXPECT_FALSE((*probe)->observe_keys(1, 7, 1, kv.k.data()).is_ok());

  FidelityProbeOptions o = options();
  o.layers = {kLayers};
  EXPECT_FALSE(FidelityProbe::create(nullptr, o, kLayers).is_ok());
  o = options();
  o.kv_heads = {kKvHeads};
  EXPECT_FALSE(FidelityProbe::create(nullptr, o, kLayers).is_ok());
  o = options();
  o.kv_heads.clear();
  EXPECT_FALSE(FidelityProbe::create(nullptr, o, kLayers).is_ok());
}

}  // namespace probe_test
}  // namespace
}  // namespace leoam::sparse
