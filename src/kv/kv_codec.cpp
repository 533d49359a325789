#include "kv/kv_codec.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/avx2_util.h"
#include "kv/box_f16.h"

namespace leoam {

namespace {

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

// The decoded value of `code`: scale * code is exact in f32 (11 + 8 significant bits), so only
// the sum rounds, with or without FMA.
float decoded_value(float min, float scale, int code) { return min + scale * static_cast<float>(code); }

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

// The code of x in a group with header r (scale not 0). With keep_signs, a code whose value has
// the other sign than x moves one step toward x's side of 0 (x >= 0 decodes >= 0, x <= 0 decodes
// <= 0, by sign bit), so that a key's sign bit in an abstract holds for its decoded form.
int code_of(KvCodec codec, float x, GroupRange r, bool keep_signs) {
  const float min = f16_to_f32(r.min_h);
  const double scale = f16_to_f32(r.scale_h);
  const double q = (static_cast<double>(x) - min) / scale + 0.5;
  // q >= 1 false for NaN too: a cast of NaN to an integer is undefined.
  int code = q >= 1.0 ? static_cast<int>(std::min(q, static_cast<double>(codec_levels(codec)))) : 0;
  if (keep_signs) {
    // One step is enough: x lies within half a step of the code's value, and [min, min + levels *
    // scale] holds x, so the neighbour on x's side exists and is at most a step away.
    if (!std::signbit(x) && decoded_value(min, static_cast<float>(scale), code) < 0.0f) ++code;
    if (std::signbit(x) && decoded_value(min, static_cast<float>(scale), code) > 0.0f) --code;
  }
  return code;
}

// --- V: groups of 32 channels of one row -------------------------------------------------------

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

// x[n], n <= 32 -> one block at dst (block_bytes(codec) long).
void encode_group(KvCodec codec, const float* x, int n, uint8_t* dst) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const GroupRange r = group_range(codec, lo, hi);
  int32_t codes[kKvCodecGroup] = {};  // unused codes of a short group stay 0
  if (r.scale_h != 0) {
    for (int i = 0; i < n; ++i) codes[i] = code_of(codec, x[i], r, /*keep_signs=*/false);
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
    x[i] = decoded_value(min, scale, code);
  }
}

size_t values_bytes(const ChunkGeometry& g, KvCodec codec) {
  return static_cast<size_t>(g.chunk_tokens) * static_cast<size_t>(groups_per_row(g)) * block_bytes(codec);
}

// --- K: groups of up to 32 rows of one channel -------------------------------------------------

size_t key_code_row_bytes(KvCodec codec, int64_t n) {
  return codec == KvCodec::kInt8 ? static_cast<size_t>(n) : static_cast<size_t>(n + 1) / 2;
}

// Bytes of the K token group of t rows: n scales, n minima, t rows of codes.
size_t key_group_bytes(KvCodec codec, int64_t n, int64_t t) {
  return kBlockHeaderBytes * static_cast<size_t>(n) + static_cast<size_t>(t) * key_code_row_bytes(codec, n);
}

size_t keys_bytes(const ChunkGeometry& g, KvCodec codec) {
  size_t bytes = 0;
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    bytes += key_group_bytes(codec, g.row_elements(), std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0));
  }
  return bytes;
}

void put_code(KvCodec codec, uint8_t* row, int64_t e, int code) {
  if (codec == KvCodec::kInt8) {
    row[e] = static_cast<uint8_t>(code);
  } else {
    row[e / 2] = static_cast<uint8_t>(row[e / 2] | (code << (4 * (e % 2))));
  }
}

// Header i of a K token group's n scales (then n minima): unaligned little-endian f16s.
void put_f16(uint8_t* at, int64_t i, uint16_t h) { std::memcpy(at + 2 * i, &h, sizeof(h)); }
uint16_t get_f16(const uint8_t* at, int64_t i) {
  uint16_t h;
  std::memcpy(&h, at + 2 * i, sizeof(h));
  return h;
}

int get_code(KvCodec codec, const uint8_t* row, int64_t e) {
  return codec == KvCodec::kInt8 ? row[e] : (row[e / 2] >> (4 * (e % 2))) & 0xf;
}

