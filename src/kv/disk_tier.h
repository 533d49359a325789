// DiskTier: the KV chunks and abstracts of one session that live on disk, in per-layer files:
// <session>-LNNN.kv (a slot per chunk, its stored form padded to a multiple of 4096, O_DIRECT and
// io_uring), <session>-LNNN.lka (abstract records, one per group of chunks) and, with a transfer
// codec, <session>-LNNN.kvc (each chunk again in the codec's form). Every chunk and record read is
// checked against the checksum written with it: a mismatch is kCorrupt, a short read or I/O error
// kIoError, each naming the session, layer, chunk and file; a failed read or write changes no
// recorded state. Files are created 0600 and, unless kept, unlinked once open, so none outlives
// the process. A tier may read its first chunks in place from a kept session's tier (share_prefix).
// The file formats, byte by byte: docs/kv-store.md#disk-tier-files
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/aligned_buffer.h"
#include "io/file.h"
#include "kv/chunk_layout.h"
#include "kv/kv_catalog.h"  // ChunkRun
#include "kv/kv_codec.h"
#include "kv/kv_stats.h"

namespace leoam {

struct DiskTierOptions {
  std::string dir;
  std::string session = "kv";  // file name prefix, and the name errors give
  int n_layer = 0;
  ChunkGeometry geometry;
  KvCodec codec = KvCodec::kNone;  // the stored form of the chunks
  // A second, compressed copy of every chunk written, for reads that ask for it (kNone: none).
  // Only beside the stored form kNone; not for a kept session (open_existing).
  KvCodec transfer_codec = KvCodec::kNone;
  // Per layer, the chunks that share an abstract record (G above; empty, or a layer past the
  // end: 1). A kept session's records must have been written with the same.
  std::vector<int> abstract_group_chunks;
  FileOpenOptions file_options;    // direct / uring / queue depth (create and truncate are set here)
  bool keep_files = false;         // leave the files in place when destroyed
  bool visible_files = false;      // without keep_files: unlink at the end, not at once
  FileSystem* file_system = nullptr;  // nullptr: posix_file_system()
  KvStats* stats = nullptr;           // where I/O latency and bytes are counted (may be null)
};

// One chunk to read: its slot's stored bytes land in dst (aligned to kDirectIoAlignment, at
// least slot_bytes() long), or with `compressed` its transfer codec form (at least
// compressed_slot_bytes() long).
struct DiskChunkRead {
  int64_t index = 0;
  uint8_t* dst = nullptr;
  bool compressed = false;
};

// One chunk to write: its stored form [slot_bytes()] (aligned; bytes past stored_bytes() are
// written as they are, normally zero), its filled rows and its abstract; with a transfer codec
// also its compressed form [compressed_slot_bytes()] (aligned, zero-padded likewise).
struct DiskChunkWrite {
  int64_t index = 0;
  const uint8_t* stored = nullptr;
  int64_t n_tokens = 0;
  const float* abstract = nullptr;
  const uint8_t* compressed = nullptr;
};

class DiskTier {
 public:
  // Creates (truncating) the files of every layer in options.dir, which is created if missing.
  static Result<std::unique_ptr<DiskTier>> create(const DiskTierOptions& options);
  // Opens the files of a kept session read-only, and reads every layer's abstract records
  // (n_chunks[layer] of them), checking each, to learn the chunks' checksums and fills.
  static Result<std::unique_ptr<DiskTier>> open_existing(const DiskTierOptions& options,
                                                         std::span<const int64_t> n_chunks);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const ChunkGeometry& geometry() const { return options_.geometry; }
  KvCodec codec() const { return options_.codec; }
  const std::string& session() const { return options_.session; }
  size_t stored_bytes() const { return stored_bytes_; }  // encoded_chunk_bytes
  size_t slot_bytes() const { return slot_bytes_; }      // stored_bytes rounded up to 4096
  int group_chunks(int layer) const { return layers_[layer].group_chunks; }
  size_t record_bytes(int layer) const { return layers_[layer].record_bytes; }
  // The last record of each layer, kept to add the next chunks to it.
  uint64_t buffer_bytes() const;
  KvCodec transfer_codec() const { return options_.transfer_codec; }
  size_t compressed_bytes() const { return compressed_bytes_; }            // encoded_chunk_bytes
  size_t compressed_slot_bytes() const { return compressed_slot_bytes_; }  // rounded up to 4096
  // The abstract files' bytes on disk, all layers (records and block padding).
  uint64_t abstract_file_bytes() const;
  // The I/O mode in effect, e.g. "O_DIRECT + io_uring (queue depth 32), chunks and abstracts",
  // or the fallback note ("buffered (page cache)" where O_DIRECT was refused).
  std::string io_mode() const;
  // Paths of a layer's files.
  std::string chunk_path(int layer) const;
  std::string abstract_path(int layer) const;
  std::string compressed_path(int layer) const;

