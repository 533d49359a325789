#include "kv/disk_tier.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "io/checksum.h"
#include "kv/box_f16.h"

namespace leoam {
namespace {

// Requests larger than this are not grown further by coalescing: enough to make a run of small
// chunks one operation, small enough to keep several in flight.
constexpr size_t kMaxCoalescedBytes = size_t{4} << 20;

const uint8_t* buffer_of(const ReadRequest& r) { return static_cast<const uint8_t*>(r.dst); }
const uint8_t* buffer_of(const WriteRequest& w) { return static_cast<const uint8_t*>(w.src); }

// Appends r, or grows the last request by it when both its file range and its buffer follow the
// last's: consecutive chunks in consecutive buffer slots move in one operation.
template <class Request>
void push_coalesced(std::vector<Request>& requests, const Request& r) {
  if (!requests.empty()) {
    Request& last = requests.back();
    if (last.offset + last.n_bytes == r.offset && buffer_of(last) + last.n_bytes == buffer_of(r) &&
        last.n_bytes + r.n_bytes <= kMaxCoalescedBytes) {
      last.n_bytes += r.n_bytes;
      return;
    }
  }
  requests.push_back(r);
}

// "LKA5" read as little-endian bytes (LKA4: 16-byte chunk slots; LKA3: a record per chunk; LKA2:
// an f32 box; LKA1: no sign sketch).
constexpr uint32_t kRecordMagic = 0x35414b4c;
constexpr size_t kRecordHeaderBytes = 32;

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint32_t layer = 0;
  uint32_t codec = 0;
  uint32_t group_chunks = 0;
  uint64_t group = 0;
  uint64_t record_checksum = 0;
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);

// One chunk's place in its group's record (n_tokens 0: not written), stored packed in
// kRecordSlotBytes: u16 n_tokens (a chunk holds at most kMaxChunkTokens), then the u64 checksum.
struct RecordSlot {
  uint32_t n_tokens = 0;
  uint64_t chunk_checksum = 0;
};
constexpr size_t kRecordSlotBytes = sizeof(uint16_t) + sizeof(uint64_t);
static_assert(kMaxChunkTokens <= std::numeric_limits<uint16_t>::max());

void store_slot(const RecordSlot& s, uint8_t* at) {
  const auto n = static_cast<uint16_t>(s.n_tokens);
  std::memcpy(at, &n, sizeof(n));
  std::memcpy(at + sizeof(n), &s.chunk_checksum, sizeof(s.chunk_checksum));
}

RecordSlot load_slot(const uint8_t* at) {
  uint16_t n = 0;
  RecordSlot s;
  std::memcpy(&n, at, sizeof(n));
  std::memcpy(&s.chunk_checksum, at + sizeof(n), sizeof(s.chunk_checksum));
  s.n_tokens = n;
  return s;
}

// Where the parts of a record of `group_chunks` chunks lie (docs/kv-store.md#disk-tier-files).
struct RecordLayout {
  size_t slots = kRecordHeaderBytes;
  size_t box = 0;    // f16 [box_floats]
  size_t signs = 0;  // u32 [group_chunks][sign_words]
  size_t bytes = 0;

