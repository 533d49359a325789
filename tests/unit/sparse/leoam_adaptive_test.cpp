// leoam with the adaptive chunk tree (IAKM) on constructed keys: which leaves it scores, splits,
// merges and selects, step by step. A KeysCatalog computes store-chunk abstracts from keys the
// test sets (every key (0, 0) unless set) and records every load_abstracts call: only a grow reads
// (splits and merges change leaves over the blocks' boxes the tree holds). Without the key sign
// sketch (as here unless said) the tree keeps a box per store chunk. Store chunks are
// 8 tokens, so leaves are 8..512 tokens; layers 0 and 1 start at 8, the others at 64, both capped
// by the budget: a leaf starts and merges no larger than the largest 8 * 2^k of which 4 fit the
// budget (budget 256: 64; 512: 128; 100..127: 16). One query head on one kv head, scale 1, unless
// said. The budget always holds at least 4 leaves of the initial size, so it takes the best leaf
// and then, as the other far leaves tie, those of the lowest index ("filler").
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "keys_catalog.h"
#include "kv/kv_catalog.h"
#include "select_ok.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

using testing_util::KeysCatalog;
using testing_util::Load;
using testing_util::select_ok;
using Loads = std::vector<Load>;
using Ranges = std::vector<TokenRange>;

SelectionQuery make_query(int layer, int64_t step, int64_t n_tokens, TokenRange far, int64_t budget,
                          const std::vector<float>& q, int n_head = 1) {
  SelectionQuery query;
  query.layer = layer;
  query.step = step;
  query.n_tokens = n_tokens;
  query.q = q.data();
  query.n_head = n_head;
  query.n_head_kv = 1;
  query.head_dim = 2;
  query.scale = 1.0f;
  query.far = far;
  query.budget_tokens = budget;
  return query;
}

std::unique_ptr<SelectionPolicy> leoam(const PolicyOptions& options = {}) {
  auto p = make_selection_policy("leoam", options);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return std::move(p).value();
}

// What one step did: the selection, how many leaves were scored, and the abstract reads.
struct Step {
  Ranges ranges;
  int64_t n_scored = 0;
  Loads loads;

