#include "kv/residency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <ostream>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace leoam {

// Readable plans in failure messages. Static: found by argument-dependent lookup in leoam, and
// private to this test file.
static void PrintTo(const Residency::Move& m, std::ostream* os) {
  *os << "{(" << m.chunk.layer << "," << m.chunk.index << ") "
      << (m.from ? tier_name(*m.from) : "new") << "->" << tier_name(m.to) << (m.needs_write ? " write" : "")
      << "}";
}

namespace {

using Move = Residency::Move;
using Plan = Residency::Plan;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kDeviceChunk = 256 * kKiB;  // 0.25 MiB
constexpr uint64_t kHostChunk = 128 * kKiB;    // the host's stored form is half the size

// Room for n_device chunks on the device and n_host chunks on the host.
ResidencyOptions options(uint64_t n_device, uint64_t n_host) {
  ResidencyOptions o;
  o.device_budget_bytes = n_device * kDeviceChunk;
  o.host_budget_bytes = n_host * kHostChunk;
  o.device_chunk_bytes = kDeviceChunk;
  o.host_chunk_bytes = kHostChunk;
  return o;
}

ChunkKey key(int layer, int64_t index) { return {layer, index}; }
Move insert_move(ChunkKey k) { return {k, std::nullopt, Tier::kDevice, false}; }
Move move(ChunkKey k, Tier from, Tier to, bool needs_write = false) { return {k, from, to, needs_write}; }

void apply_plan(Residency& r, const Plan& plan) {
  for (const Move& m : plan.moves) r.apply(m);
}

// Inserts `k` (applying whatever its plan demotes) and marks it used at `tick`.
void insert(Residency& r, ChunkKey k, uint64_t tick = 0) {
  auto plan = r.plan_insert(k);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  apply_plan(r, *plan);
  r.touch(k, tick);
}

// Inserts layer 0's chunks [0, n), chunk i used at tick i + 1, so lower indices are older.
Residency filled(const ResidencyOptions& o, int64_t n) {
  Residency r(o);
  for (int64_t i = 0; i < n; ++i) insert(r, key(0, i), static_cast<uint64_t>(i + 1));
  return r;
}

Tier tier_of(const Residency& r, ChunkKey k) {
  const ChunkResidency* c = r.find(k);
  EXPECT_NE(c, nullptr);
  return c == nullptr ? Tier::kDisk : c->tier;
}

TEST(Residency, InsertsIntoFreeSpace) {
  Residency r(options(4, 2));
  auto plan = r.plan_insert(key(0, 0));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, std::vector<Move>{insert_move(key(0, 0))});
  EXPECT_EQ(r.n_chunks(), 0);  // planning changes nothing

  apply_plan(r, *plan);
  const ChunkResidency* c = r.find(key(0, 0));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->tier, Tier::kDevice);
  EXPECT_EQ(c->pins, 0);
  EXPECT_EQ(c->importance, 0.0f);
  EXPECT_EQ(c->last_use, 0u);
  EXPECT_FALSE(c->on_disk);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), kDeviceChunk);
  EXPECT_EQ(r.used_bytes(Tier::kHost), 0u);
  EXPECT_EQ(r.n_chunks(Tier::kDevice), 1);
  EXPECT_EQ(r.n_chunks(), 1);
}

TEST(Residency, EvictsTheLeastRecentlyUsedChunk) {
  Residency r(options(4, 2));
  for (int64_t i = 0; i < 4; ++i) insert(r, key(0, i));
  r.touch(key(0, 0), 5);
  r.touch(key(0, 1), 2);
  r.touch(key(0, 2), 3);
  r.touch(key(0, 3), 4);
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 1), Tier::kDevice, Tier::kHost), insert_move(key(0, 4))}));
}

TEST(Residency, LowerImportanceBeatsRecency) {
  Residency r = filled(options(4, 2), 4);
  for (int64_t i = 0; i < 3; ++i) r.set_importance(key(0, i), 1.0f);
  // (0,3) is the most recently used, but the least important.
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 3), Tier::kDevice, Tier::kHost), insert_move(key(0, 4))}));
}