// A K token group of t rows of n channels: x [t][n] floats -> dst (key_group_bytes).
void encode_key_group(KvCodec codec, const float* x, int64_t t, int64_t n, uint8_t* dst) {
  uint8_t* scales = dst;
  uint8_t* mins = dst + 2 * static_cast<size_t>(n);
  uint8_t* codes = dst + 4 * static_cast<size_t>(n);
  const size_t row_bytes = key_code_row_bytes(codec, n);
  std::memset(codes, 0, static_cast<size_t>(t) * row_bytes);
  for (int64_t e = 0; e < n; ++e) {
    float lo = x[e], hi = x[e];
    for (int64_t r = 1; r < t; ++r) {
      lo = std::min(lo, x[r * n + e]);
      hi = std::max(hi, x[r * n + e]);
    }
    const GroupRange g = group_range(codec, lo, hi);
    put_f16(scales, e, g.scale_h);
    put_f16(mins, e, g.min_h);
    if (g.scale_h == 0) continue;
    for (int64_t r = 0; r < t; ++r) put_code(codec, codes + r * row_bytes, e, code_of(codec, x[r * n + e], g, true));
  }
}

// A K token group at src -> x [t][n] floats.
void decode_key_group(KvCodec codec, const uint8_t* src, int64_t t, int64_t n, float* x) {
  const uint8_t* scales = src;
  const uint8_t* mins = src + 2 * static_cast<size_t>(n);
  const uint8_t* codes = src + 4 * static_cast<size_t>(n);
  const size_t row_bytes = key_code_row_bytes(codec, n);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t e = 0; e < n; ++e) {
      x[r * n + e] = decoded_value(f16_to_f32(get_f16(mins, e)), f16_to_f32(get_f16(scales, e)), get_code(codec, codes + r * row_bytes, e));
    }
  }
}

// The scalar codecs of a chunk's halves: the K rows (as the chunk lays them out) to and from the
// K groups, and the V rows to and from their blocks.
void encode_keys_scalar(const ChunkGeometry& g, KvCodec codec, const uint8_t* chunk, uint8_t* dst) {
  const int64_t n = g.row_elements();
  std::vector<float> x(static_cast<size_t>(std::min(g.chunk_tokens, kKvCodecGroup) * n));
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    for (int64_t r = 0; r < t; ++r) load_kv_values(g.dtype, chunk + static_cast<size_t>(t0 + r) * g.row_bytes(), n, x.data() + r * n);
    encode_key_group(codec, x.data(), t, n, dst);
    dst += key_group_bytes(codec, n, t);
  }
}

void decode_keys_scalar(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* chunk) {
  const int64_t n = g.row_elements();
  std::vector<float> x(static_cast<size_t>(std::min(g.chunk_tokens, kKvCodecGroup) * n));
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    decode_key_group(codec, src, t, n, x.data());
    for (int64_t r = 0; r < t; ++r) store_kv_values(g.dtype, x.data() + r * n, n, chunk + static_cast<size_t>(t0 + r) * g.row_bytes());
    src += key_group_bytes(codec, n, t);
  }
}

void encode_values_scalar(const ChunkGeometry& g, KvCodec codec, const uint8_t* v, uint8_t* dst) {
  const int64_t n = g.row_elements();
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < g.chunk_tokens; ++r) {
    const uint8_t* row = v + static_cast<size_t>(r) * g.row_bytes();
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup, dst += block_bytes(codec)) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      load_kv_values(g.dtype, row + static_cast<size_t>(e0) * kv_dtype_size(g.dtype), len, x);
      encode_group(codec, x, len, dst);
    }
  }
}

void decode_values_scalar(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* v) {
  const int64_t n = g.row_elements();
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < g.chunk_tokens; ++r) {
    uint8_t* row = v + static_cast<size_t>(r) * g.row_bytes();
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup, src += block_bytes(codec)) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      decode_group(codec, src, len, x);
      store_kv_values(g.dtype, x, len, row + static_cast<size_t>(e0) * kv_dtype_size(g.dtype));
    }
  }
}

#ifdef LEOAM_HAVE_X86

