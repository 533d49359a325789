// Residency: which tier each KV chunk lives in, and the placement and eviction decisions, as
// metadata only: no bytes and no I/O, so every decision is unit-tested exactly. Check, then
// mutate: plan_*() return a Plan (ordered moves) and change nothing; apply() records one move once
// the store (tiered_kv_cache.h) has carried it out, so a store that fails halfway through a plan
// has applied exactly the moves it completed. Every chunk has one home tier; device and host stay
// within their byte budgets after each move; new chunks land on the device and victims cascade
// down (lowest importance, then least recently used, then lowest (layer, index)); pinned chunks
// never move; promotion displaces only strictly less important chunks, so a scan of equals does
// not thrash. The rules in full: docs/kv-store.md#residency-rules
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "core/status.h"
#include "kv/tier.h"

namespace leoam {

struct ChunkKey {
  int layer = 0;
  int64_t index = 0;  // chunk index within the layer: positions [index * C, (index + 1) * C)

  auto operator<=>(const ChunkKey&) const = default;
};

struct ResidencyOptions {
  uint64_t device_budget_bytes = 0;
  uint64_t host_budget_bytes = 0;
  uint64_t device_chunk_bytes = 0;  // a chunk's size on the device
  uint64_t host_chunk_bytes = 0;    // a chunk's size on the host (its stored form)
};

struct ChunkResidency {
  Tier tier = Tier::kDevice;
  int pins = 0;            // > 0: must stay where it is (sink, recent window, open tail)
  float importance = 0.0f; // set by the selection policies; higher stays closer to compute
  uint64_t last_use = 0;   // tick of the last gather that read it
  bool on_disk = false;    // a valid copy exists on disk (written once sealed: demoted, or written through)
};

class Residency {
 public:
  struct Move {
    ChunkKey chunk;
    std::optional<Tier> from;  // nullopt: the chunk is new (insert)
    Tier to = Tier::kDevice;
    bool needs_write = false;  // to == kDisk and no disk copy exists yet

    bool operator==(const Move&) const = default;
  };
  struct Plan {
    std::vector<Move> moves;  // in the order they must be carried out
  };

  explicit Residency(const ResidencyOptions& options);

  const ResidencyOptions& options() const { return options_; }

  // Moves that make room for the new chunk `key` on the device and insert it: demotions first.
  // Fails (kInvalidArgument, naming the budget and what is pinned) when pinned chunks leave no
  // room, or when the key exists.
  Result<Plan> plan_insert(ChunkKey key) const;
  // Moves that bring `key` to `to` (a faster tier than its own), or an empty plan when that would
  // displace chunks of equal or higher importance, when it is there already, or when it is
  // pinned. Fails with kNotFound for an unknown key and kInvalidArgument when `to` is slower.
  Result<Plan> plan_promote(ChunkKey key, Tier to) const;

  // Records one move of a plan, once carried out. A move with no `from` creates the entry (no
  // pins, importance 0, last_use 0); a move to the disk marks the disk copy as existing.
  void apply(const Move& move);

  // Forgets chunks (truncation); an unknown key is ignored. Their disk copies are forgotten too.
  void erase(ChunkKey key);
  void clear();

  // These name an existing chunk (asserted). Pins nest: each pin needs one unpin.
  void pin(ChunkKey key);
  void unpin(ChunkKey key);
  void set_importance(ChunkKey key, float importance);
  void touch(ChunkKey key, uint64_t tick);
  // The store wrote the (sealed) chunk's copy to disk where it lives: demoting it later needs no
  // write.
  void set_on_disk(ChunkKey key);

  const ChunkResidency* find(ChunkKey key) const;
  uint64_t used_bytes(Tier tier) const;  // device and host; 0 for disk
  int64_t n_chunks(Tier tier) const;
  int64_t n_chunks() const { return n_total_; }
  // Calls f(key, entry) for every chunk, in key order.
  template <typename F>
  void for_each_chunk(F f) const {
    for (size_t layer = 0; layer < chunks_.size(); ++layer) {
      for (size_t i = 0; i < chunks_[layer].size(); ++i) {
        if (chunks_[layer][i]) f(ChunkKey{static_cast<int>(layer), static_cast<int64_t>(i)}, chunks_[layer][i]->entry);
      }
    }
  }

  // A device or host chunk that may be evicted, keyed in victim order.
  struct Evictable {
    float importance = 0.0f;
    uint64_t last_use = 0;
    ChunkKey key;

    auto operator<=>(const Evictable&) const = default;
  };
  // The unpinned chunks of the device or host tier, first victim first (a sorted copy).
  std::vector<Evictable> evictable(Tier tier) const;
  // The first unpinned chunk of the device or host tier in victim order for which skip(key) is
  // false, among those of importance below `below` when it is set; nullopt when there is none.
  // O((skipped + 1) * log n): victim searches never scan every chunk.
  std::optional<ChunkKey> first_victim(Tier tier, std::optional<float> below,
                                       const std::function<bool(ChunkKey)>& skip) const;

 private:
  // A chunk's entry, and the stamp of its live entry in the eviction queue (0: not evictable).
  struct Slot {
    ChunkResidency entry;
    uint64_t stamp = 0;
  };
  // An eviction queue entry: live while its chunk's slot holds the same stamp.
  struct Queued {
    Evictable e;
    uint64_t stamp = 0;
  };

  // Keep the eviction queues in step with an entry: drop it before a change, add it back after.
  void unindex(Slot& s);
  void index(ChunkKey key, Slot& s);
  // Sets the entry's importance and last use, and queues it again where it now belongs.
  void reorder(ChunkKey key, Slot& s, float importance, uint64_t last_use);
  Slot& must_find_slot(ChunkKey key);
  const Slot* find_slot(ChunkKey key) const;
  bool live(const Queued& q) const;

  ResidencyOptions options_;
  // [layer][index]: chunk (layer, index)'s entry, where it has one. A lookup is an index, not a
  // tree walk: a decode step looks up every chunk it reads (with 8-token chunks, tens of
  // thousands a step at 32K tokens), where an ordered map's walks cost a visible share of the
  // step (docs/kv-store.md#residency-rules).
  std::vector<std::vector<std::optional<Slot>>> chunks_;
  int64_t n_total_ = 0;
  // [device, host]: the evictable chunks in binary min-heaps of victim order. A change of a
  // chunk's order pushes a new entry and leaves the old one stale (its stamp no longer the
  // slot's), dropped when it reaches the top or when stale entries outnumber live ones. A decode
  // step reorders every chunk it picks and reads, tens of thousands at 32K tokens: in ordered
  // sets each reorder walked trees of scattered nodes (docs/kv-store.md#residency-rules), while
  // a push onto the heap's array mostly stops at once, since a chunk just read or picked sorts
  // late. Victim searches pop from the top, and put back what they passed over: mutable, though
  // a search changes nothing anyone can see.
  mutable std::array<std::vector<Queued>, 2> queue_;
  std::array<int64_t, 2> n_evictable_{};
  uint64_t next_stamp_ = 1;
  mutable std::vector<Queued> passed_;  // a victim search's entries taken off the top
  std::array<int64_t, kNumTiers> n_chunks_{};
  uint64_t used_device_ = 0;
  uint64_t used_host_ = 0;
};

}  // namespace leoam
