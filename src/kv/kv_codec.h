// The stored form of a chunk on the host and disk tiers: as attention reads it (kNone), or
// compressed group-wise to 8 or 4 bits with an f16 scale and minimum per group (asymmetric, like
// ggml's Q4_1/Q8_1): keys by channel, values by token (KIVI: keys have outlier channels). Lossy:
// |decoded - x| <= scale / 2, but a key code is moved (by one scale at most) to keep the key's
// sign, so an abstract's sign bits (chunk_layout.h) hold for decoded keys. Inputs are finite and
// within f16 range, as f16 KV is. The codes are kernels/cpu/kv_group_codes.h's on the CPU's
// fastest path, bitwise equal to the scalar references in namespace ref.
// The layout and the bound: docs/kv-store.md#chunk-codecs
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
