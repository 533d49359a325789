// TieredKvCache's reads: gathers of token ranges in batches of bounded scratch, each planned
// (accounting, staged reads taken, scratch packed), issued (disk reads, overlapped with the visit
// of the chunks in memory where allowed, and decoding) and visited, then promoted; prefetch,
// read-ahead and whole views go through them.
#include "kv/tiered_kv_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/trace.h"

namespace leoam {
namespace {

// Owns the gathered bytes of a view made by view().
class OwnedKv final : public KvViewResources {
 public:
  std::vector<uint8_t> k, v;
};

}  // namespace

Status TieredKvCache::check_kept(int layer, std::span<const TokenRange> ranges, const char* what) const {
  const int64_t first = layers_[layer].first_kept * options_.chunk_tokens;
  for (const TokenRange& r : ranges) {
    if (r.begin < first && r.begin < r.end) {
      return invalid_argument(std::string(what) + " of layer " + std::to_string(layer) + ": positions [" +
                              std::to_string(r.begin) + ", " + std::to_string(r.end) + ") reach before " +
                              std::to_string(first) + ", which the layer dropped behind its sliding window of " +
                              std::to_string(window(layer)))
          .about(Setting::kKvSwaFull);
    }
  }
  return Status::ok();
}

Status TieredKvCache::for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) {
  return gather(layer, ranges, fn, false);
}

Status TieredKvCache::for_each_view_unordered(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) {
  return gather(layer, ranges, fn, true);
}

Status TieredKvCache::gather(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn, bool unordered) {
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV read: layer " + std::to_string(layer) + " out of range");
  }
  const LayerState& L = layers_[layer];
  int64_t prev_end = 0;
  for (const TokenRange& r : ranges) {
    if (r.begin < prev_end || r.end < r.begin || r.end > L.n_tokens) {
      return invalid_argument("KV read of layer " + std::to_string(layer) + ": ranges must be sorted, disjoint and inside [0, " +
                              std::to_string(L.n_tokens) + "), got [" + std::to_string(r.begin) + ", " +
                              std::to_string(r.end) + ")");
    }
    prev_end = r.end;
  }
  LEOAM_RETURN_IF_ERROR(check_kept(layer, ranges, "KV read"));
  read_ahead_.settle(layer);
  ++tick_;
  const int64_t c = options_.chunk_tokens;
  const int64_t n_slots = gather_slots_;

  std::vector<GatherItem> batch;
  int64_t slots_used = 0;
  for (const TokenRange& r : ranges) {
    for (int64_t p = r.begin; p < r.end;) {
      const int64_t index = p / c;
      const int64_t t1 = std::min(r.end - index * c, c);
      const bool same_chunk = !batch.empty() && batch.back().index == index;
      const Tier tier = residency_.find({layer, index})->tier;
      const bool needs_slot = tier == Tier::kDisk || (tier == Tier::kHost && options_.host_codec != KvCodec::kNone);
      if (needs_slot && !same_chunk && slots_used == n_slots) {
        LEOAM_RETURN_IF_ERROR(gather_batch(layer, batch, fn, unordered));
        batch.clear();
        slots_used = 0;
      }
      if (needs_slot && !same_chunk) ++slots_used;
      batch.push_back({index, p - index * c, t1, nullptr, tier});
      p = index * c + t1;
    }
  }
  if (!batch.empty()) LEOAM_RETURN_IF_ERROR(gather_batch(layer, batch, fn, unordered));
  return Status::ok();
}

Status TieredKvCache::prefetch(int layer, std::span<const TokenRange> ranges) {
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV prefetch: layer " + std::to_string(layer) + " out of range");
  }
  // The whole chunks of `ranges` that are not on the device, merged where they touch.
  const int64_t c = options_.chunk_tokens;
  const int64_t n = layers_[layer].n_tokens;
  LEOAM_RETURN_IF_ERROR(check_kept(layer, ranges, "KV prefetch"));
  std::vector<TokenRange> below;
  for (const TokenRange& r : ranges) {
    if (r.begin < 0 || r.end > n || r.end < r.begin) {
      return invalid_argument("KV prefetch of layer " + std::to_string(layer) + ": [" + std::to_string(r.begin) +
                              ", " + std::to_string(r.end) + ") is outside [0, " + std::to_string(n) + ")");
    }
    for (int64_t i = r.begin / c; i * c < r.end; ++i) {
      if (residency_.find({layer, i})->tier == Tier::kDevice) continue;
      const TokenRange chunk{i * c, std::min(n, (i + 1) * c)};
      if (!below.empty() && below.back().end >= chunk.begin) {
        below.back().end = std::max(below.back().end, chunk.end);
      } else {
        below.push_back(chunk);
      }
    }
  }
  if (below.empty()) return Status::ok();
  const uint64_t disk_read0 = stats_[Tier::kDisk].bytes_read;
  LEOAM_RETURN_IF_ERROR(for_each_view(layer, below, [](const KvView&) { return Status::ok(); }));
  stats_.disk_bytes_prefetched += stats_[Tier::kDisk].bytes_read - disk_read0;
  return Status::ok();
}

