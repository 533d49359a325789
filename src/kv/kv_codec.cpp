#include "kv/kv_codec.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace leoam {

namespace {

constexpr size_t kBlockHeaderBytes = 2 * sizeof(uint16_t);  // f16 scale, f16 min

int codec_levels(KvCodec codec) { return codec == KvCodec::kInt8 ? 255 : 15; }

size_t block_bytes(KvCodec codec) {
  return kBlockHeaderBytes + (codec == KvCodec::kInt8 ? kKvCodecGroup : kKvCodecGroup / 2);
}

int64_t groups_per_row(const ChunkGeometry& g) { return (g.row_elements() + kKvCodecGroup - 1) / kKvCodecGroup; }

// The largest f16 not above x (x finite and within f16 range): the stored minimum must not
// exceed the true one, or the smallest values would decode high by up to half an f16 ulp of the
// minimum, which for a narrow group far from 0 is many scales.
uint16_t f16_round_down(float x) {
  uint16_t h = f32_to_f16(x);
  if (f16_to_f32(h) > x) {
    // One step toward -inf: positive values shrink their magnitude, -0 and negatives grow it.
    h = (h & 0x8000u) == 0 && h != 0 ? static_cast<uint16_t>(h - 1)
                                     : static_cast<uint16_t>((h | 0x8000u) + 1);
  }
  return h;
}

// The smallest positive f16 not below x >= 0: a scale that covers [min, max] in `levels` steps,
// so the top code is never clamped short of max.
uint16_t f16_round_up(double x) {
  uint16_t h = f32_to_f16(static_cast<float>(x));
  if (static_cast<double>(f16_to_f32(h)) < x) h = static_cast<uint16_t>(h + 1);
  return h;
}


// The decoded value of `code`, computed as decode_group does.
float decoded_value(float min, float scale, int code) { return min + scale * static_cast<float>(code); }

// x[n], n <= 32 -> one block at dst (block_bytes(codec) long). With keep_signs, a code whose
// value has the other sign than x moves one step toward x's side of 0 (x >= 0 decodes >= 0, x <= 0
// decodes <= 0, by sign bit), so that a key's sign bit in an abstract holds for its decoded form.
void encode_group(KvCodec codec, const float* x, int n, bool keep_signs, uint8_t* dst) {
  const int levels = codec_levels(codec);
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const uint16_t min_h = f16_round_down(lo);
  const float min = f16_to_f32(min_h);
  // Double: the range of two floats is exact there, so the covering check in f16_round_up holds.
  const double range = static_cast<double>(hi) - static_cast<double>(min);
  const uint16_t scale_h = range > 0.0 ? f16_round_up(range / levels) : 0;
  const double scale = f16_to_f32(scale_h);

  uint8_t codes[kKvCodecGroup] = {};  // unused codes of a short group stay 0
  if (scale_h != 0) {
    for (int i = 0; i < n; ++i) {
      const double q = (static_cast<double>(x[i]) - min) / scale + 0.5;
      // q >= 1 false for NaN too: a cast of NaN to an integer is undefined.
      int code = q >= 1.0 ? static_cast<int>(std::min(q, static_cast<double>(levels))) : 0;
      if (keep_signs) {
        // One step is enough: x lies within half a step of the code's value, and [min, min +
        // levels * scale] holds x, so the neighbour on x's side exists and is at most a step away.
        if (!std::signbit(x[i]) && decoded_value(min, static_cast<float>(scale), code) < 0.0f) ++code;
        if (std::signbit(x[i]) && decoded_value(min, static_cast<float>(scale), code) > 0.0f) --code;
      }
      codes[i] = static_cast<uint8_t>(code);
    }
  }
  std::memcpy(dst, &scale_h, sizeof(scale_h));
  std::memcpy(dst + sizeof(scale_h), &min_h, sizeof(min_h));
  uint8_t* q = dst + kBlockHeaderBytes;
  if (codec == KvCodec::kInt8) {
    std::memcpy(q, codes, kKvCodecGroup);
  } else {
    for (int i = 0; i < kKvCodecGroup / 2; ++i) q[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

// One block at src -> x[n].
void decode_group(KvCodec codec, const uint8_t* src, int n, float* x) {
  uint16_t scale_h, min_h;
  std::memcpy(&scale_h, src, sizeof(scale_h));
  std::memcpy(&min_h, src + sizeof(scale_h), sizeof(min_h));
  const float scale = f16_to_f32(scale_h);
  const float min = f16_to_f32(min_h);
  const uint8_t* q = src + kBlockHeaderBytes;
  for (int i = 0; i < n; ++i) {
    const int code = codec == KvCodec::kInt8 ? q[i] : (q[i / 2] >> (4 * (i % 2))) & 0xf;
    // scale * code is exact in f32 (11 + 8 significant bits), so only the sum rounds.
    x[i] = decoded_value(min, scale, code);
  }
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
  const size_t n_rows = 2 * static_cast<size_t>(g.chunk_tokens);  // K rows then V rows
  return n_rows * static_cast<size_t>(groups_per_row(g)) * block_bytes(codec);
}

void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(codec);
  const int64_t n_rows = 2 * static_cast<int64_t>(g.chunk_tokens);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = in + static_cast<size_t>(r) * row_bytes;
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      load_kv_values(g.dtype, row + static_cast<size_t>(e0) * kv_dtype_size(g.dtype), len, x);
      encode_group(codec, x, len, /*keep_signs=*/r < g.chunk_tokens, dst);  // K rows come first
      dst += n_block_bytes;
    }
  }
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(codec);
  const int64_t n_rows = 2 * static_cast<int64_t>(g.chunk_tokens);
  uint8_t* out = static_cast<uint8_t*>(dst);
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = out + static_cast<size_t>(r) * row_bytes;
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      decode_group(codec, src, len, x);
      store_kv_values(g.dtype, x, len, row + static_cast<size_t>(e0) * kv_dtype_size(g.dtype));
      src += n_block_bytes;
    }
  }
}

}  // namespace leoam