  RecordLayout(const ChunkGeometry& g, int group_chunks) {
    box = slots + static_cast<size_t>(group_chunks) * kRecordSlotBytes;  // even: the f16 box stays aligned
    signs = box + static_cast<size_t>(g.box_floats()) * sizeof(uint16_t);
    bytes = signs + static_cast<size_t>(group_chunks) * static_cast<size_t>(g.sign_words()) * sizeof(uint32_t);
  }
};

// XXH3 of the record with its checksum field read as zero.
uint64_t record_checksum(const uint8_t* record, size_t record_bytes) {
  constexpr size_t kField = offsetof(RecordHeader, record_checksum);
  const uint64_t zero = 0;
  uint64_t h = checksum64(record, kField);
  h = checksum64_seeded(&zero, sizeof(zero), h);
  return checksum64_seeded(record + kField + sizeof(zero), record_bytes - kField - sizeof(zero), h);
}

// A group's record with no chunk in it: the empty box (min +inf, max -inf), no sign set.
void reset_record(const ChunkGeometry& g, const RecordLayout& r, const RecordHeader& header, uint8_t* record) {
  std::memset(record, 0, r.bytes);
  std::memcpy(record, &header, sizeof(header));
  const int64_t half = g.box_floats() / 2;
  auto* box = reinterpret_cast<uint16_t*>(record + r.box);
  std::fill(box, box + half, uint16_t{0x7c00});             // +inf
  std::fill(box + half, box + 2 * half, uint16_t{0xfc00});  // -inf
}

// Adds chunk `slot` of the group to its record: its fill and checksum, its key signs, and its box
// into the group's, rounded outward (the f16 extremes stay exact: the union of the chunks' f16
// boxes, the same whatever the order).
void put_chunk(const ChunkGeometry& g, const RecordLayout& r, int slot, const RecordSlot& s, const float* abstract,
               uint8_t* record) {
  store_slot(s, record + r.slots + slot * kRecordSlotBytes);
  const int64_t half = g.box_floats() / 2;
  auto* box = reinterpret_cast<uint16_t*>(record + r.box);
  for (int64_t e = 0; e < half; ++e) {
    const float lo = std::min(f16_to_f32(box[e]), abstract[e]);
    const float hi = std::max(f16_to_f32(box[half + e]), abstract[half + e]);
    box[e] = f16_round_down(lo);
    box[half + e] = f16_round_up(hi);
  }
  const size_t sign_bytes = static_cast<size_t>(g.sign_words()) * sizeof(uint32_t);
  std::memcpy(record + r.signs + slot * sign_bytes, abstract + g.box_floats(), sign_bytes);
}

// abstract = chunk `slot`'s as the record gives it: the group's box, widened back to f32 exactly,
// then the chunk's own key signs.
void get_chunk_abstract(const ChunkGeometry& g, const RecordLayout& r, const uint8_t* record, int slot, float* abstract) {
  decode_box(reinterpret_cast<const uint16_t*>(record + r.box), g.box_floats(), abstract);
  const size_t sign_bytes = static_cast<size_t>(g.sign_words()) * sizeof(uint32_t);
  std::memcpy(abstract + g.box_floats(), record + r.signs + slot * sign_bytes, sign_bytes);
}

uint64_t count_compressed(std::span<const DiskChunkRead> reads) {
  return static_cast<uint64_t>(std::count_if(reads.begin(), reads.end(), [](const DiskChunkRead& r) { return r.compressed; }));
}

double elapsed_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

std::string hex_0x(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
  return buf;
}

}  // namespace

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
  LEOAM_RETURN_IF_ERROR(tier->fs_->create_dirs(options.dir).with_context("KV directory --kv-dir '" + options.dir + "'"));
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
    return invalid_argument("disk tier: a shared prefix has no compressed copy to read (--kv-compress off)");
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

Status DiskTier::load_record(int layer, int64_t g, std::vector<uint8_t>& record) {
  Layer& L = layers_[layer];
  const RecordLayout layout(options_.geometry, L.group_chunks);
  if (g == L.open_group) {
    record = L.open_record;
    return Status::ok();
  }
  if (g >= static_cast<int64_t>(L.record_checksums.size()) || L.record_checksums[g] == 0) {
    RecordHeader h;
    h.layer = static_cast<uint32_t>(layer);
    h.codec = static_cast<uint32_t>(options_.codec);
    h.group_chunks = static_cast<uint32_t>(L.group_chunks);
    h.group = static_cast<uint64_t>(g);
    record.resize(layout.bytes);
    reset_record(options_.geometry, layout, h, record.data());
    return Status::ok();
  }
  // A group written before that is not the open one (a chunk written out of order): from the file.
  record.resize(layout.bytes);
  const ReadRequest req{static_cast<uint64_t>(g) * layout.bytes, layout.bytes, record.data()};
  if (Status st = L.abstracts->read({&req, 1}); !st.is_ok()) {
    return chunk_error(st.code(), layer, g * L.group_chunks, "reading its abstract record back: " + st.message());
  }
  if (record_checksum(record.data(), layout.bytes) != L.record_checksums[g]) {
    return chunk_error(StatusCode::kCorrupt, layer, g * L.group_chunks,
                       "abstract checksum mismatch in " + abstract_path(layer) + " at offset " +
                           std::to_string(req.offset) + ": the abstract file is corrupt");
  }
  return Status::ok();
}

