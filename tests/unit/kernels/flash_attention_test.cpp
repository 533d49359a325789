// flash_attention (tiled prefill and split-KV decode) against ref::attention, a materialized
// softmax in double, on random data: causal masks, GQA groups of 1 and 4, F16 and F32 KV split
// into padded segments, key counts off the 64-key tile, forced KV splits, 1-3 threads, every ISA
// path the CPU has (AVX-512 skipped with a message where it lacks it), GQA groups 1-8 and 16 and
// head dims 16-128, which the vector paths' register blocks cut differently. Tolerance: 2e-5
// absolute on outputs of order 1 (weighted means of N(0,1) values), i.e. ~1e-5 relative; the
// vector exp alone is within 2e-7. The log-sum-exp output (lse) to 1e-5 relative (absolute
// below 1), and -inf exactly where a query sees no key.
#include "kernels/cpu/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"

namespace leoam::kernels {
namespace {

// Keys/values of n positions laid out as several runs with padded rows (NaN padding, so a read
// past a row's end shows up).
struct RunsKv {
  std::vector<std::vector<uint8_t>> k_store, v_store;
  std::vector<KvRun> runs;
};

RunsKv make_runs(int n, int n_head_kv, int hd, bool f16, const std::vector<int>& cuts, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  RunsKv kv;
  const int row = n_head_kv * hd;
  const int pad = 5;  // elements after each row
  const size_t elem = f16 ? 2 : 4;
  std::vector<int> ends = cuts;
  ends.push_back(n);
  int pos0 = 0;
  kv.k_store.reserve(ends.size());
  kv.v_store.reserve(ends.size());
  for (int end : ends) {
    const int m = end - pos0;
    const size_t stride = (row + pad) * elem;
    std::vector<uint8_t> kb(m * stride, 0xff), vb(m * stride, 0xff);  // 0xff..: NaN in f16 and f32
    for (int t = 0; t < m; ++t) {
      for (int e = 0; e < row; ++e) {
        for (auto* buf : {&kb, &vb}) {
          const float x = dist(rng);
          if (f16) {
            const uint16_t h = f32_to_f16(x);
            std::memcpy(buf->data() + t * stride + e * 2, &h, 2);
          } else {
            std::memcpy(buf->data() + t * stride + e * 4, &x, 4);
          }
        }
      }
    }
    kv.k_store.push_back(std::move(kb));
    kv.v_store.push_back(std::move(vb));
    kv.runs.push_back({pos0, m, kv.k_store.back().data(), kv.v_store.back().data(), f16, stride});
    pos0 = end;
  }
  return kv;
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// |got - want| within 1e-5 relative (absolute below 1); -inf only where -inf is wanted.
::testing::AssertionResult lse_near(float got, float want) {
  if (want == kNegInf || got == kNegInf) {
    if (got == want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "lse " << got << ", want " << want;
  }
  const float tol = 1e-5f * std::max(1.0f, std::fabs(want));
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "lse " << got << ", want " << want << " (tolerance " << tol << ")";
}

struct Case {
  int n_kv;
  int n_head, n_head_kv, hd;
  int64_t pos0, n_tokens;
  std::vector<int> cuts;
  int64_t key_pos0 = 0;  // position of the first key: the queries before it see no key
  int64_t window = 0;    // FlashAttentionParams::window
  float softcap = 0.0f;  // FlashAttentionParams::softcap
};

void check(const Case& c, bool f16, AttentionIsa isa, const std::vector<int>& splits) {
  std::mt19937 rng(static_cast<uint32_t>(c.n_kv * 131 + c.n_head * 7 + c.hd + (f16 ? 1 : 0)));
  RunsKv kv = make_runs(c.n_kv, c.n_head_kv, c.hd, f16, c.cuts, rng);
  for (KvRun& run : kv.runs) run.pos0 += c.key_pos0;
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> q(static_cast<size_t>(c.n_tokens * c.n_head * c.hd));
  for (float& x : q) x = dist(rng);
  FlashAttentionParams p{c.n_head, c.n_head_kv, c.hd, 1.0f / std::sqrt(static_cast<float>(c.hd)), c.pos0,
                         c.n_tokens};
  p.window = c.window;
  p.softcap = c.softcap;
  std::vector<float> want(q.size());
  std::vector<float> want_lse(static_cast<size_t>(c.n_tokens * c.n_head));
  ref::attention(kv.runs, p, q.data(), want.data(), want_lse.data());
  for (int n_threads = 1; n_threads <= 3; ++n_threads) {
    ThreadPool pool(n_threads);
    for (int n_splits : splits) {
      SCOPED_TRACE("n_kv " + std::to_string(c.n_kv) + " heads " + std::to_string(c.n_head) + "/" +
                   std::to_string(c.n_head_kv) + " hd " + std::to_string(c.hd) + " pos0 " + std::to_string(c.pos0) +
                   " tokens " + std::to_string(c.n_tokens) + (f16 ? " f16" : " f32") + " threads " +
                   std::to_string(n_threads) + " splits " + std::to_string(n_splits) + " keys from " +
                   std::to_string(c.key_pos0) + " window " + std::to_string(c.window) + " softcap " +
                   std::to_string(c.softcap));
      std::vector<float> out(q.size(), std::nanf("")), lse(want_lse.size(), std::nanf(""));
      flash_attention(kv.runs, p, q.data(), out.data(), lse.data(), pool, FlashAttentionOptions{isa, n_splits});
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << "element " << i;
      for (size_t i = 0; i < lse.size(); ++i) ASSERT_TRUE(lse_near(lse[i], want_lse[i])) << "row " << i;
      // Without lse the output is the same, bit for bit.
      std::vector<float> out_only(q.size(), std::nanf(""));
      flash_attention(kv.runs, p, q.data(), out_only.data(), pool, FlashAttentionOptions{isa, n_splits});
      ASSERT_EQ(std::memcmp(out_only.data(), out.data(), out.size() * sizeof(float)), 0);
    }
  }
}

class FlashAttentionTest : public ::testing::TestWithParam<std::tuple<AttentionIsa, bool>> {
 protected:
  void SetUp() override {
    if (std::get<0>(GetParam()) == AttentionIsa::kAvx2 && cpu_path() < CpuPath::kAvx2) {
      GTEST_SKIP() << "this CPU (or LEOAM_CPU_PATH) has no AVX2 path";
    }
    if (std::get<0>(GetParam()) == AttentionIsa::kAvx512 && cpu_path() < CpuPath::kAvx512) {
      GTEST_SKIP() << "this CPU (or LEOAM_CPU_PATH) has no AVX-512 path (F, BW, VL, DQ): the AVX-512 "
                      "attention kernels are not tested";
    }
  }
  AttentionIsa isa() const { return std::get<0>(GetParam()); }
  bool f16() const { return std::get<1>(GetParam()); }
};

TEST_P(FlashAttentionTest, PrefillFromTheStart) {
  // 300 keys: several 64-key tiles plus a ragged one, runs cut inside and across tiles.
  check({300, 4, 4, 32, 0, 300, {1, 70, 129, 200}}, f16(), isa(), {0});
  check({300, 8, 2, 32, 0, 300, {64, 250}}, f16(), isa(), {0});
}

TEST_P(FlashAttentionTest, PrefillAfterEarlierTokens) {
  // Queries at [200, 290) over 290 keys: the first 200 are fully visible, the rest causal.
  check({290, 8, 2, 16, 200, 90, {33, 150, 201}}, f16(), isa(), {0});
  check({150, 4, 1, 24, 100, 50, {}}, f16(), isa(), {0});  // 24: a 16 + 8 dims tail
}

TEST_P(FlashAttentionTest, DecodeWithKvSplits) {
  check({517, 8, 2, 32, 516, 1, {100, 101, 400}}, f16(), isa(), {0, 1, 2, 3, 7});
  check({517, 4, 4, 16, 516, 1, {}}, f16(), isa(), {0, 2, 5});
}

TEST_P(FlashAttentionTest, SplitsWhereSomeQueriesSeeNothing) {
  // 16 queries at [0, 16) in one block, 4 ranges: range 3 holds keys [12, 16), which queries
  // 0..11 cannot see, so their partials are empty and must not count.
  check({16, 8, 2, 16, 0, 16, {5}}, f16(), isa(), {1, 4, 16});
}

TEST_P(FlashAttentionTest, DecodeSplitsByItselfOnLongKv) {
  // 1600 keys >= 512 per thread for 2 and 3 threads: the automatic split is taken.
  check({1600, 8, 2, 32, 1599, 1, {700}}, f16(), isa(), {0});
  check({1600, 8, 2, 32, 1596, 4, {}}, f16(), isa(), {0});
}

TEST_P(FlashAttentionTest, QueriesBeforeTheFirstKeySeeNothing) {
  // Keys at [40, 140) (a sparse selection that skips [0, 40)): queries 0..39 get zeros and lse
  // -inf, in prefill blocks and in decode, with the KV split so that some ranges are empty.
  check({100, 8, 2, 16, 0, 140, {30}, 40}, f16(), isa(), {0});
  check({100, 4, 1, 16, 20, 8, {}, 40}, f16(), isa(), {1, 3});
  check({100, 4, 2, 16, 139, 1, {60}, 40}, f16(), isa(), {0, 1, 4});
}

TEST_P(FlashAttentionTest, HeadDimOffTheVectorWidth) {
  // 12 dims: the AVX2 path hands over to the scalar kernels; 24 (and 40): AVX-512 to AVX2.
  check({100, 2, 1, 12, 0, 100, {50}}, f16(), isa(), {0});
  check({100, 2, 1, 12, 99, 1, {50}}, f16(), isa(), {0, 3});
  check({100, 4, 1, 24, 99, 1, {50}}, f16(), isa(), {0, 3});
  check({130, 8, 2, 40, 0, 130, {}}, f16(), isa(), {0});
}

TEST_P(FlashAttentionTest, DecodeEveryGroupAndHeadDim) {
  // One token, 2 kv heads, groups 1-8 (f16 K/V read in place: the 1-3 row tails and the 4- and
  // 8-row blocks; groups 1 and 2 walked in address order, 8 keys at a time) and 16 (converted
  // tiles); head dims that cut into different numbers of column passes and a 5-vector one; 203
  // keys: ragged in-place and converted tiles, three runs.
  for (int group : {1, 2, 3, 4, 5, 7, 8, 16}) {
    for (int hd : {16, 48, 64, 80, 128}) check({203, 2 * group, 2, hd, 202, 1, {37, 100}}, f16(), isa(), {0, 1, 3});
  }
}

TEST_P(FlashAttentionTest, DecodeSeveralTokensOfAGroup) {
  // 2 tokens x group 4 = 8 rows per kv head (in place), 3 x 4 = 12 (converted), with a causal
  // edge inside the last tile.
  check({300, 8, 2, 128, 298, 2, {150}}, f16(), isa(), {0, 1, 2});
  check({300, 8, 2, 64, 297, 3, {}}, f16(), isa(), {0, 4});
  // 2 tokens x group 1 = 2 rows (walked in address order), the causal edge inside the last tile.
  check({301, 4, 4, 64, 299, 2, {150}}, f16(), isa(), {0, 1, 2});
}

TEST_P(FlashAttentionTest, DecodeOverManyShortRuns) {
  // A sparse step's chunks: runs of 1 to 23 keys, then one of 150 and 20 of 8, each run a tile
  // or less (runs packed into tiles of up to 64 keys); groups 3, 4 and 8, one token, the KV split
  // into ranges that cut runs.
  std::vector<int> cuts;
  int at = 0;
  for (int len = 1; len <= 23; ++len) cuts.push_back(at += len);
  cuts.push_back(at += 150);
  for (int i = 0; i < 20; ++i) cuts.push_back(at += 8);
  const int n = at + 5;
  for (int group : {3, 4, 8}) check({n, 2 * group, 2, 64, n - 1, 1, cuts}, f16(), isa(), {0, 1, 2, 5});
  check({n, 32, 8, 128, n + 40, 1, cuts}, f16(), isa(), {0, 3});
  // 2 tokens x group 4, the causal edge inside the last run (5 keys), which shares its tile
  // (runs packed into one) with the runs of 8 before it.
  check({n, 8, 2, 64, n - 2, 2, cuts}, f16(), isa(), {0, 1, 2});
}

TEST_P(FlashAttentionTest, PrefillWideHeads) {
  // 64-row items (16 tokens x group 4, 8 x 8) over 64-key tiles at head dims 64 and 128.
  check({200, 8, 2, 128, 0, 200, {90}}, f16(), isa(), {0});
  check({150, 16, 2, 64, 50, 100, {20, 131}}, f16(), isa(), {0});
}

TEST_P(FlashAttentionTest, SlidingWindowAndSoftcap) {
  // Windows that end inside a tile, span several, hold one key, or hold all; prefill (each row
  // its own window), decode with KV splits, and packed short runs; softcaps that bite (scores of
  // N(0, 2) queries reach past 2) and one with them together.
  check({300, 8, 2, 32, 0, 300, {1, 70, 129, 200}, 0, 37}, f16(), isa(), {0});
  check({290, 8, 2, 16, 200, 90, {33, 150, 201}, 0, 100}, f16(), isa(), {0});
  check({517, 8, 2, 32, 516, 1, {100, 101, 400}, 0, 130}, f16(), isa(), {0, 1, 3, 7});
  check({203, 8, 2, 64, 202, 1, {37, 100}, 0, 1}, f16(), isa(), {0, 2});
  check({203, 4, 4, 64, 201, 2, {37, 100}, 0, 500}, f16(), isa(), {0, 2});
  check({300, 8, 2, 32, 0, 300, {64, 250}, 0, 0, 1.5f}, f16(), isa(), {0});
  check({517, 16, 2, 64, 516, 1, {100, 400}, 0, 0, 2.0f}, f16(), isa(), {0, 3});
  check({300, 8, 2, 128, 298, 2, {150}, 0, 50, 1.0f}, f16(), isa(), {0, 1, 2});
}

INSTANTIATE_TEST_SUITE_P(Paths, FlashAttentionTest,
                         ::testing::Combine(::testing::Values(AttentionIsa::kScalar, AttentionIsa::kAvx2,
                                                              AttentionIsa::kAvx512),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           const AttentionIsa isa = std::get<0>(info.param);
                           return std::string(isa == AttentionIsa::kScalar ? "Scalar"
                                              : isa == AttentionIsa::kAvx2 ? "Avx2"
                                                                           : "Avx512") +
                                  (std::get<1>(info.param) ? "F16" : "F32");
                         });

TEST(FlashAttention, NoKeysGivesZeros) {
  ThreadPool pool(2);
  const FlashAttentionParams p{2, 1, 8, 1.0f, 0, 3};
  std::vector<float> q(3 * 2 * 8, 1.0f), out(q.size(), std::nanf("")), lse(3 * 2, std::nanf(""));
  flash_attention({}, p, q.data(), out.data(), lse.data(), pool);
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, kNegInf);
}

TEST(FlashAttention, FirstPositionReturnsItsValue) {
  // Query 0 sees only key 0: its output is exactly v[0] (weight e^0 = 1, sum 1).
  std::mt19937 rng(5);
  const RunsKv kv = make_runs(70, 1, 16, true, {}, rng);
  ThreadPool pool(1);
  const FlashAttentionParams p{1, 1, 16, 0.25f, 0, 70};
  std::vector<float> q(70 * 16, 0.5f), out(q.size());
  flash_attention(kv.runs, p, q.data(), out.data(), pool);
  const auto* v0 = reinterpret_cast<const uint16_t*>(kv.runs[0].v);
  for (int d = 0; d < 16; ++d) EXPECT_EQ(out[d], f16_to_f32(v0[d]));
}

TEST(FlashAttention, LseOfEqualScoresIsLogOfTheCount) {
  // q = 0: every score is 0, so a query at position p has lse = ln(p + 1), exactly up to the
  // float log, in prefill and in a split decode.
  std::mt19937 rng(9);
  const RunsKv kv = make_runs(600, 2, 16, true, {250}, rng);
  ThreadPool pool(2);
  std::vector<float> q(600 * 4 * 16, 0.0f), out(q.size()), lse(600 * 4);
  flash_attention(kv.runs, FlashAttentionParams{4, 2, 16, 0.25f, 0, 600}, q.data(), out.data(), lse.data(), pool);
  for (int t = 0; t < 600; ++t) {
    for (int h = 0; h < 4; ++h) ASSERT_TRUE(lse_near(lse[t * 4 + h], std::log(t + 1.0f))) << t << " " << h;
  }
  flash_attention(kv.runs, FlashAttentionParams{4, 2, 16, 0.25f, 599, 1}, q.data(), out.data(), lse.data(), pool,
                  FlashAttentionOptions{AttentionIsa::kAuto, 3});
  for (int h = 0; h < 4; ++h) EXPECT_TRUE(lse_near(lse[h], std::log(600.0f))) << h;
}

// The reference's window and softcap against what they mean, without the reference's loop: a
// window of w keys is attention over the last w keys alone, and softcap 1 on two keys of scores
// +100 and -100 weighs their values e^1 : e^-1.
TEST(FlashAttention, WindowIsAttentionOverTheLastKeysAlone) {
  std::mt19937 rng(5);
  RunsKv kv = make_runs(200, 2, 16, false, {90}, rng);
  std::vector<float> q(4 * 16);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : q) x = dist(rng);
  FlashAttentionParams windowed{4, 2, 16, 0.25f, 199, 1};
  windowed.window = 30;
  std::vector<float> got(q.size()), want(q.size());
  ref::attention(kv.runs, windowed, q.data(), got.data());
  KvRun last = kv.runs[1];
  const int64_t skip = 200 - 30 - last.pos0;
  last.pos0 += skip;
  last.n_tokens -= skip;
  last.k = static_cast<const char*>(last.k) + skip * last.row_stride_bytes;
  last.v = static_cast<const char*>(last.v) + skip * last.row_stride_bytes;
  FlashAttentionParams plain = windowed;
  plain.window = 0;
  ref::attention({&last, 1}, plain, q.data(), want.data());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(FlashAttention, SoftcapSquashesTheScores) {
  const float k[2] = {100.0f, -100.0f};
  const float v[2] = {1.0f, 0.0f};
  const KvRun run{0, 2, k, v, false, sizeof(float)};
  const float q = 1.0f;
  FlashAttentionParams p{1, 1, 1, 1.0f, 1, 1};
  p.softcap = 1.0f;
  float out = 0.0f;
  ref::attention({&run, 1}, p, &q, &out);
  const double want = std::exp(1.0) / (std::exp(1.0) + std::exp(-1.0));
  EXPECT_NEAR(out, want, 1e-6);
  ThreadPool pool(1);
  flash_attention({&run, 1}, p, &q, &out, pool, {AttentionIsa::kScalar, 0});
  EXPECT_NEAR(out, want, 1e-6);
}


}  // namespace
}  // namespace leoam::kernels