  bool operator==(const Step&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Step& s) {
  os << "{ranges";
  for (const TokenRange& r : s.ranges) os << " [" << r.begin << ", " << r.end << ")";
  os << "; scored " << s.n_scored << "; loads";
  for (const Load& l : s.loads) os << " (" << l.layer << ": " << l.i0 << ", " << l.i1 << ")";
  return os << "}";
}

// The reads of a grow over store chunks [c0, c1) of `layer`: pieces of 32 chunks (chunk_tree.cpp).
Loads grown(int layer, int64_t c0, int64_t c1) {
  Loads l;
  for (int64_t c = c0; c < c1; c += 32) l.push_back({layer, c, std::min(c + 32, c1)});
  return l;
}

Step step(SelectionPolicy& p, const SelectionQuery& query, KeysCatalog& catalog) {
  const size_t n0 = catalog.loads().size();
  const Selection s = select_ok(p, query, catalog);
  EXPECT_FALSE(s.desert);
  return {s.ranges, s.n_chunks_scored, Loads(catalog.loads().begin() + static_cast<std::ptrdiff_t>(n0), catalog.loads().end())};
}

// Layer 2, 1024 tokens: leaves of 64, [0, 64) the sink and [960, 1024) the recent window, far
// [64, 960), budget 256 (4 leaves of 64), q = (10, 0). Keys (1, 0) on [192, 208), bound 10, are
// the hot region; every other far bound is 0. Keys (0, 1) on [640, 768) bound 0 too, and serve
// the probe at the end. The budget takes [192, 256) and, filling up with the lowest tied leaves,
// [64, 192) and [256, 320): the selection stays [64, 320) while it splits.
//
//   step 0  4 leaves selected; early step: each splits -> 8 of 32
//   step 1  the 8 leaves of [64, 320) selected; early: each splits -> 16 of 16
//   step 2  hot 1: no split (not early, not hot long enough)
//   step 3  hot 2 and skew ~1 (16 of 16 + 880 e^-10): the 16 split -> 32 leaves of 8, min.
//           The 10 far leaves of [320, 960), cold since step 0, reach 4 cold steps, but their
//           parents (128) exceed the cap of budget 256 (64): none merges
//   step 4  budget 512 (cap 128): [64, 576) selected; [640, 768) and [768, 896), still cold,
//           merge ([576, 640)'s buddy was selected, [896, 960)'s is the recent window)
TEST(LeoamAdaptive, SplitsTheHotLeafToMinAndMergesColdBuddies) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 1024, {0, 0});
  catalog.set_keys(192, 208, {1, 0});
  catalog.set_keys(640, 768, {0, 1});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s, int64_t budget = 256) { return make_query(2, s, 1024, {64, 960}, budget, q); };
  EXPECT_EQ(step(*policy, at(0), catalog), (Step{{{64, 320}}, 16, grown(2, 0, 128)}));
  EXPECT_EQ(step(*policy, at(1), catalog), (Step{{{64, 320}}, 20, {}}));
  EXPECT_EQ(step(*policy, at(2), catalog), (Step{{{64, 320}}, 28, {}}));
  EXPECT_EQ(step(*policy, at(3), catalog), (Step{{{64, 320}}, 28, {}}));  // the 16 leaves of [64, 320) split
  // 44 leaves: 4 of 64 outside far, 32 of 8 over [64, 320), 10 of 64 over [320, 960).
  EXPECT_EQ(step(*policy, at(4, 512), catalog), (Step{{{64, 576}}, 44, {}}));

  // The probe: q = (0, 10) bounds the merged [640, 768) at 10, all else at 0. One leaf of 128
  // tokens: a budget of 127 takes nothing (the ranking stops at it), and the leaf, too big for the
  // budget, splits (43 leaves after). Its halves then fit a budget of 128.
  const std::vector<float> probe = {0, 10};
  EXPECT_EQ(step(*policy, make_query(2, 5, 1024, {64, 960}, 127, probe), catalog), (Step{{}, 42, {}}));
  EXPECT_EQ(step(*policy, make_query(2, 6, 1024, {64, 960}, 128, probe), catalog), (Step{{{640, 768}}, 43, {}}));
}

// Store chunks of 2 (the CLI's default for a far budget under 64 tokens): the leaves are 2 tokens,
// so a budget of 4 takes the hot pair [20, 22) and one tied filler, the lowest far pair [8, 10).
// Layer 0, 64 tokens, far [8, 56), q = (10, 0), keys (1, 0) on [20, 22) only.
TEST(LeoamAdaptive, StoreChunksOfTwoGiveLeavesOfTwo) {
  KeysCatalog catalog(2, 1, 2);
  catalog.set_keys(0, 64, {0, 0});
  catalog.set_keys(20, 22, {1, 0});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  const Selection s = select_ok(*policy, make_query(0, 0, 64, {8, 56}, 4, q), catalog);
  EXPECT_EQ(s.ranges, (Ranges{{8, 10}, {20, 22}}));
}

// Layer 2, 512 tokens, far [64, 448), budget 256, hot [192, 208), without the early steps
// (step >= 2 from the start): the selected leaves ([192, 256) and the filler [64, 192)
// [256, 320)) split only after two hot steps, each time: 64 -> 32 at step 3, 32 -> 16 at 5,
// 16 -> 8 at 7. The cold [320, 384) [384, 448) reach 4 cold steps at step 5 but do not merge:
// their parent (128) exceeds the cap of budget 256 (64).
TEST(LeoamAdaptive, LaterStepsSplitAfterTwoHotSteps) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 512, {0, 0});
  catalog.set_keys(192, 208, {1, 0});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s) { return make_query(2, s, 512, {64, 448}, 256, q); };
  // The leaves scored tell the splits: 4 of 64 over [64, 320) become 8 after step 3, 16 after 5, 32 after 7.
  EXPECT_EQ(step(*policy, at(2), catalog), (Step{{{64, 320}}, 8, grown(2, 0, 64)}));
  EXPECT_EQ(step(*policy, at(3), catalog), (Step{{{64, 320}}, 8, {}}));
  EXPECT_EQ(step(*policy, at(4), catalog), (Step{{{64, 320}}, 12, {}}));
  EXPECT_EQ(step(*policy, at(5), catalog), (Step{{{64, 320}}, 12, {}}));
  EXPECT_EQ(step(*policy, at(6), catalog), (Step{{{64, 320}}, 20, {}}));
  EXPECT_EQ(step(*policy, at(7), catalog), (Step{{{64, 320}}, 20, {}}));
  EXPECT_EQ(step(*policy, at(8), catalog), (Step{{{64, 320}}, 36, {}}));
}

