// Tensor bundle import: a manifest and float32 file written here must come out of GgufFile with
// the same metadata (values, types, order) and tensors (shapes reversed into ne, stored types,
// values), and every malformed bundle must give an error naming the file and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../temp_dir.h"
#include "core/fp16.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_bundle.h"
#include "gguf_test_util.h"
#include "kernels/cpu/quant.h"

namespace leoam {
namespace {

using json = nlohmann::ordered_json;
using test::fails_with;
using testing_util::TempDir;

std::vector<float> iota(size_t n, float start = 0.0f, float step = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

class TensorBundleTest : public ::testing::Test {
 protected:
  std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = dir_.file(name);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string write_floats(const std::string& name, const std::vector<float>& v) {
    return write_text(name, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  }
  std::string write_manifest(const json& j, const std::string& name = "m.json") { return write_text(name, j.dump(2)); }

  // A valid bundle: 12 floats in w.f32, one tensor of shape [3, 4], one metadata key.
  json base_manifest() {
    write_floats("w.f32", iota(12));
    return json{{"format", "leoam-tensor-bundle"},
                {"version", 1},
                {"data", "w.f32"},
                {"metadata", json::array({json{{"key", "general.architecture"}, {"type", "str"}, {"value", "llama"}}})},
                {"tensors", json::array({json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}}})}};
  }

  // Imports `manifest` and parses the written GGUF (bytes_ keeps it alive).
  Result<GgufFile> pack(const std::string& manifest) {
    GgufWriter w;
    LEOAM_RETURN_IF_ERROR(import_tensor_bundle(manifest, w));
    bytes_ = w.to_bytes();
    return GgufFile::parse("packed.gguf", bytes_.data(), bytes_.size());
  }

  TempDir dir_;
  std::vector<uint8_t> bytes_;
};

TEST_F(TensorBundleTest, MetadataKeepsOrderTypesAndValues) {
  json m = base_manifest();
  m["metadata"] = json::array({
      json{{"key", "general.architecture"}, {"type", "str"}, {"value", "llama"}},
      json{{"key", "k.u8"}, {"type", "u8"}, {"value", 255}},
      json{{"key", "k.i8"}, {"type", "i8"}, {"value", -128}},
      json{{"key", "k.u16"}, {"type", "u16"}, {"value", 65535}},
      json{{"key", "k.i16"}, {"type", "i16"}, {"value", -32768}},
      json{{"key", "llama.block_count"}, {"type", "u32"}, {"value", 4294967295u}},
      json{{"key", "k.i32"}, {"type", "i32"}, {"value", -2147483647 - 1}},
      json{{"key", "k.u64"}, {"type", "u64"}, {"value", std::numeric_limits<uint64_t>::max()}},
      json{{"key", "k.i64"}, {"type", "i64"}, {"value", std::numeric_limits<int64_t>::min()}},
      json{{"key", "k.f32"}, {"type", "f32"}, {"value", 0.1}},
      json{{"key", "k.f32_int"}, {"type", "f32"}, {"value", 3}},
      json{{"key", "k.f64"}, {"type", "f64"}, {"value", -1e300}},
      json{{"key", "k.bool"}, {"type", "bool"}, {"value", true}},
      json{{"key", "k.utf8"}, {"type", "str"}, {"value", "h\xc3\xa9llo \xe2\x96\x81"}},
      json{{"key", "k.arr_u32"}, {"type", "arr_u32"}, {"value", {1, 2, 4000000000u}}},
      json{{"key", "k.arr_i32"}, {"type", "arr_i32"}, {"value", {-1, 0, 7}}},
      json{{"key", "k.arr_f32"}, {"type", "arr_f32"}, {"value", {0.5, -2, 1e-5}}},
      json{{"key", "k.arr_str"}, {"type", "arr_str"}, {"value", {"<unk>", "", "\xe2\x96\x81t"}}},
      json{{"key", "k.arr_empty"}, {"type", "arr_i32"}, {"value", json::array()}},
      json{{"key", "k.arr_bool"}, {"type", "arr_bool"}, {"value", {true, false}}},
  });
  auto f = pack(write_manifest(m));
  ASSERT_TRUE(f.is_ok()) << f.status().message();

  std::vector<std::string> keys;
  for (const auto& [k, v] : f->metadata()) keys.push_back(k);
  std::vector<std::string> want;
  for (const auto& e : m["metadata"]) want.push_back(e["key"].get<std::string>());
  EXPECT_EQ(keys, want);

  const auto type_of = [&](const char* k) { return f->find(k)->type(); };
  EXPECT_EQ(*f->require_string("general.architecture"), "llama");
  EXPECT_EQ(type_of("k.u8"), GgufValueType::kU8);
  EXPECT_EQ(*f->find("k.u8")->as_int(), 255);
  EXPECT_EQ(type_of("k.i8"), GgufValueType::kI8);
  EXPECT_EQ(*f->find("k.i8")->as_int(), -128);
  EXPECT_EQ(type_of("k.u16"), GgufValueType::kU16);
  EXPECT_EQ(*f->find("k.u16")->as_int(), 65535);
  EXPECT_EQ(type_of("k.i16"), GgufValueType::kI16);
  EXPECT_EQ(*f->find("k.i16")->as_int(), -32768);
  EXPECT_EQ(type_of("llama.block_count"), GgufValueType::kU32);
  EXPECT_EQ(*f->find("llama.block_count")->as_int(), 4294967295);
  EXPECT_EQ(type_of("k.i32"), GgufValueType::kI32);
  EXPECT_EQ(*f->find("k.i32")->as_int(), -2147483648);
  EXPECT_EQ(type_of("k.u64"), GgufValueType::kU64);
  EXPECT_EQ(*f->find("k.u64")->as_uint(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(type_of("k.i64"), GgufValueType::kI64);
  EXPECT_EQ(*f->find("k.i64")->as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(type_of("k.f32"), GgufValueType::kF32);
  EXPECT_EQ(static_cast<float>(*f->find("k.f32")->as_float()), 0.1f);
  EXPECT_EQ(*f->find("k.f32_int")->as_float(), 3.0);
  EXPECT_EQ(type_of("k.f64"), GgufValueType::kF64);
  EXPECT_EQ(*f->find("k.f64")->as_float(), -1e300);
  EXPECT_EQ(type_of("k.bool"), GgufValueType::kBool);
  EXPECT_EQ(*f->find("k.bool")->as_bool(), true);
  EXPECT_EQ(*f->require_string("k.utf8"), "h\xc3\xa9llo \xe2\x96\x81");

  const GgufValue* au = f->find("k.arr_u32");
  EXPECT_TRUE(au->is_array());
  EXPECT_EQ(au->elem_type(), GgufValueType::kU32);
  ASSERT_EQ(au->raw().size(), 12u);
  uint32_t u[3];
  std::memcpy(u, au->raw().data(), 12);
  EXPECT_EQ(u[0], 1u);
  EXPECT_EQ(u[2], 4000000000u);
  EXPECT_EQ(f->find("k.arr_i32")->elem_type(), GgufValueType::kI32);
  EXPECT_EQ(*f->find("k.arr_i32")->to_i32s(), (std::vector<int32_t>{-1, 0, 7}));
  EXPECT_EQ(f->find("k.arr_f32")->elem_type(), GgufValueType::kF32);
  EXPECT_EQ(*f->find("k.arr_f32")->to_f32s(), (std::vector<float>{0.5f, -2.0f, 1e-5f}));
  EXPECT_EQ(*f->find("k.arr_str")->as_strings(), (std::vector<std::string>{"<unk>", "", "\xe2\x96\x81t"}));
  EXPECT_TRUE(f->find("k.arr_empty")->is_array());
  EXPECT_EQ(f->find("k.arr_empty")->size(), 0u);
  EXPECT_EQ(f->find("k.arr_bool")->elem_type(), GgufValueType::kBool);
  EXPECT_EQ(f->find("k.arr_bool")->raw(), (std::vector<uint8_t>{1, 0}));
}

TEST_F(TensorBundleTest, TensorsReverseShapeAndConvertToTheirType) {
  // w.f32: a [3, 4] at 0, b [2, 32] at 48, c [64] at 304, d [2, 3, 4] at 560 (shares c's tail).
  std::vector<float> data = iota(12);                            // a
  for (float v : iota(64, -3.0f, 0.1f)) data.push_back(v);        // b
  for (float v : iota(64, -1.0f, 1.0f / 32)) data.push_back(v);  // c
  json m = base_manifest();
  write_floats("w.f32", data);
  m["tensors"] = json::array({
      json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}},
      json{{"name", "b"}, {"shape", {2, 32}}, {"offset", 48}, {"type", "f16"}},
      json{{"name", "c"}, {"shape", {64}}, {"offset", 304}, {"type", "q8_0"}},
      json{{"name", "d"}, {"shape", {2, 3, 4}}, {"offset", 464}, {"type", "bf16"}},
      json{{"name", "e"}, {"shape", {1}}, {"offset", 4}, {"type", "f32"}},
  });
  auto f = pack(write_manifest(m));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->tensors()[4].name, "e");

  const GgufTensorInfo* a = f->find_tensor("a");
  EXPECT_EQ(a->type(), GgmlType::kF32);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 3}));
  ASSERT_EQ(a->n_bytes, 48u);
  EXPECT_EQ(std::memcmp(a->data, data.data(), 48), 0);

  const GgufTensorInfo* b = f->find_tensor("b");
  EXPECT_EQ(b->type(), GgmlType::kF16);
  EXPECT_EQ(b->ne, (std::vector<int64_t>{32, 2}));
  ASSERT_EQ(b->n_bytes, 128u);
  for (size_t i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, b->data + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16(data[12 + i])) << i;
  }

  const GgufTensorInfo* c = f->find_tensor("c");
  EXPECT_EQ(c->type(), GgmlType::kQ8_0);
  EXPECT_EQ(c->ne, (std::vector<int64_t>{64}));
  EXPECT_EQ(c->n_bytes, ggml_row_size(GgmlType::kQ8_0, 64));
  std::vector<float> back(64);
  kernels::dequantize_row(GgmlType::kQ8_0, c->data, back.data(), 64);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(back[i], data[76 + i], 1.0 / 127) << i;

  const GgufTensorInfo* d = f->find_tensor("d");
  EXPECT_EQ(d->type(), GgmlType::kBF16);
  EXPECT_EQ(d->ne, (std::vector<int64_t>{4, 3, 2}));
  for (size_t i = 0; i < 24; ++i) {
    uint16_t h;
    std::memcpy(&h, d->data + 2 * i, 2);
    EXPECT_EQ(h, f32_to_bf16(data[116 + i])) << i;
  }

  const GgufTensorInfo* e = f->find_tensor("e");
  EXPECT_EQ(e->ne, (std::vector<int64_t>{1}));
  float ev;
  std::memcpy(&ev, e->data, 4);
  EXPECT_EQ(ev, 1.0f);
}

