// The disk tier's abstract record (DiskTier, the .lka files): one per group of G chunks, holding
// a header, each chunk's fill and checksum, the group's key box in f16 and each chunk's key signs.
// Internal to DiskTier's files (disk_tier.cpp, disk_tier_io.cpp).
// The format, byte by byte: docs/kv-store.md#disk-tier-files
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "kv/chunk_layout.h"

namespace leoam {

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

// The slot stored packed at `at`.
RecordSlot load_slot(const uint8_t* at);

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
uint64_t record_checksum(const uint8_t* record, size_t record_bytes);

// A group's record with no chunk in it: the empty box (min +inf, max -inf), no sign set.
void reset_record(const ChunkGeometry& g, const RecordLayout& r, const RecordHeader& header, uint8_t* record);

// Adds chunk `slot` of the group to its record: its fill and checksum, its key signs, and its box
// into the group's, rounded outward (the f16 extremes stay exact: the union of the chunks' f16
// boxes, the same whatever the order).
void put_chunk(const ChunkGeometry& g, const RecordLayout& r, int slot, const RecordSlot& s, const float* abstract,
               uint8_t* record);

// abstract = chunk `slot`'s as the record gives it: the group's box, widened back to f32 exactly,
// then the chunk's own key signs.
void get_chunk_abstract(const ChunkGeometry& g, const RecordLayout& r, const uint8_t* record, int slot, float* abstract);

}  // namespace leoam
