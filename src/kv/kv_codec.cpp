#include "kv/kv_codec.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/kv_group_codes.h"
#include "kv/box_f16.h"

namespace leoam {

namespace {

using kernels::KvCodeKernels;

constexpr size_t kBlockHeaderBytes = 2 * sizeof(uint16_t);  // f16 scale, f16 min

int codec_levels(KvCodec codec) { return codec == KvCodec::kInt8 ? 255 : 15; }

size_t block_bytes(KvCodec codec) {
  return kBlockHeaderBytes + (codec == KvCodec::kInt8 ? kKvCodecGroup : kKvCodecGroup / 2);
}

int64_t groups_per_row(const ChunkGeometry& g) { return (g.row_elements() + kKvCodecGroup - 1) / kKvCodecGroup; }

// The smallest positive f16 not below x >= 0, from a double: a scale that covers [min, max] in
// `levels` steps, so the top code is never clamped short of max.
uint16_t f16_scale_round_up(double x) {
  uint16_t h = f32_to_f16(static_cast<float>(x));
  if (static_cast<double>(f16_to_f32(h)) < x) h = static_cast<uint16_t>(h + 1);
  return h;
}

struct GroupRange {
  uint16_t min_h = 0;    // the group's minimum, rounded down to f16
  uint16_t scale_h = 0;  // (max - min) / levels, rounded up to f16; 0 for a constant group
};

// The header of a group whose values span [lo, hi]. A minimum of -0 counts as +0: both decode
// alike, and then the sign of a zero minimum does not depend on the order the values were
// compared in (the vector paths' differs).
GroupRange group_range(KvCodec codec, float lo, float hi) {
  GroupRange r;
  // The minimum rounded down (box_f16.h): rounded to nearest it could exceed the true one, and the
  // smallest values would decode high by up to half an f16 ulp of it, for a narrow group far from
  // 0 many scales.
  r.min_h = f16_round_down(lo + 0.0f);
  // Double: the range of two floats is exact there, so the covering check in f16_scale_round_up holds.
  const double range = static_cast<double>(hi) - static_cast<double>(f16_to_f32(r.min_h));
  r.scale_h = range > 0.0 ? f16_scale_round_up(range / codec_levels(codec)) : 0;
  return r;
}

// Bytes of n packed codes.
size_t code_bytes(KvCodec codec, int64_t n) {
  return codec == KvCodec::kInt8 ? static_cast<size_t>(n) : static_cast<size_t>(n + 1) / 2;
}

// Header i of n f16s at `at` (a V block's scale then minimum; a K token group's n scales, then n
// minima): unaligned little-endian.
void put_f16(uint8_t* at, int64_t i, uint16_t h) { std::memcpy(at + 2 * i, &h, sizeof(h)); }

// Where the codes of `codec` lie, a header a `group` of them (kernels/cpu/kv_group_codes.h).
kernels::CodeLayout code_layout(KvCodec codec, int64_t group, size_t group_bytes = 0) {
  return {codec == KvCodec::kInt8 ? 8 : 4, group, group_bytes};
}

// out [n] in `dtype` = the decoded values of the codes at q.
void decode_codes(const KvCodeKernels& k, KvDtype dtype, const uint8_t* q, kernels::CodeLayout layout, const float* min,
                  const float* scale, int64_t n, uint8_t* out) {
  if (dtype == KvDtype::kF16) {
    k.decode_f16(q, layout, min, scale, n, reinterpret_cast<uint16_t*>(out));
  } else {
    k.decode_f32(q, layout, min, scale, n, reinterpret_cast<float*>(out));
  }
}

// --- V: groups of 32 channels of one row, a block each: f16 scale, f16 min, 32 codes packed -----

size_t values_bytes(const ChunkGeometry& g, KvCodec codec) {
  return static_cast<size_t>(g.chunk_tokens) * static_cast<size_t>(groups_per_row(g)) * block_bytes(codec);
}

// A row at a time: its groups' ranges, their headers written, then the codes between them.
void encode_values(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const uint8_t* v, uint8_t* dst) {
  const int64_t n = g.row_elements();
  const int64_t n_groups = groups_per_row(g);
  std::vector<float> x(static_cast<size_t>(n));
  std::vector<float> lo(static_cast<size_t>(n_groups)), hi(lo.size()), min_f(lo.size()), scale_f(lo.size());
  const kernels::CodeLayout layout = code_layout(codec, kKvCodecGroup, block_bytes(codec));
  for (int64_t r = 0; r < g.chunk_tokens; ++r, dst += n_groups * block_bytes(codec)) {
    load_kv_values(g.dtype, v + static_cast<size_t>(r) * g.row_bytes(), n, x.data());
    k.group_ranges(x.data(), n, kKvCodecGroup, lo.data(), hi.data());
    for (int64_t j = 0; j < n_groups; ++j) {
      const GroupRange gr = group_range(codec, lo[j], hi[j]);
      uint8_t* block = dst + j * block_bytes(codec);
      put_f16(block, 0, gr.scale_h);
      put_f16(block, 1, gr.min_h);
      min_f[j] = f16_to_f32(gr.min_h);
      scale_f[j] = f16_to_f32(gr.scale_h);  // 0 for a constant group: its codes are 0
    }
    // The unused codes of a short last group stay 0.
    std::memset(dst + (n_groups - 1) * block_bytes(codec) + kBlockHeaderBytes, 0, code_bytes(codec, kKvCodecGroup));
    k.encode(x.data(), min_f.data(), scale_f.data(), layout, n, /*keep_signs=*/false, dst + kBlockHeaderBytes);
  }
}

// A row at a time: its headers, all scales then all minima, converted at once, then its codes
// read in place between them.
void decode_values(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* v) {
  const int64_t n = g.row_elements();
  const int64_t n_groups = groups_per_row(g);
  std::vector<uint16_t> headers_h(static_cast<size_t>(2 * n_groups));
  std::vector<float> headers(headers_h.size());
  const kernels::CodeLayout layout = code_layout(codec, kKvCodecGroup, block_bytes(codec));
  for (int64_t r = 0; r < g.chunk_tokens; ++r, src += n_groups * block_bytes(codec)) {
    for (int64_t j = 0; j < n_groups; ++j) {
      std::memcpy(&headers_h[j], src + j * block_bytes(codec), sizeof(uint16_t));
      std::memcpy(&headers_h[n_groups + j], src + j * block_bytes(codec) + sizeof(uint16_t), sizeof(uint16_t));
    }
    load_kv_values(KvDtype::kF16, headers_h.data(), 2 * n_groups, headers.data());
    decode_codes(k, g.dtype, src + kBlockHeaderBytes, layout, headers.data() + n_groups, headers.data(), n,
                 v + static_cast<size_t>(r) * g.row_bytes());
  }
}

// --- K: groups of up to 32 rows of one channel -------------------------------------------------

// Bytes of the K token group of t rows: n scales, n minima, t rows of codes.
size_t key_group_bytes(KvCodec codec, int64_t n, int64_t t) {
  return kBlockHeaderBytes * static_cast<size_t>(n) + static_cast<size_t>(t) * code_bytes(codec, n);
}

size_t keys_bytes(const ChunkGeometry& g, KvCodec codec) {
  size_t bytes = 0;
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    bytes += key_group_bytes(codec, g.row_elements(), std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0));
  }
  return bytes;
}