TEST(Residency, EqualVictimsLeaveInKeyOrder) {
  Residency r(options(4, 4));
  for (ChunkKey k : {key(1, 0), key(0, 2), key(0, 1), key(1, 1)}) insert(r, k);
  // The new chunks (layer 5) tie with the old ones but have larger keys, so the old leave first.
  std::vector<ChunkKey> evicted;
  for (int64_t i = 0; i < 3; ++i) {
    auto plan = r.plan_insert(key(5, i));
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    ASSERT_EQ(plan->moves.size(), 2u);
    EXPECT_EQ(plan->moves[0].from, Tier::kDevice);
    EXPECT_EQ(plan->moves[0].to, Tier::kHost);
    EXPECT_EQ(plan->moves[1], insert_move(key(5, i)));
    evicted.push_back(plan->moves[0].chunk);
    apply_plan(r, *plan);
  }
  EXPECT_EQ(evicted, (std::vector<ChunkKey>{key(0, 1), key(0, 2), key(1, 0)}));
}

TEST(Residency, PinnedChunksAreSkipped) {
  Residency r = filled(options(4, 2), 4);
  r.pin(key(0, 0));
  r.pin(key(0, 1));
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 2), Tier::kDevice, Tier::kHost), insert_move(key(0, 4))}));
}

TEST(Residency, FullHostDemotesItsVictimToDiskFirst) {
  // (0,4) and (0,5) pushed (0,0) and (0,1) to the host, which is now full.
  Residency r = filled(options(4, 2), 6);
  ASSERT_EQ(tier_of(r, key(0, 0)), Tier::kHost);
  ASSERT_EQ(tier_of(r, key(0, 1)), Tier::kHost);
  auto plan = r.plan_insert(key(0, 6));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 0), Tier::kHost, Tier::kDisk, true),
                                            move(key(0, 2), Tier::kDevice, Tier::kHost), insert_move(key(0, 6))}));

  apply_plan(r, *plan);
  EXPECT_EQ(tier_of(r, key(0, 0)), Tier::kDisk);
  EXPECT_TRUE(r.find(key(0, 0))->on_disk);
  EXPECT_EQ(tier_of(r, key(0, 2)), Tier::kHost);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 4 * kDeviceChunk);
  EXPECT_EQ(r.used_bytes(Tier::kHost), 2 * kHostChunk);
  EXPECT_EQ(r.used_bytes(Tier::kDisk), 0u);
  EXPECT_EQ(r.n_chunks(Tier::kDevice), 4);
  EXPECT_EQ(r.n_chunks(Tier::kHost), 2);
  EXPECT_EQ(r.n_chunks(Tier::kDisk), 1);
}

TEST(Residency, ZeroHostBudgetSendsVictimsToDisk) {
  Residency r = filled(options(4, 0), 4);
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves,
            (std::vector<Move>{move(key(0, 0), Tier::kDevice, Tier::kDisk, true), insert_move(key(0, 4))}));
}

TEST(Residency, HostSmallerThanAChunkSendsVictimsToDisk) {
  ResidencyOptions o = options(4, 0);
  o.host_budget_bytes = kHostChunk - 1;
  Residency r = filled(o, 4);
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves,
            (std::vector<Move>{move(key(0, 0), Tier::kDevice, Tier::kDisk, true), insert_move(key(0, 4))}));
}

TEST(Residency, HostFullOfPinnedChunksSendsVictimsToDisk) {
  Residency r = filled(options(4, 2), 6);
  r.pin(key(0, 0));
  r.pin(key(0, 1));
  auto plan = r.plan_insert(key(0, 6));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves,
            (std::vector<Move>{move(key(0, 2), Tier::kDevice, Tier::kDisk, true), insert_move(key(0, 6))}));
}

TEST(Residency, ChunkWithADiskCopyIsDemotedWithoutAWrite) {
  Residency r = filled(options(4, 0), 5);  // (0,0) was written to disk
  ASSERT_EQ(tier_of(r, key(0, 0)), Tier::kDisk);
  r.set_importance(key(0, 0), 1.0f);
  auto up = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(up.is_ok()) << up.status().message();
  EXPECT_EQ(up->moves, (std::vector<Move>{move(key(0, 1), Tier::kDevice, Tier::kDisk, true),
                                          move(key(0, 0), Tier::kDisk, Tier::kDevice)}));
  apply_plan(r, *up);
  EXPECT_EQ(tier_of(r, key(0, 0)), Tier::kDevice);
  EXPECT_TRUE(r.find(key(0, 0))->on_disk);  // the disk copy stays valid

  r.set_importance(key(0, 0), 0.0f);  // now the least recently used device chunk again
  auto down = r.plan_insert(key(0, 5));
  ASSERT_TRUE(down.is_ok()) << down.status().message();
  EXPECT_EQ(down->moves,
            (std::vector<Move>{move(key(0, 0), Tier::kDevice, Tier::kDisk, false), insert_move(key(0, 5))}));
}