TEST_F(TensorBundleTest, DataPathIsRelativeToTheManifestOrAbsolute) {
  json m = base_manifest();
  write_floats("sub/w.f32", iota(12, 100.0f));
  auto f = pack(write_manifest(m, "sub/m.json"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  float first;
  std::memcpy(&first, f->find_tensor("a")->data, 4);
  EXPECT_EQ(first, 100.0f);  // sub/w.f32, not the w.f32 beside the test's working directory

  m["data"] = dir_.file("w.f32");
  auto g = pack(write_manifest(m, "sub/abs.json"));
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  std::memcpy(&first, g->find_tensor("a")->data, 4);
  EXPECT_EQ(first, 0.0f);
}

TEST_F(TensorBundleTest, F16KeepsItsLargestValue) {
  json m = base_manifest();
  write_floats("w.f32", {65504.0f, -65504.0f, 65519.0f, 1e-8f});
  m["tensors"] = json::array({json{{"name", "h"}, {"shape", {4}}, {"offset", 0}, {"type", "f16"}}});
  auto f = pack(write_manifest(m));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  uint16_t h[4];
  std::memcpy(h, f->find_tensor("h")->data, 8);
  EXPECT_EQ(f16_to_f32(h[0]), 65504.0f);
  EXPECT_EQ(f16_to_f32(h[1]), -65504.0f);
  EXPECT_EQ(f16_to_f32(h[2]), 65504.0f);  // rounds down, still finite
}

TEST_F(TensorBundleTest, MissingOrUnreadableFiles) {
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_tensor_bundle("/nonexistent/m.json", w), "/nonexistent/m.json: ", "No such file"));

  json m = base_manifest();
  m["data"] = "missing.f32";
  const std::string path = write_manifest(m);
  EXPECT_TRUE(fails_with(import_tensor_bundle(path, w), dir_.file("missing.f32") + ": ", "No such file"));
}