Status DiskTier::write_records(int layer, std::vector<GroupRecord>& groups, int64_t first_chunk, uint64_t* n_bytes) {
  Layer& L = layers_[layer];
  std::vector<WriteRequest> requests;
  std::vector<uint64_t> checksums;
  uint64_t records_end = 0;
  for (GroupRecord& r : groups) {
    const uint64_t h = record_checksum(r.bytes.data(), r.bytes.size());
    std::memcpy(r.bytes.data() + offsetof(RecordHeader, record_checksum), &h, sizeof(h));
    checksums.push_back(h);
    const uint64_t offset = static_cast<uint64_t>(r.group) * L.record_bytes;
    push_coalesced(requests, {offset, r.bytes.size(), r.bytes.data()});
    records_end = std::max<uint64_t>(records_end, offset + r.bytes.size());
  }
  // Zeros from the last record to the next block edge, the first time the file grows past it:
  // the file then ends on a block, so that an O_DIRECT read of any records' blocks is whole.
  static constexpr std::array<uint8_t, kDirectIoAlignment> kZeros{};
  const uint64_t padded_end = align_up(records_end, kDirectIoAlignment);
  if (records_end > L.abstract_file_bytes && padded_end > records_end) {
    requests.push_back({records_end, static_cast<size_t>(padded_end - records_end), kZeros.data()});
  }
  if (Status st = L.abstracts->write_batch(requests); !st.is_ok()) {
    return chunk_error(st.code(), layer, first_chunk, "writing abstract records: " + st.message());
  }
  L.abstract_file_bytes = std::max(L.abstract_file_bytes, padded_end);
  for (size_t k = 0; k < groups.size(); ++k) {
    const auto g = static_cast<size_t>(groups[k].group);
    if (L.record_checksums.size() <= g) L.record_checksums.resize(g + 1, 0);
    L.record_checksums[g] = checksums[k];
    *n_bytes += groups[k].bytes.size();
  }
  L.open_group = groups.back().group;
  L.open_record = std::move(groups.back().bytes);
  return Status::ok();
}