// 8 floats -> dst, as store_kv_values writes them (f16: round to nearest even, as f32_to_f16).
template <KvDtype kDtype>
LEOAM_AVX2 inline void store8(__m256 x, uint8_t* dst) {
  if constexpr (kDtype == KvDtype::kF16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  } else {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst), x);
  }
}

// 8 values in kDtype at src -> 8 floats (exact).
template <KvDtype kDtype>
LEOAM_AVX2 inline __m256 load8(const uint8_t* src) {
  if constexpr (kDtype == KvDtype::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  } else {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
  }
}

// The 8 codes in the low 8 bytes of `codes8` -> 8 floats min + scale * code, as decoded_value.
LEOAM_AVX2 inline __m256 decode8(__m128i codes8, __m256 scale, __m256 min) {
  return _mm256_add_ps(min, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes8))));
}

// 8 int4 codes, 4 bytes at q (element 2i in the low nibble of q[i]) -> 8 bytes in order.
LEOAM_AVX2 inline __m128i unpack_nibbles8(const uint8_t* q) {
  int32_t packed;
  std::memcpy(&packed, q, sizeof(packed));
  const __m128i v = _mm_cvtsi32_si128(packed);
  const __m128i mask = _mm_set1_epi8(0x0f);
  return _mm_unpacklo_epi8(_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask));
}

// code_of for 8 lanes, each with its own header (min, scale as floats; scale_nz: the lanes whose
// scale is not 0, the others coded 0): IEEE division rounds as the scalar's does.
LEOAM_AVX2 inline __m256i codes8(__m256 x, __m256 min, __m256 scale, __m256 scale_nz, double levels, bool keep_signs) {
  const __m256d half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0), top = _mm256_set1_pd(levels);
  __m128i c4[2];
  for (int k = 0; k < 2; ++k) {
    const auto part = [k](__m256 v) { return _mm256_cvtps_pd(k == 0 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1)); };
    const __m256d q = _mm256_add_pd(_mm256_div_pd(_mm256_sub_pd(part(x), part(min)), part(scale)), half);
    c4[k] = _mm256_cvttpd_epi32(_mm256_and_pd(_mm256_cmp_pd(q, one, _CMP_GE_OQ), _mm256_min_pd(q, top)));
  }
  __m256i c = _mm256_set_m128i(c4[1], c4[0]);
  if (keep_signs) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 dec = _mm256_add_ps(min, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(c)));
    const __m256i negative = _mm256_srai_epi32(_mm256_castps_si256(x), 31);
    const __m256i up = _mm256_andnot_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_LT_OQ)));
    const __m256i down = _mm256_and_si256(negative, _mm256_castps_si256(_mm256_cmp_ps(dec, zero, _CMP_GT_OQ)));
    c = _mm256_add_epi32(_mm256_sub_epi32(c, up), down);  // masks are -1
  }
  return _mm256_and_si256(c, _mm256_castps_si256(scale_nz));
}

// One whole V group of 32 values (x) -> one block at dst: encode_group's bytes exactly.
LEOAM_AVX2 void encode_full_group_avx2(KvCodec codec, const float* x, uint8_t* dst) {
  const __m256 v[4] = {_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8), _mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)};
  float los[8], his[8];
  _mm256_storeu_ps(los, _mm256_min_ps(_mm256_min_ps(v[0], v[1]), _mm256_min_ps(v[2], v[3])));
  _mm256_storeu_ps(his, _mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3])));
  float l = los[0], h = his[0];
  for (int i = 1; i < 8; ++i) {
    l = std::min(l, los[i]);
    h = std::max(h, his[i]);
  }
  const GroupRange r = group_range(codec, l, h);
  alignas(32) int32_t codes[kKvCodecGroup] = {};
  if (r.scale_h != 0) {
    const __m256 min = _mm256_set1_ps(f16_to_f32(r.min_h)), scale = _mm256_set1_ps(f16_to_f32(r.scale_h));
    const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int j = 0; j < 4; ++j) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes + 8 * j), codes8(v[j], min, scale, all, codec_levels(codec), false));
    }
  }
  put_block(codec, r, codes, dst);
}

