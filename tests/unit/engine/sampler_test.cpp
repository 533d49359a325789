#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace leoam {
namespace {

std::vector<int32_t> ids_of(const std::vector<TokenCandidate>& c) {
  std::vector<int32_t> ids;
  for (const auto& x : c) ids.push_back(x.id);
  return ids;
}

std::vector<TokenCandidate> with_probs(const std::vector<float>& p) {
  std::vector<TokenCandidate> c;
  for (size_t i = 0; i < p.size(); ++i) c.push_back({static_cast<int32_t>(i), std::log(p[i]), p[i]});
  return c;
}

SamplerOptions pure_sampling(uint64_t seed) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  o.seed = seed;
  return o;
}

TEST(SamplerTest, GreedyPicksArgmax) {
  SamplerOptions o;
  o.temperature = 0.0f;
  Sampler s(o);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5.0f, -4.0f, -3.0f}), 2);
  // Ties go to the lowest id.
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 3.0f}), 1);
  o.temperature = -1.0f;
  Sampler negative(o);
  EXPECT_EQ(negative.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}), 1);
}

TEST(SamplerTest, TopK1EqualsGreedyAtAnyTemperature) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float temp : {0.1f, 0.8f, 1.0f, 5.0f, 100.0f}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      std::vector<float> logits(100);
      for (auto& l : logits) l = dist(gen);
      if (seed % 4 == 0) logits[60] = logits[17] = 10.0f;  // a tie: 17 wins
      SamplerOptions o;
      o.temperature = temp;
      o.top_k = 1;
      o.seed = seed;
      Sampler s(o);
      EXPECT_EQ(s.sample(logits), sampling::argmax(logits)) << "temp " << temp << " seed " << seed;
      if (seed % 4 == 0) {
        EXPECT_EQ(s.sample(logits), 17);
      }
    }
  }
}

TEST(SamplerTest, TopKKeepsLargestWithTiesByLowerId) {
  auto c = sampling::make_candidates(std::vector<float>{1.0f, 5.0f, 3.0f, 5.0f, 2.0f});
  sampling::top_k(c, 3);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 3, 2}));

  auto all = sampling::make_candidates(std::vector<float>{1.0f, 5.0f, 3.0f});
  sampling::top_k(all, 0);  // keeps all, sorted
  EXPECT_EQ(ids_of(all), (std::vector<int32_t>{1, 2, 0}));
  auto more = sampling::make_candidates(std::vector<float>{1.0f, 5.0f});
  sampling::top_k(more, 10);
  EXPECT_EQ(ids_of(more), (std::vector<int32_t>{1, 0}));
}

TEST(SamplerTest, SoftmaxAppliesTemperature) {
  auto c = sampling::make_candidates(std::vector<float>{0.0f, std::log(2.0f)});
  sampling::softmax(c, 1.0f);
  EXPECT_NEAR(c[0].p, 1.0f / 3.0f, 1e-6);
  EXPECT_NEAR(c[1].p, 2.0f / 3.0f, 1e-6);
  sampling::softmax(c, 0.5f);  // exp(2 ln 2) = 4
  EXPECT_NEAR(c[0].p, 1.0f / 5.0f, 1e-6);
  EXPECT_NEAR(c[1].p, 4.0f / 5.0f, 1e-6);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingMass) {
  const std::vector<float> p = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
  struct Case {
    float top_p;
    std::vector<int32_t> kept;
  };
  for (const Case& k : {Case{0.4f, {0}}, Case{0.6f, {0, 1}}, Case{0.8f, {0, 1, 2}}, Case{0.9f, {0, 1, 2, 3}},
                        Case{0.99f, {0, 1, 2, 3, 4}}, Case{1.0f, {0, 1, 2, 3, 4}}, Case{0.0f, {0}}}) {
    auto c = with_probs(p);
    sampling::top_p(c, k.top_p);
    EXPECT_EQ(ids_of(c), k.kept) << "top_p " << k.top_p;
  }
  auto c = with_probs(p);
  sampling::top_p(c, 0.6f);
  EXPECT_NEAR(c[0].p, 0.5f / 0.7f, 1e-6);
  EXPECT_NEAR(c[1].p, 0.2f / 0.7f, 1e-6);
}

TEST(SamplerTest, MinPKeepsCandidatesAboveFractionOfMax) {
  const std::vector<float> p = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
  struct Case {
    float min_p;
    std::vector<int32_t> kept;
  };
  for (const Case& k : {Case{0.25f, {0, 1, 2}}, Case{0.05f, {0, 1, 2, 3, 4}}, Case{0.5f, {0}}, Case{0.0f, {0, 1, 2, 3, 4}},
                        Case{0.35f, {0, 1}}, Case{1.0f, {0}}}) {
    auto c = with_probs(p);
    sampling::min_p(c, k.min_p);
    EXPECT_EQ(ids_of(c), k.kept) << "min_p " << k.min_p;
  }
  // Order is kept for unsorted input, and the survivors are renormalized.
  std::vector<TokenCandidate> c = {{3, 0.0f, 0.1f}, {0, 0.0f, 0.5f}, {1, 0.0f, 0.2f}};
  sampling::min_p(c, 0.3f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(c[0].p + c[1].p, 1.0f, 1e-6);
}

TEST(SamplerTest, DrawNeverPicksZeroProbability) {
  std::mt19937_64 rng(1);
  const std::vector<TokenCandidate> c = {{4, 0.0f, 0.0f}, {9, 0.0f, 1.0f}, {2, 0.0f, 0.0f}};
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(sampling::draw(c, rng), 9);
}

TEST(SamplerTest, RepeatPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2.0f, 1.8f, -1.0f, 0.5f};
  const std::vector<int32_t> recent = {0, 0, 2, 0, 99, -1};  // repeats count once; out of range ignored
  sampling::apply_repeat_penalty(logits, recent, 1.5f);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 1.5f);
  EXPECT_FLOAT_EQ(logits[1], 1.8f);
  EXPECT_FLOAT_EQ(logits[2], -1.5f);
  EXPECT_FLOAT_EQ(logits[3], 0.5f);
}

