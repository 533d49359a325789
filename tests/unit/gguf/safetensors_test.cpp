// The safetensors reader and a checkpoint folder's shards, on files the tests write by the
// format's definition: an 8-byte little-endian header size, a JSON header, the data.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/safetensors_checkpoint.h"
#include "gguf/safetensors_file.h"
#include "../safetensors_writer.h"
#include "../temp_dir.h"

namespace leoam {
namespace {

using json = nlohmann::ordered_json;
using testing_util::Entry;
using testing_util::file_bytes;
using testing_util::safetensors;
using testing_util::write_file;

std::string floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

Result<SafetensorsFile> parse(const std::string& bytes) {
  return SafetensorsFile::parse("t.safetensors", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// The error message of parsing `bytes`, which must fail with `code`.
std::string error_of(const std::string& bytes, StatusCode code = StatusCode::kCorrupt) {
  const Result<SafetensorsFile> f = parse(bytes);
  EXPECT_FALSE(f.is_ok());
  if (f.is_ok()) return "";
  EXPECT_EQ(f.status().code(), code) << f.status().message();
  EXPECT_NE(f.status().message().find("t.safetensors"), std::string::npos) << f.status().message();
  return f.status().message();
}

TEST(SafetensorsFileTest, ReadsEachDtypeShapeDataAndTheMetadata) {
  const std::string bf16 = {'\x80', '\x3f', '\x00', '\x40'};  // 1.0 and 2.0
  const std::string f16 = {'\x00', '\x3c', '\x00', '\xc0', '\x00', '\x00'};  // 1, -2, 0
  const std::string bytes = safetensors({{"model.embed_tokens.weight", "F32", {2, 3}, floats({1, 2, 3, 4, 5, 6})},
                                         {"model.norm.weight", "BF16", {2}, bf16},
                                         {"lm_head.weight", "F16", {1, 3}, f16}},
                                        {{"format", "pt"}});
  testing_util::TempDir dir;
  write_file(dir.file("model.safetensors"), bytes);
  Result<SafetensorsFile> f = SafetensorsFile::open(dir.file("model.safetensors"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const SafetensorsTensor* e = f->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(e->n_elements(), 6);
  ASSERT_EQ(e->n_bytes, 24u);
  float v[6];
  std::memcpy(v, e->data, sizeof(v));
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[5], 6.0f);
  const SafetensorsTensor* n = f->find("model.norm.weight");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(n->data), n->n_bytes), bf16);
  const SafetensorsTensor* h = f->find("lm_head.weight");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, SafetensorsDtype::kF16);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(h->data), h->n_bytes), f16);
  EXPECT_EQ(f->find("missing"), nullptr);
  // In the order of their data.
  EXPECT_EQ(f->tensors()[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(f->tensors()[2].name, "lm_head.weight");
}

TEST(SafetensorsFileTest, AScalarAndAnEmptyTensorAreTensors) {
  Result<SafetensorsFile> f = parse(safetensors({{"a", "F32", {}, floats({7})}, {"b", "F16", {0, 4}, ""}}));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->find("a")->n_elements(), 1);
  EXPECT_EQ(f->find("b")->n_bytes, 0u);
}

TEST(SafetensorsFileTest, BadFilesFailWithTheFileAndTheTensorNamed) {
  const std::string good = safetensors({{"w", "F32", {2}, floats({1, 2})}});
  EXPECT_NE(error_of("abc").find("too short"), std::string::npos);
  EXPECT_NE(error_of(file_bytes(std::string(64, ' '), "")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, 20)).find("truncated"), std::string::npos);
  // The data cut short: the tensor's range runs past the file's end.
  EXPECT_NE(error_of(good.substr(0, good.size() - 1)).find("outside"), std::string::npos);
  std::string huge = good;
  huge[5] = '\x7f';  // a header size near 2^47
  EXPECT_NE(error_of(huge).find("limit"), std::string::npos);

  EXPECT_NE(error_of(safetensors({{"w", "Q4", {2}, floats({1, 2})}})).find("unknown dtype 'Q4'"), std::string::npos);
  const std::string i8 = error_of(safetensors({{"w", "I8", {8}, floats({1, 2})}}), StatusCode::kUnsupported);
  EXPECT_NE(i8.find("dtype I8 is not supported"), std::string::npos) << i8;
  EXPECT_NE(i8.find("'w'"), std::string::npos) << i8;
  EXPECT_NE(error_of(safetensors({{"w", "F32", {3}, floats({1, 2})}})).find("needs 12"), std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})))
                .find("not a size"),
            std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", floats({1, 2}))).find("no \"data_offsets\""),
            std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", floats({1, 2})))
                .find("other than"),
            std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", floats({1, 2})))
                .find("outside"),
            std::string::npos);
  // Overlapping tensors, a hole between two, bytes after the last.
  EXPECT_NE(error_of(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                floats({1, 2})))
                .find("still another tensor's"),
            std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                floats({1, 2, 3})))
                .find("hole"),
            std::string::npos);
  EXPECT_NE(error_of(good + "xxxx").find("after the last tensor"), std::string::npos);
  EXPECT_NE(error_of(file_bytes(R"({"__metadata__":{"a":1}})", "")).find("is not text"), std::string::npos);
}

