// The reader on real files: llama.cpp's vocab-only GGUFs and the stories260K model in the v3 and
// the old v1 layout, which must describe the same model with the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "gguf_test_util.h"

namespace leoam {
namespace {

using test::fixture;

constexpr const char* kV3 = "models/stories260K/stories260K.gguf";
constexpr const char* kV1 = "models/stories260K/tinyllamas-stories-260k-f32.gguf";

TEST(GgufReaderFixture, OpensStories260KV3) {
  LEOAM_SKIP_WITHOUT_FIXTURE(kV3);
  auto f = GgufFile::open(fixture(kV3));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_EQ(*f->require_string("general.architecture"), "llama");
  EXPECT_EQ(*f->require_int("llama.embedding_length"), 64);
  EXPECT_EQ(*f->require_int("llama.block_count"), 5);
  EXPECT_EQ(*f->require_int("llama.attention.head_count_kv"), 4);
  EXPECT_FLOAT_EQ(static_cast<float>(*f->require_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  const GgufTensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type(), GgmlType::kF32);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(q->n_bytes, 64u * 64u * 4u);
  EXPECT_EQ(q->n_elements(), 4096);
  const GgufTensorInfo* k = f->find_tensor("blk.4.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f->find_tensor("no.such.tensor"), nullptr);
  // The last tensor ends exactly at the end of the file.
  uint64_t end = 0;
  for (const auto& t : f->tensors()) end = std::max<uint64_t>(end, f->data_offset() + t.offset + t.n_bytes);
  EXPECT_EQ(end, f->file_size());
}

TEST(GgufReaderFixture, V1AndV3HoldTheSameModel) {
  LEOAM_SKIP_WITHOUT_FIXTURE(kV3);
  LEOAM_SKIP_WITHOUT_FIXTURE(kV1);
  auto v3 = GgufFile::open(fixture(kV3));
  auto v1 = GgufFile::open(fixture(kV1));
  ASSERT_TRUE(v3.is_ok()) << v3.status().message();
  ASSERT_TRUE(v1.is_ok()) << v1.status().message();
  EXPECT_EQ(v1->version(), 1u);

  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.rope.dimension_count", "tokenizer.ggml.bos_token_id",
                          "tokenizer.ggml.eos_token_id"}) {
    auto a = v1->require_int(key);
    auto b = v3->require_int(key);
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    EXPECT_EQ(*a, *b) << key;
  }
  EXPECT_EQ(*v1->require_float("llama.attention.layer_norm_rms_epsilon"),
            *v3->require_float("llama.attention.layer_norm_rms_epsilon"));
  const auto* tok1 = v1->find("tokenizer.ggml.tokens")->as_strings();
  const auto* tok3 = v3->find("tokenizer.ggml.tokens")->as_strings();
  ASSERT_NE(tok1, nullptr);
  ASSERT_NE(tok3, nullptr);
  ASSERT_EQ(tok1->size(), 512u);
  EXPECT_EQ(*tok1, *tok3);
  EXPECT_EQ(*v1->find("tokenizer.ggml.scores")->to_f32s(), *v3->find("tokenizer.ggml.scores")->to_f32s());
  EXPECT_EQ(*v1->find("tokenizer.ggml.token_type")->to_i32s(), *v3->find("tokenizer.ggml.token_type")->to_i32s());

  // Every tensor of the v1 file is in the v3 file with the same type, shape and bytes.
  size_t n_compared = 0;
  for (const GgufTensorInfo& t1 : v1->tensors()) {
    const GgufTensorInfo* t3 = v3->find_tensor(t1.name);
    ASSERT_NE(t3, nullptr) << t1.name;
    EXPECT_EQ(t1.type_id, t3->type_id) << t1.name;
    EXPECT_EQ(t1.ne, t3->ne) << t1.name;
    ASSERT_EQ(t1.n_bytes, t3->n_bytes) << t1.name;
    EXPECT_EQ(std::memcmp(t1.data, t3->data, t1.n_bytes), 0) << t1.name;
    ++n_compared;
  }
  EXPECT_EQ(n_compared, 48u);
}

TEST(GgufReaderFixture, EveryVocabFileOpens) {
  const std::string dir = fixture("vocab");
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (see ../shared)";
  size_t n_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".gguf") continue;
    auto f = GgufFile::open(e.path().string());
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->version(), 3u) << e.path();
    EXPECT_TRUE(f->tensors().empty()) << e.path();
    const GgufValue* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr) << e.path();
    EXPECT_GT(tokens->size(), 0u) << e.path();
    ++n_files;
  }
  EXPECT_GE(n_files, 10u);
}

TEST(GgufReaderFixture, LlamaSpmVocab) {
  LEOAM_SKIP_WITHOUT_FIXTURE("vocab/ggml-vocab-llama-spm.gguf");
  auto f = GgufFile::open(fixture("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const auto* tokens = f->find("tokenizer.ggml.tokens")->as_strings();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 32000u);
  EXPECT_EQ((*tokens)[15043], "\xe2\x96\x81Hello");  // "Hello" -> 15043 in the README's example
  EXPECT_EQ(*f->require_string("tokenizer.ggml.model"), "llama");
}

// Every prefix of a real model file fails cleanly (stride past the metadata to keep it quick).
TEST(GgufReaderFixture, EveryPrefixOfStoriesFails) {
  LEOAM_SKIP_WITHOUT_FIXTURE(kV3);
  LEOAM_SKIP_WITHOUT_FIXTURE(kV1);
  for (const char* rel : {kV3, kV1}) {
    auto whole = GgufFile::open(fixture(rel));
    ASSERT_TRUE(whole.is_ok());
    std::vector<uint8_t> bytes(whole->file_size());
    {
      FILE* fp = std::fopen(fixture(rel).c_str(), "rb");
      ASSERT_NE(fp, nullptr);
      ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), fp), bytes.size());
      std::fclose(fp);
    }
    const size_t header_end = static_cast<size_t>(whole->data_offset());
    size_t n_tried = 0;
    for (size_t len = 0; len < bytes.size(); len += (len < header_end + 64 ? 1 : 4093)) {
      auto r = GgufFile::parse("cut.gguf", bytes.data(), len);
      ASSERT_TRUE(test::fails_with(r, "cut.gguf: ", "")) << rel << " prefix " << len;
      ++n_tried;
    }
    auto r = GgufFile::parse("cut.gguf", bytes.data(), bytes.size() - 1);
    EXPECT_TRUE(test::fails_with(r, "cut.gguf: ", "extends past end of file")) << rel;
    EXPECT_GT(n_tried, header_end);
  }
}

}  // namespace
}  // namespace leoam
