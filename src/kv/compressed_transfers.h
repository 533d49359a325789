// CompressedTransfers: the tiered store's side of compressed transfers (transfer_compression.h),
// for a disk tier that keeps a compressed copy of every chunk. It encodes the copies that a
// write-through batch writes, chooses the form of each batch of disk reads (--kv-compress), times
// reads and decodes for the cost model (auto), and widens a chunk's box to bound the keys as a
// compressed read would serve them. Which chunks are lossy (read compressed whatever the choice)
// is the store's to say. One thread drives it, as the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "io/aligned_buffer.h"
#include "kv/chunk_layout.h"
#include "kv/disk_tier.h"
#include "kv/kv_codec.h"
#include "kv/kv_stats.h"
#include "kv/transfer_compression.h"

namespace leoam {

class CompressedTransfers {
 public:
  // For `disk`, whose transfer codec is the one of `mode` (int8, int4 or auto), with write-through
  // batches of n_write_slots chunks at most. Auto gets its first decode rate here: one chunk
  // decoded for a millisecond or so.
  static Result<std::unique_ptr<CompressedTransfers>> create(const DiskTier& disk, KvCompress mode,
                                                             size_t n_write_slots);

  KvCodec codec() const { return codec_; }
  size_t slot_bytes() const { return slot_bytes_; }  // a compressed copy's disk slot
  // Whether the cost model times the reads (auto): a batch's reads then go alone, unoverlapped.
  bool times_reads() const { return model_ != nullptr; }
  // Whether the next batch of disk reads (a gather's or a read-ahead's) reads the compressed copies.
  bool choose_compressed_read();
  // The compressed copy of `chunk` (compute-ready, [chunk_bytes]) in write slot `slot`, zero-padded
  // to its disk slot; valid until that slot is encoded again.
  const uint8_t* encode_for_write(const uint8_t* chunk, size_t slot);
  // Widens `box` to bound the keys of rows [0, n_rows) of `chunk` (compute-ready) after their
  // round trip through the codec.
  void cover_round_trip(const uint8_t* chunk, int64_t n_rows, float* box);
  // Widens `box` to bound rows [0, n_rows) of the keys of `compressed` (a chunk's copy), decoded
  // into keys_scratch [k_bytes].
  void cover_compressed(const uint8_t* compressed, int64_t n_rows, float* box, uint8_t* keys_scratch) const;
  // A batch of disk reads took `seconds`: with auto, a sample of its form's time a chunk when the
  // batch read one form only.
  void record_reads(std::span<const DiskChunkRead> reads, double seconds);
  void decode(const uint8_t* compressed, uint8_t* dst) const;  // dst: [chunk_bytes]
  // n_chunks copies were decoded in `seconds`: counted in `stats`, and a sample for auto.
  void record_decode(uint64_t n_chunks, double seconds, KvStats& stats);
  // The mode and, with auto, the cost model's times a chunk, into stats.transfer.
  void report(KvStats& stats) const;
  uint64_t buffer_bytes() const { return write_buffer_.size() + round_trip_.capacity(); }

 private:
  CompressedTransfers(const ChunkGeometry& geometry, KvCompress mode, KvCodec codec, size_t slot_bytes);

  ChunkGeometry geometry_;
  KvCompress mode_;
  KvCodec codec_;
  size_t slot_bytes_;
  AlignedBuffer write_buffer_;                 // [n_write_slots][slot_bytes], aligned for O_DIRECT
  std::unique_ptr<TransferCostModel> model_;   // auto only
  std::vector<uint8_t> round_trip_;            // cover_round_trip's keys [k_bytes], grown when first used
};

}  // namespace leoam