Status TieredKvCache::read_ahead(int layer, std::span<const TokenRange> ranges) {
  if (!read_ahead_.enabled()) return Status::ok();
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV read-ahead: layer " + std::to_string(layer) + " out of range");
  }
  const int64_t c = options_.chunk_tokens;
  const int64_t n = layers_[layer].n_tokens;
  LEOAM_RETURN_IF_ERROR(check_kept(layer, ranges, "KV read-ahead"));
  std::vector<DiskChunkRead> on_disk;  // index, and whether lossy (read compressed whatever the form)
  int64_t last = -1;
  for (const TokenRange& r : ranges) {
    if (r.begin < 0 || r.end > n || r.end < r.begin) {
      return invalid_argument("KV read-ahead of layer " + std::to_string(layer) + ": [" + std::to_string(r.begin) +
                              ", " + std::to_string(r.end) + ") is outside [0, " + std::to_string(n) + ")");
    }
    for (int64_t i = std::max(r.begin / c, last + 1); i * c < r.end; ++i) {
      if (residency_.find({layer, i})->tier == Tier::kDisk) {
        on_disk.push_back({i, nullptr, layers_[layer].chunks[i].lossy});
      }
      last = i;
    }
  }
  if (!on_disk.empty() && choose_compressed_read()) {
    for (DiskChunkRead& r : on_disk) r.compressed = true;
  }
  read_ahead_.start(layer, on_disk);
  return Status::ok();
}

Status TieredKvCache::gather_batch(int layer, std::span<GatherItem> items, const ViewVisitor& fn, bool unordered) {
  const std::vector<DiskChunkRead> reads = plan_batch(layer, items);
  // The chunks in memory are visited while the reads are in flight, unless the cost model of
  // compressed transfers times the reads: it wants them alone.
  const bool overlap = unordered && !reads.empty() && (transfers_ == nullptr || !transfers_->times_reads()) &&
                       std::any_of(items.begin(), items.end(), [](const GatherItem& it) { return it.source != Tier::kDisk; });
  LEOAM_RETURN_IF_ERROR(issue_batch(layer, items, reads, overlap ? &fn : nullptr));
  return visit_batch(layer, items, fn, overlap ? GatherPart::kFromDisk : GatherPart::kAll);
}

