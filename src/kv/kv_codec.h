// The stored form of a chunk on the host and disk tiers: as attention reads it (kNone), or
// compressed group-wise to 8 or 4 bits with a scale and a minimum per group (asymmetric, like
// ggml's Q4_1/Q8_1 but keyed to KV rows). Compression is lossy: the tier that holds a compressed
// chunk says so, and a decoded chunk is not bit-equal to the original.
//
// Encoded chunk (kInt8 / kInt4):
//
//   [K: row 0 | row 1 | ... | row C-1][V: row 0 | ... | row C-1]
//   encoded row = n_groups blocks, group g covering row elements [32g, 32g + 32) (the last group
//   of a row may be short, when row_elements % 32 != 0; its unused codes are 0):
//     block = { f16 scale; f16 min; uint8 q[32] }        kInt8, 36 bytes
//     block = { f16 scale; f16 min; uint8 q[16] }        kInt4, 20 bytes, element 2i in the low
//                                                        nibble of q[i], 2i+1 in the high nibble
//   value = min + scale * code, code in [0, 255] or [0, 15]. min is the group's minimum rounded
//   down to f16; scale = (max - min) / 255 (or 15) with that min, rounded up to f16 (0 when the
//   group is constant at min, and then every code is 0); codes are round-to-nearest of
//   (x - min) / scale, clamped. Rounding min down and scale up keeps every x inside
//   [min, min + 255 * scale], so |decoded - x| <= scale / 2 (plus the f16 rounding of the output
//   when dtype is f16), even for a narrow group far from 0 in an f32 chunk. Keys keep their sign:
//   a K code whose value lies on the other side of 0 than x takes its neighbour on x's side
//   (error at most one scale), so an abstract's sign bits (chunk_layout.h) hold for decoded keys.
//
// Keys and values are taken to be finite and within f16 range (|x| <= 65504), as f16 KV is.
//
// Encoding is scalar (it runs on demotion and write-through). Decoding runs on every gather of a
// compressed chunk, so it has an AVX2 path, bitwise equal to the scalar reference ref::decode_chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kv/chunk_layout.h"

namespace leoam {

enum class KvCodec : uint8_t { kNone, kInt8, kInt4 };

inline constexpr int kKvCodecGroup = 32;

const char* kv_codec_name(KvCodec codec);  // "none", "int8", "int4"
std::optional<KvCodec> parse_kv_codec(std::string_view name);

// Bytes of one chunk of `g` in the stored form of `codec` (chunk_bytes() for kNone).
size_t encoded_chunk_bytes(const ChunkGeometry& g, KvCodec codec);

// dst[encoded_chunk_bytes] = the stored form of the chunk at src (layout of chunk_layout.h).
// Encodes all C rows of K and V (zero rows encode to zero).
void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst);
// dst[g.chunk_bytes()] = the chunk decoded from its stored form.
void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst);

// The codec's bound on how far a round trip moves a key, per group of 32 channels: scales[gi] (for
// codec_groups_per_row groups) = the largest group scale over K rows [0, n_rows), as encode_chunk
// picks it from the keys (key_group_scales) or as a stored form holds it (stored_key_group_scales).
int64_t codec_groups_per_row(const ChunkGeometry& g);
void key_group_scales(const ChunkGeometry& g, KvCodec codec, const void* chunk, int64_t n_rows, float* scales);
void stored_key_group_scales(const ChunkGeometry& g, KvCodec codec, const uint8_t* stored, int64_t n_rows, float* scales);
// Widens box [2][row_elements] (minima, then maxima; chunk_layout.h) so that it holds the round
// trip of every key it held, and every key whose round trip it held, given the scales of both.
void widen_box_by_group_scales(const ChunkGeometry& g, const float* scales, float* box);

namespace ref {
void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst);
}  // namespace ref

}  // namespace leoam