// Layer 2, 2048 tokens, far [64, 1984) (30 leaves of 64), budget 512 (cap 128). All far keys
// (1, 0): every far leaf ties at bound 10, and the budget holds 512 / 1920 of the far mass: the
// layer is not skewed. The early steps split the selected [64, 576) down to 16-token leaves;
// after that nothing splits, however long the same leaves stay selected. The 22 leaves of
// [576, 1984) stay cold from step 0 on, but in a flat layer they hold most of the far mass: they
// never merge.
TEST(LeoamAdaptive, AnUnskewedLayerNeitherSplitsNorMerges) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 2048, {0, 0});
  catalog.set_keys(64, 1984, {1, 0});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s) { return make_query(2, s, 2048, {64, 1984}, 512, q); };
  EXPECT_EQ(step(*policy, at(0), catalog), (Step{{{64, 576}}, 32, grown(2, 0, 256)}));  // 8 leaves of 64 split
  EXPECT_EQ(step(*policy, at(1), catalog), (Step{{{64, 576}}, 40, {}}));             // and 16 of 32
  // 56 leaves: 2 outside far, 32 of 16 over [64, 576), 22 of 64 over [576, 1984).
  for (int64_t s = 2; s < 12; ++s) EXPECT_EQ(step(*policy, at(s), catalog), (Step{{{64, 576}}, 56, {}})) << s;
}

// Layer 0 starts at 8-token leaves, whatever the budget: 64 over [0, 512), far [16, 496), keys
// (1, 0) on [48, 56) and (0, 1) on [320, 352) (for the probe). Budget 128 (cap 32): [48, 56) and
// the filler, [16, 144), are selected; at min already, they never split. The 44 cold leaves of
// [144, 496) merge in buddy pairs after 4 steps (22 pairs of 16), and 4 steps later once more
// (10 pairs of 32 over [160, 480): [144, 160)'s buddy is selected, [480, 496)'s is the recent
// window); then no more: a parent of 64 exceeds the cap.
TEST(LeoamAdaptive, FirstLayersStartAtMinAndColdLeavesMergeUpward) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 512, {0, 0});
  catalog.set_keys(48, 56, {1, 0});
  catalog.set_keys(320, 352, {0, 1});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s) { return make_query(0, s, 512, {16, 496}, 128, q); };
  EXPECT_EQ(step(*policy, at(0), catalog), (Step{{{16, 144}}, 64, grown(0, 0, 64)}));
  for (int64_t s = 1; s < 4; ++s) EXPECT_EQ(step(*policy, at(s), catalog), (Step{{{16, 144}}, 64, {}})) << s;
  for (int64_t s = 4; s < 8; ++s) EXPECT_EQ(step(*policy, at(s), catalog), (Step{{{16, 144}}, 42, {}})) << s;
  for (int64_t s = 8; s < 12; ++s) EXPECT_EQ(step(*policy, at(s), catalog), (Step{{{16, 144}}, 32, {}})) << s;
  const std::vector<float> probe = {0, 10};
  // The probe (as in SplitsTheHotLeafToMin): [320, 352) is one leaf, too big for 31 tokens: it splits.
  EXPECT_EQ(step(*policy, make_query(0, 12, 512, {16, 496}, 31, probe), catalog), (Step{{}, 32, {}}));
  EXPECT_EQ(step(*policy, make_query(0, 13, 512, {16, 496}, 32, probe), catalog), (Step{{{320, 352}}, 33, {}}));
}

