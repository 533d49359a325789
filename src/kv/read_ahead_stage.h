// ReadAheadStage: the tiered store's end of its read-ahead (read_ahead.h). It starts a layer's
// job on the disk chunks the store names, settles a layer before the store uses its chunk file,
// and hands a gather the chunks staged for it in a form they may be served in (a lossy chunk only
// as read compressed), counting those used and those that a layer read ahead missed. Without
// staging (the default, or no staging bytes) every call does nothing and nothing is staged.
// Thread safety: ReadAhead's; the store's thread makes every call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/disk_tier.h"
#include "kv/kv_stats.h"
#include "kv/read_ahead.h"

namespace leoam {

class Trace;

class ReadAheadStage {
 public:
  ReadAheadStage() = default;
  // Stages reads of `disk` in staging_bytes (both buffers; 0: no read-ahead), counting into
  // `stats`, which must outlive the stage; the waits and reads go into `trace` (may be null).
  static Result<ReadAheadStage> create(DiskTier& disk, uint64_t staging_bytes, KvStats& stats, Trace* trace);

  bool enabled() const { return read_ahead_ != nullptr; }
  // Reads `chunks` of `layer` (on disk, each its index and form) ahead, as many as the staging holds.
  void start(int layer, std::span<const DiskChunkRead> chunks);
  // Before the store uses `layer`'s chunk file: its job is finished and counted.
  void settle(int layer);
  // Forgets every job's chunks (the KV they hold may be about to change).
  void drop_all();
  // For a gather of settled `layer`: the staged read of chunk `index` when it was read in a form
  // the chunk may be served in (lossy: compressed only), counted used; else null, counted missed
  // where the layer was read ahead.
  const DiskChunkRead* take(int layer, int64_t index, bool lossy);
  uint64_t buffer_bytes() const { return read_ahead_ != nullptr ? read_ahead_->buffer_bytes() : 0; }

 private:
  std::unique_ptr<ReadAhead> read_ahead_;  // null: no read-ahead
  KvStats* stats_ = nullptr;
  Trace* trace_ = nullptr;
};

}  // namespace leoam
