#include "core/ggml_type.h"

#include <gtest/gtest.h>

namespace leoam {
namespace {

struct Expected {
  GgmlType type;
  const char* name;
  int64_t block_size;
  size_t type_size;
};

TEST(GgmlType, SupportedTypeGeometry) {
  // Sizes from ggml's type table.
  const Expected expected[] = {
      {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},        {GgmlType::kBF16, "BF16", 1, 2},
      {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ8_0, "Q8_0", 32, 34},    {GgmlType::kQ4_K, "Q4_K", 256, 144},
      {GgmlType::kQ6_K, "Q6_K", 256, 210},
  };
  for (const Expected& e : expected) {
    const uint32_t id = static_cast<uint32_t>(e.type);
    const auto traits = ggml_type_traits(id);
    ASSERT_TRUE(traits.has_value()) << e.name;
    EXPECT_EQ(traits->name, e.name);
    EXPECT_EQ(traits->block_size, e.block_size) << e.name;
    EXPECT_EQ(traits->type_size, e.type_size) << e.name;
    EXPECT_TRUE(traits->supported) << e.name;
    EXPECT_TRUE(ggml_type_supported(id));
    EXPECT_EQ(ggml_type_name(id), e.name);
    EXPECT_EQ(ggml_block_size(e.type), e.block_size);
    EXPECT_EQ(ggml_row_size(e.type, 4 * 256), static_cast<size_t>(4 * 256 / e.block_size) * e.type_size);
  }
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::kQ4_K), 12u);  // GGUF ids
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::kBF16), 30u);
}

TEST(GgmlType, UnsupportedAndUnknown) {
  const auto q5k = ggml_type_traits(13);
  ASSERT_TRUE(q5k.has_value());
  EXPECT_EQ(q5k->name, "Q5_K");
  EXPECT_EQ(q5k->type_size, 176u);
  EXPECT_FALSE(q5k->supported);
  EXPECT_FALSE(ggml_type_supported(13));
  EXPECT_FALSE(ggml_type_traits(99).has_value());
  EXPECT_FALSE(ggml_type_supported(99));
  EXPECT_EQ(ggml_type_name(99), "type 99");
  EXPECT_EQ(ggml_type_name(13), "Q5_K");
}

TEST(GgmlType, SupportedList) {
  EXPECT_EQ(supported_types_list(), "F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K");
  int n_supported = 0;
  for (uint32_t id = 0; id < 64; ++id) n_supported += ggml_type_supported(id) ? 1 : 0;
  EXPECT_EQ(n_supported, 7);
}

TEST(GgmlTypeTest, SupportedTypesByNameInAnyCase) {
  EXPECT_EQ(supported_type_by_name("q4_0"), GgmlType::kQ4_0);
  EXPECT_EQ(supported_type_by_name("BF16"), GgmlType::kBF16);
  EXPECT_EQ(supported_type_by_name("Q6_k"), GgmlType::kQ6_K);
  EXPECT_EQ(supported_type_by_name("q5_k"), std::nullopt);  // a ggml type the engine does not compute with
  EXPECT_EQ(supported_type_by_name("q4"), std::nullopt);
  EXPECT_EQ(supported_type_by_name(""), std::nullopt);
  EXPECT_EQ(supported_type_names(), "f32 f16 bf16 q8_0 q4_0 q4_k q6_k");
  for (const std::string_view name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    EXPECT_TRUE(supported_type_by_name(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace leoam
