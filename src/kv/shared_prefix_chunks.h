// SharedPrefixChunks: the chunks that a store's disk tier reads in place from a kept session's
// tier (DiskTier::share_prefix). It says how many whole chunks of such a base the store can
// share (both stored as they are, in one geometry, no compressed copy here), shares them, and
// counts the shared chunks that are on the disk tier now, from the store's moves: they cost the
// store no disk bytes of its own, and its stats report them apart. Without a disk tier it shares
// nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "kv/disk_tier.h"
#include "kv/kv_stats.h"
#include "kv/residency.h"

namespace leoam {

class SharedPrefixChunks {
 public:
  explicit SharedPrefixChunks(DiskTier* disk = nullptr) : disk_(disk) {}

  // The whole chunks of `base`'s first n_positions positions, the same number in each of n_layer
  // layers, that the disk tier can read in place; 0 where it cannot share.
  int64_t shareable_chunks(const DiskTier& base, int n_layer, int64_t n_positions) const;
  // Reads chunks [0, n_chunks) of every layer from `base` from now on (DiskTier::share_prefix).
  [[nodiscard]] Status share(std::shared_ptr<DiskTier> base, int n_layer, int64_t n_chunks);
  bool is_shared(ChunkKey key) const {
    return disk_ != nullptr && key.index < disk_->shared_chunks(key.layer);
  }
  // Counts a move that the store carried out (or applied) for a chunk, before its layer forgets
  // any chunk; and a chunk forgotten while on `tier`.
  void count_move(const Residency::Move& move);
  void count_forgotten(ChunkKey key, Tier tier);
  void clear() { n_on_disk_ = 0; }
  int64_t n_on_disk() const { return n_on_disk_; }
  // Takes the shared chunks on the disk out of stats' resident disk chunks and bytes (which
  // counted every disk chunk at disk_chunk_bytes) and reports them apart, at a slot each.
  void report(KvStats& stats, uint64_t disk_chunk_bytes) const;

 private:
  DiskTier* disk_;
  int64_t n_on_disk_ = 0;
};

}  // namespace leoam