TEST_F(TensorBundleTest, InvalidJson) {
  GgufWriter w;
  for (const char* text : {"", "{", "{\"format\": }", "{\"version\": NaN}", "[1, 2,]"}) {
    const std::string path = write_text("bad.json", text);
    EXPECT_TRUE(fails_with(import_tensor_bundle(path, w), path + ": ", "invalid JSON: parse error at line")) << text;
  }
  const std::string nan = write_text("nan.json", "{\"metadata\": [{\"value\": NaN}]}");
  EXPECT_TRUE(fails_with(import_tensor_bundle(nan, w), nan + ": ", "JSON has no NaN or Infinity"));
  const std::string path = write_text("bad.json", "{\n  \"format\": \"leoam-tensor-bundle\",\n  oops\n}");
  EXPECT_TRUE(fails_with(import_tensor_bundle(path, w), path + ": ", "line 3")) << "names the line";
}

struct BadCase {
  const char* what;
  std::function<void(json&)> mutate;
  std::string needle;
};

// Each case breaks one thing in the base manifest; the message must start with the manifest's path.
TEST_F(TensorBundleTest, BadManifestsNameTheManifestAndTheProblem) {
  const auto meta = [](json value, const char* type) {
    return [value, type](json& m) {
      m["metadata"].push_back(json{{"key", "k"}, {"type", type}, {"value", value}});
    };
  };
  const auto tensor = [](json t) { return [t](json& m) { m["tensors"] = json::array({t}); }; };
  const std::vector<BadCase> cases = {
      {"top level not an object", [](json& m) { m = json::array(); }, "the top level must be a JSON object"},
      {"no format", [](json& m) { m.erase("format"); }, "not a tensor bundle manifest: missing required field 'format'"},
      {"wrong format", [](json& m) { m["format"] = "gguf"; }, "'format' is \"gguf\", expected \"leoam-tensor-bundle\""},
      {"no version", [](json& m) { m.erase("version"); }, "missing required field 'version'"},
      {"version 2", [](json& m) { m["version"] = 2; }, "tensor bundle version 2 is not supported; this build reads version 1"},
      {"version string", [](json& m) { m["version"] = "1"; }, "tensor bundle version \"1\" is not supported"},
      {"unknown field", [](json& m) { m["extra"] = 1; }, "unknown field 'extra'; fields: format version data metadata tensors"},
      {"no data", [](json& m) { m.erase("data"); }, "missing required field 'data'"},
      {"no metadata", [](json& m) { m.erase("metadata"); }, "missing required field 'metadata'"},
      {"no tensors", [](json& m) { m.erase("tensors"); }, "missing required field 'tensors'"},
      {"data not string", [](json& m) { m["data"] = 3; }, "'data' must be a non-empty string"},
      {"data empty", [](json& m) { m["data"] = ""; }, "'data' must be a non-empty string"},
      {"metadata not array", [](json& m) { m["metadata"] = json::object(); }, "'metadata' must be an array"},
      {"metadata entry not object", [](json& m) { m["metadata"].push_back(3); }, "metadata[1] must be a JSON object"},
      {"metadata no value", [](json& m) { m["metadata"].push_back(json{{"key", "k"}, {"type", "u32"}}); },
       "metadata[1] ('k'): missing required field 'value'"},
      {"metadata no type", [](json& m) { m["metadata"].push_back(json{{"key", "k"}, {"value", 1}}); },
       "metadata[1] ('k'): missing required field 'type'"},
      {"metadata no key", [](json& m) { m["metadata"].push_back(json{{"type", "u32"}, {"value", 1}}); },
       "metadata[1]: missing required field 'key'"},
      {"metadata misspelt field", [](json& m) { m["metadata"].push_back(json{{"key", "k"}, {"typ", "u32"}, {"value", 1}}); },
       "metadata[1] ('k'): unknown field 'typ'; fields: key type value"},
      {"metadata empty key", [](json& m) { m["metadata"].push_back(json{{"key", ""}, {"type", "u32"}, {"value", 1}}); },
       "'key' must be a non-empty string"},
      {"duplicate key",
       [](json& m) { m["metadata"].push_back(json{{"key", "general.architecture"}, {"type", "str"}, {"value", "x"}}); },
       "metadata[1] ('general.architecture'): duplicate metadata key 'general.architecture'"},
      {"unknown type", meta(1, "u128"), "metadata[1] ('k') of type u128: unknown type 'u128'; types: u8 i8 u16 i16"},
      {"unknown array type", meta(json::array({1}), "arr_u128"), "unknown type 'arr_u128'"},
      {"u8 too big", meta(256, "u8"), "of type u8: 256 is out of range for u8 (0 to 255)"},
      {"u8 negative", meta(-1, "u8"), "-1 is out of range for u8 (0 to 255)"},
      {"i8 too small", meta(-129, "i8"), "-129 is out of range for i8 (-128 to 127)"},
      {"u32 too big", meta(4294967296u, "u32"), "4294967296 is out of range for u32 (0 to 4294967295)"},
      {"u64 negative", meta(-1, "u64"), "-1 is out of range for u64"},
      {"i64 too big", meta(9223372036854775808u, "i64"), "9223372036854775808 is out of range for i64"},
      {"u32 float", meta(4.0, "u32"), "of type u32: 4.0 is not an integer"},
      {"i32 fraction", meta(2.5, "i32"), "2.5 is not an integer"},
      {"u32 string", meta("4", "u32"), "\"4\" is not an integer (u32 takes a JSON integer, got a string)"},
      {"u32 bool", meta(true, "u32"), "true is not an integer"},
      {"f32 string", meta("x", "f32"), "\"x\" is not a number"},
      {"f32 too big", meta(1e39, "f32"), "is out of range for f32"},
      {"bool int", meta(1, "bool"), "1 is not a boolean"},
      {"str int", meta(5, "str"), "5 is not a string"},
      {"array not array", meta(3, "arr_u32"), "value must be a JSON array for arr_u32, got an integer"},
      {"array bad element", meta(json::array({1, -2}), "arr_u32"), "of type arr_u32: element 1: -2 is out of range for u32"},
      {"arr_str bad element", meta(json::array({"a", 1}), "arr_str"), "of type arr_str: element 1: 1 is not a string (got an integer)"},
      {"arr_f32 bad element", meta(json::array({0.5, "x"}), "arr_f32"), "element 1: \"x\" is not a number"},
      {"tensors not array", [](json& m) { m["tensors"] = 1; }, "'tensors' must be an array"},
      {"tensor not object", tensor(json("a")), "tensors[0]: must be a JSON object"},
      {"tensor no name", tensor(json{{"shape", {3, 4}}, {"offset", 0}}), "tensors[0]: missing required field 'name'"},
      {"tensor no shape", tensor(json{{"name", "a"}, {"offset", 0}}), "tensors[0] ('a'): missing required field 'shape'"},
      {"tensor no offset", tensor(json{{"name", "a"}, {"shape", {3, 4}}}), "tensors[0] ('a'): missing required field 'offset'"},
      {"tensor misspelt field", tensor(json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}, {"dtype", "f16"}}),
       "tensors[0] ('a'): unknown field 'dtype'; fields: name shape offset type"},
      {"tensor name not string", tensor(json{{"name", 1}, {"shape", {3, 4}}, {"offset", 0}}), "'name' must be a string"},
      {"tensor name empty", tensor(json{{"name", ""}, {"shape", {3, 4}}, {"offset", 0}}), "'name' is empty"},
      {"tensor name too long", tensor(json{{"name", std::string(64, 'x')}, {"shape", {3, 4}}, {"offset", 0}}),
       "'name' is 64 bytes long"},
      {"unknown tensor type", tensor(json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}, {"type", "q5_k"}}),
       "tensors[0] ('a'): unknown tensor type 'q5_k'; types: f32 f16 bf16 q8_0 q4_0 q4_k q6_k"},
      {"tensor type not string", tensor(json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}, {"type", 1}}),
       "'type' must be a string"},
      {"block type misfit", tensor(json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}, {"type", "q4_k"}}),
       "type q4_k stores blocks of 256 values along the last dimension, but shape [3, 4] ends in 4"},
      {"duplicate tensor",
       [](json& m) { m["tensors"].push_back(json{{"name", "a"}, {"shape", {1}}, {"offset", 0}}); },
       "tensors[1] ('a'): duplicate tensor name 'a'"},
      {"empty shape", tensor(json{{"name", "a"}, {"shape", json::array()}, {"offset", 0}}),
       "'shape' [] has 0 dimensions; a GGUF tensor has 1 to 4"},
      {"five dims", tensor(json{{"name", "a"}, {"shape", {1, 1, 1, 1, 1}}, {"offset", 0}}), "has 5 dimensions"},
      {"zero dim", tensor(json{{"name", "a"}, {"shape", {3, 0}}, {"offset", 0}}),
       "'shape' [3,0] has dimension 0; every dimension must be a positive integer"},
      {"negative dim", tensor(json{{"name", "a"}, {"shape", {-3, 4}}, {"offset", 0}}), "has dimension -3"},
      {"fractional dim", tensor(json{{"name", "a"}, {"shape", {3, 4.5}}, {"offset", 0}}), "has dimension 4.5"},
      {"shape not array", tensor(json{{"name", "a"}, {"shape", 12}, {"offset", 0}}), "'shape' must be an array"},
      {"huge shape", tensor(json{{"name", "a"}, {"shape", {4294967296u, 4294967296u}}, {"offset", 0}}),
       "holds more elements than 2^64"},
      {"misaligned offset", tensor(json{{"name", "a"}, {"shape", {2}}, {"offset", 6}}),
       "tensors[0] ('a'): offset 6 is not a multiple of 4"},
      {"negative offset", tensor(json{{"name", "a"}, {"shape", {2}}, {"offset", -4}}),
       "'offset' must be a non-negative integer, got -4"},
      {"float offset", tensor(json{{"name", "a"}, {"shape", {2}}, {"offset", 4.0}}),
       "'offset' must be a non-negative integer, got a non-integer number 4.0"},
      {"offset past end", tensor(json{{"name", "a"}, {"shape", {1}}, {"offset", 48}}),
       "tensors[0] ('a'): shape [1] at offset 48 needs bytes [48, 52) of "},
      {"size past end", tensor(json{{"name", "a"}, {"shape", {4, 4}}, {"offset", 0}}),
       "needs bytes [0, 64) of "},
      {"offset overflow", tensor(json{{"name", "a"}, {"shape", {2}}, {"offset", 18446744073709551612u}}),
       "2^64 and beyond"},
      {"size overflow", tensor(json{{"name", "a"}, {"shape", {4611686018427387904u}}, {"offset", 0}}),
       "2^64 and beyond"},
  };
  for (const BadCase& c : cases) {
    json m = base_manifest();
    c.mutate(m);
    const std::string path = write_manifest(m);
    GgufWriter w;
    EXPECT_TRUE(fails_with(import_tensor_bundle(path, w), path + ": ", c.needle)) << c.what;
  }
}

