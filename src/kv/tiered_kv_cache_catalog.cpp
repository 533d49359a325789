// TieredKvCache as the catalog the selection policies see: chunk tiers, and chunk abstracts
// from memory (kept, or computed from the keys) or from the disk (the abstract records in one
// batch of reads, or the KV read again); and a sealed chunk's record made again for a truncation.
#include "kv/tiered_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/huge_pages.h"

namespace leoam {

int64_t TieredKvCache::n_chunks(int layer) const {
  return (n_tokens(layer) + options_.chunk_tokens - 1) / options_.chunk_tokens;
}

Tier TieredKvCache::chunk_tier(int layer, int64_t index) const {
  const ChunkResidency* r = residency_.find({layer, index});
  return r != nullptr ? r->tier : Tier::kDisk;
}

Status TieredKvCache::load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource source,
                                     uint32_t* signs) {
  const ChunkRun run{i0, i1};
  return gather_abstracts(layer, {&run, 1}, dst, source, signs);
}

Status TieredKvCache::load_abstract_runs(int layer, std::span<const ChunkRun> runs, float* dst,
                                         AbstractSource source) {
  return gather_abstracts(layer, runs, dst, source, nullptr);
}

Status TieredKvCache::gather_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, AbstractSource source,
                                       uint32_t* signs) {
  for (const ChunkRun& r : runs) {
    if (layer < 0 || layer >= options_.shape.n_layer || r.begin < 0 || r.end > n_chunks(layer) || r.begin > r.end) {
      return invalid_argument("KV abstracts: chunks [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                              ") of layer " + std::to_string(layer) + " out of range");
    }
  }
  const int64_t n_box = geometry_.box_floats();
  const int64_t n_floats = geometry_.abstract_floats();
  // One whole abstract (box, then signs) into the caller's arrays, at output position k.
  const auto deliver = [&](int64_t k, const float* abstract) {
    std::memcpy(dst + k * n_box, abstract, static_cast<size_t>(n_box) * sizeof(float));
    if (signs != nullptr) abstract_signs(geometry_, abstract, signs + k * geometry_.sign_words());
  };
  // A device or host chunk's: kept, or computed from its keys (both tiers hold them as they are).
  const auto deliver_resident = [&](int64_t k, const Chunk& c) {
    if (keeps_abstracts(options_)) return deliver(k, c.abstract.data());
    const uint8_t* keys = c.device != nullptr ? c.device.get() : c.host.get();
    chunk_key_box(geometry_, keys, c.n_filled, dst + k * n_box);
    cover_round_trip(c, keys, dst + k * n_box);
    if (signs != nullptr) chunk_key_signs(geometry_, keys, c.n_filled, signs + k * geometry_.sign_words());
  };
  const LayerState& L = layers_[layer];
  // In-memory chunks (device, host) are delivered at once; the disk ones are gathered into runs of
  // their own, read together, then delivered where their chunks go.
  std::vector<ChunkRun> disk_runs;
  std::vector<int64_t> disk_at;  // per disk run, the output position of its first chunk
  int64_t k = 0;
  for (const ChunkRun& r : runs) {
    for (int64_t i = r.begin; i < r.end;) {
      if (is_resident(L.chunks[i])) {
        deliver_resident(k++, L.chunks[i]);
        ++i;
        continue;
      }
      int64_t end = i + 1;
      while (end < r.end && !is_resident(L.chunks[end])) ++end;
      disk_runs.push_back({i, end});
      disk_at.push_back(k);
      k += end - i;
      i = end;
    }
  }
  if (disk_runs.empty()) return Status::ok();
  int64_t n_disk = 0;
  for (const ChunkRun& r : disk_runs) n_disk += r.size();
  // Whole abstracts of the disk chunks: MiBs when a tree first covers a long prompt.
  std::vector<float, HugePageAllocator<float>> whole(static_cast<size_t>(n_disk * n_floats));
  if (source == AbstractSource::kLka) {  // their records, every run in one batch of reads
    LEOAM_RETURN_IF_ERROR(disk_->read_abstracts(layer, disk_runs, whole.data()));
  } else {  // their KV, read in full and summarized again
    float* part = whole.data();
    for (const ChunkRun& r : disk_runs) {
      LEOAM_RETURN_IF_ERROR(abstracts_from_kv(layer, r.begin, r.end, part));
      part += r.size() * n_floats;
    }
  }
  const float* src = whole.data();
  for (size_t d = 0; d < disk_runs.size(); ++d) {
    for (int64_t j = 0; j < disk_runs[d].size(); ++j, src += n_floats) deliver(disk_at[d] + j, src);
  }
  return Status::ok();
}

Status TieredKvCache::abstracts_from_kv(int layer, int64_t i0, int64_t i1, float* dst) {
  const KvCodec codec = options_.host_codec;
  const size_t slot = disk_->slot_bytes();
  const auto n_slots = static_cast<int64_t>(scratch_.size() / slot);
  const int64_t n_floats = geometry_.abstract_floats();
  std::vector<DiskChunkRead> reads;
  for (int64_t b0 = i0; b0 < i1; b0 += n_slots) {  // in batches the gather scratch holds
    const int64_t b1 = std::min(i1, b0 + n_slots);
    reads.clear();
    for (int64_t i = b0; i < b1; ++i) reads.push_back({i, scratch_.data() + (i - b0) * slot});
    read_ahead_.settle(layer);
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, reads));
    stats_[Tier::kDisk].hits += static_cast<uint64_t>(b1 - b0);
    for (int64_t i = b0; i < b1; ++i) {
      const uint8_t* stored = reads[i - b0].dst;
      const uint8_t* keys = stored;
      if (codec != KvCodec::kNone) {
        decode_chunk(geometry_, codec, stored, row_scratch_.data());
        keys = row_scratch_.data();
      }
      float* a = dst + (i - i0) * n_floats;
      reset_abstract(geometry_, a);
      update_abstract(geometry_, keys, 0, layers_[layer].chunks[i].n_filled, a);
    }
  }
  return Status::ok();
}

Status TieredKvCache::record_abstract_again(int layer, int64_t index, float* a) {
  const Chunk& c = layers_[layer].chunks[index];
  if (keeps_abstracts(options_) && !c.abstract.empty()) {
    std::memcpy(a, c.abstract.data(), c.abstract.size() * sizeof(float));
    return Status::ok();
  }
  const uint8_t* keys = c.device != nullptr ? c.device.get() : c.host.get();
  if (keys == nullptr) {  // on the disk only: its stored form, decoded
    read_ahead_.settle(layer);
    const DiskChunkRead read{index, scratch_.data()};
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, {&read, 1}));
    keys = scratch_.data();
    if (options_.host_codec != KvCodec::kNone) {
      decode_chunk_keys(geometry_, options_.host_codec, scratch_.data(), row_scratch_.data());
      keys = row_scratch_.data();
    }
  }
  reset_abstract(geometry_, a);
  update_abstract(geometry_, keys, 0, c.n_filled, a);
  cover_round_trip(c, keys, a);
  return Status::ok();
}

}  // namespace leoam