// Growing: each step reads only the store chunks from the block that held the old end on (here
// blocks are store chunks); a query that goes back (a new sequence) rebuilds the tree, as reset()
// does.
TEST(LeoamAdaptive, GrowsFromTheEdgeAndRebuildsWhenTheSequenceGoesBack) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 300, {0, 0});
  auto policy = leoam();
  const std::vector<float> q = {1, 0};
  // The reads of one step of `layer` over [0, n), far [64, n - 64) or at least [64, 68), budget
  // 256 (leaves of 64 in layer 5), that reach the last store chunk.
  auto reads = [&](int layer, int64_t step_index, int64_t n) {
    const TokenRange far{64, std::max<int64_t>(68, n - 64)};
    Loads edge;
    for (const Load& l : step(*policy, make_query(layer, step_index, n, far, 256, q), catalog).loads) {
      if (l.i1 == (n + 7) / 8) edge.push_back(l);
    }
    return edge;
  };
  EXPECT_EQ(reads(5, 2, 200), (Loads{{5, 0, 25}}));   // [0, 64) [64, 128) [128, 192) [192, 200)
  EXPECT_EQ(reads(5, 3, 201), (Loads{{5, 25, 26}}));  // the edge block [200, 201)
  EXPECT_EQ(reads(5, 4, 201), (Loads{}));
  EXPECT_EQ(reads(5, 5, 256), (Loads{{5, 25, 32}}));
  EXPECT_EQ(reads(5, 0, 100), (Loads{{5, 0, 13}}));   // went back: rebuilt
  policy->reset();
  EXPECT_EQ(reads(5, 1, 100), (Loads{{5, 0, 13}}));
  EXPECT_EQ(reads(1, 1, 100), (Loads{{1, 0, 13}}));   // each layer has a tree of its own
}

// Desert fixture on layer 2 (leaves of 64 with the default budget of 256): 512 tokens, far
// [64, 448), q0 = (10, 0) and q1 = (0, 10); near keys (1, 1) bound 10 for both heads, far keys 0.
// Per head m = 10, near_lower = 128 and far_upper = 384 e^-10 = 0.017 < 0.01 * 128. The two
// query heads agree on every ranking below, so group_combine does not matter (sum, the default).
class LeoamAdaptiveDesert : public ::testing::Test {
 protected:
  LeoamAdaptiveDesert() : catalog_(8, 1, 2) {
    catalog_.set_keys(0, 512, {0, 0});
    catalog_.set_keys(0, 64, {1, 1});
    catalog_.set_keys(448, 512, {1, 1});
  }

  Selection select(int layer, TokenRange far, int64_t budget = 256) {
    return select_ok(*policy_, make_query(layer, 5, 512, far, budget, q_, 2), catalog_);
  }

  KeysCatalog catalog_;
  std::vector<float> q_ = {10, 0, 0, 10};
  std::unique_ptr<SelectionPolicy> policy_ = leoam();
};

TEST_F(LeoamAdaptiveDesert, DetectedOverTheLeaves) {
  const Selection s = select(2, {64, 448});
  EXPECT_TRUE(s.desert);
  EXPECT_TRUE(s.ranges.empty());
  EXPECT_EQ(s.n_chunks_scored, 8);  // every leaf
  EXPECT_EQ(catalog_.loads(), grown(2, 0, 64));
}

// Position 400 bounds the leaf [384, 448) at 10: no desert. It ranks first; the budget then fills
// with the lowest of the tied leaves, [64, 256).
TEST_F(LeoamAdaptiveDesert, NotDetectedWhenOneFarLeafHasALargeBound) {
  catalog_.set_keys(400, 401, {1, 1});
  const Selection s = select(2, {64, 448});
  EXPECT_FALSE(s.desert);
  EXPECT_EQ(s.ranges, (Ranges{{64, 256}, {384, 448}}));
  EXPECT_EQ(s.n_chunks_scored, 8);
}

