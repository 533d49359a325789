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

bool TransferCostModel::choose_compressed() {
  ++n_choices_;
  if (as_is_.units == 0.0) return false;  // try each form once: as it is first (exact)
  if (compressed_.units == 0.0) return true;
  const bool faster = compressed_seconds() + decode_seconds() < as_is_seconds();
  return n_choices_ % kExploreEvery == 0 ? !faster : faster;
}

}  // namespace leoam