// One whole V group (block at src) -> 32 values at dst in kDtype: bitwise what decode_group and
// store_kv_values give.
template <KvCodec kCodec, KvDtype kDtype>
LEOAM_AVX2 void decode_full_group_avx2(const uint8_t* src, uint8_t* dst) {
  constexpr size_t kOut = kDtype == KvDtype::kF16 ? 16 : 32;  // bytes of 8 values
  uint16_t scale_h, min_h;
  std::memcpy(&scale_h, src, sizeof(scale_h));
  std::memcpy(&min_h, src + sizeof(scale_h), sizeof(min_h));
  const __m256 scale = _mm256_set1_ps(_cvtsh_ss(scale_h));
  const __m256 min = _mm256_set1_ps(_cvtsh_ss(min_h));
  const uint8_t* q = src + kBlockHeaderBytes;
  for (int j = 0; j < 4; ++j) {
    const __m128i c = kCodec == KvCodec::kInt8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * j))
                                               : unpack_nibbles8(q + 4 * j);
    store8<kDtype>(decode8(c, scale, min), dst + j * kOut);
  }
}

template <KvDtype kDtype>
LEOAM_AVX2 void encode_values_avx2(const ChunkGeometry& g, KvCodec codec, const uint8_t* v, uint8_t* dst) {
  const int64_t n = g.row_elements();
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < g.chunk_tokens; ++r) {
    const uint8_t* row = v + static_cast<size_t>(r) * g.row_bytes();
    for (int64_t e0 = 0; e0 < n; e0 += kKvCodecGroup, dst += block_bytes(codec)) {
      const int len = static_cast<int>(std::min<int64_t>(kKvCodecGroup, n - e0));
      const uint8_t* at = row + static_cast<size_t>(e0) * kv_dtype_size(kDtype);
      if (len < kKvCodecGroup) {
        load_kv_values(kDtype, at, len, x);
        encode_group(codec, x, len, dst);
        continue;
      }
      for (int i = 0; i < kKvCodecGroup; i += 8) _mm256_storeu_ps(x + i, load8<kDtype>(at + i * kv_dtype_size(kDtype)));
      encode_full_group_avx2(codec, x, dst);
    }
  }
}

template <KvCodec kCodec, KvDtype kDtype>
LEOAM_AVX2 void decode_values_avx2(const ChunkGeometry& g, const uint8_t* src, uint8_t* v) {
  const int64_t n = g.row_elements();
  const int64_t n_full = n / kKvCodecGroup * kKvCodecGroup;
  float x[kKvCodecGroup];
  for (int64_t r = 0; r < g.chunk_tokens; ++r) {
    uint8_t* row = v + static_cast<size_t>(r) * g.row_bytes();
    for (int64_t e0 = 0; e0 < n_full; e0 += kKvCodecGroup, src += block_bytes(kCodec)) {
      decode_full_group_avx2<kCodec, kDtype>(src, row + static_cast<size_t>(e0) * kv_dtype_size(kDtype));
    }
    if (n_full < n) {  // a short last group
      const int len = static_cast<int>(n - n_full);
      decode_group(kCodec, src, len, x);
      store_kv_values(kDtype, x, len, row + static_cast<size_t>(n_full) * kv_dtype_size(kDtype));
      src += block_bytes(kCodec);
    }
  }
}

