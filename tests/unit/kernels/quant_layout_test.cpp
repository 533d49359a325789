// Hand-built blocks with exactly known values: these pin the ggml bit layouts. The bytes are
// written out from the layout spec (not with the quantizer), and every expected value is exactly
// representable, so both the reference and the fast dequantizer must match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

namespace leoam::kernels {
namespace {

// Both dequantizers, plus the dot with the all-ones vector (= the sum of the values).
void expect_decodes_to(GgmlType type, const std::vector<uint8_t>& bytes, const std::vector<float>& expected) {
  const int64_t n = static_cast<int64_t>(expected.size());
  ASSERT_EQ(bytes.size(), ggml_row_size(type, n));
  std::vector<float> fast(expected.size()), slow(expected.size());
  ref::dequantize_row(type, bytes.data(), slow.data(), n);
  dequantize_row(type, bytes.data(), fast.data(), n);
  double sum = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(slow[i], expected[i]) << "ref, element " << i;
    EXPECT_EQ(fast[i], expected[i]) << "fast, element " << i;
    sum += expected[i];
  }
  const std::vector<float> ones(expected.size(), 1.0f);
  EXPECT_NEAR(dot_row(type, bytes.data(), ones.data(), n), sum, 1e-4 * (1 + std::fabs(sum)));
  EXPECT_NEAR(ref::dot_row(type, bytes.data(), ones.data(), n), sum, 1e-6 * (1 + std::fabs(sum)));
}

TEST(QuantLayout, BlockSizesMatchTypeTraits) {
  EXPECT_EQ(sizeof(BlockQ4_0), ggml_row_size(GgmlType::kQ4_0, 32));
  EXPECT_EQ(sizeof(BlockQ8_0), ggml_row_size(GgmlType::kQ8_0, 32));
  EXPECT_EQ(sizeof(BlockQ4_K), ggml_row_size(GgmlType::kQ4_K, 256));
  EXPECT_EQ(sizeof(BlockQ6_K), ggml_row_size(GgmlType::kQ6_K, 256));
}

TEST(QuantLayout, Q4_0) {
  // d = 0.5 (f16 0x3800, little-endian 00 38); byte j = j | (15 - j) << 4.
  std::vector<uint8_t> bytes = {0x00, 0x38};
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> expected(32);
  for (int j = 0; j < 16; ++j) {
    expected[j] = (j - 8) * 0.5f;              // low nibbles: elements 0..15
    expected[j + 16] = ((15 - j) - 8) * 0.5f;  // high nibbles: elements 16..31
  }
  expect_decodes_to(GgmlType::kQ4_0, bytes, expected);
}

TEST(QuantLayout, Q8_0TwoBlocks) {
  // Block 0: d = 0.25 (0x3400), qs[j] = j - 16. Block 1: d = -2 (0xC000), qs[j] = 127 - 8j.
  std::vector<uint8_t> bytes = {0x00, 0x34};
  for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  bytes.push_back(0x00);
  bytes.push_back(0xC0);
  for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(127 - 8 * j)));
  std::vector<float> expected(64);
  for (int j = 0; j < 32; ++j) {
    expected[j] = (j - 16) * 0.25f;
    expected[32 + j] = (127 - 8 * j) * -2.0f;
  }
  expect_decodes_to(GgmlType::kQ8_0, bytes, expected);
}