Status DiskTier::write_chunks(int layer, std::span<const DiskChunkWrite> writes) {
  if (writes.empty()) return Status::ok();
  for (const DiskChunkWrite& w : writes) {
    if (w.index < shared_chunks(layer)) return chunk_error(StatusCode::kInternal, layer, w.index, "write over a shared chunk");
  }
  Layer& L = layers_[layer];
  const ChunkGeometry& geo = options_.geometry;
  const RecordLayout layout(geo, L.group_chunks);
  std::vector<Entry> entries(writes.size());
  std::vector<WriteRequest> slots;
  std::vector<WriteRequest> compressed_slots;
  std::vector<GroupRecord> groups;  // the records the batch touches, in the order it first does
  const bool with_compressed = options_.transfer_codec != KvCodec::kNone;
  for (size_t j = 0; j < writes.size(); ++j) {
    const DiskChunkWrite& w = writes[j];
    if (with_compressed && w.compressed == nullptr) {
      return chunk_error(StatusCode::kInternal, layer, w.index, "write without its compressed form");
    }
    Entry& entry = entries[j];
    entry = {true, static_cast<uint32_t>(w.n_tokens), checksum64(w.stored, stored_bytes_),
             with_compressed ? checksum64(w.compressed, compressed_bytes_) : 0};
    const int64_t g = w.index / L.group_chunks;
    auto rec = std::find_if(groups.begin(), groups.end(), [&](const GroupRecord& r) { return r.group == g; });
    if (rec == groups.end()) {
      groups.push_back({g, {}});
      LEOAM_RETURN_IF_ERROR(load_record(layer, g, groups.back().bytes));
      rec = groups.end() - 1;
    }
    put_chunk(geo, layout, static_cast<int>(w.index % L.group_chunks), {entry.n_tokens, entry.chunk_checksum},
              w.abstract, rec->bytes.data());
    push_coalesced(slots, {static_cast<uint64_t>(w.index) * slot_bytes_, slot_bytes_, w.stored});
    if (with_compressed) {
      push_coalesced(compressed_slots,
                     {static_cast<uint64_t>(w.index) * compressed_slot_bytes_, compressed_slot_bytes_, w.compressed});
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  if (Status st = L.chunks->write_batch(slots); !st.is_ok()) {
    const std::string what = writes.size() == 1 ? "writing the chunk: "
                                                : "writing " + std::to_string(writes.size()) + " chunks from this one on: ";
    return chunk_error(st.code(), layer, writes[0].index, what + st.message());
  }
  if (with_compressed) {
    if (Status st = L.compressed->write_batch(compressed_slots); !st.is_ok()) {
      return chunk_error(st.code(), layer, writes[0].index,
                         "writing the compressed form of " + std::to_string(writes.size()) + " chunk(s) from this one on: " +
                             st.message());
    }
  }
  uint64_t record_bytes_written = 0;
  LEOAM_RETURN_IF_ERROR(write_records(layer, groups, writes[0].index, &record_bytes_written));
  if (options_.stats != nullptr) {
    options_.stats->disk_write_latency.record_us(elapsed_us(t0));
    (*options_.stats)[Tier::kDisk].bytes_written +=
        writes.size() * (slot_bytes_ + compressed_slot_bytes_) + record_bytes_written;
  }
  for (size_t j = 0; j < writes.size(); ++j) {
    const int64_t index = writes[j].index;
    if (static_cast<int64_t>(L.entries.size()) <= index) L.entries.resize(static_cast<size_t>(index) + 1);
    L.entries[index] = entries[j];
  }
  return Status::ok();
}

Status DiskTier::read_chunks(int layer, std::span<const DiskChunkRead> reads, KvStats* count_in) {
  const int64_t shared = shared_chunks(layer);
  if (shared == 0) return read_own_chunks(layer, reads, count_in);
  std::vector<DiskChunkRead> own, from_base;
  for (const DiskChunkRead& r : reads) {
    if (r.index >= shared) {
      own.push_back(r);
    } else if (r.compressed) {
      return chunk_error(StatusCode::kInternal, layer, r.index, "compressed read of a shared chunk");
    } else {
      from_base.push_back(r);
    }
  }
  LEOAM_RETURN_IF_ERROR(base_->read_chunks_serialised(layer, from_base, count_in != nullptr ? count_in : options_.stats));
  return read_own_chunks(layer, own, count_in);
}

Status DiskTier::plan_reads(PendingRead& pending) const {
  const Layer& L = layers_[pending.layer];
  pending.requests.clear();
  pending.compressed_requests.clear();
  pending.requests.reserve(pending.reads.size());
  pending.n_bytes = 0;
  for (const DiskChunkRead& r : pending.reads) {
    if (!wrote_chunk(pending.layer, r.index)) {
      return chunk_error(StatusCode::kInternal, pending.layer, r.index, "read of a chunk never written");
    }
    if (r.compressed && L.compressed == nullptr) {
      return chunk_error(StatusCode::kInternal, pending.layer, r.index, "compressed read without a transfer codec");
    }
    const size_t slot = r.compressed ? compressed_slot_bytes_ : slot_bytes_;
    push_coalesced(r.compressed ? pending.compressed_requests : pending.requests,
                   {static_cast<uint64_t>(r.index) * slot, slot, r.dst});
    pending.n_bytes += slot;
  }
  return Status::ok();
}

Status DiskTier::read_error(const PendingRead& pending, const Status& st) const {
  return chunk_error(st.code(), pending.layer, pending.reads[0].index,
                     "reading " + std::to_string(pending.reads.size()) + " chunk(s) from this one on: " + st.message());
}

Status DiskTier::check_reads(const PendingRead& pending, KvStats* count_in) const {
  const std::span<const DiskChunkRead> reads = pending.reads;
  if (KvStats* stats = count_in != nullptr ? count_in : options_.stats; stats != nullptr) {
    stats->disk_read_latency.record_us(elapsed_us(pending.t0));
    (*stats)[Tier::kDisk].bytes_read += pending.n_bytes;
    if (options_.transfer_codec != KvCodec::kNone) {
      const uint64_t n_compressed = count_compressed(reads);
      TransferStats& t = stats->transfer;
      t.chunks_compressed += n_compressed;
      t.chunks_as_is += reads.size() - n_compressed;
      t.bytes_compressed += n_compressed * compressed_slot_bytes_;
    }
  }
  const Layer& L = layers_[pending.layer];
  for (const DiskChunkRead& r : reads) {
    const Entry& e = L.entries[r.index];
    const uint64_t expected = r.compressed ? e.compressed_checksum : e.chunk_checksum;
    const uint64_t got = checksum64(r.dst, r.compressed ? compressed_bytes_ : stored_bytes_);
    if (got != expected) {
      const size_t slot = r.compressed ? compressed_slot_bytes_ : slot_bytes_;
      return chunk_error(StatusCode::kCorrupt, pending.layer, r.index,
                         "checksum mismatch in " + (r.compressed ? compressed_path(pending.layer) : chunk_path(pending.layer)) +
                             " at offset " + std::to_string(static_cast<uint64_t>(r.index) * slot) + " (expected " +
                             hex_0x(expected) + ", read " + hex_0x(got) + "): the KV file is corrupt");
    }
  }
  return Status::ok();
}

Status DiskTier::read_own_chunks(int layer, std::span<const DiskChunkRead> reads, KvStats* count_in) {
  if (reads.empty()) return Status::ok();
  PendingRead p;
  p.layer = layer;
  p.reads = reads;
  LEOAM_RETURN_IF_ERROR(plan_reads(p));
  const Layer& L = layers_[layer];
  p.t0 = std::chrono::steady_clock::now();
  for (const auto& [file, reqs] : {std::pair{L.chunks.get(), &p.requests}, std::pair{L.compressed.get(), &p.compressed_requests}}) {
    if (reqs->empty()) continue;
    if (Status st = file->read(*reqs); !st.is_ok()) return read_error(p, st);
  }
  return check_reads(p, count_in);
}

Status DiskTier::start_read_chunks(int layer, std::span<const DiskChunkRead> reads, PendingRead& pending) {
  pending = PendingRead{};
  pending.layer = layer;
  pending.reads = reads;
  if (reads.empty()) return Status::ok();
  if (shared_chunks(layer) > 0) {
    pending.deferred = true;
    return Status::ok();
  }
  LEOAM_RETURN_IF_ERROR(plan_reads(pending));
  const Layer& L = layers_[layer];
  pending.t0 = std::chrono::steady_clock::now();
  RandomAccessFile* files[2] = {L.chunks.get(), L.compressed.get()};
  const std::vector<ReadRequest>* requests[2] = {&pending.requests, &pending.compressed_requests};
  for (int f = 0; f < 2; ++f) {
    if (requests[f]->empty()) continue;
    if (Status st = files[f]->start_reads(*requests[f]); !st.is_ok()) {
      if (f == 1 && pending.started[0]) (void)files[0]->finish_reads();  // nothing may stay in flight
      pending.started[0] = false;
      return read_error(pending, st);
    }
    pending.started[f] = true;
  }
  return Status::ok();
}

Status DiskTier::finish_read_chunks(PendingRead& pending) {
  if (pending.reads.empty()) return Status::ok();
  if (pending.deferred) return read_chunks(pending.layer, pending.reads);
  const Layer& L = layers_[pending.layer];
  RandomAccessFile* files[2] = {L.chunks.get(), L.compressed.get()};
  Status first_error;
  for (int f = 0; f < 2; ++f) {  // both, whatever the first says: nothing may stay in flight
    if (!std::exchange(pending.started[f], false)) continue;
    if (Status st = files[f]->finish_reads(); !st.is_ok() && first_error.is_ok()) first_error = read_error(pending, st);
  }
  if (!first_error.is_ok()) return first_error;
  return check_reads(pending, nullptr);
}

Status DiskTier::read_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in) {
  const int64_t shared = shared_chunks(layer);
  const bool reaches_base = std::any_of(runs.begin(), runs.end(), [&](const ChunkRun& r) { return r.begin < shared && r.end > r.begin; });
  return reaches_base ? read_split_abstracts(layer, runs, dst, count_in) : read_own_abstracts(layer, runs, dst, count_in);
}

Status DiskTier::read_split_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in) {
  const int64_t shared = shared_chunks(layer);
  const int64_t stride = options_.geometry.abstract_floats();
  std::vector<ChunkRun> base_runs, own_runs;
  int64_t n_base = 0, n_own = 0;
  for (const ChunkRun& r : runs) {
    const int64_t mid = std::clamp(shared, r.begin, std::max(r.begin, r.end));
    if (mid > r.begin) base_runs.push_back({r.begin, mid}), n_base += mid - r.begin;
    if (r.end > mid) own_runs.push_back({mid, r.end}), n_own += r.end - mid;
  }
  std::vector<float> from_base(static_cast<size_t>(n_base * stride)), own(static_cast<size_t>(n_own * stride));
  {
    std::lock_guard lock(base_->shared_mutex_);
    LEOAM_RETURN_IF_ERROR(
        base_->read_own_abstracts(layer, base_runs, from_base.data(), count_in != nullptr ? count_in : options_.stats));
  }
  LEOAM_RETURN_IF_ERROR(read_own_abstracts(layer, own_runs, own.data(), count_in));
  // Run after run, as asked: each run's shared chunks come before its own.
  const float* b = from_base.data();
  const float* o = own.data();
  for (const ChunkRun& r : runs) {
    const int64_t mid = std::clamp(shared, r.begin, std::max(r.begin, r.end));
    const int64_t nb = std::max<int64_t>(0, mid - r.begin) * stride, no = std::max<int64_t>(0, r.end - mid) * stride;
    dst = std::copy(b, b + nb, dst);
    dst = std::copy(o, o + no, dst);
    b += nb;
    o += no;
  }
  return Status::ok();
}