TEST(Residency, BudgetTooSmallForThePinnedChunksIsAnError) {
  Residency r = filled(options(4, 2), 4);
  for (int64_t i = 0; i < 4; ++i) r.pin(key(0, i));
  auto plan = r.plan_insert(key(0, 4));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "device KV budget of 1.0 MiB cannot hold another chunk of 0.25 MiB: 1.0 MiB is pinned (sink, "
            "recent window, open chunks); raise the device budget");
  EXPECT_EQ(plan.status().setting(), Setting::kKvDeviceBudget);

  // One unpinned chunk is enough room again.
  r.unpin(key(0, 2));
  auto retry = r.plan_insert(key(0, 4));
  ASSERT_TRUE(retry.is_ok()) << retry.status().message();
  EXPECT_EQ(retry->moves, (std::vector<Move>{move(key(0, 2), Tier::kDevice, Tier::kHost), insert_move(key(0, 4))}));
}

TEST(Residency, ChunkLargerThanTheDeviceBudgetIsAnError) {
  ResidencyOptions o = options(0, 2);
  o.device_budget_bytes = 100 * kKiB;
  Residency r(o);
  auto plan = r.plan_insert(key(0, 0));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "device KV budget of 0.098 MiB cannot hold another chunk of 0.25 MiB: 0.0 MiB is pinned (sink, "
            "recent window, open chunks); raise the device budget");
  EXPECT_EQ(plan.status().setting(), Setting::kKvDeviceBudget);
}

TEST(Residency, DuplicateKeyIsAnError) {
  Residency r = filled(options(4, 2), 2);
  auto plan = r.plan_insert(key(0, 1));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "KV chunk (layer 0, index 1) is already resident; a chunk is inserted once");
}

TEST(Residency, ApplyCreatesEntriesAndMarksDiskCopies) {
  Residency r(options(4, 2));
  r.apply({key(2, 7), std::nullopt, Tier::kDisk, true});
  ASSERT_NE(r.find(key(2, 7)), nullptr);
  EXPECT_EQ(r.find(key(2, 7))->tier, Tier::kDisk);
  EXPECT_TRUE(r.find(key(2, 7))->on_disk);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 0u);
  EXPECT_EQ(r.n_chunks(Tier::kDisk), 1);

  r.apply(move(key(2, 7), Tier::kDisk, Tier::kHost));
  EXPECT_EQ(r.used_bytes(Tier::kHost), kHostChunk);
  r.apply(move(key(2, 7), Tier::kHost, Tier::kDevice));
  EXPECT_EQ(r.used_bytes(Tier::kHost), 0u);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), kDeviceChunk);
  EXPECT_EQ(r.find(key(2, 7))->tier, Tier::kDevice);
  EXPECT_TRUE(r.find(key(2, 7))->on_disk);
  EXPECT_EQ(r.n_chunks(Tier::kDisk), 0);
  EXPECT_EQ(r.n_chunks(Tier::kDevice), 1);
}

TEST(Residency, EraseAndClearReleaseTheBytes) {
  Residency r = filled(options(4, 2), 7);  // device (0,3..6), host (0,1) (0,2), disk (0,0)
  r.erase(key(0, 4));
  r.erase(key(0, 1));
  r.erase(key(0, 0));
  r.erase(key(9, 9));  // unknown: ignored
  EXPECT_EQ(r.find(key(0, 4)), nullptr);
  EXPECT_EQ(r.n_chunks(), 4);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 3 * kDeviceChunk);
  EXPECT_EQ(r.used_bytes(Tier::kHost), kHostChunk);
  EXPECT_EQ(r.n_chunks(Tier::kDisk), 0);

  // The freed device slot takes a new chunk without a demotion.
  auto plan = r.plan_insert(key(0, 0));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, std::vector<Move>{insert_move(key(0, 0))});

  r.clear();
  EXPECT_EQ(r.n_chunks(), 0);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 0u);
  EXPECT_EQ(r.used_bytes(Tier::kHost), 0u);
}

