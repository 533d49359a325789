#include "kv/kv_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/fp16.h"

namespace leoam {
namespace {

ChunkGeometry geometry(int n_kv_heads, int head_dim, int chunk_tokens, KvDtype dtype) {
  ChunkGeometry g;
  g.n_kv_heads = n_kv_heads;
  g.head_dim = head_dim;
  g.chunk_tokens = chunk_tokens;
  g.dtype = dtype;
  return g;
}

// Every value of a chunk (K rows then V rows), as float, to and from the chunk's dtype.
std::vector<float> load_chunk(const ChunkGeometry& g, const std::vector<uint8_t>& chunk) {
  std::vector<float> x(static_cast<size_t>(2 * g.chunk_tokens * g.row_elements()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (g.dtype == KvDtype::kF32) {
      std::memcpy(&x[i], chunk.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, chunk.data() + 2 * i, 2);
      x[i] = f16_to_f32(h);
    }
  }
  return x;
}

std::vector<uint8_t> store_chunk(const ChunkGeometry& g, const std::vector<float>& x) {
  std::vector<uint8_t> chunk(g.chunk_bytes());
  for (size_t i = 0; i < x.size(); ++i) {
    if (g.dtype == KvDtype::kF32) {
      std::memcpy(chunk.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = f32_to_f16(x[i]);
      std::memcpy(chunk.data() + 2 * i, &h, 2);
    }
  }
  return chunk;
}

// Values whose groups differ in offset and spread, some narrow and far from 0 (where an f16
// minimum rounded to nearest would cost many scales).
std::vector<float> random_values(const ChunkGeometry& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> offset(-300.0f, 300.0f);
  std::vector<float> x(static_cast<size_t>(2 * g.chunk_tokens * g.row_elements()));
  for (size_t r = 0; r < x.size() / g.row_elements(); ++r) {
    const float base = offset(rng);
    const float spread = (r % 3 == 0) ? 0.01f : (r % 3 == 1 ? 1.0f : 50.0f);
    for (int64_t e = 0; e < g.row_elements(); ++e) x[r * g.row_elements() + e] = base + spread * dist(rng);
  }
  return x;
}

// One parsed block: the test's own reading of the documented byte layout.
struct Block {
  float scale;
  float min;
  uint16_t scale_bits;
  uint16_t min_bits;
  std::vector<int> codes;  // all 32, including the unused tail of a short group
};

Block parse_block(KvCodec codec, const uint8_t* p) {
  Block b;
  b.scale_bits = static_cast<uint16_t>(p[0] | (p[1] << 8));  // little-endian f16
  b.min_bits = static_cast<uint16_t>(p[2] | (p[3] << 8));
  b.scale = f16_to_f32(b.scale_bits);
  b.min = f16_to_f32(b.min_bits);
  for (int i = 0; i < kKvCodecGroup; ++i) {
    b.codes.push_back(codec == KvCodec::kInt8 ? p[4 + i] : (i % 2 == 0 ? p[4 + i / 2] & 0xf : p[4 + i / 2] >> 4));
  }
  return b;
}

int levels(KvCodec codec) { return codec == KvCodec::kInt8 ? 255 : 15; }
size_t block_size(KvCodec codec) { return codec == KvCodec::kInt8 ? 36 : 20; }

// The documented K layout: token groups of 32 rows, each n scales, n minima, then a code row each.
size_t key_code_row(KvCodec codec, int64_t n) { return codec == KvCodec::kInt8 ? n : (n + 1) / 2; }
size_t keys_size(const ChunkGeometry& g, KvCodec codec) {
  size_t bytes = 0;
  for (int64_t t0 = 0; t0 < g.chunk_tokens; t0 += 32) {
    bytes += 4 * g.row_elements() + std::min<int64_t>(32, g.chunk_tokens - t0) * key_code_row(codec, g.row_elements());
  }
  return bytes;
}

// Element e of row r (K rows 0 .. C-1, then the V rows) of `encoded`: its group's header and its
// code, read by the documented layout.
struct Quant {
  float scale, min;
  uint16_t scale_bits, min_bits;
  int code;
};

Quant quant_of(const ChunkGeometry& g, KvCodec codec, const uint8_t* encoded, int64_t r, int64_t e) {
  const int64_t n = g.row_elements();
  if (r >= g.chunk_tokens) {  // V: the block of the row's group of 32 elements
    const int64_t n_groups = (n + 31) / 32;
    const Block b = parse_block(codec, encoded + keys_size(g, codec) + ((r - g.chunk_tokens) * n_groups + e / 32) * block_size(codec));
    return {b.scale, b.min, b.scale_bits, b.min_bits, b.codes[e % 32]};
  }
  const uint8_t* group = encoded + (r / 32) * (4 * n + 32 * key_code_row(codec, n));
  Quant q;
  q.scale_bits = static_cast<uint16_t>(group[2 * e] | (group[2 * e + 1] << 8));
  q.min_bits = static_cast<uint16_t>(group[2 * n + 2 * e] | (group[2 * n + 2 * e + 1] << 8));
  q.scale = f16_to_f32(q.scale_bits);
  q.min = f16_to_f32(q.min_bits);
  const uint8_t* codes = group + 4 * n + (r % 32) * key_code_row(codec, n);
  q.code = codec == KvCodec::kInt8 ? codes[e] : (codes[e / 2] >> (4 * (e % 2))) & 0xf;
  return q;
}

// The values of the group that element e of row r belongs to: K, its channel over the rows of its
// token group; V, its row's 32-element group.
std::vector<float> group_values(const ChunkGeometry& g, const std::vector<float>& x, int64_t r, int64_t e) {
  const int64_t n = g.row_elements();
  std::vector<float> v;
  if (r < g.chunk_tokens) {
    for (int64_t t = r / 32 * 32; t < std::min<int64_t>(g.chunk_tokens, r / 32 * 32 + 32); ++t) v.push_back(x[t * n + e]);
  } else {
    for (int64_t i = e / 32 * 32; i < std::min<int64_t>(n, e / 32 * 32 + 32); ++i) v.push_back(x[r * n + i]);
  }
  return v;
}

// Half an f16 ulp of y: the most that rounding y to f16 moves it (normal range).
double f16_half_ulp(double y) {
  const double a = std::max(std::fabs(y), std::ldexp(1.0, -14));
  return std::ldexp(1.0, std::ilogb(a) - 11);
}

// The stored form of `original` and the values decoded from it.
std::pair<std::vector<uint8_t>, std::vector<float>> round_trip(const ChunkGeometry& g, KvCodec codec,
                                                               const std::vector<uint8_t>& original) {
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec));
  encode_chunk(g, codec, original.data(), encoded.data());
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, codec, encoded.data(), decoded.data());
  return {encoded, load_chunk(g, decoded)};
}

TEST(KvCodecTest, NamesRoundTrip) {
  for (KvCodec c : {KvCodec::kNone, KvCodec::kInt8, KvCodec::kInt4}) {
    const auto parsed = parse_kv_codec(kv_codec_name(c));
    ASSERT_TRUE(parsed.has_value()) << kv_codec_name(c);
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_STREQ(kv_codec_name(KvCodec::kInt4), "int4");
  EXPECT_FALSE(parse_kv_codec("int2").has_value());
  EXPECT_FALSE(parse_kv_codec("").has_value());
  EXPECT_FALSE(parse_kv_codec("INT8").has_value());
}

TEST(KvCodecTest, EncodedSizes) {
  // row 32 elements, 16 rows: K one token group (32 scales and minima, 16 code rows), V one block a row
  const ChunkGeometry a = geometry(4, 8, 16, KvDtype::kF16);
  EXPECT_EQ(encoded_chunk_bytes(a, KvCodec::kNone), 2048u);
  EXPECT_EQ(encoded_chunk_bytes(a, KvCodec::kInt8), 4u * 32 + 16 * 32 + 16 * 36);
  EXPECT_EQ(encoded_chunk_bytes(a, KvCodec::kInt4), 4u * 32 + 16 * 16 + 16 * 20);
  // row 36 elements: V a full group and a short one of 4
  const ChunkGeometry b = geometry(3, 12, 8, KvDtype::kF32);
  EXPECT_EQ(encoded_chunk_bytes(b, KvCodec::kNone), 2u * 8 * 36 * 4);
  EXPECT_EQ(encoded_chunk_bytes(b, KvCodec::kInt8), 4u * 36 + 8 * 36 + 8 * 2 * 36);
  EXPECT_EQ(encoded_chunk_bytes(b, KvCodec::kInt4), 4u * 36 + 8 * 18 + 8 * 2 * 20);
  // row 5 elements: an odd int4 code row of 3 bytes, one short V group
  const ChunkGeometry c = geometry(1, 5, 8, KvDtype::kF16);
  EXPECT_EQ(encoded_chunk_bytes(c, KvCodec::kInt8), 4u * 5 + 8 * 5 + 8 * 36);
  EXPECT_EQ(encoded_chunk_bytes(c, KvCodec::kInt4), 4u * 5 + 8 * 3 + 8 * 20);
  // a real model's shape: 8 heads of 128, 64 tokens: two K token groups
  const ChunkGeometry d = geometry(8, 128, 64, KvDtype::kF16);
  EXPECT_EQ(encoded_chunk_bytes(d, KvCodec::kNone), 262144u);
  EXPECT_EQ(encoded_chunk_bytes(d, KvCodec::kInt8), 2u * (4 * 1024 + 32 * 1024) + 64 * 32 * 36);
  EXPECT_EQ(encoded_chunk_bytes(d, KvCodec::kInt4), 2u * (4 * 1024 + 32 * 512) + 64 * 32 * 20);
}

// (geometry n_kv_heads, head_dim), dtype, codec
using RoundTripParam = std::tuple<std::pair<int, int>, KvDtype, KvCodec>;

class KvCodecRoundTripTest : public ::testing::TestWithParam<RoundTripParam> {};

std::string round_trip_name(const ::testing::TestParamInfo<RoundTripParam>& info) {
  const auto& [shape, dtype, codec] = info.param;
  return std::to_string(shape.first) + "x" + std::to_string(shape.second) + "_" + kv_dtype_name(dtype) + "_" +
         kv_codec_name(codec);
}

TEST_P(KvCodecRoundTripTest, ErrorIsAtMostHalfAScalePerGroup) {
  const auto [shape, dtype, codec] = GetParam();
  const ChunkGeometry g = geometry(shape.first, shape.second, 8, dtype);
  const auto original = store_chunk(g, random_values(g, 11));
  const std::vector<float> x = load_chunk(g, original);  // the values as stored, dtype-rounded

  const auto [encoded, y] = round_trip(g, codec, original);

  const int64_t n = g.row_elements();
  const double l = levels(codec);
  for (int64_t r = 0; r < 2 * g.chunk_tokens; ++r) {
    for (int64_t e = 0; e < n; ++e) {
      const Quant q = quant_of(g, codec, encoded.data(), r, e);
      const std::vector<float> members = group_values(g, x, r, e);
      const double lo = *std::min_element(members.begin(), members.end());
      const double hi = *std::max_element(members.begin(), members.end());
      SCOPED_TRACE("row " + std::to_string(r) + " element " + std::to_string(e));
      // The stored min is the group min rounded down to f16 (exact when the chunk is f16).
      EXPECT_LE(q.min, lo);
      EXPECT_LE(lo - q.min, 2 * f16_half_ulp(lo));
      if (dtype == KvDtype::kF16) {
        EXPECT_EQ(q.min, lo);
      }
      // The scale covers [min, max] in `levels` steps and is no coarser than rounding needs.
      EXPECT_GE(q.min + l * q.scale, hi);
      EXPECT_LE(q.scale, (hi - q.min) / l * (1.0 + std::ldexp(1.0, -10)));
      const double xi = x[r * n + e];
      // The scalar reference: decode from the parsed header, round to the chunk's dtype.
      const float ref_f32 = q.min + q.scale * static_cast<float>(q.code);
      const float ref = dtype == KvDtype::kF16 ? f16_to_f32(f32_to_f16(ref_f32)) : ref_f32;
      EXPECT_EQ(y[r * n + e], ref);
      // Round to nearest: the code is within half a step of x (a key within one, kept on its side
      // of 0) ...
      const double exact = static_cast<double>(q.min) + static_cast<double>(q.scale) * q.code;
      const double step = r < g.chunk_tokens ? 1.0 : 0.5;
      EXPECT_LE(std::fabs(exact - xi), step * q.scale * (1 + 1e-9));
      // ... and the decoded value within that plus the output's rounding.
      const double rounding = dtype == KvDtype::kF16 ? f16_half_ulp(ref_f32) : 1e-7 * std::fabs(ref_f32);
      EXPECT_LE(std::fabs(y[r * n + e] - xi), step * q.scale + rounding);
    }
  }
  // A short V group's unused codes are 0.
  const int64_t n_groups = (n + 31) / 32;
  for (int64_t r = 0; r < g.chunk_tokens && n % 32 != 0; ++r) {
    const Block b = parse_block(codec, encoded.data() + keys_size(g, codec) + (r * n_groups + n_groups - 1) * block_size(codec));
    for (int64_t i = n % 32; i < 32; ++i) EXPECT_EQ(b.codes[i], 0) << "row " << r << " unused code " << i;
  }
}

TEST_P(KvCodecRoundTripTest, ConstantGroupsDecodeExactly) {
  const auto [shape, dtype, codec] = GetParam();
  const ChunkGeometry g = geometry(shape.first, shape.second, 8, dtype);
  const float constants[] = {1.5f, -3.25f, 0.0f, 1000.0f, -0.0078125f};
  const int64_t n = g.row_elements();
  std::vector<float> x(static_cast<size_t>(2 * g.chunk_tokens * n));
  for (int64_t r = 0; r < 2 * g.chunk_tokens; ++r) {
    for (int64_t e = 0; e < n; ++e) {  // K constant along each channel, V along each row
      x[r * n + e] = constants[(r < g.chunk_tokens ? e : r) % std::size(constants)];
    }
  }
  const auto original = store_chunk(g, x);
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec));
  encode_chunk(g, codec, original.data(), encoded.data());
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, codec, encoded.data(), decoded.data());
  EXPECT_EQ(decoded, original);
  // A constant group stores scale 0 and all-zero codes.
  for (const int64_t r : {int64_t{0}, int64_t{g.chunk_tokens}}) {
    const Quant q = quant_of(g, codec, encoded.data(), r, 0);
    EXPECT_EQ(q.scale_bits, 0);
    EXPECT_EQ(q.min, x[r * n]);
    EXPECT_EQ(q.code, 0);
  }
  EXPECT_EQ(parse_block(codec, encoded.data() + keys_size(g, codec)).codes, std::vector<int>(32, 0));
}

