#include "kv/kv_codec.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/avx2_util.h"

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
struct GroupRange {
  uint16_t min_h = 0;    // the group's minimum, rounded down to f16
  uint16_t scale_h = 0;  // (max - min) / levels, rounded up to f16; 0 for a constant group
};

// The block header of a group whose values span [lo, hi]. A minimum of -0 counts as +0: both
// decode alike, and then the sign of a zero minimum does not depend on the order the values were
// compared in (the vector path's differs).
GroupRange group_range(KvCodec codec, float lo, float hi) {
  GroupRange r;
  r.min_h = f16_round_down(lo + 0.0f);
  // Double: the range of two floats is exact there, so the covering check in f16_round_up holds.
  const double range = static_cast<double>(hi) - static_cast<double>(f16_to_f32(r.min_h));
  r.scale_h = range > 0.0 ? f16_round_up(range / codec_levels(codec)) : 0;
  return r;
}

GroupRange group_range(KvCodec codec, const float* x, int n) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  return group_range(codec, lo, hi);
}

// One block at dst: the header r and the codes[32] packed.
void put_block(KvCodec codec, GroupRange r, const int32_t* codes, uint8_t* dst) {
  std::memcpy(dst, &r.scale_h, sizeof(r.scale_h));
  std::memcpy(dst + sizeof(r.scale_h), &r.min_h, sizeof(r.min_h));
  uint8_t* q = dst + kBlockHeaderBytes;
  if (codec == KvCodec::kInt8) {
    for (int i = 0; i < kKvCodecGroup; ++i) q[i] = static_cast<uint8_t>(codes[i]);
  } else {
    for (int i = 0; i < kKvCodecGroup / 2; ++i) q[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

// x[n], n <= 32 -> one block at dst (block_bytes(codec) long). With keep_signs, a code whose
// value has the other sign than x moves one step toward x's side of 0 (x >= 0 decodes >= 0, x <= 0
// decodes <= 0, by sign bit), so that a key's sign bit in an abstract holds for its decoded form.
void encode_group(KvCodec codec, const float* x, int n, bool keep_signs, uint8_t* dst) {
  const int levels = codec_levels(codec);
  const GroupRange r = group_range(codec, x, n);
  const float min = f16_to_f32(r.min_h);
  const double scale = f16_to_f32(r.scale_h);
  int32_t codes[kKvCodecGroup] = {};  // unused codes of a short group stay 0
  if (r.scale_h != 0) {
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
      codes[i] = code;
    }
  }
  put_block(codec, r, codes, dst);
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


#ifdef LEOAM_HAVE_X86

// 8 codes (bytes at q) -> 8 floats min + scale * code: the product is exact in f32, so the sum
// rounds once, as decode_group's does, with or without FMA.
LEOAM_AVX2 inline __m256 decode8(__m128i codes8, __m256 scale, __m256 min) {
  return _mm256_add_ps(min, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes8))));
}

// 8 floats -> dst, as store_kv_values writes them (f16: round to nearest even, as f32_to_f16).
template <KvDtype kDtype>
LEOAM_AVX2 inline void store8(__m256 x, uint8_t* dst) {
  if constexpr (kDtype == KvDtype::kF16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  } else {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst), x);
  }
}

// One whole group of 32 (block at src) -> 32 values at dst in kDtype: bitwise what decode_group
// and store_kv_values give.
template <KvCodec kCodec, KvDtype kDtype>
LEOAM_AVX2 void decode_full_group_avx2(const uint8_t* src, uint8_t* dst) {
  constexpr size_t kOut = kDtype == KvDtype::kF16 ? 16 : 32;  // bytes of 8 values
  uint16_t scale_h, min_h;
  std::memcpy(&scale_h, src, sizeof(scale_h));
  std::memcpy(&min_h, src + sizeof(scale_h), sizeof(min_h));
  const __m256 scale = _mm256_set1_ps(_cvtsh_ss(scale_h));
  const __m256 min = _mm256_set1_ps(_cvtsh_ss(min_h));
  const uint8_t* q = src + kBlockHeaderBytes;
  __m128i lo, hi;  // codes 0..15 and 16..31
  if constexpr (kCodec == KvCodec::kInt8) {
    lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
  } else {
    // Element 2i in the low nibble of q[i], 2i + 1 in the high one: interleave the nibbles back.
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i even = _mm_and_si128(packed, mask);
    const __m128i odd = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
    lo = _mm_unpacklo_epi8(even, odd);
    hi = _mm_unpackhi_epi8(even, odd);
  }
  store8<kDtype>(decode8(lo, scale, min), dst);
  store8<kDtype>(decode8(_mm_srli_si128(lo, 8), scale, min), dst + kOut);
  store8<kDtype>(decode8(hi, scale, min), dst + 2 * kOut);
  store8<kDtype>(decode8(_mm_srli_si128(hi, 8), scale, min), dst + 3 * kOut);
}