// The K groups, 8 channels at a time (the channels past the last 8 as the scalar path does).
template <KvDtype kDtype>
LEOAM_AVX2 void encode_keys_avx2(const ChunkGeometry& g, KvCodec codec, const uint8_t* chunk, uint8_t* dst) {
  const int64_t n = g.row_elements();
  const int64_t n8 = n / 8 * 8;
  const size_t row_bytes = key_code_row_bytes(codec, n);
  const size_t in_row = g.row_bytes();
  std::vector<float> x(static_cast<size_t>(std::min(g.chunk_tokens, kKvCodecGroup) * n));
  std::vector<float> min_f(static_cast<size_t>(n)), scale_f(static_cast<size_t>(n));
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    for (int64_t r = 0; r < t; ++r) load_kv_values(kDtype, chunk + static_cast<size_t>(t0 + r) * in_row, n, x.data() + r * n);
    if (n8 < n) {  // the tail channels, the whole group by the scalar path; its codes redone below
      encode_key_group(codec, x.data(), t, n, dst);
    } else {
      std::memset(dst + 4 * static_cast<size_t>(n), 0, static_cast<size_t>(t) * row_bytes);
    }
    uint8_t* scales = dst;
    uint8_t* mins = dst + 2 * static_cast<size_t>(n);
    uint8_t* codes = dst + 4 * static_cast<size_t>(n);
    for (int64_t e0 = 0; e0 < n8; e0 += 8) {
      __m256 lo = _mm256_loadu_ps(x.data() + e0), hi = lo;
      for (int64_t r = 1; r < t; ++r) {
        const __m256 v = _mm256_loadu_ps(x.data() + r * n + e0);
        lo = _mm256_min_ps(lo, v);
        hi = _mm256_max_ps(hi, v);
      }
      float los[8], his[8];
      _mm256_storeu_ps(los, lo);
      _mm256_storeu_ps(his, hi);
      for (int i = 0; i < 8; ++i) {
        const GroupRange gr = group_range(codec, los[i], his[i]);
        put_f16(scales, e0 + i, gr.scale_h);
        put_f16(mins, e0 + i, gr.min_h);
        min_f[e0 + i] = f16_to_f32(gr.min_h);
        scale_f[e0 + i] = f16_to_f32(gr.scale_h);
      }
    }
    for (int64_t r = 0; r < t; ++r) {
      uint8_t* code_row = codes + r * row_bytes;
      for (int64_t e0 = 0; e0 < n8; e0 += 8) {
        const __m256 scale = _mm256_loadu_ps(scale_f.data() + e0);
        const __m256 nz = _mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_NEQ_OQ);
        alignas(32) int32_t c[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(c),
                           codes8(_mm256_loadu_ps(x.data() + r * n + e0), _mm256_loadu_ps(min_f.data() + e0), scale, nz,
                                  codec_levels(codec), true));
        if (codec == KvCodec::kInt8) {
          for (int i = 0; i < 8; ++i) code_row[e0 + i] = static_cast<uint8_t>(c[i]);
        } else {
          for (int i = 0; i < 4; ++i) code_row[e0 / 2 + i] = static_cast<uint8_t>(c[2 * i] | (c[2 * i + 1] << 4));
        }
      }
    }
    dst += key_group_bytes(codec, n, t);
  }
}

template <KvCodec kCodec, KvDtype kDtype>
LEOAM_AVX2 void decode_keys_avx2(const ChunkGeometry& g, const uint8_t* src, uint8_t* chunk) {
  const int64_t n = g.row_elements();
  const int64_t n8 = n / 8 * 8;
  const size_t row_bytes = key_code_row_bytes(kCodec, n);
  std::vector<float> min_f(static_cast<size_t>(n)), scale_f(static_cast<size_t>(n));
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += kKvCodecGroup) {
    const int64_t t = std::min<int64_t>(kKvCodecGroup, g.chunk_tokens - t0);
    const uint8_t* codes = src + 4 * static_cast<size_t>(n);
    const uint8_t* mins = src + 2 * static_cast<size_t>(n);
    for (int64_t e0 = 0; e0 < n8; e0 += 8) {
      _mm256_storeu_ps(scale_f.data() + e0, load8<KvDtype::kF16>(src + 2 * e0));
      _mm256_storeu_ps(min_f.data() + e0, load8<KvDtype::kF16>(mins + 2 * e0));
    }
    for (int64_t e = n8; e < n; ++e) {
      scale_f[e] = f16_to_f32(get_f16(src, e));
      min_f[e] = f16_to_f32(get_f16(mins, e));
    }
    for (int64_t r = 0; r < t; ++r) {
      const uint8_t* code_row = codes + r * row_bytes;
      uint8_t* out = chunk + static_cast<size_t>(t0 + r) * g.row_bytes();
      for (int64_t e0 = 0; e0 < n8; e0 += 8) {
        const __m128i c = kCodec == KvCodec::kInt8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(code_row + e0))
                                                   : unpack_nibbles8(code_row + e0 / 2);
        store8<kDtype>(decode8(c, _mm256_loadu_ps(scale_f.data() + e0), _mm256_loadu_ps(min_f.data() + e0)),
                       out + static_cast<size_t>(e0) * kv_dtype_size(kDtype));
      }
      for (int64_t e = n8; e < n; ++e) {
        const float y = decoded_value(min_f[e], scale_f[e], get_code(kCodec, code_row, e));
        store_kv_values(kDtype, &y, 1, out + static_cast<size_t>(e) * kv_dtype_size(kDtype));
      }
    }
    src += key_group_bytes(kCodec, n, t);
  }
}