TEST(SafetensorsFileTest, AMissingFileSaysSo) {
  const Result<SafetensorsFile> f = SafetensorsFile::open("/nonexistent/model.safetensors");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.safetensors"), std::string::npos) << f.status().message();
}

class SafetensorsCheckpointTest : public ::testing::Test {
 protected:
  // Two shards and their index, as a sharded Hugging Face checkpoint.
  void write_sharded(const json& weight_map) {
    write_file(dir_.file("model-00001-of-00002.safetensors"),
          safetensors({{"a", "F32", {2}, floats({1, 2})}, {"b", "F32", {1}, floats({3})}}));
    write_file(dir_.file("model-00002-of-00002.safetensors"), safetensors({{"c", "F32", {1}, floats({4})}}));
    write_file(dir_.file(kSafetensorsIndexFile), json{{"metadata", {{"total_size", 16}}}, {"weight_map", weight_map}}.dump());
  }
  std::string error() {
    const Result<SafetensorsCheckpoint> c = SafetensorsCheckpoint::open(dir_.path());
    EXPECT_FALSE(c.is_ok());
    return c.is_ok() ? "" : c.status().message();
  }
  testing_util::TempDir dir_;
};

const json kMap = {{"a", "model-00001-of-00002.safetensors"},
                   {"b", "model-00001-of-00002.safetensors"},
                   {"c", "model-00002-of-00002.safetensors"}};

TEST_F(SafetensorsCheckpointTest, ASingleFileOrShardsByTheirIndex) {
  write_file(dir_.file(kSafetensorsSingleFile), safetensors({{"x", "F32", {1}, floats({9})}}));
  Result<SafetensorsCheckpoint> single = SafetensorsCheckpoint::open(dir_.path());
  ASSERT_TRUE(single.is_ok()) << single.status().message();
  ASSERT_EQ(single->tensors().size(), 1u);
  EXPECT_NE(single->find("x"), nullptr);
  std::filesystem::remove(dir_.file(kSafetensorsSingleFile));

  write_sharded(kMap);
  Result<SafetensorsCheckpoint> sharded = SafetensorsCheckpoint::open(dir_.path());
  ASSERT_TRUE(sharded.is_ok()) << sharded.status().message();
  EXPECT_EQ(sharded->shards().size(), 2u);
  ASSERT_EQ(sharded->tensors().size(), 3u);
  const SafetensorsTensor* c = sharded->find("c");
  ASSERT_NE(c, nullptr);
  float v = 0;
  std::memcpy(&v, c->data, 4);
  EXPECT_EQ(v, 4.0f);
}

TEST_F(SafetensorsCheckpointTest, ShardsAndIndexThatDisagreeFail) {
  EXPECT_NE(error().find("neither model.safetensors nor"), std::string::npos);

  json missing = kMap;
  missing["d"] = "model-00002-of-00002.safetensors";
  write_sharded(missing);
  EXPECT_NE(error().find("names tensor 'd' in model-00002-of-00002.safetensors, which does not hold it"),
            std::string::npos);

  json unlisted = kMap;
  unlisted.erase("b");
  write_sharded(unlisted);
  EXPECT_NE(error().find("holds tensor 'b', which model.safetensors.index.json does not name"), std::string::npos);

  json moved = kMap;
  moved["c"] = "model-00001-of-00002.safetensors";
  write_sharded(moved);
  EXPECT_NE(error().find("tensor 'c'"), std::string::npos);

  json absent = kMap;
  absent["c"] = "model-00003-of-00003.safetensors";
  write_sharded(absent);
  EXPECT_NE(error().find("model-00003-of-00003.safetensors"), std::string::npos);

  json escape = kMap;
  escape["c"] = "../model.safetensors";
  write_sharded(escape);
  EXPECT_NE(error().find("is not a file in the folder"), std::string::npos);

  write_sharded(kMap);
  const std::string shard = dir_.file("model-00002-of-00002.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 2);
  EXPECT_NE(error().find("model-00002-of-00002.safetensors"), std::string::npos);

  write_file(dir_.file(kSafetensorsIndexFile), "{\"weight_map\": 3}");
  EXPECT_NE(error().find("no \"weight_map\""), std::string::npos);
}

}  // namespace
}  // namespace leoam