TEST_P(KvCodecRoundTripTest, ZeroValueRowsEncodeToZeroAndStayZero) {
  const auto [shape, dtype, codec] = GetParam();
  const ChunkGeometry g = geometry(shape.first, shape.second, 8, dtype);
  // V rows 0..2 filled, the rest zero, as a chunk still being appended.
  std::vector<float> x = random_values(g, 12);
  std::fill(x.begin() + (g.chunk_tokens + 3) * g.row_elements(), x.end(), 0.0f);
  const auto original = store_chunk(g, x);
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec));
  encode_chunk(g, codec, original.data(), encoded.data());
  const size_t encoded_row_bytes = (encoded.size() - keys_size(g, codec)) / g.chunk_tokens;
  EXPECT_TRUE(std::all_of(encoded.begin() + keys_size(g, codec) + 3 * encoded_row_bytes, encoded.end(),
                          [](uint8_t v) { return v == 0; }));
  std::vector<uint8_t> decoded(g.chunk_bytes(), 0xAB);
  decode_chunk(g, codec, encoded.data(), decoded.data());
  EXPECT_TRUE(std::all_of(decoded.begin() + g.k_bytes() + 3 * g.row_bytes(), decoded.end(), [](uint8_t v) { return v == 0; }));
}

// Keys keep their side of 0 (x >= 0 decodes >= 0, a set sign bit decodes <= 0), so an abstract's
// sign bits hold for decoded keys; a key moved for it is within one step, every other value (and
// every V value) within half a step.
TEST_P(KvCodecRoundTripTest, KeysKeepTheirSignWithinOneStep) {
  const auto [shape, dtype, codec] = GetParam();
  const ChunkGeometry g = geometry(shape.first, shape.second, 8, dtype);
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(2 * g.chunk_tokens * g.row_elements()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = (i % 11 == 0) ? (i % 2 ? -0.0f : 0.0f) : 0.3f + dist(rng);
  const auto original = store_chunk(g, values);
  const std::vector<float> x = load_chunk(g, original);
  const auto [encoded, y] = round_trip(g, codec, original);
  const int64_t n = g.row_elements();
  int n_moved = 0;
  for (int64_t r = 0; r < 2 * g.chunk_tokens; ++r) {
    const bool key = r < g.chunk_tokens;
    for (int64_t e = 0; e < n; ++e) {
      const Quant b = quant_of(g, codec, encoded.data(), r, e);
      const double xi = x[r * n + e], yi = y[r * n + e];
      const double exact = static_cast<double>(b.min) + static_cast<double>(b.scale) * b.code;
      const bool moved = std::fabs(exact - xi) > 0.5 * b.scale * (1 + 1e-9);
      SCOPED_TRACE("row " + std::to_string(r) + " element " + std::to_string(e));
      if (key) {
        if (std::signbit(x[r * n + e])) {
          EXPECT_LE(yi, 0.0);
        } else {
          EXPECT_GE(yi, 0.0);
        }
        EXPECT_LE(std::fabs(exact - xi), b.scale * (1 + 1e-9));
        n_moved += moved ? 1 : 0;
      } else {
        EXPECT_FALSE(moved);
      }
    }
  }
  if (codec == KvCodec::kInt4) {
    EXPECT_GT(n_moved, 0) << "no key was near enough to 0 to need moving";
  }
}

// The dispatched encode and decode (AVX2 where the CPU has it) give the scalar references' bytes
// exactly: an abstract widened by the reference's decode bounds what a gather serves.
TEST_P(KvCodecRoundTripTest, EncodeAndDecodeEqualTheScalarReferencesBitwise) {
  const auto [shape, dtype, codec] = GetParam();
  for (const ChunkGeometry& g : {geometry(shape.first, shape.second, 8, dtype), geometry(shape.first, shape.second, 3, dtype)}) {
    const auto original = store_chunk(g, random_values(g, 29));
    std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec));
    encode_chunk(g, codec, original.data(), encoded.data());
    std::vector<uint8_t> encoded_ref(encoded.size(), 0xEE);
    ref::encode_chunk(g, codec, original.data(), encoded_ref.data());
    EXPECT_EQ(encoded, encoded_ref) << "encoded, chunk of " << g.chunk_tokens << " tokens";
    std::vector<uint8_t> fast(g.chunk_bytes(), 0xAB), reference(g.chunk_bytes(), 0xCD);
    decode_chunk(g, codec, encoded.data(), fast.data());
    ref::decode_chunk(g, codec, encoded.data(), reference.data());
    EXPECT_EQ(fast, reference) << "chunk of " << g.chunk_tokens << " tokens";
  }
}