template <KvCodec kCodec, KvDtype kDtype>
LEOAM_AVX2 void decode_rows_avx2(const ChunkGeometry& g, const uint8_t* src, int64_t n_rows, uint8_t* out) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(kCodec);
  const int64_t n_full = n / kKvCodecGroup * kKvCodecGroup;
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = out + static_cast<size_t>(r) * row_bytes;
    for (int64_t e0 = 0; e0 < n_full; e0 += kKvCodecGroup) {
      decode_full_group_avx2<kCodec, kDtype>(src, row + static_cast<size_t>(e0) * kv_dtype_size(kDtype));
      src += n_block_bytes;
    }
    if (n_full < n) {  // a short last group
      const int len = static_cast<int>(n - n_full);
      decode_group(kCodec, src, len, x);
      store_kv_values(kDtype, x, len, row + static_cast<size_t>(n_full) * kv_dtype_size(kDtype));
      src += n_block_bytes;
    }
  }
}

// One whole group of 32 values (x) -> one block at dst: encode_group's bytes exactly. The codes
// take encode_group's double arithmetic, four lanes at a time (IEEE division rounds alike).
LEOAM_AVX2 void encode_full_group_avx2(KvCodec codec, const float* x, bool keep_signs, uint8_t* dst) {
  const __m256 v[4] = {_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), _mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)};
  __m256 lo = _mm256_min_ps(_mm256_min_ps(v[0], v[1]), _mm256_min_ps(v[2], v[3]));
  __m256 hi = _mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3]));
  float los[8], his[8];
  _mm256_storeu_ps(los, lo);
  _mm256_storeu_ps(his, hi);
  float l = los[0], h = his[0];
  for (int i = 1; i < 8; ++i) {
    l = std::min(l, los[i]);
    h = std::max(h, his[i]);
  }
  const GroupRange r = group_range(codec, l, h);
  alignas(32) int32_t codes[kKvCodecGroup] = {};
  if (r.scale_h != 0) {
    const float min = f16_to_f32(r.min_h);
    const float scale = f16_to_f32(r.scale_h);
    const __m256d min_d = _mm256_set1_pd(min), scale_d = _mm256_set1_pd(scale);
    const __m256d half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0);
    const __m256d top = _mm256_set1_pd(codec_levels(codec));
    const __m256 min_f = _mm256_set1_ps(min), scale_f = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      __m128i c4[2];
      for (int k = 0; k < 2; ++k) {
        const __m256d xd = _mm256_cvtps_pd(k == 0 ? _mm256_castps256_ps128(v[j]) : _mm256_extractf128_ps(v[j], 1));
        const __m256d q = _mm256_add_pd(_mm256_div_pd(_mm256_sub_pd(xd, min_d), scale_d), half);
        const __m256d kept = _mm256_and_pd(_mm256_cmp_pd(q, one, _CMP_GE_OQ), _mm256_min_pd(q, top));
        c4[k] = _mm256_cvttpd_epi32(kept);
      }
      __m256i c = _mm256_set_m128i(c4[1], c4[0]);
      if (keep_signs) {
        const __m256 dec = _mm256_add_ps(min_f, _mm256_mul_ps(scale_f, _mm256_cvtepi32_ps(c)));
        const __m256i negative = _mm256_srai_epi32(_mm256_castps_si256(v[j]), 31);
        const __m256i up = _mm256_andnot_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_LT_OQ)));
        const __m256i down = _mm256_and_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_GT_OQ)));
        c = _mm256_add_epi32(_mm256_sub_epi32(c, up), down);  // masks are -1
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes + 8 * j), c);
    }
  }
  put_block(codec, r, codes, dst);
}