std::vector<DiskChunkRead> TieredKvCache::plan_batch(int layer, std::span<GatherItem> items) {
  const KvCodec codec = options_.host_codec;
  const size_t slot = slot_bytes_;
  const size_t decoded =
      codec == KvCodec::kNone && transfers_ == nullptr ? 0 : align_up(geometry_.chunk_bytes(), kDirectIoAlignment);
  LayerState& L = layers_[layer];
  // The disk chunks staged ahead in the form they serve are taken; the others are read.
  size_t n_reads = 0, n_lossy_reads = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    GatherItem& it = items[i];
    if (it.source != Tier::kDisk || (i > 0 && items[i - 1].index == it.index)) continue;
    const bool lossy = L.chunks[it.index].lossy;
    it.staged = read_ahead_.take(layer, it.index, lossy);
    if (it.staged == nullptr) {
      ++n_reads;
      n_lossy_reads += lossy ? 1 : 0;
    }
  }
  // The form of this batch's disk reads (lossy chunks are read compressed whatever it is).
  const bool compressed = n_reads > 0 && choose_compressed_read();
  const size_t n_compressed = compressed ? n_reads : n_lossy_reads;
  const size_t compressed_slot = transfers_ != nullptr ? transfers_->slot_bytes() : 0;
  // The scratch (gather_slots_ chunks a batch): the reads' bytes, then the decoded chunks. The
  // compressed reads are packed first, one after another, so that neighbours in the file are one
  // request; the reads as they are follow, a slot each, from the next whole slot.
  uint8_t* next_compressed = scratch_.data();
  uint8_t* next_as_is = scratch_.data() + align_up(n_compressed * compressed_slot, slot);
  uint8_t* const decoded_base = scratch_.data() + (gather_slots_ + 1) * slot;

  std::vector<DiskChunkRead> reads;
  size_t next_slot = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    GatherItem& it = items[i];
    if (i > 0 && items[i - 1].index == it.index) {
      it.data = items[i - 1].data;
      it.stored = items[i - 1].stored;
      it.compressed = items[i - 1].compressed;
      continue;
    }
    Chunk& ch = L.chunks[it.index];
    const ChunkKey key{layer, it.index};
    residency_.touch(key, tick_);
    TierStats& device = stats_[Tier::kDevice];
    TierStats& host = stats_[Tier::kHost];
    switch (it.source) {
      case Tier::kDevice:
        it.data = ch.device.get();
        device.hits += 1;
        device.bytes_read += static_cast<uint64_t>(ch.n_filled) * geometry_.row_bytes() * 2;
        break;
      case Tier::kHost:
        device.misses += 1;
        host.hits += 1;
        host.bytes_read += host_chunk_bytes_;
        it.stored = ch.host.get();
        if (codec == KvCodec::kNone) {
          it.data = ch.host.get();
        } else {
          uint8_t* dst = decoded_base + next_slot++ * decoded;
          const TraceSpan span(options_.trace, "decode chunks", "decode", layer);
          decode_chunk(geometry_, codec, ch.host.get(), dst);
          it.data = dst;
        }
        break;
      case Tier::kDisk: {
        device.misses += 1;
        host.misses += 1;
        stats_[Tier::kDisk].hits += 1;
        uint8_t* decoded_dst = decoded_base + next_slot++ * decoded;
        if (it.staged != nullptr) {
          it.stored = it.staged->dst;
          it.compressed = it.staged->compressed;
        } else {
          it.compressed = compressed || ch.lossy;
          uint8_t*& next = it.compressed ? next_compressed : next_as_is;
          reads.push_back({it.index, next, it.compressed});
          it.stored = next;
          next += it.compressed ? compressed_slot : slot;
        }
        it.data = codec == KvCodec::kNone && !it.compressed ? it.stored : decoded_dst;
        break;
      }
    }
  }
  return reads;
}

Status TieredKvCache::issue_batch(int layer, std::span<const GatherItem> items, std::span<const DiskChunkRead> reads,
                                  const ViewVisitor* visit_in_memory) {
  if (visit_in_memory != nullptr) {
    DiskTier::PendingRead pending;
    {
      const TraceSpan span(options_.trace, "disk read", "io", layer);
      LEOAM_RETURN_IF_ERROR(disk_->start_read_chunks(layer, reads, pending));
    }
    const Status visited = (*visit_in_memory)(batch_view(items, GatherPart::kInMemory));
    Status read;
    {
      const TraceSpan span(options_.trace, "disk read", "io", layer);
      read = disk_->finish_read_chunks(pending);
    }
    LEOAM_RETURN_IF_ERROR(visited);
    LEOAM_RETURN_IF_ERROR(read);
  } else if (!reads.empty()) {
    const TraceSpan span(options_.trace, "disk read", "io", layer);
    const auto t0 = std::chrono::steady_clock::now();
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, reads));
    // A sample of the reads' time for the cost model (auto).
    if (transfers_ != nullptr) {
      transfers_->record_reads(reads, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const KvCodec codec = options_.host_codec;
  if (codec == KvCodec::kNone && transfers_ == nullptr) return Status::ok();
  const TraceSpan span(options_.trace, "decode chunks", "decode", layer);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t n_transfer_decoded = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const GatherItem& it = items[i];
    if (it.source != Tier::kDisk || (i > 0 && items[i - 1].index == it.index)) continue;
    if (codec != KvCodec::kNone) {
      decode_chunk(geometry_, codec, it.stored, const_cast<uint8_t*>(it.data));
    } else if (it.compressed) {
      transfers_->decode(it.stored, const_cast<uint8_t*>(it.data));
      ++n_transfer_decoded;
    }
  }
  if (n_transfer_decoded > 0) {
    transfers_->record_decode(n_transfer_decoded,
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), stats_);
  }
  return Status::ok();
}