  // Reads chunks [0, n_chunks[layer]) of every layer from `base` (a kept session's tier: same
  // geometry and stored form, no transfer codec here) in place from now on. Only before this
  // tier has written anything. `base` is shared: its reads are serialised on its own lock.
  [[nodiscard]] Status share_prefix(std::shared_ptr<DiskTier> base, std::span<const int64_t> n_chunks);
  // The chunks of `layer` read from the shared prefix (0: none).
  int64_t shared_chunks(int layer) const {
    return base_ != nullptr && layer < static_cast<int>(shared_chunks_.size()) ? shared_chunks_[layer] : 0;
  }

  // True once chunk `index` of `layer` has been written (and not forgotten), or is shared.
  bool has_chunk(int layer, int64_t index) const;
  int64_t n_tokens_of(int layer, int64_t index) const;  // filled rows of a written chunk

  // Writes one chunk of `layer` (write_chunks of one).
  [[nodiscard]] Status write_chunk(int layer, const DiskChunkWrite& write) { return write_chunks(layer, {&write, 1}); }
  // Writes chunks of one layer in one batch (the KV slots in flight together, then the
  // abstracts). A chunk counts as written only once the whole batch is: after an error none of
  // them does.
  [[nodiscard]] Status write_chunks(int layer, std::span<const DiskChunkWrite> writes);
  // Reads written chunks of one layer in one batch, and checks each. The bytes and the latency
  // are counted in `count_in` (the read-ahead thread's own), or the tier's stats when null.
  [[nodiscard]] Status read_chunks(int layer, std::span<const DiskChunkRead> reads, KvStats* count_in = nullptr);
  // read_chunks in two halves, so that the caller can compute while the reads are in flight
  // (RandomAccessFile::start_reads): start_read_chunks() starts them and returns;
  // finish_read_chunks() waits for them, counts them in the tier's stats and checks each chunk,
  // returning what read_chunks would have. A start that returns ok must be finished before the
  // layer's files are used again; `pending` holds the batch in between, `reads` and their
  // buffers must stay valid, and nothing of it is started when the start fails. A batch that
  // reaches into a shared prefix is read whole in finish_read_chunks().
  struct PendingRead {
    int layer = -1;
    std::span<const DiskChunkRead> reads;  // the caller's
    std::vector<ReadRequest> requests, compressed_requests;  // the .kv's and the .kvc's
    bool deferred = false;  // read in finish_read_chunks()
    bool started[2] = {false, false};  // requests, compressed_requests
    uint64_t n_bytes = 0;
    std::chrono::steady_clock::time_point t0;
  };
  [[nodiscard]] Status start_read_chunks(int layer, std::span<const DiskChunkRead> reads, PendingRead& pending);
  [[nodiscard]] Status finish_read_chunks(PendingRead& pending);
  // read_chunks on a tier that other tiers share (share_prefix): serialised with their reads of it.
  [[nodiscard]] Status read_chunks_serialised(int layer, std::span<const DiskChunkRead> reads, KvStats* count_in = nullptr) {
    std::lock_guard lock(shared_mutex_);
    return read_chunks(layer, reads, count_in);
  }
  // Reads the abstracts of the chunks of `runs` of `layer` (all written) in one batch, a read of
  // the blocks that hold each run (O_DIRECT where the file system allows; bytes_read counts the
  // blocks, the latency one sample), checks them, and stores them run after run in dst:
  // [chunks][abstract_floats] floats. Counted in `count_in`, or the tier's stats when null.
  [[nodiscard]] Status read_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in = nullptr);
  [[nodiscard]] Status read_abstracts(int layer, int64_t i0, int64_t i1, float* dst) {
    const ChunkRun run{i0, i1};
    return read_abstracts(layer, {&run, 1}, dst);
  }
  // Makes every written chunk and abstract durable.
  [[nodiscard]] Status sync();
  // Forgets chunks at and past `index` of `layer` (their slots may be rewritten; shared ones are
  // no longer read). Where `index` cuts a group, its record is rewritten from kept_abstracts: the
  // abstracts (as write_chunks takes them) of chunks [index - index % G, index), of which those
  // this tier wrote are kept.
  [[nodiscard]] Status forget_from(int layer, int64_t index, std::span<const float> kept_abstracts = {});