// round_trip_keys gives the K half of a chunk's round trip, on its own.
TEST_P(KvCodecRoundTripTest, RoundTripKeysAreTheKeysOfTheChunksRoundTrip) {
  const auto [shape, dtype, codec] = GetParam();
  const ChunkGeometry g = geometry(shape.first, shape.second, 8, dtype);
  const auto original = store_chunk(g, random_values(g, 31));
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec)), round_trip(g.chunk_bytes());
  encode_chunk(g, codec, original.data(), encoded.data());
  ref::decode_chunk(g, codec, encoded.data(), round_trip.data());
  std::vector<uint8_t> keys(g.k_bytes(), 0x5A);
  round_trip_keys(g, codec, original.data(), keys.data());
  EXPECT_EQ(keys, std::vector<uint8_t>(round_trip.begin(), round_trip.begin() + static_cast<ptrdiff_t>(g.k_bytes())));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KvCodecRoundTripTest,
    ::testing::Combine(::testing::Values(std::pair{4, 8}, std::pair{3, 12}, std::pair{1, 5}, std::pair{2, 64},
                                         std::pair{32, 128}),
                       ::testing::Values(KvDtype::kF16, KvDtype::kF32),
                       ::testing::Values(KvCodec::kInt8, KvCodec::kInt4)),
    round_trip_name);

