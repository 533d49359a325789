#include "kv/shared_prefix_chunks.h"

#include <utility>
#include <vector>

namespace leoam {

int64_t SharedPrefixChunks::shareable_chunks(const DiskTier& base, int n_layer, int64_t n_positions) const {
  if (disk_ == nullptr) return 0;
  // Only chunks stored as they are, in this tier's geometry, read as they are.
  const ChunkGeometry& b = base.geometry();
  const ChunkGeometry& g = disk_->geometry();
  if (disk_->codec() != KvCodec::kNone || disk_->transfer_codec() != KvCodec::kNone ||
      base.codec() != KvCodec::kNone || b.chunk_tokens != g.chunk_tokens || b.n_kv_heads != g.n_kv_heads ||
      b.head_dim != g.head_dim || b.dtype != g.dtype) {
    return 0;
  }
  const int64_t c = g.chunk_tokens;
  int64_t n_chunks = n_positions / c;
  for (int il = 0; il < n_layer; ++il) {
    for (int64_t i = 0; i < n_chunks; ++i) {
      if (base.n_tokens_of(il, i) != c) n_chunks = i;  // whole chunks only
    }
  }
  return n_chunks;
}

Status SharedPrefixChunks::share(std::shared_ptr<DiskTier> base, int n_layer, int64_t n_chunks) {
  if (disk_ == nullptr) return internal_error("KV store: a prefix is shared only into a disk tier");
  return disk_->share_prefix(std::move(base), std::vector<int64_t>(static_cast<size_t>(n_layer), n_chunks));
}

void SharedPrefixChunks::count_move(const Residency::Move& move) {
  if (is_shared(move.chunk)) n_on_disk_ += (move.to == Tier::kDisk) - (move.from == Tier::kDisk);
}

void SharedPrefixChunks::count_forgotten(ChunkKey key, Tier tier) {
  if (tier == Tier::kDisk && is_shared(key)) --n_on_disk_;
}

void SharedPrefixChunks::report(KvStats& stats, uint64_t disk_chunk_bytes) const {
  const auto disk = static_cast<int>(Tier::kDisk);
  stats.resident_chunks[disk] -= n_on_disk_;
  stats.resident_bytes[disk] -= static_cast<uint64_t>(n_on_disk_) * disk_chunk_bytes;
  stats.shared_disk_chunks = n_on_disk_;
  stats.shared_disk_bytes = disk_ != nullptr ? static_cast<uint64_t>(n_on_disk_) * disk_->slot_bytes() : 0;
}

}  // namespace leoam
