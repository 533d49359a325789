#include "kv/compressed_transfers.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace leoam {

CompressedTransfers::CompressedTransfers(const ChunkGeometry& geometry, KvCompress mode, KvCodec codec,
                                         size_t slot_bytes)
    : geometry_(geometry), mode_(mode), codec_(codec), slot_bytes_(slot_bytes) {}

Result<std::unique_ptr<CompressedTransfers>> CompressedTransfers::create(const DiskTier& disk, KvCompress mode,
                                                                         size_t n_write_slots) {
  if (mode == KvCompress::kOff || disk.transfer_codec() != transfer_codec_of(mode)) {
    return internal_error(std::string("compressed transfers (") + kv_compress_name(mode) +
                          "): the disk tier keeps no compressed copy in their codec");
  }
  std::unique_ptr<CompressedTransfers> t(
      new CompressedTransfers(disk.geometry(), mode, disk.transfer_codec(), disk.compressed_slot_bytes()));
  LEOAM_ASSIGN_OR_RETURN(t->write_buffer_, AlignedBuffer::allocate(n_write_slots * t->slot_bytes_));
  if (mode == KvCompress::kAuto) {
    t->model_ = std::make_unique<TransferCostModel>();
    std::vector<uint8_t> encoded(encoded_chunk_bytes(t->geometry_, t->codec_));
    std::vector<uint8_t> chunk(t->geometry_.chunk_bytes(), 0);
    encode_chunk(t->geometry_, t->codec_, chunk.data(), encoded.data());
    const auto t0 = std::chrono::steady_clock::now();
    double seconds = 0.0;
    uint64_t n = 0;
    while (seconds < 1e-3) {
      decode_chunk(t->geometry_, t->codec_, encoded.data(), chunk.data());
      ++n;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    t->model_->record_decode(n, seconds);
  }
  return t;
}

bool CompressedTransfers::choose_compressed_read() { return model_ == nullptr || model_->choose_compressed(); }

const uint8_t* CompressedTransfers::encode_for_write(const uint8_t* chunk, size_t slot) {
  uint8_t* dst = write_buffer_.data() + slot * slot_bytes_;
  std::memset(dst, 0, slot_bytes_);
  encode_chunk(geometry_, codec_, chunk, dst);
  return dst;
}

void CompressedTransfers::cover_round_trip(const uint8_t* chunk, int64_t n_rows, float* box) {
  round_trip_.resize(geometry_.k_bytes());
  round_trip_keys(geometry_, codec_, chunk, round_trip_.data());
  widen_abstract_box(geometry_, round_trip_.data(), 0, n_rows, box);
}

void CompressedTransfers::cover_compressed(const uint8_t* compressed, int64_t n_rows, float* box,
                                           uint8_t* keys_scratch) const {
  decode_chunk_keys(geometry_, codec_, compressed, keys_scratch);
  widen_abstract_box(geometry_, keys_scratch, 0, n_rows, box);
}

void CompressedTransfers::record_reads(std::span<const DiskChunkRead> reads, double seconds) {
  if (model_ == nullptr) return;
  const auto n_compressed = std::count_if(reads.begin(), reads.end(), [](const DiskChunkRead& r) { return r.compressed; });
  if (n_compressed == 0 || n_compressed == static_cast<std::ptrdiff_t>(reads.size())) {
    model_->record_read(n_compressed > 0, reads.size(), seconds);
  }
}

void CompressedTransfers::decode(const uint8_t* compressed, uint8_t* dst) const {
  decode_chunk(geometry_, codec_, compressed, dst);
}

void CompressedTransfers::record_decode(uint64_t n_chunks, double seconds, KvStats& stats) {
  stats.transfer.decode_ms += seconds * 1e3;
  if (model_ != nullptr) model_->record_decode(n_chunks, seconds);
}

void CompressedTransfers::report(KvStats& stats) const {
  stats.transfer.mode = mode_ == KvCompress::kAuto ? std::string("auto (") + kv_codec_name(codec_) + ")"
                                                   : kv_compress_name(mode_);
  if (model_ != nullptr) {
    stats.transfer.as_is_us_per_chunk = model_->as_is_seconds() * 1e6;
    stats.transfer.compressed_us_per_chunk = model_->compressed_seconds() * 1e6;
    stats.transfer.decode_us_per_chunk = model_->decode_seconds() * 1e6;
  }
}

}  // namespace leoam