 private:
  struct Entry {
    bool written = false;
    uint32_t n_tokens = 0;
    uint64_t chunk_checksum = 0;
    uint64_t compressed_checksum = 0;  // with a transfer codec
  };
  struct Layer {
    std::unique_ptr<RandomAccessFile> chunks;
    std::unique_ptr<RandomAccessFile> compressed;      // with a transfer codec
    std::unique_ptr<RandomAccessFile> abstracts;       // buffered: record writes, open_existing's read
    std::unique_ptr<RandomAccessFile> abstract_reads;  // O_DIRECT reads of whole blocks; null when kept
    uint64_t abstract_file_bytes = 0;                  // the .lka's length so far, a block multiple
    std::vector<Entry> entries;                        // [chunk index]
    int group_chunks = 1;                              // G
    size_t record_bytes = 0;
    std::vector<uint64_t> record_checksums;            // [group index]: of its record as written
    int64_t open_group = -1;                           // the group of open_record, -1: none
    std::vector<uint8_t> open_record;                  // the last record written
  };

  explicit DiskTier(const DiskTierOptions& options);
  bool wrote_chunk(int layer, int64_t index) const;  // written by this tier (not shared)
  Status read_own_chunks(int layer, std::span<const DiskChunkRead> reads, KvStats* count_in);
  // read_own_chunks' halves: the requests of pending.reads (checked: written, a codec where
  // compressed), then, after they are read, their count in the stats and the chunks' checksums.
  Status plan_reads(PendingRead& pending) const;
  Status check_reads(const PendingRead& pending, KvStats* count_in) const;
  // "reading N chunk(s) from this one on: <what the file said>"
  Status read_error(const PendingRead& pending, const Status& st) const;
  Status read_own_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in);
  // read_abstracts of runs that reach into the shared prefix: its part from the base, the rest here.
  Status read_split_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, KvStats* count_in);
  Status open_files(bool create);
  Status chunk_error(StatusCode code, int layer, int64_t index, const std::string& what) const;
  // record = group g's record as the file holds it (the open one from memory), checked; or, with
  // none written, an empty one.
  Status load_record(int layer, int64_t g, std::vector<uint8_t>& record);
  // Writes the records of `groups` (group index, record; the checksum field filled here) in one
  // batch, with the block padding past the file's end, then records their checksums and keeps
  // the last one open. Nothing changes on failure.
  struct GroupRecord {
    int64_t group = 0;
    std::vector<uint8_t> bytes;
  };
  Status write_records(int layer, std::vector<GroupRecord>& groups, int64_t first_chunk, uint64_t* n_bytes);

  DiskTierOptions options_;
  FileSystem* fs_ = nullptr;
  size_t stored_bytes_ = 0;
  size_t slot_bytes_ = 0;
  size_t compressed_bytes_ = 0;
  size_t compressed_slot_bytes_ = 0;
  std::vector<Layer> layers_;
  AlignedBuffer read_scratch_;  // read_abstracts' blocks, grown as needed
  std::shared_ptr<DiskTier> base_;      // the shared prefix's tier, or null
  std::vector<int64_t> shared_chunks_;  // [layer]: chunks read from base_
  std::mutex shared_mutex_;             // held while a tier that shares this one reads from it
};

}  // namespace leoam
