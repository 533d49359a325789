// The disk tier's abstract record: packing a chunk's slot, box and signs in and out (disk_record.h).
#include "kv/disk_record.h"

#include <algorithm>
#include <cstring>

#include "io/checksum.h"
#include "kv/box_f16.h"

namespace leoam {
namespace {

void store_slot(const RecordSlot& s, uint8_t* at) {
  const auto n = static_cast<uint16_t>(s.n_tokens);
  std::memcpy(at, &n, sizeof(n));
  std::memcpy(at + sizeof(n), &s.chunk_checksum, sizeof(s.chunk_checksum));
}

}  // namespace

RecordSlot load_slot(const uint8_t* at) {
  uint16_t n = 0;
  RecordSlot s;
  std::memcpy(&n, at, sizeof(n));
  std::memcpy(&s.chunk_checksum, at + sizeof(n), sizeof(s.chunk_checksum));
  s.n_tokens = n;
  return s;
}

uint64_t record_checksum(const uint8_t* record, size_t record_bytes) {
  constexpr size_t kField = offsetof(RecordHeader, record_checksum);
  const uint64_t zero = 0;
  uint64_t h = checksum64(record, kField);
  h = checksum64_seeded(&zero, sizeof(zero), h);
  return checksum64_seeded(record + kField + sizeof(zero), record_bytes - kField - sizeof(zero), h);
}

void reset_record(const ChunkGeometry& g, const RecordLayout& r, const RecordHeader& header, uint8_t* record) {
  std::memset(record, 0, r.bytes);
  std::memcpy(record, &header, sizeof(header));
  const int64_t half = g.box_floats() / 2;
  auto* box = reinterpret_cast<uint16_t*>(record + r.box);
  std::fill(box, box + half, uint16_t{0x7c00});             // +inf
  std::fill(box + half, box + 2 * half, uint16_t{0xfc00});  // -inf
}

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

void get_chunk_abstract(const ChunkGeometry& g, const RecordLayout& r, const uint8_t* record, int slot, float* abstract) {
  decode_box(reinterpret_cast<const uint16_t*>(record + r.box), g.box_floats(), abstract);
  const size_t sign_bytes = static_cast<size_t>(g.sign_words()) * sizeof(uint32_t);
  std::memcpy(abstract + g.box_floats(), record + r.signs + slot * sign_bytes, sign_bytes);
}

}  // namespace leoam