// Far [32, 448): the sink [0, 32) shares the leaf [0, 64) with far tokens in layer 2, whose
// bounds then cover 32 far tokens at e^0 (and its lower bound is 0): no desert; that leaf ranks
// first (its 32 far tokens), then [64, 256) fills the budget to 224 (one more leaf would make 288).
// Layer 0's leaves of 8 keep the sink apart: a desert.
TEST_F(LeoamAdaptiveDesert, NeedsLeavesThatKeepNearAndFarApart) {
  catalog_.set_keys(32, 64, {0, 0});
  const Selection coarse = select(2, {32, 448});
  EXPECT_FALSE(coarse.desert);
  EXPECT_EQ(coarse.ranges, (Ranges{{32, 256}}));
  EXPECT_EQ(coarse.n_chunks_scored, 8);
  const Selection fine = select(0, {32, 448});
  EXPECT_TRUE(fine.desert);
  EXPECT_EQ(fine.n_chunks_scored, 64);
}

// Layer 0's 48 far leaves of 8 are cold at every desert step. Nothing is selected, so the skew
// is 0, but a desert reads no far KV: after 4 steps they merge in pairs (the cap at a budget of
// 256 is 64), and the fifth step scores 40 leaves.
TEST_F(LeoamAdaptiveDesert, ColdLeavesMergeInADesert) {
  for (int i = 0; i < 4; ++i) {
    const Selection s = select(0, {64, 448});
    EXPECT_TRUE(s.desert) << i;
    EXPECT_EQ(s.n_chunks_scored, 64) << i;
  }
  const Selection s = select(0, {64, 448});
  EXPECT_TRUE(s.desert);
  EXPECT_EQ(s.n_chunks_scored, 40);
}

TEST_F(LeoamAdaptiveDesert, OffByOption) {
  PolicyOptions options;
  options.desert = false;
  policy_ = leoam(options);
  const Selection s = select(2, {64, 448});
  EXPECT_FALSE(s.desert);
  EXPECT_EQ(s.ranges, (Ranges{{64, 320}}));  // the far leaves tie at bound 0: the lowest 4
  EXPECT_EQ(s.n_chunks_scored, 8);           // every leaf still: the near ones weigh in the mass shares
}

// The keys of LaterStepsSplitAfterTwoHotSteps (hot [192, 208)), past the early steps. The tree is
// built at a budget of 256 (leaves of 64); then the budget drops to 16, below the 64-token
// leaves: nothing fits, so the best leaf splits until it does. At that budget the cap is 8: the
// cold leaves (from step 6 on) never merge.
TEST(LeoamAdaptive, ABudgetBelowTheBestLeafSplitsIt) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 512, {0, 0});
  catalog.set_keys(192, 208, {1, 0});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s) { return make_query(2, s, 512, {64, 448}, 16, q); };
  EXPECT_EQ(step(*policy, make_query(2, 5, 512, {64, 448}, 256, q), catalog), (Step{{{64, 320}}, 8, grown(2, 0, 64)}));
  EXPECT_EQ(step(*policy, at(6), catalog), (Step{{}, 8, {}}));  // [192, 256) splits
  EXPECT_EQ(step(*policy, at(7), catalog), (Step{{}, 9, {}}));  // [192, 224)
  EXPECT_EQ(step(*policy, at(8), catalog), (Step{{{192, 208}}, 10, {}}));
  // Step 9: hot 2 and skewed, [192, 208) splits.
  EXPECT_EQ(step(*policy, at(9), catalog), (Step{{{192, 208}}, 10, {}}));
  for (int64_t s = 10; s < 12; ++s) EXPECT_EQ(step(*policy, at(s), catalog), (Step{{{192, 208}}, 11, {}})) << s;
}

