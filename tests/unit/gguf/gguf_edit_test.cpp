// Copying a GGUF file with metadata keys set, and the KEY=TYPE:VALUE syntax of `leoam gguf set`.
#include "gguf/gguf_edit.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace leoam {
namespace {

std::vector<uint8_t> original() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::from_string("llama"));
  w.set("general.name", GgufValue::from_string("old"));
  w.set("llama.block_count", GgufValue::from_u32(2));
  std::vector<uint8_t> data(4 * 32 * 2);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  EXPECT_TRUE(w.add_tensor("a.weight", GgmlType::kF32, {32, 2}, data).is_ok());
  EXPECT_TRUE(w.add_tensor("b.weight", GgmlType::kF16, {64, 2}, std::vector<uint8_t>(256, 3)).is_ok());
  return w.to_bytes();
}

TEST(GgufEdit, ReplacesInPlaceAppendsNewKeysAndCopiesTensorsExactly) {
  const std::vector<uint8_t> bytes = original();
  auto in = GgufFile::parse("in.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(in.is_ok()) << in.status().message();
  const std::vector<GgufKeyValue> set = {{"leoam.attention.logn_length", GgufValue::from_u32(1536)},
                                         {"general.name", GgufValue::from_string("new")}};
  GgufWriter w;
  ASSERT_TRUE(copy_with_metadata(*in, set, w).is_ok());
  const std::vector<uint8_t> out_bytes = w.to_bytes();
  auto out = GgufFile::parse("out.gguf", out_bytes.data(), out_bytes.size());
  ASSERT_TRUE(out.is_ok()) << out.status().message();

  std::vector<std::string> keys;
  for (const auto& [key, value] : out->metadata()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"general.architecture", "general.name", "llama.block_count",
                                            "leoam.attention.logn_length"}));
  EXPECT_EQ(*out->find("general.name")->as_string(), "new");
  EXPECT_EQ(out->find("leoam.attention.logn_length")->as_uint(), 1536u);
  EXPECT_EQ(out->find("llama.block_count")->as_uint(), 2u);
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  for (size_t i = 0; i < in->tensors().size(); ++i) {
    const GgufTensorInfo& a = in->tensors()[i];
    const GgufTensorInfo& b = out->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type_id, b.type_id);
    EXPECT_EQ(a.ne, b.ne);
    ASSERT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name;
  }
}

TEST(GgufEdit, ParsesKeyAssignments) {
  auto u = parse_key_assignment("leoam.attention.logn_length=u32:1536");
  ASSERT_TRUE(u.is_ok()) << u.status().message();
  EXPECT_EQ(u->first, "leoam.attention.logn_length");
  EXPECT_EQ(u->second.type(), GgufValueType::kU32);
  EXPECT_EQ(u->second.as_uint(), 1536u);

  auto s = parse_key_assignment("general.name=str:a=b:c");  // the text after TYPE: as it is
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(*s->second.as_string(), "a=b:c");
  auto f = parse_key_assignment("x.eps=f32:1e-5");
  ASSERT_TRUE(f.is_ok());
  EXPECT_FLOAT_EQ(static_cast<float>(*f->second.as_float()), 1e-5f);
  auto arr = parse_key_assignment("x.ids=arr_i32:[1, -2]");
  ASSERT_TRUE(arr.is_ok());
  EXPECT_EQ(*arr->second.to_i32s(), (std::vector<int32_t>{1, -2}));

  EXPECT_EQ(parse_key_assignment("novalue").status().message(),
            "'novalue' is not KEY=TYPE:VALUE (e.g. general.name=str:my-model)");
  EXPECT_FALSE(parse_key_assignment("=u32:1").is_ok());
  EXPECT_FALSE(parse_key_assignment("k=u32").is_ok());
  EXPECT_EQ(parse_key_assignment("k=u8:300").status().message(), "k: 300 is out of range for u8 (0 to 255)");
  EXPECT_FALSE(parse_key_assignment("k=u32:1.5").is_ok());
  EXPECT_FALSE(parse_key_assignment("k=f32:abc").is_ok());
  EXPECT_FALSE(parse_key_assignment("k=q4:1").is_ok());
}

}  // namespace
}  // namespace leoam