Status DiskTier::read_own_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in) {
  Layer& L = layers_[layer];
  for (const ChunkRun& r : runs) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      if (!wrote_chunk(layer, i)) return chunk_error(StatusCode::kInternal, layer, i, "abstract of a chunk never written");
    }
  }
  const int64_t G = L.group_chunks;
  const uint64_t rb = L.record_bytes;
  // Per run, the whole blocks that hold its groups' records, so that the read can bypass the page
  // cache.
  RandomAccessFile& file = L.abstract_reads != nullptr ? *L.abstract_reads : *L.abstracts;
  const bool whole_blocks = L.abstract_reads != nullptr;
  struct Span {
    int64_t g0 = 0;      // the run's first group
    uint64_t read0 = 0, read1 = 0;
    uint64_t at = 0;     // where its blocks land in the scratch
  };
  std::vector<Span> spans;
  uint64_t total = 0;
  for (const ChunkRun& r : runs) {
    if (r.end <= r.begin) {
      spans.push_back({});
      continue;
    }
    Span sp;
    sp.g0 = r.begin / G;
    const uint64_t first = static_cast<uint64_t>(sp.g0) * rb;
    const uint64_t last = static_cast<uint64_t>((r.end - 1) / G + 1) * rb;
    sp.read0 = whole_blocks ? first / kDirectIoAlignment * kDirectIoAlignment : first;
    sp.read1 = whole_blocks ? align_up(last, kDirectIoAlignment) : last;
    sp.at = total;
    total += align_up(sp.read1 - sp.read0, kDirectIoAlignment);
    spans.push_back(sp);
  }
  if (total == 0) return Status::ok();
  if (read_scratch_.size() < total) {
    LEOAM_ASSIGN_OR_RETURN(read_scratch_, AlignedBuffer::allocate(total));
  }
  std::vector<ReadRequest> reqs;
  for (const Span& sp : spans) {
    if (sp.read1 > sp.read0) reqs.push_back({sp.read0, static_cast<size_t>(sp.read1 - sp.read0), read_scratch_.data() + sp.at});
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (Status st = file.read(reqs); !st.is_ok()) {
    return chunk_error(st.code(), layer, runs.front().begin, "reading abstracts: " + st.message());
  }
  if (KvStats* stats = count_in != nullptr ? count_in : options_.stats; stats != nullptr) {
    stats->disk_read_latency.record_us(elapsed_us(t0));
    for (const ReadRequest& req : reqs) {
      (*stats)[Tier::kDisk].bytes_read += req.n_bytes;
      stats->disk_abstract_bytes_read += req.n_bytes;
    }
  }
  const ChunkGeometry& g = options_.geometry;
  const RecordLayout layout(g, L.group_chunks);
  for (size_t k = 0; k < runs.size(); ++k) {
    const ChunkRun& r = runs[k];
    const uint8_t* records = read_scratch_.data() + spans[k].at + (spans[k].g0 * rb - spans[k].read0);
    int64_t checked = -1;  // the last group checked
    for (int64_t i = r.begin; i < r.end; ++i) {
      const int64_t gi = i / G;
      const uint8_t* rec = records + (gi - spans[k].g0) * rb;
      if (gi != checked) {
        if (gi >= static_cast<int64_t>(L.record_checksums.size())) {
          return chunk_error(StatusCode::kInternal, layer, i, "abstract record never written");
        }
        RecordHeader h;
        std::memcpy(&h, rec, sizeof(h));
        const uint64_t expected = L.record_checksums[gi];
        if (h.record_checksum != expected || record_checksum(rec, rb) != expected) {
          return chunk_error(StatusCode::kCorrupt, layer, i,
                             "abstract checksum mismatch in " + abstract_path(layer) + " at offset " +
                                 std::to_string(static_cast<uint64_t>(gi) * rb) + ": the abstract file is corrupt");
        }
        checked = gi;
      }
      get_chunk_abstract(g, layout, rec, static_cast<int>(i - gi * G), dst);
      dst += g.abstract_floats();
    }
  }
  return Status::ok();
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