template <KvDtype kDtype>
LEOAM_AVX2 void encode_rows_avx2(const ChunkGeometry& g, KvCodec codec, const uint8_t* in, int64_t n_rows, uint8_t* dst) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(codec);
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = in + static_cast<size_t>(r) * row_bytes;
    const bool keep_signs = r < g.chunk_tokens;  // K rows come first
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup, dst += n_block_bytes) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      const uint8_t* at = row + static_cast<size_t>(e0) * kv_dtype_size(kDtype);
      if (len < kKvCodecGroup) {
        load_kv_values(kDtype, at, len, x);
        encode_group(codec, x, len, keep_signs, dst);
        continue;
      }
      if constexpr (kDtype == KvDtype::kF16) {
        for (int i = 0; i < kKvCodecGroup; i += 8) {
          _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 2 * i))));
        }
      } else {
        std::memcpy(x, at, sizeof(x));
      }
      encode_full_group_avx2(codec, x, keep_signs, dst);
    }
  }
}

#endif  // LEOAM_HAVE_X86

// Rows [0, n_rows) of a chunk (K rows first: a key row keeps its sign) to and from blocks.
void encode_rows_scalar(const ChunkGeometry& g, KvCodec codec, const void* src, int64_t n_rows, uint8_t* dst) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(codec);
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

void decode_rows_scalar(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, int64_t n_rows, void* dst) {
  const int64_t n = g.row_elements();
  const size_t row_bytes = g.row_bytes();
  const size_t n_block_bytes = block_bytes(codec);
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

void encode_rows(const ChunkGeometry& g, KvCodec codec, const void* src, int64_t n_rows, uint8_t* dst) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    const auto* in = static_cast<const uint8_t*>(src);
    g.dtype == KvDtype::kF16 ? encode_rows_avx2<KvDtype::kF16>(g, codec, in, n_rows, dst)
                             : encode_rows_avx2<KvDtype::kF32>(g, codec, in, n_rows, dst);
    return;
  }
#endif
  encode_rows_scalar(g, codec, src, n_rows, dst);
}

void decode_rows(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, int64_t n_rows, void* dst) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    const bool f16 = g.dtype == KvDtype::kF16;
    if (codec == KvCodec::kInt4) {
      f16 ? decode_rows_avx2<KvCodec::kInt4, KvDtype::kF16>(g, src, n_rows, out)
          : decode_rows_avx2<KvCodec::kInt4, KvDtype::kF32>(g, src, n_rows, out);
    } else {
      f16 ? decode_rows_avx2<KvCodec::kInt8, KvDtype::kF16>(g, src, n_rows, out)
          : decode_rows_avx2<KvCodec::kInt8, KvDtype::kF32>(g, src, n_rows, out);
    }
    return;
  }
#endif
  decode_rows_scalar(g, codec, src, n_rows, dst);
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
  encode_rows(g, codec, src, 2 * static_cast<int64_t>(g.chunk_tokens), dst);
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  decode_rows(g, codec, src, 2 * static_cast<int64_t>(g.chunk_tokens), dst);
}

void round_trip_keys(const ChunkGeometry& g, KvCodec codec, const void* chunk, void* dst) {
  std::vector<uint8_t> blocks(encoded_chunk_bytes(g, codec) / 2);  // the K rows' half
  encode_rows(g, codec, chunk, g.chunk_tokens, blocks.data());
  decode_rows(g, codec, blocks.data(), g.chunk_tokens, dst);
}

namespace ref {

void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  encode_rows_scalar(g, codec, src, 2 * static_cast<int64_t>(g.chunk_tokens), dst);
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  decode_rows_scalar(g, codec, src, 2 * static_cast<int64_t>(g.chunk_tokens), dst);
}

}  // namespace ref

}  // namespace leoam