// The budget cap itself: in layer 2, a budget of 100 holds 4 leaves of 16 but not of 32, so the
// tree starts at 16-token leaves (32 over [0, 512)) and cold buddies stop merging at 16. Keys
// (1, 0) on [64, 80), q = (10, 0): that leaf bounds at 10, every other one at 0, so the budget
// (6 leaves of 16, [64, 160): the hot one and the lowest tied ones) holds nearly all the far
// mass: skewed. Its 6 leaves split to 8 at step 3 (hot 2). The 18 leaves of [160, 448), cold
// since step 2, reach 4 cold steps at step 5 and stay; at step 6 a budget of 128 raises the cap
// to 32: the 8 pairs of [192, 448) merge ([160, 176) and [176, 192) are selected now, and split
// at step 7, hot 2).
TEST(LeoamAdaptive, TheBudgetCapsTheInitialAndMergedLeaves) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 512, {0, 0});
  catalog.set_keys(64, 80, {1, 0});
  auto policy = leoam();
  const std::vector<float> q = {10, 0};
  auto at = [&](int64_t s, int64_t budget) { return make_query(2, s, 512, {64, 448}, budget, q); };
  EXPECT_EQ(step(*policy, at(2, 100), catalog), (Step{{{64, 160}}, 32, grown(2, 0, 64)}));
  EXPECT_EQ(step(*policy, at(3, 100), catalog), (Step{{{64, 160}}, 32, {}}));  // the 6 leaves of [64, 160) split
  for (int64_t s = 4; s < 6; ++s) EXPECT_EQ(step(*policy, at(s, 100), catalog), (Step{{{64, 160}}, 38, {}})) << s;
  EXPECT_EQ(step(*policy, at(6, 128), catalog), (Step{{{64, 192}}, 38, {}}));  // then 8 merges
  EXPECT_EQ(step(*policy, at(7, 128), catalog), (Step{{{64, 192}}, 30, {}}));  // [160, 192) splits
}

// A budget of all far tokens selects all of far, edge leaves counted by their far tokens only,
// step after step, and splits nothing (every far token is read anyway). One token less, and the
// ranking stops short.
TEST(LeoamAdaptive, ABudgetOfAllFarSelectsAllOfFar) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 512, {0, 0});
  for (int64_t p = 0; p < 512; p += 8) catalog.set_keys(p, p + 8, {static_cast<float>(p % 24) / 24.0f, 0.5f});
  const std::vector<float> q = {1, -1};
  const TokenRange far{60, 450};
  auto policy = leoam();
  for (int64_t s = 0; s < 6; ++s) {
    const size_t n0 = catalog.loads().size();
    const Selection sel = select_ok(*policy, make_query(2, s, 512, far, far.size(), q), catalog);
    EXPECT_FALSE(sel.desert);
    EXPECT_EQ(sel.ranges, (Ranges{far})) << s;
    EXPECT_EQ(sel.n_chunks_scored, 8) << s;
    EXPECT_EQ(catalog.loads().size(), n0 + (s == 0 ? 2 : 0)) << s;  // the first grow only (2 pieces of 32 chunks)
  }
  const Selection short_one = select_ok(*policy, make_query(2, 6, 512, far, far.size() - 1, q), catalog);
  int64_t n = 0;
  for (const TokenRange& r : short_one.ranges) n += r.size();
  EXPECT_LT(n, far.size());
  EXPECT_GT(n, 0);
}

// Key signs against boxes that look alike. Layer 0 (leaves of 8), 256 tokens, far [4, 192), a
// budget of one leaf, q = (1, 1). The decoy [64, 72) holds keys (1, -1) and (-1, 1), the needle
// [128, 136) keys (1, 1) and (-1, -1): both boxes are [-1, 1] x [-1, 1], box bound 2, and the
// decoy wins the tie by its lower index. The signs bound the decoy's rows at 1 + 0 and 0 + 1 and
// the needle's (1, 1) row at 2, its true q.k: with them the needle is picked.
TEST(LeoamAdaptive, KeySignsTellApartChunksWhoseBoxesAreAlike) {
  KeysCatalog catalog(8, 1, 2);
  catalog.set_keys(0, 256, {0, 0});
  for (int64_t p = 64; p < 72; p += 2) {
    catalog.set_keys(p, p + 1, {1, -1});
    catalog.set_keys(p + 1, p + 2, {-1, 1});
  }
  for (int64_t p = 128; p < 136; p += 2) {
    catalog.set_keys(p, p + 1, {1, 1});
    catalog.set_keys(p + 1, p + 2, {-1, -1});
  }
  const std::vector<float> q = {1, 1};
  const SelectionQuery query = make_query(0, 0, 256, {4, 192}, 8, q);
  EXPECT_EQ(step(*leoam(), query, catalog).ranges, (Ranges{{64, 72}}));  // no signs in the catalog: boxes
  catalog.with_key_signs();
  EXPECT_EQ(step(*leoam(), query, catalog).ranges, (Ranges{{128, 136}}));
  PolicyOptions no_signs;
  no_signs.key_signs = false;
  EXPECT_EQ(step(*leoam(no_signs), query, catalog).ranges, (Ranges{{64, 72}}));
  PolicyOptions flat;  // the store's chunks, not the tree: the same
  flat.adaptive = false;
  EXPECT_EQ(select_ok(*leoam(flat), query, catalog).ranges, (Ranges{{128, 136}}));
}