// The K rows (as the chunk lays them out) -> the K token groups. A key code keeps its key's sign
// (kernels/cpu/kv_group_codes.h, keep_signs), so that the abstract's sign bits hold for decoded keys.
void encode_keys(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const uint8_t* chunk, uint8_t* dst) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = code_bytes(codec, n);
  std::vector<float> x(static_cast<size_t>(std::min(g.chunk_tokens, kKvCodecGroup) * n));
  std::vector<float> lo(static_cast<size_t>(n)), hi(lo.size()), min_f(lo.size()), scale_f(lo.size());
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    for (int64_t r = 0; r < t; ++r) load_kv_values(g.dtype, chunk + static_cast<size_t>(t0 + r) * g.row_bytes(), n, x.data() + r * n);
    k.column_range(x.data(), t, n, lo.data(), hi.data());
    uint8_t* scales = dst;
    uint8_t* mins = dst + 2 * static_cast<size_t>(n);
    uint8_t* codes = dst + 4 * static_cast<size_t>(n);
    for (int64_t e = 0; e < n; ++e) {
      const GroupRange gr = group_range(codec, lo[e], hi[e]);
      put_f16(scales, e, gr.scale_h);
      put_f16(mins, e, gr.min_h);
      min_f[e] = f16_to_f32(gr.min_h);
      scale_f[e] = f16_to_f32(gr.scale_h);
    }
    for (int64_t r = 0; r < t; ++r) {
      k.encode(x.data() + r * n, min_f.data(), scale_f.data(), code_layout(codec, 1), n, /*keep_signs=*/true,
               codes + r * row_bytes);
    }
    dst += key_group_bytes(codec, n, t);
  }
}