TEST(QuantLayout, Q4_K) {
  // d = 1 (0x3C00), dmin = 0.5 (0x3800);
  // sub-block scales sc = {1, 2, 3, 4, 17, 33, 50, 63}, mins m = {0, 5, 10, 63, 16, 32, 48, 1}.
  // Packed by hand (see BlockQ4_K):
  //   bytes 0..3:  sc[j] | (sc[j+4] >> 4) << 6 = 0x41 0x82 0xC3 0xC4
  //   bytes 4..7:  m[j]  | (m[j+4]  >> 4) << 6 = 0x40 0x85 0xCA 0x3F
  //   bytes 8..11: (sc[j+4] & 15) | (m[j+4] & 15) << 4 = 0x01 0x01 0x02 0x1F
  const float sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
  const float m[8] = {0, 5, 10, 63, 16, 32, 48, 1};
  std::vector<uint8_t> bytes = {0x00, 0x3C, 0x00, 0x38, 0x41, 0x82, 0xC3, 0xC4, 0x40,
                                0x85, 0xCA, 0x3F, 0x01, 0x01, 0x02, 0x1F};
  // qs[32g + l]: low nibble l % 16 (element 64g + l), high nibble (l + g) % 16 (element 64g + 32 + l).
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) bytes.push_back(static_cast<uint8_t>((l % 16) | (((l + g) % 16) << 4)));
  }
  std::vector<float> expected(256);
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      expected[64 * g + l] = 1.0f * sc[2 * g] * (l % 16) - 0.5f * m[2 * g];
      expected[64 * g + 32 + l] = 1.0f * sc[2 * g + 1] * ((l + g) % 16) - 0.5f * m[2 * g + 1];
    }
  }
  expect_decodes_to(GgmlType::kQ4_K, bytes, expected);

  // The helper that unpacks the scales agrees with the hand packing, and packing round-trips.
  uint8_t packed[12];
  uint8_t sc_u8[8], m_u8[8];
  for (int j = 0; j < 8; ++j) {
    sc_u8[j] = static_cast<uint8_t>(sc[j]);
    m_u8[j] = static_cast<uint8_t>(m[j]);
  }
  q4_k_pack_scales(sc_u8, m_u8, packed);
  EXPECT_EQ(0, std::memcmp(packed, bytes.data() + 4, 12));
  for (int j = 0; j < 8; ++j) {
    uint8_t s, mm;
    q4_k_scale_min(j, packed, &s, &mm);
    EXPECT_EQ(s, sc_u8[j]);
    EXPECT_EQ(mm, m_u8[j]);
  }
}

TEST(QuantLayout, Q6_K) {
  // d = 0.5; scales[j] = j - 8; element e holds q(e) = (7e + 3) % 64, i.e. value q(e) - 32, and
  // uses scale e / 16. Bytes written from the table in BlockQ6_K.
  auto q = [](int e) { return (7 * e + 3) % 64; };
  BlockQ6_K blk{};
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int e = 128 * h + l;
      blk.ql[64 * h + l] = static_cast<uint8_t>((q(e) & 0xF) | ((q(e + 64) & 0xF) << 4));
      blk.ql[64 * h + l + 32] = static_cast<uint8_t>((q(e + 32) & 0xF) | ((q(e + 96) & 0xF) << 4));
      blk.qh[32 * h + l] =
          static_cast<uint8_t>((q(e) >> 4) | (q(e + 32) >> 4) << 2 | (q(e + 64) >> 4) << 4 | (q(e + 96) >> 4) << 6);
    }
  }
  for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(j - 8);
  blk.d = 0x3800;
  std::vector<uint8_t> bytes(sizeof(blk));
  std::memcpy(bytes.data(), &blk, sizeof(blk));
  // d sits in the last two bytes, little-endian.
  EXPECT_EQ(bytes[208], 0x00);
  EXPECT_EQ(bytes[209], 0x38);
  EXPECT_EQ(bytes[192], static_cast<uint8_t>(-8));  // scales start at 192

  std::vector<float> expected(256);
  for (int e = 0; e < 256; ++e) expected[e] = 0.5f * static_cast<float>(e / 16 - 8) * static_cast<float>(q(e) - 32);
  expect_decodes_to(GgmlType::kQ6_K, bytes, expected);
}

TEST(QuantLayout, HalfTypes) {
  // F16 1.5 = 0x3E00, -2 = 0xC000; BF16 1.5 = 0x3FC0, -2 = 0xC000. Little-endian bytes.
  expect_decodes_to(GgmlType::kF16, {0x00, 0x3E, 0x00, 0xC0}, {1.5f, -2.0f});
  expect_decodes_to(GgmlType::kBF16, {0xC0, 0x3F, 0x00, 0xC0}, {1.5f, -2.0f});
}

TEST(QuantLayout, QuantizerWritesGgmlScaleConvention) {
  // Q4_0 maps the largest-magnitude value to q = 0 (value -8 d), d = max / -8: for max = -4,
  // d = 0.5 and the stored nibble of that element is 0.
  std::vector<float> x(32, 0.0f);
  x[3] = -4.0f;
  x[20] = 1.0f;
  BlockQ4_0 blk;
  quantize_row(GgmlType::kQ4_0, x.data(), &blk, 32);
  EXPECT_EQ(blk.d, 0x3800);           // 0.5
  EXPECT_EQ(blk.qs[3] & 0xF, 0);      // -4 = (0 - 8) * 0.5
  EXPECT_EQ(blk.qs[4] >> 4, 8 + 2);   // element 20: 1 = (10 - 8) * 0.5
  EXPECT_EQ(blk.qs[0] & 0xF, 8);      // 0
}

}  // namespace
}  // namespace leoam::kernels