TEST(Residency, PinsNest) {
  Residency r = filled(options(4, 2), 4);
  r.pin(key(0, 0));
  r.pin(key(0, 0));
  r.unpin(key(0, 0));
  EXPECT_EQ(r.find(key(0, 0))->pins, 1);
  auto pinned = r.plan_insert(key(0, 4));
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().message();
  EXPECT_EQ(pinned->moves.front().chunk, key(0, 1));

  r.unpin(key(0, 0));
  EXPECT_EQ(r.find(key(0, 0))->pins, 0);
  auto unpinned = r.plan_insert(key(0, 4));
  ASSERT_TRUE(unpinned.is_ok()) << unpinned.status().message();
  EXPECT_EQ(unpinned->moves.front().chunk, key(0, 0));
}

TEST(ResidencyDeathTest, UnpinWithoutAPinIsAnInvariantViolation) {
  Residency r = filled(options(4, 2), 1);
  EXPECT_DEBUG_DEATH(r.unpin(key(0, 0)), "unpin without a matching pin");
}

TEST(Residency, PromotesIntoFreeSpace) {
  Residency r = filled(options(4, 2), 5);  // (0,0) on the host
  r.erase(key(0, 3));
  auto plan = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, std::vector<Move>{move(key(0, 0), Tier::kHost, Tier::kDevice)});
  apply_plan(r, *plan);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 4 * kDeviceChunk);
  EXPECT_EQ(r.used_bytes(Tier::kHost), 0u);
}

TEST(Residency, PromotionDisplacesAStrictlyLessImportantChunk) {
  Residency r = filled(options(4, 2), 5);  // device (0,1..4), host (0,0) with one slot free
  r.set_importance(key(0, 0), 2.0f);
  for (int64_t i = 1; i <= 4; ++i) r.set_importance(key(0, i), i == 3 ? 1.0f : 5.0f);
  auto plan = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 3), Tier::kDevice, Tier::kHost),
                                            move(key(0, 0), Tier::kHost, Tier::kDevice)}));
}

TEST(Residency, PromotionNeverDisplacesAnEquallyImportantChunk) {
  Residency r = filled(options(4, 2), 5);
  r.set_importance(key(0, 0), 2.0f);
  for (int64_t i = 1; i <= 4; ++i) r.set_importance(key(0, i), 2.0f);
  r.set_importance(key(0, 1), 0.0f);
  r.pin(key(0, 1));  // less important, but pinned
  auto plan = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_TRUE(plan->moves.empty());
}

// Device (0,3..6), host (0,1) (0,2), disk (0,0).
Residency three_tiers() {
  Residency r = filled(options(4, 2), 7);
  EXPECT_EQ(tier_of(r, key(0, 0)), Tier::kDisk);
  EXPECT_EQ(tier_of(r, key(0, 1)), Tier::kHost);
  EXPECT_EQ(tier_of(r, key(0, 2)), Tier::kHost);
  return r;
}

TEST(Residency, PromotionFromDiskToDeviceCascades) {
  Residency r = three_tiers();
  r.set_importance(key(0, 0), 5.0f);
  auto plan = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 1), Tier::kHost, Tier::kDisk, true),
                                            move(key(0, 3), Tier::kDevice, Tier::kHost),
                                            move(key(0, 0), Tier::kDisk, Tier::kDevice)}));
  apply_plan(r, *plan);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), 4 * kDeviceChunk);
  EXPECT_EQ(r.used_bytes(Tier::kHost), 2 * kHostChunk);
}

TEST(Residency, PromotionSendsItsVictimToDiskRatherThanDisplaceImportantHostChunks) {
  Residency r = three_tiers();
  r.set_importance(key(0, 0), 5.0f);
  r.set_importance(key(0, 1), 5.0f);
  r.set_importance(key(0, 2), 7.0f);
  auto plan = r.plan_promote(key(0, 0), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 3), Tier::kDevice, Tier::kDisk, true),
                                            move(key(0, 0), Tier::kDisk, Tier::kDevice)}));
}

TEST(Residency, PromotionFromAFullHostDemotesAnotherHostChunkFirst) {
  // The promoted chunk's host slot frees only with its own move, which comes last.
  Residency r = three_tiers();
  r.set_importance(key(0, 1), 5.0f);
  auto plan = r.plan_promote(key(0, 1), Tier::kDevice);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 2), Tier::kHost, Tier::kDisk, true),
                                            move(key(0, 3), Tier::kDevice, Tier::kHost),
                                            move(key(0, 1), Tier::kHost, Tier::kDevice)}));
}