TEST(KvCodecTest, NoneIsBitExact) {
  const ChunkGeometry g = geometry(3, 12, 8, KvDtype::kF32);
  std::vector<uint8_t> original(g.chunk_bytes());
  std::mt19937 rng(13);
  for (auto& v : original) v = static_cast<uint8_t>(rng());  // any bits, NaN patterns included
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, KvCodec::kNone));
  encode_chunk(g, KvCodec::kNone, original.data(), encoded.data());
  EXPECT_EQ(encoded, original);
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, KvCodec::kNone, encoded.data(), decoded.data());
  EXPECT_EQ(decoded, original);
}

// One group of 32 in the first V row; every other value is zero and encodes to zero bytes.
std::vector<uint8_t> encode_first_value_row(KvDtype dtype, KvCodec codec, const std::vector<float>& row0) {
  const ChunkGeometry g = geometry(1, 32, 8, dtype);
  std::vector<float> x(static_cast<size_t>(2 * 8 * 32), 0.0f);
  std::copy(row0.begin(), row0.end(), x.begin() + 8 * 32);
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, codec));
  encode_chunk(g, codec, store_chunk(g, x).data(), encoded.data());
  const auto block = encoded.begin() + static_cast<ptrdiff_t>(keys_size(g, codec));
  EXPECT_TRUE(std::all_of(encoded.begin(), block, [](uint8_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(block + static_cast<ptrdiff_t>(block_size(codec)), encoded.end(), [](uint8_t v) { return v == 0; }));
  return std::vector<uint8_t>(block, block + static_cast<ptrdiff_t>(block_size(codec)));
}

TEST(KvCodecTest, Int8BlockBytesForZeroToThirtyOne) {
  std::vector<float> row(32);
  for (int i = 0; i < 32; ++i) row[i] = static_cast<float>(i);
  // min 0; scale 31/255 = 0.121569 rounded up to f16 0x2FC8 = 0.12158203125;
  // codes round(i / 0.12158203125) = round(i * 8.2249).
  const std::vector<uint8_t> want = {
      0xC8, 0x2F, 0x00, 0x00,                                                   //
      0,   8,   16,  25,  33,  41,  49,  58,  66,  74,  82,  90,  99,  107, 115, 123,  //
      132, 140, 148, 156, 164, 173, 181, 189, 197, 206, 214, 222, 230, 239, 247, 255};
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kF32}) {
    EXPECT_EQ(encode_first_value_row(dtype, KvCodec::kInt8, row), want) << kv_dtype_name(dtype);
  }
}