TEST(SamplerTest, RepeatPenaltyChangesArgmax) {
  const std::vector<float> logits = {2.0f, 1.8f, -1.0f, 0.5f};
  SamplerOptions o;
  o.temperature = 0.0f;
  o.repeat_penalty = 1.5f;
  o.repeat_last_n = 2;
  Sampler s(o);
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 2.0 / 1.5 < 1.8
  s.accept(3);
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(3);  // token 0 has left the last-2 window
  EXPECT_EQ(s.sample(logits), 0);
  EXPECT_EQ(s.recent_tokens(), (std::deque<int32_t>{3, 3}));

  o.repeat_penalty = 1.0f;  // off
  Sampler off(o);
  off.accept(0);
  EXPECT_EQ(off.sample(logits), 0);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  std::vector<float> logits(16);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.1f * static_cast<float>(i % 5);
  auto run = [&](uint64_t seed) {
    Sampler s(pure_sampling(seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  // Not stuck on one token.
  const auto seq = run(42);
  EXPECT_GT(std::set<int32_t>(seq.begin(), seq.end()).size(), 10u);
}

TEST(SamplerTest, EmpiricalFrequenciesMatchDistribution) {
  const std::vector<double> p = {0.5, 0.3, 0.2};
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  Sampler s(pure_sampling(12345));
  constexpr int kDraws = 20000;
  std::vector<int> counts(3, 0);
  for (int i = 0; i < kDraws; ++i) counts[static_cast<size_t>(s.sample(logits))]++;
  // sd of a frequency is at most sqrt(0.25 / 20000) = 0.0035; 0.015 is over 4 sd.
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(counts[i] / static_cast<double>(kDraws), p[i], 0.015) << "token " << i;
  }
}

TEST(SamplerTest, DefaultChainFiltersUnlikelyTokens) {
  // With the default options (top_k 40, top_p 0.95, min_p 0.05, temp 0.8) a token holding far
  // less than 5% of the top token's probability is never drawn.
  std::vector<float> logits = {5.0f, 4.5f, 0.0f, -3.0f};
  SamplerOptions o;
  o.seed = 3;
  Sampler s(o);
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = s.sample(logits);
    EXPECT_TRUE(t == 0 || t == 1) << t;
  }
}

std::vector<int32_t> draw_n(Sampler& s, std::span<const float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits));
  return out;
}

TEST(SamplerTest, RestoredRngStateContinuesTheSameSequence) {
  std::vector<float> logits(16);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.1f * static_cast<float>(i % 5);
  Sampler original(pure_sampling(42));
  draw_n(original, logits, 37);
  const std::string state = original.rng_state();

  Sampler restored(pure_sampling(7));  // the seed is replaced by the state
  ASSERT_TRUE(restored.restore_rng_state(state).is_ok());
  EXPECT_EQ(restored.rng_state(), state);
  const std::vector<int32_t> expected = draw_n(original, logits, 200);
  EXPECT_EQ(draw_n(restored, logits, 200), expected);
  EXPECT_EQ(restored.rng_state(), original.rng_state());
  // The state holds the position in the stream, not just the seed.
  Sampler reseeded(pure_sampling(42));
  EXPECT_NE(draw_n(reseeded, logits, 200), expected);
  // Trailing whitespace (a newline at the end of a file) is fine.
  Sampler with_newline(pure_sampling(7));
  EXPECT_TRUE(with_newline.restore_rng_state(state + "\n").is_ok());
  EXPECT_EQ(with_newline.rng_state(), state);
}

TEST(SamplerTest, InvalidRngStateIsRejectedAndChangesNothing) {
  std::vector<float> logits(16, 0.0f);
  Sampler s(pure_sampling(5));
  draw_n(s, logits, 3);
  const std::string before = s.rng_state();
  const std::string first_number = before.substr(0, before.find(' '));
  const std::vector<std::string> bad = {
      "",
      "garbage",
      before.substr(0, before.size() / 2),                                // too few numbers
      before + " 17",                                                     // one number too many
      before + "x",                                                       // trailing garbage
      "99999999999999999999999" + before.substr(first_number.size()),  // a word over 64 bits
  };
  for (const std::string& state : bad) {
    const Status st = s.restore_rng_state(state);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "'" << state.substr(0, 40) << "'";
    EXPECT_EQ(st.message(), "sampler state (" + std::to_string(state.size()) +
                                " bytes) is not valid: expected a std::mt19937_64 state as Sampler::rng_state() writes "
                                "it (decimal numbers separated by spaces) and nothing after it");
    EXPECT_EQ(s.rng_state(), before);
  }
  // Still the stream it was: the same draws as a twin that was never asked to restore.
  Sampler twin(pure_sampling(5));
  draw_n(twin, logits, 3);
  EXPECT_EQ(draw_n(s, logits, 50), draw_n(twin, logits, 50));
}

}  // namespace
}  // namespace leoam
