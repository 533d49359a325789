// Compressed transfers from the disk tier (--kv-compress; LeoAM's dynamic compression): the disk
// keeps a second copy of every chunk in a transfer codec's form (disk_tier.h, the .kvc files),
// and each gather reads either the chunks as they are or that copy, then decodes it.
//
//   off          read chunks as they are (exact)
//   int8, int4   always read the compressed copy (lossy: kv_codec.h bounds the error)
//   auto         int4 when TransferCostModel expects it to be faster, per gather batch:
//                  as they are:  n * slot_bytes / disk_rate
//                  compressed:   n * compressed_slot_bytes / disk_rate + n * chunk_bytes / decode_rate
//
// The rates are measured while the store runs: every disk read of chunks and every decode of a
// compressed chunk is a sample. Both are decayed sums of bytes and seconds, so that the model
// follows a disk whose throughput changes. Before the first read the disk rate is unknown, and the
// compressed form is read (the reads then measure it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kv/kv_codec.h"

namespace leoam {

enum class KvCompress : uint8_t { kOff, kInt8, kInt4, kAuto };

const char* kv_compress_name(KvCompress mode);  // "off", "int8", "int4", "auto"
std::optional<KvCompress> parse_kv_compress(std::string_view name);
// The codec of the disk's compressed copy: none for off, int4 for auto.
KvCodec transfer_codec_of(KvCompress mode);

class TransferCostModel {
 public:
  struct Sizes {
    size_t slot_bytes = 0;             // a chunk as it is, on disk
    size_t compressed_slot_bytes = 0;  // its compressed copy, on disk
    size_t chunk_bytes = 0;            // decoded (compute-ready)
  };
  explicit TransferCostModel(const Sizes& sizes) : sizes_(sizes) {}

  void record_disk_read(uint64_t bytes, double seconds) { disk_.add(bytes, seconds); }
  void record_decode(uint64_t decoded_bytes, double seconds) { decode_.add(decoded_bytes, seconds); }
  // Bytes per second; 0 before the first sample.
  double disk_rate() const { return disk_.rate(); }
  double decode_rate() const { return decode_.rate(); }
  // Whether reading a chunk's compressed copy and decoding it is expected to take less time than
  // reading it as it is.
  bool prefers_compressed() const;

 private:
  // A rate from samples, each older one weighing kDecay times the next (about 20 samples matter).
  struct DecayedRate {
    static constexpr double kDecay = 0.95;
    double bytes = 0.0, seconds = 0.0;
    void add(uint64_t b, double s) {
      bytes = bytes * kDecay + static_cast<double>(b);
      seconds = seconds * kDecay + s;
    }
    double rate() const { return seconds > 0.0 ? bytes / seconds : 0.0; }
  };

  Sizes sizes_;
  DecayedRate disk_;
  DecayedRate decode_;
};

}  // namespace leoam