// The K token groups at src -> the K rows of a chunk.
void decode_keys(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* chunk) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = code_bytes(codec, n);
  // A token group's headers, its n scales then its n minima, converted at once.
  std::vector<uint16_t> headers_h(static_cast<size_t>(2 * n));
  std::vector<float> headers(headers_h.size());
  const float* scale_f = headers.data();
  const float* min_f = headers.data() + n;
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    const uint8_t* codes = src + 4 * static_cast<size_t>(n);
    std::memcpy(headers_h.data(), src, 4 * static_cast<size_t>(n));
    load_kv_values(KvDtype::kF16, headers_h.data(), 2 * n, headers.data());
    for (int64_t r = 0; r < t; ++r) {
      decode_codes(k, g.dtype, codes + r * row_bytes, code_layout(codec, 1), min_f, scale_f, n,
                   chunk + static_cast<size_t>(t0 + r) * g.row_bytes());
    }
    src += key_group_bytes(codec, n, t);
  }
}

// A chunk by the kernels k: the keys, then the values.
void encode_chunk_with(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  const auto* chunk = static_cast<const uint8_t*>(src);
  encode_keys(k, g, codec, chunk, dst);
  encode_values(k, g, codec, chunk + g.k_bytes(), dst + keys_bytes(g, codec));
}

void decode_chunk_with(const KvCodeKernels& k, const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  auto* chunk = static_cast<uint8_t*>(dst);
  decode_keys(k, g, codec, src, chunk);
  decode_values(k, g, codec, src + keys_bytes(g, codec), chunk + g.k_bytes());
}

}  // namespace

const char* kv_codec_name(KvCodec codec) {
  switch (codec) {
    case KvCodec::kNone: return "none";
    case KvCodec::kInt8: return "int8";
    case KvCodec::kInt4: return "int4";
  }
  return "?";
}

std::optional<KvCodec> parse_kv_codec(std::string_view name) {
  for (KvCodec c : {KvCodec::kNone, KvCodec::kInt8, KvCodec::kInt4}) {
    if (name == kv_codec_name(c)) return c;
  }
  return std::nullopt;
}

size_t encoded_chunk_bytes(const ChunkGeometry& g, KvCodec codec) {
  if (codec == KvCodec::kNone) return g.chunk_bytes();
  return keys_bytes(g, codec) + values_bytes(g, codec);
}

void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  encode_chunk_with(kernels::kv_code_kernels(), g, codec, src, dst);
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  decode_chunk_with(kernels::kv_code_kernels(), g, codec, src, dst);
}

void decode_chunk_keys(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.k_bytes());
    return;
  }
  decode_keys(kernels::kv_code_kernels(), g, codec, src, static_cast<uint8_t*>(dst));
}

void round_trip_keys(const ChunkGeometry& g, KvCodec codec, const void* chunk, void* dst) {
  const KvCodeKernels& k = kernels::kv_code_kernels();
  std::vector<uint8_t> groups(keys_bytes(g, codec));
  encode_keys(k, g, codec, static_cast<const uint8_t*>(chunk), groups.data());
  decode_keys(k, g, codec, groups.data(), static_cast<uint8_t*>(dst));
}

namespace ref {

void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  encode_chunk_with(kernels::ref::kv_code_kernels(), g, codec, src, dst);
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  decode_chunk_with(kernels::ref::kv_code_kernels(), g, codec, src, dst);
}

}  // namespace ref

}  // namespace leoam
