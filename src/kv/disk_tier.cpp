// DiskTier: its per-layer files (created, or a kept session's opened and its records checked),
// what it holds, a shared prefix, and forgetting chunks. The reads and writes: disk_tier_io.cpp.
#include "kv/disk_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "kv/disk_record.h"

namespace leoam {

DiskTier::DiskTier(const DiskTierOptions& options) : options_(options) {
  fs_ = options.file_system != nullptr ? options.file_system : &posix_file_system();
  stored_bytes_ = encoded_chunk_bytes(options.geometry, options.codec);
  slot_bytes_ = align_up(stored_bytes_, kDirectIoAlignment);
  if (options.transfer_codec != KvCodec::kNone) {
    compressed_bytes_ = encoded_chunk_bytes(options.geometry, options.transfer_codec);
    compressed_slot_bytes_ = align_up(compressed_bytes_, kDirectIoAlignment);
  }
  layers_.resize(static_cast<size_t>(options.n_layer));
  for (int il = 0; il < options.n_layer; ++il) {
    const auto& groups = options.abstract_group_chunks;
    layers_[il].group_chunks = il < static_cast<int>(groups.size()) ? groups[il] : 1;
    layers_[il].record_bytes = RecordLayout(options.geometry, layers_[il].group_chunks).bytes;
  }
}

DiskTier::~DiskTier() {
  if (options_.keep_files || !options_.visible_files) return;  // kept, or unlinked at creation
  for (int il = 0; il < options_.n_layer; ++il) {
    Layer& layer = layers_[il];
    const bool had_files = layer.chunks != nullptr;
    layer.chunks.reset();
    layer.abstracts.reset();
    layer.compressed.reset();
    if (!had_files) continue;
    // Best effort: a destructor has no one to report to, and a leftover file is only litter.
    (void)fs_->remove(chunk_path(il));
    (void)fs_->remove(abstract_path(il));
    if (options_.transfer_codec != KvCodec::kNone) (void)fs_->remove(compressed_path(il));
  }
}

std::string DiskTier::chunk_path(int layer) const {
  char name[32];
  std::snprintf(name, sizeof(name), "-L%03d.kv", layer);
  return options_.dir + "/" + options_.session + name;
}

std::string DiskTier::abstract_path(int layer) const {
  char name[32];
  std::snprintf(name, sizeof(name), "-L%03d.lka", layer);
  return options_.dir + "/" + options_.session + name;
}

std::string DiskTier::compressed_path(int layer) const {
  char name[32];
  std::snprintf(name, sizeof(name), "-L%03d.kvc", layer);
  return options_.dir + "/" + options_.session + name;
}

Status DiskTier::open_files(bool create) {
  FileOpenOptions chunk_options = options_.file_options;
  chunk_options.create = create;
  chunk_options.truncate = create;
  chunk_options.read_only = !create;
  FileOpenOptions abstract_options = chunk_options;
  abstract_options.direct = false;  // small packed records: read-modify-write would cost more
  abstract_options.uring = false;
  FileOpenOptions abstract_read_options = options_.file_options;
  abstract_read_options.read_only = true;
  for (int il = 0; il < options_.n_layer; ++il) {
    LEOAM_ASSIGN_OR_RETURN(layers_[il].chunks, fs_->open(chunk_path(il), chunk_options));
    LEOAM_ASSIGN_OR_RETURN(layers_[il].abstracts, fs_->open(abstract_path(il), abstract_options));
    if (options_.transfer_codec != KvCodec::kNone) {
      LEOAM_ASSIGN_OR_RETURN(layers_[il].compressed, fs_->open(compressed_path(il), chunk_options));
    }
    // A kept session's files may end mid-block (older builds did not pad them): it reads its
    // records once, buffered, at open (open_existing) and never through this handle.
    if (create) {
      LEOAM_ASSIGN_OR_RETURN(layers_[il].abstract_reads, fs_->open(abstract_path(il), abstract_read_options));
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<DiskTier>> DiskTier::create(const DiskTierOptions& options) {
  if (options.n_layer <= 0 || options.geometry.row_elements() <= 0) {
    return invalid_argument("disk tier: bad geometry");
  }
  if (options.transfer_codec != KvCodec::kNone && options.codec != KvCodec::kNone) {
    return invalid_argument("disk tier: a transfer codec needs chunks stored as they are (codec none)");
  }
  for (const int g : options.abstract_group_chunks) {
    if (g < 1 || g > 4096) return invalid_argument("disk tier: chunks per abstract record must be 1 to 4096");
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  LEOAM_RETURN_IF_ERROR(
      tier->fs_->create_dirs(options.dir).with_context("KV directory '" + options.dir + "'").about(Setting::kKvDir));
  if (Status st = tier->open_files(/*create=*/true); !st.is_ok()) return st;
  if (!options.keep_files && !options.visible_files) {
    for (int il = 0; il < options.n_layer; ++il) {
      LEOAM_RETURN_IF_ERROR(tier->fs_->remove(tier->chunk_path(il)));
      LEOAM_RETURN_IF_ERROR(tier->fs_->remove(tier->abstract_path(il)));
      if (options.transfer_codec != KvCodec::kNone) LEOAM_RETURN_IF_ERROR(tier->fs_->remove(tier->compressed_path(il)));
    }
  }
  return tier;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open_existing(const DiskTierOptions& options,
                                                          std::span<const int64_t> n_chunks) {
  DiskTierOptions o = options;
  o.keep_files = true;
  if (o.transfer_codec != KvCodec::kNone) return invalid_argument("disk tier: a kept session has no compressed copy");
  std::unique_ptr<DiskTier> tier(new DiskTier(o));
  if (static_cast<int>(n_chunks.size()) != o.n_layer) return invalid_argument("disk tier: one chunk count per layer needed");
  LEOAM_RETURN_IF_ERROR(tier->open_files(/*create=*/false));
  for (const int g : o.abstract_group_chunks) {
    if (g < 1 || g > 4096) return invalid_argument("disk tier: chunks per abstract record must be 1 to 4096");
  }
  const ChunkGeometry& geo = o.geometry;
  for (int il = 0; il < o.n_layer; ++il) {
    Layer& L = tier->layers_[il];
    const int64_t n = n_chunks[il];
    const int64_t G = L.group_chunks;
    const int64_t n_groups = (n + G - 1) / G;
    L.entries.assign(static_cast<size_t>(n), Entry{});
    L.record_checksums.assign(static_cast<size_t>(n_groups), 0);
    if (n == 0) continue;
    const RecordLayout layout(geo, L.group_chunks);
    std::vector<uint8_t> records(static_cast<size_t>(n_groups) * L.record_bytes);
    const ReadRequest req{0, records.size(), records.data()};
    LEOAM_RETURN_IF_ERROR(L.abstracts->read({&req, 1}));
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* rec = records.data() + g * L.record_bytes;
      RecordHeader h;
      std::memcpy(&h, rec, sizeof(h));
      bool ok = h.magic == kRecordMagic && h.layer == static_cast<uint32_t>(il) && h.group == static_cast<uint64_t>(g) &&
                h.codec == static_cast<uint32_t>(o.codec) && h.group_chunks == static_cast<uint32_t>(G) &&
                record_checksum(rec, L.record_bytes) == h.record_checksum;
      for (int64_t i = g * G; ok && i < std::min(n, (g + 1) * G); ++i) {
        const RecordSlot slot = load_slot(rec + layout.slots + (i - g * G) * kRecordSlotBytes);
        ok = slot.n_tokens > 0 && slot.n_tokens <= static_cast<uint32_t>(geo.chunk_tokens);
        if (ok) L.entries[i] = Entry{true, slot.n_tokens, slot.chunk_checksum, 0};
      }
      if (!ok) {
        return tier->chunk_error(StatusCode::kCorrupt, il, g * G,
                                 "abstract record in " + tier->abstract_path(il) + " is corrupt (bad header or checksum)");
      }
      L.record_checksums[g] = h.record_checksum;
    }
    // Later reads of the records bypass the page cache, as a tier's own do, where the file is
    // padded to whole blocks (every session this format version writes is).
    LEOAM_ASSIGN_OR_RETURN(const uint64_t file_bytes, L.abstracts->size());
    if (file_bytes % kDirectIoAlignment == 0) {
      FileOpenOptions reads = o.file_options;
      reads.read_only = true;
      LEOAM_ASSIGN_OR_RETURN(L.abstract_reads, tier->fs_->open(tier->abstract_path(il), reads));
      L.abstract_file_bytes = file_bytes;
    }
  }
  return tier;
}

uint64_t DiskTier::abstract_file_bytes() const {
  uint64_t total = 0;
  for (const Layer& L : layers_) total += L.abstract_file_bytes;
  return total;
}

std::string DiskTier::io_mode() const {
  if (layers_.empty() || layers_[0].chunks == nullptr) return "none";
  const auto describe = [&](const FileIoInfo& info) {
    std::string mode = info.direct ? "O_DIRECT" : "buffered (page cache)";
    mode += info.uring ? " + io_uring (queue depth " + std::to_string(options_.file_options.queue_depth) + ")" : " + pread";
    if (!info.fallback_note.empty()) mode += "; " + info.fallback_note;
    return mode;
  };
  const FileIoInfo chunks = layers_[0].chunks->io_info();
  const RandomAccessFile* abstracts =
      layers_[0].abstract_reads != nullptr ? layers_[0].abstract_reads.get() : layers_[0].abstracts.get();
  const FileIoInfo records = abstracts->io_info();
  if (records.direct == chunks.direct && records.uring == chunks.uring) return describe(chunks) + ", chunks and abstracts";
  return describe(chunks) + "; abstract reads " + describe(records);
}

bool DiskTier::wrote_chunk(int layer, int64_t index) const {
  const std::vector<Entry>& e = layers_[layer].entries;
  return index >= 0 && index < static_cast<int64_t>(e.size()) && e[index].written;
}

bool DiskTier::has_chunk(int layer, int64_t index) const {
  return (index >= 0 && index < shared_chunks(layer)) || wrote_chunk(layer, index);
}

int64_t DiskTier::n_tokens_of(int layer, int64_t index) const {
  if (index >= 0 && index < shared_chunks(layer)) return base_->n_tokens_of(layer, index);
  return wrote_chunk(layer, index) ? layers_[layer].entries[index].n_tokens : 0;
}

Status DiskTier::share_prefix(std::shared_ptr<DiskTier> base, std::span<const int64_t> n_chunks) {
  const ChunkGeometry& a = options_.geometry;
  const ChunkGeometry& b = base->options_.geometry;
  if (a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim || a.chunk_tokens != b.chunk_tokens ||
      a.dtype != b.dtype || options_.codec != base->options_.codec || base->options_.n_layer != options_.n_layer) {
    return invalid_argument("disk tier: a shared prefix must have this tier's geometry and stored form");
  }
  if (options_.transfer_codec != KvCodec::kNone) {
    return invalid_argument("disk tier: a shared prefix has no compressed copy to read").about(Setting::kKvCompress);
  }
  if (static_cast<int>(n_chunks.size()) != options_.n_layer) {
    return invalid_argument("disk tier: one shared chunk count per layer needed");
  }
  for (int il = 0; il < options_.n_layer; ++il) {
    if (!layers_[il].entries.empty()) return invalid_argument("disk tier: a prefix is shared before anything is written");
    for (int64_t i = 0; i < n_chunks[il]; ++i) {
      if (!base->has_chunk(il, i)) {
        return invalid_argument("disk tier: the shared prefix lacks chunk " + std::to_string(i) + " of layer " +
                                std::to_string(il));
      }
    }
  }
  shared_chunks_.assign(n_chunks.begin(), n_chunks.end());
  base_ = std::move(base);
  return Status::ok();
}

Status DiskTier::chunk_error(StatusCode code, int layer, int64_t index, const std::string& what) const {
  return Status(code, "KV session '" + options_.session + "' layer " + std::to_string(layer) + " chunk " +
                          std::to_string(index) + ": " + what);
}

uint64_t DiskTier::buffer_bytes() const {
  uint64_t total = 0;
  for (const Layer& L : layers_) total += L.open_record.capacity();
  return total;
}

Status DiskTier::sync() {
  for (Layer& L : layers_) {
    LEOAM_RETURN_IF_ERROR(L.chunks->sync());
    if (L.compressed != nullptr) LEOAM_RETURN_IF_ERROR(L.compressed->sync());
    LEOAM_RETURN_IF_ERROR(L.abstracts->sync());
  }
  return Status::ok();
}

Status DiskTier::forget_from(int layer, int64_t index, std::span<const float> kept_abstracts) {
  Layer& L = layers_[layer];
  const ChunkGeometry& geo = options_.geometry;
  index = std::max<int64_t>(index, 0);
  if (index < shared_chunks(layer)) shared_chunks_[layer] = index;
  const int64_t G = L.group_chunks;
  const int64_t g = index / G;  // the first group that loses chunks, or that index cuts
  const int64_t first = g * G;
  const bool cut = index % G != 0 && g < static_cast<int64_t>(L.record_checksums.size()) && L.record_checksums[g] != 0;
  if (cut && static_cast<int64_t>(kept_abstracts.size()) < (index - first) * geo.abstract_floats()) {
    return chunk_error(StatusCode::kInternal, layer, index, "forget_from cuts a group without its kept abstracts");
  }
  if (index < static_cast<int64_t>(L.entries.size())) L.entries.resize(static_cast<size_t>(index));
  if (L.open_group >= g) {
    L.open_group = -1;
    std::vector<uint8_t>().swap(L.open_record);
  }
  L.record_checksums.resize(std::min(L.record_checksums.size(), static_cast<size_t>(g)));
  if (!cut) return Status::ok();
  // The cut group's record again, from the abstracts of the chunks it keeps.
  const RecordLayout layout(geo, L.group_chunks);
  std::vector<GroupRecord> groups(1);
  groups[0].group = g;
  LEOAM_RETURN_IF_ERROR(load_record(layer, g, groups[0].bytes));  // g has no record now: an empty one
  bool any = false;
  for (int64_t i = first; i < index; ++i) {
    if (!wrote_chunk(layer, i)) continue;
    const Entry& e = L.entries[i];
    put_chunk(geo, layout, static_cast<int>(i - first), {e.n_tokens, e.chunk_checksum},
              kept_abstracts.data() + (i - first) * geo.abstract_floats(), groups[0].bytes.data());
    any = true;
  }
  if (!any) return Status::ok();
  uint64_t n_bytes = 0;
  if (Status st = write_records(layer, groups, first, &n_bytes); !st.is_ok()) {
    L.entries.resize(std::min(L.entries.size(), static_cast<size_t>(first)));  // their record is gone: so are they
    return st;
  }
  if (options_.stats != nullptr) (*options_.stats)[Tier::kDisk].bytes_written += n_bytes;
  return Status::ok();
}

}  // namespace leoam