TEST(Residency, PromotionFromDiskToHost) {
  Residency r = three_tiers();
  r.set_importance(key(0, 0), 1.0f);
  auto plan = r.plan_promote(key(0, 0), Tier::kHost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->moves, (std::vector<Move>{move(key(0, 1), Tier::kHost, Tier::kDisk, true),
                                            move(key(0, 0), Tier::kDisk, Tier::kHost)}));

  r.set_importance(key(0, 1), 1.0f);
  r.set_importance(key(0, 2), 1.0f);
  auto blocked = r.plan_promote(key(0, 0), Tier::kHost);
  ASSERT_TRUE(blocked.is_ok()) << blocked.status().message();
  EXPECT_TRUE(blocked->moves.empty());
}

TEST(Residency, PromotionThatIsNotOne) {
  Residency r = three_tiers();
  r.set_importance(key(0, 1), 5.0f);

  auto same = r.plan_promote(key(0, 1), Tier::kHost);
  ASSERT_TRUE(same.is_ok()) << same.status().message();
  EXPECT_TRUE(same->moves.empty());

  auto slower = r.plan_promote(key(0, 1), Tier::kDisk);
  ASSERT_FALSE(slower.is_ok());
  EXPECT_EQ(slower.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(slower.status().message(),
            "KV chunk (layer 0, index 1) is on the host tier; it cannot be promoted to the slower disk tier "
            "(chunks move down only as victims of a plan)");

  auto unknown = r.plan_promote(key(3, 0), Tier::kDevice);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);

  r.pin(key(0, 1));  // a live view reads it where it is
  auto pinned = r.plan_promote(key(0, 1), Tier::kDevice);
  ASSERT_TRUE(pinned.is_ok()) << pinned.status().message();
  EXPECT_TRUE(pinned->moves.empty());
}

// --- Property test -------------------------------------------------------------------------

using Snapshot = std::vector<std::tuple<ChunkKey, Tier, int, float, uint64_t, bool>>;

// Every chunk with its entry, in key order.
std::vector<std::pair<ChunkKey, ChunkResidency>> entries(const Residency& r) {
  std::vector<std::pair<ChunkKey, ChunkResidency>> e;
  r.for_each_chunk([&](ChunkKey k, const ChunkResidency& c) { e.emplace_back(k, c); });
  return e;
}

Snapshot snapshot(const Residency& r) {
  Snapshot s;
  s.reserve(static_cast<size_t>(r.n_chunks()));
  r.for_each_chunk([&](ChunkKey k, const ChunkResidency& c) {
    s.emplace_back(k, c.tier, c.pins, c.importance, c.last_use, c.on_disk);
  });
  return s;
}

// Budgets, byte accounting, one tier per chunk and the eviction index, recounted from the
// chunks themselves.
void check_invariants(const Residency& r) {
  const ResidencyOptions& o = r.options();
  int64_t n[kNumTiers] = {};
  std::set<Residency::Evictable> evictable[2];
  int64_t n_all = 0;
  r.for_each_chunk([&](ChunkKey k, const ChunkResidency& c) {
    ASSERT_TRUE(c.tier == Tier::kDevice || c.tier == Tier::kHost || c.tier == Tier::kDisk);
    ++n[static_cast<int>(c.tier)];
    ++n_all;
    if (c.tier != Tier::kDisk && c.pins == 0) evictable[c.tier == Tier::kDevice ? 0 : 1].insert({c.importance, c.last_use, k});
  });
  EXPECT_EQ(r.n_chunks(), n_all);
  EXPECT_EQ(r.evictable(Tier::kDevice), std::vector<Residency::Evictable>(evictable[0].begin(), evictable[0].end()));
  EXPECT_EQ(r.evictable(Tier::kHost), std::vector<Residency::Evictable>(evictable[1].begin(), evictable[1].end()));
  EXPECT_EQ(n[0] + n[1] + n[2], r.n_chunks());
  for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) EXPECT_EQ(r.n_chunks(t), n[static_cast<int>(t)]);
  EXPECT_EQ(r.used_bytes(Tier::kDevice), static_cast<uint64_t>(n[0]) * o.device_chunk_bytes);
  EXPECT_EQ(r.used_bytes(Tier::kHost), static_cast<uint64_t>(n[1]) * o.host_chunk_bytes);
  EXPECT_EQ(r.used_bytes(Tier::kDisk), 0u);
  EXPECT_LE(r.used_bytes(Tier::kDevice), o.device_budget_bytes);
  EXPECT_LE(r.used_bytes(Tier::kHost), o.host_budget_bytes);
}

