// Compressed transfers from the disk tier (--kv-compress; LeoAM's dynamic compression): the disk
// keeps a second copy of every chunk in a transfer codec's form (disk_tier.h, the .kvc files),
// and each gather reads either the chunks as they are or that copy, then decodes it: off reads
// them as they are (exact); int8 and int4 always read the copy (lossy: kv_codec.h bounds the
// error); auto reads int4 where TransferCostModel expects it to be faster, per gather batch.
// The cost model times each form per chunk (a disk's cost is not only its bytes), as decayed
// sums, and retries the form not chosen one batch in kExploreEvery.
// Why so: docs/kv-store.md#the-three-tiers
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
  static constexpr int kExploreEvery = 32;

  void record_read(bool compressed, uint64_t n_chunks, double seconds) {
    (compressed ? compressed_ : as_is_).add(static_cast<double>(n_chunks), seconds);
  }
  void record_decode(uint64_t n_chunks, double seconds) { decode_.add(static_cast<double>(n_chunks), seconds); }
  // Seconds a chunk takes to read as it is, to read compressed, and to decode; 0 before a sample.
  double as_is_seconds() const { return as_is_.per_unit(); }
  double compressed_seconds() const { return compressed_.per_unit(); }
  double decode_seconds() const { return decode_.per_unit(); }
  // Whether the next batch reads compressed: the faster form, or the other one to explore it.
  bool choose_compressed();

 private:
  // Seconds per unit from samples, each older one weighing kDecay times the next.
  struct Decayed {
    static constexpr double kDecay = 0.95;
    double units = 0.0, seconds = 0.0;
    void add(double u, double s) {
      units = units * kDecay + u;
      seconds = seconds * kDecay + s;
    }
    double per_unit() const { return units > 0.0 ? seconds / units : 0.0; }
  };

  Decayed as_is_;
  Decayed compressed_;
  Decayed decode_;
  uint64_t n_choices_ = 0;
};

}  // namespace leoam
