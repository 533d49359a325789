// The stored form of a chunk on the host and disk tiers: as attention reads it (kNone), or
// compressed group-wise to 8 or 4 bits with a scale and a minimum per group (asymmetric, like
// ggml's Q4_1/Q8_1). Keys are grouped by channel and values by token (KIVI: keys have outlier
// channels, so a channel's values share a scale; bench/kv_quant_error.py measures both ways).
// Compression is lossy: the tier that holds a compressed chunk says so, and a decoded chunk is not
// bit-equal to the original.
//
// Encoded chunk (kInt8 / kInt4), E = row_elements, C = chunk_tokens:
//
//   [K: token group 0 | token group 1 | ...][V: row 0 | row 1 | ... | row C-1]
//   K token group j = rows [32j, 32j + T), T = min(32, C - 32j), one group per channel:
//     f16 scale[E] | f16 min[E] | codes of row 0 | ... | codes of row T-1
//     codes of a row: int8 one byte a channel; int4 ceil(E/2) bytes, channel 2i in the low nibble
//     of byte i, 2i+1 in the high one (a last odd channel's high nibble 0)
//   V row = n_groups blocks, group g covering row elements [32g, 32g + 32) (the last group of a
//   row may be short, when row_elements % 32 != 0; its unused codes are 0):
//     block = { f16 scale; f16 min; uint8 q[32] }        kInt8, 36 bytes
//     block = { f16 scale; f16 min; uint8 q[16] }        kInt4, 20 bytes, element 2i in the low
//                                                        nibble of q[i], 2i+1 in the high nibble
//   In every group: value = min + scale * code, code in [0, 255] or [0, 15]. min is the group's
//   minimum rounded down to f16; scale = (max - min) / 255 (or 15) with that min, rounded up to
//   f16 (0 when the group is constant at min, and then every code is 0); codes are
//   round-to-nearest of (x - min) / scale, clamped. Rounding min down and scale up keeps every x
//   inside [min, min + 255 * scale], so |decoded - x| <= scale / 2 (plus the f16 rounding of the
//   output when dtype is f16), even for a narrow group far from 0 in an f32 chunk. Keys keep their
//   sign: a K code whose value lies on the other side of 0 than x takes its neighbour on x's side
//   (error at most one scale), so an abstract's sign bits (chunk_layout.h) hold for decoded keys.
//
// Keys and values are taken to be finite and within f16 range (|x| <= 65504), as f16 KV is.
//
// Encoding (every chunk written with a codec) and decoding (every gather of a compressed chunk)
// have AVX2 paths, bitwise equal to the scalar references in namespace ref.
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

// dst [chunk_tokens][row_bytes] = the K rows of the chunk whose stored form is at src (the keys
// of decode_chunk alone).
void decode_chunk_keys(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst);
// dst [chunk_tokens][row_bytes] = the K rows of `chunk` (a whole chunk, layout of chunk_layout.h)
// as decode_chunk(encode_chunk(chunk)) gives them, for codec int8 or int4.
void round_trip_keys(const ChunkGeometry& g, KvCodec codec, const void* chunk, void* dst);

namespace ref {
void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst);
void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst);
}  // namespace ref

}  // namespace leoam