TEST_F(TensorBundleTest, RangeErrorsNameTheDataFileAndItsSize) {
  json m = base_manifest();
  m["tensors"] = json::array({json{{"name", "a"}, {"shape", {13}}, {"offset", 0}}});
  const std::string path = write_manifest(m);
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_tensor_bundle(path, w), path + ": ",
                         "needs bytes [0, 52) of " + dir_.file("w.f32") + ", which has 48 bytes"));
}

TEST_F(TensorBundleTest, NonFiniteValuesNameTheTensorAndIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [bad, shown] : std::vector<std::pair<float, std::string>>{{nan, "nan"}, {inf, "inf"}, {-inf, "-inf"}}) {
    json m = base_manifest();
    std::vector<float> data = iota(12);
    data[6] = bad;  // numpy index [1, 2] of shape [3, 4]
    write_floats("w.f32", data);
    m["tensors"] = json::array({json{{"name", "ok"}, {"shape", {2}}, {"offset", 0}},
                                json{{"name", "a"}, {"shape", {3, 4}}, {"offset", 0}, {"type", "f16"}}});
    GgufWriter w;
    const Status st = import_tensor_bundle(write_manifest(m), w);
    EXPECT_TRUE(fails_with(st, dir_.file("w.f32") + ": ",
                           "tensors[1] ('a') holds a non-finite value (" + shown + ") at index [1, 2] (byte 24)"))
        << shown;
    // Checked before anything was added: the writer is still empty.
    EXPECT_EQ(w.to_bytes(), GgufWriter().to_bytes());
  }
}

TEST_F(TensorBundleTest, F16OverflowIsAnError) {
  json m = base_manifest();
  write_floats("w.f32", {1.0f, -70000.0f});
  m["tensors"] = json::array({json{{"name", "h"}, {"shape", {2}}, {"offset", 0}, {"type", "f16"}}});
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_tensor_bundle(write_manifest(m), w), dir_.file("w.f32") + ": ",
                         "tensors[0] ('h') has type f16 but holds -70000 at index [1], beyond f16's range"));
  m["tensors"][0]["type"] = "bf16";
  EXPECT_TRUE(import_tensor_bundle(write_manifest(m), w).is_ok());
}

TEST_F(TensorBundleTest, EmptyTensorListAndEmptyDataFile) {
  json m = base_manifest();
  write_text("w.f32", "");
  m["tensors"] = json::array();
  auto f = pack(write_manifest(m));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(*f->require_string("general.architecture"), "llama");
}

}  // namespace
}  // namespace leoam
