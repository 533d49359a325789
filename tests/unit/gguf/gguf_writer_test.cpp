// Writer round trips: every value type and every supported tensor type, in each GGUF version.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "kernels/cpu/quant.h"

namespace leoam {
namespace {

using test::fails_with;

template <typename T>
std::vector<uint8_t> le_bytes(std::initializer_list<T> v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

std::vector<std::pair<std::string, GgufValue>> every_value() {
  return {
      {"s.u8", GgufValue::from_u8(250)},
      {"s.i8", GgufValue::from_i8(-100)},
      {"s.u16", GgufValue::from_u16(65000)},
      {"s.i16", GgufValue::from_i16(-32000)},
      {"s.u32", GgufValue::from_u32(4000000000u)},
      {"s.i32", GgufValue::from_i32(-2000000000)},
      {"s.u64", GgufValue::from_u64(18000000000000000000ull)},
      {"s.i64", GgufValue::from_i64(-9000000000000000000ll)},
      {"s.f32", GgufValue::from_f32(0.1f)},
      {"s.f64", GgufValue::from_f64(-1e300)},
      {"s.bool", GgufValue::from_bool(true)},
      {"s.string", GgufValue::from_string("h\xc3\xa9llo \xe2\x96\x81world")},
      {"s.empty_string", GgufValue::from_string("")},
      {"a.strings", GgufValue::from_strings({"<unk>", "", "\xe2\x96\x81the"})},
      {"a.f32", GgufValue::from_f32s({0.5f, -1.0f, 3.25f})},
      {"a.i32", GgufValue::from_i32s({1, -2, 2147483647})},
      {"a.u32", GgufValue::from_u32s({0, 4294967295u})},
      {"a.empty", GgufValue::from_f32s({})},
      {"a.u8", GgufValue::from_raw(GgufValueType::kU8, true, {1, 2, 255})},
      {"a.i8", GgufValue::from_raw(GgufValueType::kI8, true, le_bytes<int8_t>({-1, 5}))},
      {"a.u16", GgufValue::from_raw(GgufValueType::kU16, true, le_bytes<uint16_t>({1, 65535}))},
      {"a.i16", GgufValue::from_raw(GgufValueType::kI16, true, le_bytes<int16_t>({-7, 7}))},
      {"a.u64", GgufValue::from_raw(GgufValueType::kU64, true, le_bytes<uint64_t>({1, ~uint64_t{0}}))},
      {"a.i64", GgufValue::from_raw(GgufValueType::kI64, true, le_bytes<int64_t>({-1, 1}))},
      {"a.f64", GgufValue::from_raw(GgufValueType::kF64, true, le_bytes<double>({0.25, 1e-300}))},
      {"a.bool", GgufValue::from_raw(GgufValueType::kBool, true, {1, 0, 1})},
  };
}

void expect_same_value(const GgufValue& a, const GgufValue& b, const std::string& key) {
  EXPECT_EQ(a.type(), b.type()) << key;
  EXPECT_EQ(a.elem_type(), b.elem_type()) << key;
  EXPECT_EQ(a.is_array(), b.is_array()) << key;
  EXPECT_EQ(a.size(), b.size()) << key;
  EXPECT_EQ(a.raw(), b.raw()) << key;
  if (a.as_string() != nullptr) {
    ASSERT_NE(b.as_string(), nullptr) << key;
    EXPECT_EQ(*a.as_string(), *b.as_string()) << key;
  }
  if (a.as_strings() != nullptr) {
    ASSERT_NE(b.as_strings(), nullptr) << key;
    EXPECT_EQ(*a.as_strings(), *b.as_strings()) << key;
  }
  EXPECT_EQ(a.to_display_string(), b.to_display_string()) << key;
}

struct TypeCase {
  GgmlType type;
  size_t row_bytes_256;  // bytes of a row of 256 elements
};

// Sizes from ggml's block layouts: F32 4 B, F16/BF16 2 B, Q8_0 34 B / 32, Q4_0 18 B / 32,
// Q4_K 144 B / 256, Q6_K 210 B / 256.
const TypeCase kTypes[] = {
    {GgmlType::kF32, 1024}, {GgmlType::kF16, 512},  {GgmlType::kBF16, 512}, {GgmlType::kQ8_0, 272},
    {GgmlType::kQ4_0, 144}, {GgmlType::kQ4_K, 144}, {GgmlType::kQ6_K, 210},
};

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  return v;
}

class GgufWriterVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufWriterVersions, RoundTripsEveryValueType) {
  GgufWriter w(GetParam());
  const auto values = every_value();
  for (const auto& [k, v] : values) w.set(k, v);
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("rt.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), GetParam());
  ASSERT_EQ(f->metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].first, values[i].first);  // file order = insertion order
    expect_same_value(f->metadata()[i].second, values[i].second, values[i].first);
  }
  EXPECT_EQ(*f->require_int("s.i64"), -9000000000000000000ll);
  EXPECT_FALSE(f->get_int("s.u64").is_ok());  // above INT64_MAX
  EXPECT_EQ(*f->find("s.u64")->as_uint(), 18000000000000000000ull);
  EXPECT_EQ(*f->require_float("s.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*f->require_float("s.f64"), -1e300);
  EXPECT_EQ(**f->get_bool("s.bool"), true);
  EXPECT_EQ(*f->require_string("s.string"), "h\xc3\xa9llo \xe2\x96\x81world");
  EXPECT_EQ(*f->find("a.i32")->to_i32s(), (std::vector<int32_t>{1, -2, 2147483647}));
  EXPECT_EQ(*f->find("a.f32")->to_f32s(), (std::vector<float>{0.5f, -1.0f, 3.25f}));
  EXPECT_EQ(f->find("a.empty")->size(), 0u);
}

TEST_P(GgufWriterVersions, RoundTripsEverySupportedTensorType) {
  GgufWriter w(GetParam());
  w.set("general.name", GgufValue::from_string("types"));
  const std::vector<int64_t> ne = {256, 3};
  const std::vector<float> values = ramp(256 * 3);
  for (const TypeCase& c : kTypes) {
    const std::string name = "t." + ggml_type_name(static_cast<uint32_t>(c.type));
    ASSERT_TRUE(w.add_tensor_f32(name, c.type, ne, values).is_ok()) << name;
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("rt.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), std::size(kTypes));
  for (const TypeCase& c : kTypes) {
    const std::string name = "t." + ggml_type_name(static_cast<uint32_t>(c.type));
    const GgufTensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type(), c.type);
    EXPECT_EQ(t->ne, ne);
    EXPECT_EQ(t->n_bytes, c.row_bytes_256 * 3) << name;
    EXPECT_EQ(t->offset % f->alignment(), 0u) << name;
    EXPECT_EQ((f->data_offset() + t->offset) % 32, 0u) << name;
    // The stored bytes are exactly quantize_row's encoding, row by row.
    std::vector<uint8_t> expect(c.row_bytes_256 * 3);
    for (int r = 0; r < 3; ++r) {
      kernels::quantize_row(c.type, values.data() + 256 * r, expect.data() + c.row_bytes_256 * r, 256);
    }
    EXPECT_EQ(std::memcmp(t->data, expect.data(), expect.size()), 0) << name;
  }
  const GgufTensorInfo* f32 = f->find_tensor("t.F32");
  EXPECT_EQ(std::memcmp(f32->data, values.data(), values.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Versions, GgufWriterVersions, ::testing::Values(1u, 2u, 3u),
                         [](const auto& info) { return "v" + std::to_string(info.param); });

TEST(GgufWriter, WritesFileAtomicallyWithMode0644) {
  const std::string dir = ::testing::TempDir() + "/leoam_writer_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/m.gguf";
  GgufWriter w;
  w.set("general.architecture", GgufValue::from_string("llama"));
  ASSERT_TRUE(w.add_tensor_f32("x", GgmlType::kF32, {4}, {1, 2, 3, 4}).is_ok());
  ASSERT_TRUE(w.write(path).is_ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  size_t n_entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n_entries;
  }
  EXPECT_EQ(n_entries, 1u);  // no temporary file left behind
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->require_string("general.architecture"), "llama");
  ASSERT_EQ(f->tensors().size(), 1u);
  float back[4];
  std::memcpy(back, f->tensors()[0].data, 16);
  EXPECT_EQ(back[3], 4.0f);
  std::filesystem::remove_all(dir);
}

TEST(GgufWriter, WriteFailsCleanly) {
  GgufWriter w;
  EXPECT_TRUE(fails_with(w.write("/nonexistent/dir/m.gguf"), "/nonexistent/dir/m.gguf: ", "No such file or directory"));
  GgufWriter v9(9);
  EXPECT_TRUE(fails_with(v9.write(::testing::TempDir() + "/v9.gguf"), ::testing::TempDir(), "cannot write GGUF version 9"));
  GgufWriter bad_align;
  bad_align.set("general.alignment", GgufValue::from_u32(24));
  EXPECT_TRUE(fails_with(bad_align.write(::testing::TempDir() + "/a.gguf"), ::testing::TempDir(),
                         "general.alignment must be a u32 nonzero power of two, got 24"));
}

TEST(GgufWriter, CustomAlignment) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::from_u32(128));
  ASSERT_TRUE(w.add_tensor_f32("a", GgmlType::kF32, {3}, {1, 2, 3}).is_ok());
  ASSERT_TRUE(w.add_tensor_f32("b", GgmlType::kF16, {5}, {1, 2, 3, 4, 5}).is_ok());
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("al.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 128u);
}

TEST(GgufWriter, SetReplacesInPlace) {
  GgufWriter w;
  w.set("a", GgufValue::from_u32(1));
  w.set("b", GgufValue::from_u32(2));
  w.set("a", GgufValue::from_string("x"));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("s.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->metadata()[0].second.as_string(), "x");
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("a", GgmlType::kF32, {2}, std::vector<uint8_t>(8)).is_ok());
  EXPECT_TRUE(fails_with(w.add_tensor("a", GgmlType::kF32, {2}, std::vector<uint8_t>(8)), "GGUF writer: ",
                         "tensor 'a' was already added"));
  EXPECT_TRUE(fails_with(w.add_tensor("b", GgmlType::kF32, {2}, std::vector<uint8_t>(7)), "GGUF writer: ",
                         "needs 8 bytes, got 7"));
  EXPECT_TRUE(fails_with(w.add_tensor("c", GgmlType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)),
                         "GGUF writer: ", "has 5 dimensions"));
  EXPECT_TRUE(fails_with(w.add_tensor("d", static_cast<GgmlType>(13), {256}, std::vector<uint8_t>(176)),
                         "GGUF writer: ", "type Q5_K is not supported; supported: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K"));
  EXPECT_TRUE(fails_with(w.add_tensor_f32("e", GgmlType::kQ8_0, {20}, std::vector<float>(20)), "GGUF writer: ",
                         "ne[0] = 20 is not a multiple of Q8_0's block size 32"));
  EXPECT_TRUE(fails_with(w.add_tensor_f32("f", GgmlType::kF32, {4, 2}, std::vector<float>(7)), "GGUF writer: ",
                         "needs 8 values, got 7"));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("w.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->tensors().size(), 1u);  // failed adds left nothing behind
}

TEST(GgufValue, DisplayStrings) {
  EXPECT_EQ(GgufValue::from_f32s({0.5f, 1.0f, 2.0f}).to_display_string(), "[3 x f32] 0.5, 1, 2");
  EXPECT_EQ(GgufValue::from_i32s({1, 2, 3, 4}).to_display_string(2), "[4 x i32] 1, 2, ...");
  EXPECT_EQ(GgufValue::from_strings({"a\"b", "\n"}).to_display_string(), "[2 x string] \"a\\\"b\", \"\\n\"");
  EXPECT_EQ(GgufValue::from_u32(7).to_display_string(), "7");
  EXPECT_EQ(GgufValue::from_i8(-3).to_display_string(), "-3");
  EXPECT_EQ(GgufValue::from_bool(false).to_display_string(), "false");
  EXPECT_EQ(GgufValue::from_f32(1e-5f).to_display_string(), "1e-05");
  EXPECT_EQ(GgufValue::from_string("x").to_display_string(), "\"x\"");
  EXPECT_EQ(GgufValue::from_f32s({}).to_display_string(), "[0 x f32]");
  EXPECT_EQ(gguf_value_type_name(8), "string");
  EXPECT_EQ(gguf_value_type_name(77), "type 77");
}

TEST(GgufValue, AccessorsRejectOtherKinds) {
  EXPECT_FALSE(GgufValue::from_string("7").as_int());
  EXPECT_FALSE(GgufValue::from_i32(-1).as_uint());
  EXPECT_EQ(*GgufValue::from_i32(-1).as_int(), -1);
  EXPECT_EQ(*GgufValue::from_u16(9).as_float(), 9.0);
  EXPECT_FALSE(GgufValue::from_u32(1).as_bool());
  EXPECT_EQ(GgufValue::from_u32(1).as_string(), nullptr);
  EXPECT_EQ(GgufValue::from_strings({"a"}).as_string(), nullptr);
  EXPECT_FALSE(GgufValue::from_u32s({1}).as_int());
  EXPECT_FALSE(GgufValue::from_i32s({1}).to_f32s());
  EXPECT_FALSE(GgufValue::from_u32s({4294967295u}).to_i32s());  // does not fit int32
  EXPECT_EQ(*GgufValue::from_u32s({5}).to_i32s(), std::vector<int32_t>{5});
}

TEST(GgufFileLookups, TypedGettersReportWrongTypeAndMissingKeys) {
  GgufWriter w;
  w.set("n", GgufValue::from_u32(3));
  w.set("s", GgufValue::from_string("x"));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse("k.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(f.is_ok());
  EXPECT_TRUE(fails_with(f->get_int("s"), "k.gguf: ", "key 's' has type string, expected an integer"));
  EXPECT_TRUE(fails_with(f->get_string("n"), "k.gguf: ", "key 'n' has type u32, expected string"));
  EXPECT_TRUE(fails_with(f->require_int("absent"), "k.gguf: ", "missing required key 'absent'"));
  EXPECT_EQ(f->require_int("absent").status().code(), StatusCode::kNotFound);
  auto opt = f->get_float("absent");
  ASSERT_TRUE(opt.is_ok());
  EXPECT_FALSE(opt->has_value());
  EXPECT_EQ(*f->require_float("n"), 3.0);
}

}  // namespace
}  // namespace leoam