Status TieredKvCache::visit_batch(int layer, std::span<const GatherItem> items, const ViewVisitor& fn, GatherPart part) {
  LEOAM_RETURN_IF_ERROR(fn(batch_view(items, part)));
  return promote_after_read(layer, items);
}

KvView TieredKvCache::batch_view(std::span<const GatherItem> items, GatherPart part) const {
  const size_t row_bytes = geometry_.row_bytes();
  std::vector<KvSegment> segments;
  segments.reserve(items.size());
  for (const GatherItem& it : items) {
    const bool from_disk = it.source == Tier::kDisk;
    if ((part == GatherPart::kInMemory && from_disk) || (part == GatherPart::kFromDisk && !from_disk)) continue;
    KvSegment s;
    s.pos0 = it.index * options_.chunk_tokens + it.t0;
    s.n_tokens = it.t1 - it.t0;
    s.k = it.data + it.t0 * row_bytes;
    s.v = it.data + geometry_.k_bytes() + it.t0 * row_bytes;
    s.dtype = options_.dtype;
    s.row_stride_bytes = row_bytes;
    segments.push_back(s);
  }
  return KvView(options_.shape.n_kv_heads, options_.shape.head_dim, std::move(segments));
}

Status TieredKvCache::promote_after_read(int layer, std::span<const GatherItem> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    const GatherItem& it = items[i];
    if (it.source == Tier::kDevice || (i > 0 && items[i - 1].index == it.index)) continue;
    // Without a codec a host chunk is compute-ready where it is (both tiers are RAM on the CPU):
    // a move to the device would copy it, and push another one down, for no faster read.
    if (it.source == Tier::kHost && options_.host_codec == KvCodec::kNone) continue;
    const ChunkKey key{layer, it.index};
    // A lossy codec's chunks stay in their stored form once they leave the device: a decoded
    // copy on the device would be encoded anew when demoted, into other values than the ones its
    // abstract bounds (the codec is not idempotent).
    Residency::Plan plan;
    if (options_.host_codec == KvCodec::kNone) {
      LEOAM_ASSIGN_OR_RETURN(plan, residency_.plan_promote(key, Tier::kDevice));
    }
    if (plan.moves.empty() && it.source == Tier::kDisk && options_.host_budget_bytes > 0) {
      LEOAM_ASSIGN_OR_RETURN(plan, residency_.plan_promote(key, Tier::kHost));
    }
    if (plan.moves.empty()) continue;
    // Without a host codec the stored form is the compute-ready one: a chunk read compressed
    // moves up as decoded.
    const uint8_t* read = options_.host_codec == KvCodec::kNone ? it.data : it.stored;
    LEOAM_RETURN_IF_ERROR(carry_out(plan, it.source == Tier::kDisk ? read : nullptr,
                                    it.source == Tier::kDisk && it.compressed ? it.stored : nullptr));
  }
  return Status::ok();
}

Result<KvView> TieredKvCache::view(int layer, int64_t n_tokens_visible) {
  if (layer < 0 || layer >= options_.shape.n_layer || n_tokens_visible < 0 || n_tokens_visible > n_tokens(layer)) {
    return invalid_argument("KV view: layer " + std::to_string(layer) + " has " + std::to_string(n_tokens(layer)) +
                            " positions, " + std::to_string(n_tokens_visible) + " asked");
  }
  auto owned = std::make_unique<OwnedKv>();
  const size_t row_bytes = geometry_.row_bytes();
  owned->k.resize(static_cast<size_t>(n_tokens_visible) * row_bytes);
  owned->v.resize(owned->k.size());
  const TokenRange all{0, n_tokens_visible};
  LEOAM_RETURN_IF_ERROR(for_each_view(layer, {&all, 1}, [&](const KvView& part) {
    for (const KvSegment& s : part.segments()) {
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        std::memcpy(owned->k.data() + (s.pos0 + t) * row_bytes, s.k_row(t), row_bytes);
        std::memcpy(owned->v.data() + (s.pos0 + t) * row_bytes, s.v_row(t), row_bytes);
      }
    }
    return Status::ok();
  }));
  std::vector<KvSegment> segments;
  if (n_tokens_visible > 0) {
    segments.push_back({0, n_tokens_visible, owned->k.data(), owned->v.data(), options_.dtype, row_bytes});
  }
  return KvView(options_.shape.n_kv_heads, options_.shape.head_dim, std::move(segments), std::move(owned));
}

}  // namespace leoam
