#include "kv/read_ahead_stage.h"

#include <utility>

namespace leoam {

Result<ReadAheadStage> ReadAheadStage::create(DiskTier& disk, uint64_t staging_bytes, KvStats& stats, Trace* trace) {
  ReadAheadStage stage;
  if (staging_bytes == 0) return stage;
  LEOAM_ASSIGN_OR_RETURN(stage.read_ahead_, ReadAhead::create(disk, staging_bytes, trace));
  stage.stats_ = &stats;
  stage.trace_ = trace;
  return stage;
}

void ReadAheadStage::start(int layer, std::span<const DiskChunkRead> chunks) {
  if (read_ahead_ != nullptr) read_ahead_->start(layer, chunks, *stats_);
}

void ReadAheadStage::settle(int layer) {
  if (read_ahead_ != nullptr) read_ahead_->settle(layer, *stats_, trace_);
}

void ReadAheadStage::drop_all() {
  if (read_ahead_ != nullptr) read_ahead_->drop_all(*stats_);
}

const DiskChunkRead* ReadAheadStage::take(int layer, int64_t index, bool lossy) {
  if (read_ahead_ == nullptr) return nullptr;
  const DiskChunkRead* staged = read_ahead_->staged(layer, index);
  if (staged != nullptr && !staged->compressed && lossy) staged = nullptr;
  if (staged != nullptr) {
    stats_->read_ahead.chunks_used += 1;
  } else if (read_ahead_->covers(layer)) {
    stats_->read_ahead.chunks_missed += 1;
  }
  return staged;
}

}  // namespace leoam