// The budget of what leoam keeps about the KV, as a property: the trained model's shape (8 query
// heads on 4 kv heads of 64, f16 KV: 1 KiB a position a layer), 4 layers (two fine, two coarse),
// store chunks of 8, random keys with their sign sketch, budget 0.1, contexts from 4096 growing
// by random steps with a random query each step. A position costs each layer 1/32 of its KV in
// signs, and an f16 box per block: 1/64 in the coarse layers (64-token blocks), 1/8 in the fine
// ones (8-token store chunks), plus 16 bytes a leaf (at most one per 8 positions in the fine
// layers, per 16 in the coarse ones after their early splits) and a 32nd of slack. What the
// trees hold stays within that budget (10.3% of the KV here; with 32 layers, two fine, it is
// 5.4%), and at its peak within it plus a step's working copies (a grow's piece of abstracts,
// every leaf's bounds), 128 KiB a layer at most.
TEST(LeoamAdaptive, StateStaysWithinItsBudget) {
  constexpr int kLayers = 4;
  constexpr int kHeads = 8;
  constexpr int kKvHeads = 4;
  constexpr int kHeadDim = 64;
  constexpr uint64_t kKvBytesPerPosition = kLayers * 2 * kKvHeads * kHeadDim * 2;
  KeysCatalog catalog(8, kKvHeads, kHeadDim);
  catalog.with_key_signs();
  std::mt19937 rng(26);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> key(kHeadDim);
  const auto append = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (float& x : key) x = dist(rng);
      catalog.set_keys(p, p + 1, key);
    }
  };
  auto policy = leoam();
  std::vector<float> q(kHeads * kHeadDim);
  int64_t n = 4096;
  append(0, n);
  for (int64_t s = 0; s < 24; ++s) {
    for (float& x : q) x = dist(rng);
    for (int layer = 0; layer < kLayers; ++layer) {
      const TokenRange far{4, n - 64};
      SelectionQuery query = make_query(layer, s, n, far, far.size() / 10, q, kHeads);
      query.n_head_kv = kKvHeads;
      query.head_dim = kHeadDim;
      query.scale = 0.125f;
      select_ok(*policy, query, catalog);
    }
    const PolicyMemory m = policy->memory();
    const uint64_t kv_bytes = static_cast<uint64_t>(n) * kKvBytesPerPosition;
    const uint64_t layer_kv = kv_bytes / kLayers;
    // The sign sketch, 1/32 of the KV, sliced in words of 64 rows.
    const uint64_t signs = static_cast<uint64_t>(n + 63) / 64 * 64 * kKvHeads * kHeadDim / 8;
    const uint64_t fine = signs + layer_kv / 8 + static_cast<uint64_t>(n) / 8 * 16;
    const uint64_t coarse = signs + layer_kv / 64 + static_cast<uint64_t>(n) / 16 * 16;
    const uint64_t budget = (2 * fine + 2 * coarse) * 33 / 32;
    ASSERT_GT(m.bytes, kv_bytes / 32) << "step " << s << ": the sign sketch alone is 1/32 of the KV";
    ASSERT_LE(m.bytes, budget) << "step " << s << ", " << n << " positions";
    ASSERT_LE(m.peak_bytes, budget + kLayers * (128u << 10)) << "step " << s << ", " << n << " positions";
    const int64_t grow = 1 + static_cast<int64_t>(rng() % 300);
    append(n, n + grow);
    n += grow;
  }
}

}  // namespace
}  // namespace leoam::sparse