TEST(KvCodecTest, Int4BlockBytesPinNibbleOrder) {
  std::vector<float> row(32);
  for (int i = 0; i < 32; ++i) row[i] = -4.0f + 0.5f * static_cast<float>(i % 16);
  // min -4 = f16 0xC400; scale (3.5 - -4) / 15 = 0.5 = f16 0x3800; codes i % 16, element 2i in the
  // low nibble of q[i].
  const std::vector<uint8_t> want = {0x00, 0x38, 0x00, 0xC4,                          //
                                     0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,  //
                                     0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
  EXPECT_EQ(encode_first_value_row(KvDtype::kF16, KvCodec::kInt4, row), want);

  // Decoding gives the values back exactly: every one is min + 0.5 * code.
  const ChunkGeometry g = geometry(1, 32, 8, KvDtype::kF32);
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, KvCodec::kInt4), 0);
  std::copy(want.begin(), want.end(), encoded.begin() + static_cast<ptrdiff_t>(keys_size(g, KvCodec::kInt4)));
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, KvCodec::kInt4, encoded.data(), decoded.data());
  const std::vector<float> y = load_chunk(g, decoded);
  EXPECT_EQ(std::vector<float>(y.begin() + 8 * 32, y.begin() + 9 * 32), row);
}

// The K layout, byte for byte: two rows of 8 channels, channel e spanning [-2 + e / 2, that +
// 3.75]: scale 0.25 (f16 0x3400) everywhere, minima -2 .. 1.5, codes 0 in row 0 and 15 in row 1.
TEST(KvCodecTest, KeyGroupBytesAreChannelHeadersThenCodeRows) {
  const ChunkGeometry g = geometry(1, 8, 2, KvDtype::kF16);
  std::vector<float> x(static_cast<size_t>(2 * 2 * 8), 0.0f);
  for (int e = 0; e < 8; ++e) {
    x[e] = -2.0f + 0.5f * static_cast<float>(e);
    x[8 + e] = x[e] + 3.75f;
  }
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, KvCodec::kInt4));
  ASSERT_EQ(encoded.size(), 4u * 8 + 2 * 4 + 2 * 20);
  encode_chunk(g, KvCodec::kInt4, store_chunk(g, x).data(), encoded.data());
  const std::vector<uint8_t> want = {
      0x00, 0x34, 0x00, 0x34, 0x00, 0x34, 0x00, 0x34, 0x00, 0x34, 0x00, 0x34, 0x00, 0x34, 0x00, 0x34,  // scales
      0x00, 0xC0, 0x00, 0xBE, 0x00, 0xBC, 0x00, 0xB8, 0x00, 0x00, 0x00, 0x38, 0x00, 0x3C, 0x00, 0x3E,  // minima
      0x00, 0x00, 0x00, 0x00,                                                                          // row 0
      0xFF, 0xFF, 0xFF, 0xFF};                                                                         // row 1
  EXPECT_EQ(std::vector<uint8_t>(encoded.begin(), encoded.begin() + 40), want);
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, KvCodec::kInt4, encoded.data(), decoded.data());
  const std::vector<float> y = load_chunk(g, decoded);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 16), std::vector<float>(x.begin(), x.begin() + 16));
}