// Applies a plan move by move, checking that each is executable and leaves the invariants whole.
void apply_checked(Residency& r, const Plan& plan, int64_t (&n_moves)[kNumTiers][kNumTiers]) {
  std::set<ChunkKey> moved;
  for (const Move& m : plan.moves) {
    ASSERT_TRUE(moved.insert(m.chunk).second) << "a chunk moves twice in one plan";
    const ChunkResidency* c = r.find(m.chunk);
    if (m.from) {
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->tier, *m.from);
      EXPECT_EQ(c->pins, 0);
      EXPECT_NE(m.to, *m.from);
      EXPECT_EQ(m.needs_write, m.to == Tier::kDisk && !c->on_disk);
    } else {
      EXPECT_EQ(c, nullptr);
    }
    r.apply(m);
    if (m.from) ++n_moves[static_cast<int>(*m.from)][static_cast<int>(m.to)];
    check_invariants(r);
    if (::testing::Test::HasFailure()) return;
  }
}

bool evicts_before(const std::pair<ChunkKey, ChunkResidency>& a, const std::pair<ChunkKey, ChunkResidency>& b) {
  return std::tie(a.second.importance, a.second.last_use, a.first) <
         std::tie(b.second.importance, b.second.last_use, b.first);
}

void run_random_ops(const ResidencyOptions& o, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&rng](int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Residency r(o);
  int64_t next_index[2] = {0, 0};
  uint64_t tick = 0;
  int64_t n_failed_inserts = 0;
  int64_t n_moves[kNumTiers][kNumTiers] = {};  // [from][to], over every applied plan
  const auto random_chunk = [&]() {
    return std::next(entries(r).begin(), uniform(0, r.n_chunks() - 1))->first;
  };
  // A random chunk of `tier`, or of any tier when `tier` has none.
  const auto random_chunk_in = [&](Tier tier) {
    std::vector<ChunkKey> in_tier;
    for (const auto& [ck, c] : entries(r)) {
      if (c.tier == tier) in_tier.push_back(ck);
    }
    if (in_tier.empty()) return random_chunk();
    return in_tier[static_cast<size_t>(uniform(0, static_cast<int64_t>(in_tier.size()) - 1))];
  };

  for (int op = 0; op < 3000 && !::testing::Test::HasFailure(); ++op) {
    const int64_t dice = uniform(0, 99);
    if (dice < 20 || r.n_chunks() == 0) {
      const int layer = static_cast<int>(uniform(0, 1));
      const ChunkKey k = key(layer, next_index[layer]++);
      // The device chunks an insertion may demote, in the order it must take them.
      std::vector<std::pair<ChunkKey, ChunkResidency>> candidates;
      for (const auto& [ck, c] : entries(r)) {
        if (c.tier == Tier::kDevice && c.pins == 0) candidates.emplace_back(ck, c);
      }
      std::sort(candidates.begin(), candidates.end(), evicts_before);
      const Snapshot before = snapshot(r);
      auto plan = r.plan_insert(k);
      ASSERT_EQ(snapshot(r), before) << "planning must not change the residency";
      if (!plan.is_ok()) {
        EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
        EXPECT_TRUE(candidates.empty()) << "an insertion failed with unpinned device chunks left";
        ++n_failed_inserts;
        continue;
      }
      ASSERT_FALSE(plan->moves.empty());
      EXPECT_EQ(plan->moves.back(), insert_move(k));
      size_t n_device_victims = 0;
      for (const Move& m : plan->moves) {
        if (m.from != Tier::kDevice) continue;
        ASSERT_LT(n_device_victims, candidates.size());
        EXPECT_EQ(m.chunk, candidates[n_device_victims++].first);
      }
      apply_checked(r, *plan, n_moves);
      r.touch(k, ++tick);
    } else if (dice < 35) {
      r.touch(random_chunk(), ++tick);
    } else if (dice < 50) {
      r.set_importance(random_chunk(), static_cast<float>(uniform(0, 3)));
    } else if (dice < 60) {
      // Most pins go to device chunks, so that pinned chunks sometimes fill the device.
      r.pin(uniform(0, 3) != 0 ? random_chunk_in(Tier::kDevice) : random_chunk());
    } else if (dice < 70) {
      std::vector<ChunkKey> pinned;
      for (const auto& [ck, c] : entries(r)) {
        if (c.pins > 0) pinned.push_back(ck);
      }
      if (!pinned.empty()) r.unpin(pinned[static_cast<size_t>(uniform(0, static_cast<int64_t>(pinned.size()) - 1))]);
    } else if (dice < 85) {
      const ChunkKey k = random_chunk_in(uniform(0, 1) == 0 ? Tier::kHost : Tier::kDisk);
      const ChunkResidency c = *r.find(k);
      if (c.tier == Tier::kDevice) continue;
      const Tier to = c.tier == Tier::kHost ? Tier::kDevice : static_cast<Tier>(uniform(0, 1));
      const bool free_space = to == Tier::kDevice
                                  ? r.used_bytes(Tier::kDevice) + o.device_chunk_bytes <= o.device_budget_bytes
                                  : o.host_budget_bytes > 0 &&
                                        r.used_bytes(Tier::kHost) + o.host_chunk_bytes <= o.host_budget_bytes;
      const Snapshot before = snapshot(r);
      auto plan = r.plan_promote(k, to);
      ASSERT_TRUE(plan.is_ok()) << plan.status().message();
      ASSERT_EQ(snapshot(r), before) << "planning must not change the residency";
      if (c.pins > 0) {
        EXPECT_TRUE(plan->moves.empty());
        continue;
      }
      if (free_space) {
        EXPECT_EQ(plan->moves, std::vector<Move>{move(k, c.tier, to)});
      }
      if (plan->moves.empty()) continue;
      EXPECT_EQ(plan->moves.back(), move(k, c.tier, to));
      for (size_t i = 0; i + 1 < plan->moves.size(); ++i) {
        const Move& m = plan->moves[i];
        EXPECT_LT(r.find(m.chunk)->importance, c.importance) << "a promotion displaced a chunk as important as the promoted one";
        EXPECT_GT(m.to, *m.from) << "a displaced chunk moves down";
      }
      apply_checked(r, *plan, n_moves);
    } else {
      const ChunkKey k = random_chunk();
      if (r.find(k)->pins == 0) r.erase(k);
      check_invariants(r);
    }
  }
  // The sequence did reach the interesting cases.
  const auto n = [&n_moves](Tier from, Tier to) { return n_moves[static_cast<int>(from)][static_cast<int>(to)]; };
  EXPECT_GT(n_failed_inserts, 0);
  EXPECT_GT(n(Tier::kDisk, Tier::kDevice), 0);
  if (o.host_budget_bytes >= o.host_chunk_bytes) {
    EXPECT_GT(n(Tier::kDevice, Tier::kHost), 0);
    EXPECT_GT(n(Tier::kHost, Tier::kDisk), 0);
    EXPECT_GT(n(Tier::kHost, Tier::kDevice), 0);
    EXPECT_GT(n(Tier::kDisk, Tier::kHost), 0);
  } else {
    EXPECT_GT(n(Tier::kDevice, Tier::kDisk), 0);
  }
}

TEST(Residency, RandomOperationsKeepTheInvariants) {
  constexpr uint64_t kChunk = 4096;
  ResidencyOptions with_host;  // budgets that are not whole numbers of chunks
  with_host.device_chunk_bytes = kChunk;
  with_host.host_chunk_bytes = kChunk / 4;
  with_host.device_budget_bytes = 6 * kChunk + 100;
  with_host.host_budget_bytes = 5 * (kChunk / 4) + 7;
  ResidencyOptions no_host = with_host;
  no_host.host_budget_bytes = 0;
  ResidencyOptions same_size = with_host;
  same_size.host_chunk_bytes = kChunk;
  same_size.host_budget_bytes = 3 * kChunk - 1;

  for (const ResidencyOptions& o : {with_host, no_host, same_size}) {
    for (uint32_t seed : {1u, 2u, 3u, 4u}) {
      SCOPED_TRACE(::testing::Message() << "host budget " << o.host_budget_bytes << ", seed " << seed);
      run_random_ops(o, seed);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace leoam