#endif  // LEOAM_HAVE_X86

// Calls fn.template operator()<C, D>() with the codec and dtype as template arguments.
template <class Fn>
void with_codec_and_dtype(KvCodec codec, KvDtype dtype, Fn&& fn) {
  const bool f16 = dtype == KvDtype::kF16;
  if (codec == KvCodec::kInt4) {
    f16 ? fn.template operator()<KvCodec::kInt4, KvDtype::kF16>() : fn.template operator()<KvCodec::kInt4, KvDtype::kF32>();
  } else {
    f16 ? fn.template operator()<KvCodec::kInt8, KvDtype::kF16>() : fn.template operator()<KvCodec::kInt8, KvDtype::kF32>();
  }
}

// A chunk's halves, by the fastest path the CPU has.
void encode_keys(const ChunkGeometry& g, KvCodec codec, const uint8_t* chunk, uint8_t* dst) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    return with_codec_and_dtype(codec, g.dtype, [&]<KvCodec, KvDtype D>() { encode_keys_avx2<D>(g, codec, chunk, dst); });
  }
#endif
  encode_keys_scalar(g, codec, chunk, dst);
}

void decode_keys(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* chunk) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    return with_codec_and_dtype(codec, g.dtype, [&]<KvCodec C, KvDtype D>() { decode_keys_avx2<C, D>(g, src, chunk); });
  }
#endif
  decode_keys_scalar(g, codec, src, chunk);
}

void encode_values(const ChunkGeometry& g, KvCodec codec, const uint8_t* v, uint8_t* dst) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    return with_codec_and_dtype(codec, g.dtype, [&]<KvCodec, KvDtype D>() { encode_values_avx2<D>(g, codec, v, dst); });
  }
#endif
  encode_values_scalar(g, codec, v, dst);
}

void decode_values(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, uint8_t* v) {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) {
    return with_codec_and_dtype(codec, g.dtype, [&]<KvCodec C, KvDtype D>() { decode_values_avx2<C, D>(g, src, v); });
  }
#endif
  decode_values_scalar(g, codec, src, v);
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
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  const auto* chunk = static_cast<const uint8_t*>(src);
  encode_keys(g, codec, chunk, dst);
  encode_values(g, codec, chunk + g.k_bytes(), dst + keys_bytes(g, codec));
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  auto* chunk = static_cast<uint8_t*>(dst);
  decode_keys(g, codec, src, chunk);
  decode_values(g, codec, src + keys_bytes(g, codec), chunk + g.k_bytes());
}

void decode_chunk_keys(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.k_bytes());
    return;
  }
  decode_keys(g, codec, src, static_cast<uint8_t*>(dst));
}

void round_trip_keys(const ChunkGeometry& g, KvCodec codec, const void* chunk, void* dst) {
  std::vector<uint8_t> groups(keys_bytes(g, codec));
  encode_keys(g, codec, static_cast<const uint8_t*>(chunk), groups.data());
  decode_keys(g, codec, groups.data(), static_cast<uint8_t*>(dst));
}

namespace ref {

void encode_chunk(const ChunkGeometry& g, KvCodec codec, const void* src, uint8_t* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  const auto* chunk = static_cast<const uint8_t*>(src);
  encode_keys_scalar(g, codec, chunk, dst);
  encode_values_scalar(g, codec, chunk + g.k_bytes(), dst + keys_bytes(g, codec));
}

void decode_chunk(const ChunkGeometry& g, KvCodec codec, const uint8_t* src, void* dst) {
  if (codec == KvCodec::kNone) {
    std::memcpy(dst, src, g.chunk_bytes());
    return;
  }
  auto* chunk = static_cast<uint8_t*>(dst);
  decode_keys_scalar(g, codec, src, chunk);
  decode_values_scalar(g, codec, src + keys_bytes(g, codec), chunk + g.k_bytes());
}

}  // namespace ref

}  // namespace leoam