TEST(KvCodecTest, NarrowGroupFarFromZeroInF32KeepsItsPrecision) {
  // 1000.4 .. 1000.431: a minimum rounded to the nearest f16 (1000.5; the spacing there is 0.5)
  // would sit above every value and cost up to 0.1, 60 int8 steps; rounded down to 1000.0 and
  // rescaled, every value stays within half a step.
  const ChunkGeometry g = geometry(1, 32, 8, KvDtype::kF32);
  std::vector<float> x(static_cast<size_t>(2 * 8 * 32), 0.0f);
  for (int i = 0; i < 32; ++i) x[8 * 32 + i] = 1000.4f + 0.001f * static_cast<float>(i);  // V row 0
  const auto original = store_chunk(g, x);
  std::vector<uint8_t> encoded(encoded_chunk_bytes(g, KvCodec::kInt8));
  encode_chunk(g, KvCodec::kInt8, original.data(), encoded.data());
  const Block b = parse_block(KvCodec::kInt8, encoded.data() + keys_size(g, KvCodec::kInt8));
  EXPECT_EQ(b.min, 1000.0f);
  EXPECT_LT(b.scale, 0.0017f);  // (1000.431 - 1000) / 255 = 0.00169, rounded up to f16
  std::vector<uint8_t> decoded(g.chunk_bytes());
  decode_chunk(g, KvCodec::kInt8, encoded.data(), decoded.data());
  const std::vector<float> y = load_chunk(g, decoded);
  for (int i = 8 * 32; i < 9 * 32; ++i) EXPECT_NEAR(y[i], x[i], 0.5 * b.scale + 1e-4) << i;
}

}  // namespace
}  // namespace leoam
