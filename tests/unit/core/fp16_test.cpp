#include "core/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace leoam {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST(Fp16, AllHalfValuesRoundTripExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (f16_is_nan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(f16_is_nan(f32_to_f16(f))) << h;
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << "f16 0x" << std::hex << h;
    }
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);               // largest finite
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0 keeps its sign
}

TEST(Fp16, RoundsHalfToEven) {
  // Halfway between 1 and 1 + 2^-10 goes down to the even 1; 1 + 3 * 2^-11 goes up to 1 + 2^-9.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above halfway rounds up.
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Subnormal ties: 0.5 and 1.5 units of 2^-24.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(f32_to_f16(-3 * std::ldexp(1.0f, -25)), 0x8002);
  // Largest subnormal + half a unit rounds up to the smallest normal (even mantissa).
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);
  // Overflow: 65519 rounds down to 65504; 65520 (the tie) rounds to even, which is inf.
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);  // underflow to zero
}

TEST(Fp16, NanAndInf) {
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(float_of(0x7F800001u))));  // payload only in low bits
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(Bf16, AllValuesRoundTripExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(f), h << 16);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << h;
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << "bf16 0x" << std::hex << h;
    }
  }
}

TEST(Bf16, RoundsHalfToEvenAndKeepsNan) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80);  // max float rounds up to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(float_of(0x00000001u)), 0x0000);  // tiny subnormal
  // A NaN whose payload is only in the low 16 bits must stay a NaN, not become inf.
  const uint16_t nan = f32_to_bf16(float_of(0x7F800001u));
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace leoam
