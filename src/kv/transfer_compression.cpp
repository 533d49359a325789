#include "kv/transfer_compression.h"

namespace leoam {

const char* kv_compress_name(KvCompress mode) {
  switch (mode) {
    case KvCompress::kOff: return "off";
    case KvCompress::kInt8: return "int8";
    case KvCompress::kInt4: return "int4";
    case KvCompress::kAuto: return "auto";
  }
  return "?";
}

std::optional<KvCompress> parse_kv_compress(std::string_view name) {
  for (KvCompress m : {KvCompress::kOff, KvCompress::kInt8, KvCompress::kInt4, KvCompress::kAuto}) {
    if (name == kv_compress_name(m)) return m;
  }
  return std::nullopt;
}

KvCodec transfer_codec_of(KvCompress mode) {
  switch (mode) {
    case KvCompress::kOff: return KvCodec::kNone;
    case KvCompress::kInt8: return KvCodec::kInt8;
    case KvCompress::kInt4:
    case KvCompress::kAuto: return KvCodec::kInt4;
  }
  return KvCodec::kNone;
}

bool TransferCostModel::prefers_compressed() const {
  const double disk = disk_rate();
  const double decode = decode_rate();
  if (disk <= 0.0) return true;     // unknown: the compressed reads will measure it
  if (decode <= 0.0) return false;  // the decode's cost is unknown: read as it is
  const double as_is = static_cast<double>(sizes_.slot_bytes) / disk;
  const double compressed = static_cast<double>(sizes_.compressed_slot_bytes) / disk +
                            static_cast<double>(sizes_.chunk_bytes) / decode;
  return compressed < as_is;
}

}  // namespace leoam
