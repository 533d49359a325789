// DiskTier's batched I/O: chunk writes with their abstract records, and reads of chunks (whole, or
// started and finished around the caller's compute) and of abstracts, each checked against the
// checksum written with it; a shared prefix's part read from its base tier.
#include "kv/disk_tier.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "io/checksum.h"
#include "kv/disk_record.h"

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

}  // namespace leoam
