// llama2.c import: stories260K.bin + tok512.bin must give the very tensors and vocab that
// llama.cpp's converter put into stories260K.gguf.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/llama2c_import.h"
#include "gguf_test_util.h"

namespace leoam {
namespace {

using test::fails_with;
using test::fixture;

constexpr const char* kBin = "models/stories260K/stories260K.bin";
constexpr const char* kTok = "models/stories260K/tok512.bin";
constexpr const char* kRef = "models/stories260K/stories260K.gguf";

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

#define SKIP_WITHOUT_LLAMA2C()             \
  LEOAM_SKIP_WITHOUT_FIXTURE(kBin);        \
  LEOAM_SKIP_WITHOUT_FIXTURE(kTok);        \
  LEOAM_SKIP_WITHOUT_FIXTURE(kRef)

TEST(Llama2cImport, MatchesLlamaCppConversion) {
  SKIP_WITHOUT_LLAMA2C();
  GgufWriter w;
  Status s = import_llama2c(fixture(kBin), fixture(kTok), w);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto got = GgufFile::parse("imported.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  auto ref = GgufFile::open(fixture(kRef));
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();

  // The checkpoint shares its classifier, so there is no output.weight; llama.cpp's converter
  // wrote a copy of token_embd instead. Every other tensor matches by name, shape and bytes,
  // with no Q/K permutation (see llama2c_import.h).
  EXPECT_EQ(got->tensors().size(), 47u);
  EXPECT_EQ(got->find_tensor("output.weight"), nullptr);
  for (const GgufTensorInfo& r : ref->tensors()) {
    const std::string name = r.name == "output.weight" ? "token_embd.weight" : r.name;
    const GgufTensorInfo* t = got->find_tensor(name);
    ASSERT_NE(t, nullptr) << r.name;
    EXPECT_EQ(t->type_id, r.type_id) << r.name;
    EXPECT_EQ(t->ne, r.ne) << r.name;
    ASSERT_EQ(t->n_bytes, r.n_bytes) << r.name;
    EXPECT_EQ(std::memcmp(t->data, r.data, r.n_bytes), 0) << r.name << " differs";
  }

  EXPECT_EQ(*got->find("tokenizer.ggml.tokens")->as_strings(), *ref->find("tokenizer.ggml.tokens")->as_strings());
  EXPECT_EQ(*got->find("tokenizer.ggml.scores")->to_f32s(), *ref->find("tokenizer.ggml.scores")->to_f32s());
  EXPECT_EQ(*got->find("tokenizer.ggml.token_type")->to_i32s(), *ref->find("tokenizer.ggml.token_type")->to_i32s());
  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.dimension_count",
                          "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"}) {
    EXPECT_EQ(*got->require_int(key), *ref->require_int(key)) << key;
  }
  EXPECT_EQ(*got->require_float("llama.attention.layer_norm_rms_epsilon"),
            *ref->require_float("llama.attention.layer_norm_rms_epsilon"));
  EXPECT_EQ(*got->require_string("general.architecture"), "llama");
  EXPECT_EQ(*got->require_string("tokenizer.ggml.model"), "llama");
  // The checkpoint's seq_len; llama.cpp's converter wrote its own default of 128 instead.
  EXPECT_EQ(*got->require_int("llama.context_length"), 512);
  const auto& tokens = *got->find("tokenizer.ggml.tokens")->as_strings();
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[259], "\xe2\x96\x81t");  // " t" in tok512.bin
}

TEST(Llama2cImport, TruncatedOrCorruptCheckpoint) {
  SKIP_WITHOUT_LLAMA2C();
  const std::vector<uint8_t> bin = read_all(fixture(kBin));
  const std::vector<uint8_t> tok = read_all(fixture(kTok));
  const Llama2cInput t{"tok.bin", tok.data(), tok.size()};
  for (size_t len : {size_t{0}, size_t{27}, size_t{28}, size_t{1000}, bin.size() - 4, bin.size() - 1}) {
    GgufWriter w;
    std::vector<uint8_t> cut(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_TRUE(fails_with(import_llama2c(Llama2cInput{"m.bin", cut.data(), cut.size()}, t, w), "m.bin: ", "truncated"))
        << len;
  }
  std::vector<uint8_t> longer = bin;
  longer.push_back(0);
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_llama2c(Llama2cInput{"m.bin", longer.data(), longer.size()}, t, w), "m.bin: ",
                         "corrupt: the header (dim=64 hidden_dim=172 n_layers=5 n_heads=8 n_kv_heads=4 vocab_size=512"));
  std::vector<uint8_t> bad = bin;
  const int32_t zero = 0;
  std::memcpy(bad.data() + 12, &zero, 4);  // n_heads = 0
  EXPECT_TRUE(fails_with(import_llama2c(Llama2cInput{"m.bin", bad.data(), bad.size()}, t, w), "m.bin: ",
                         "every size must be positive"));
  const int32_t huge = 0x7fffffff;
  std::memcpy(bad.data(), &huge, 4);  // dim
  std::memcpy(bad.data() + 4, &huge, 4);
  std::memcpy(bad.data() + 8, &huge, 4);
  std::memcpy(bad.data() + 12, &huge, 4);
  std::memcpy(bad.data() + 16, &huge, 4);
  EXPECT_TRUE(fails_with(import_llama2c(Llama2cInput{"m.bin", bad.data(), bad.size()}, t, w), "m.bin: ",
                         "dim must split into n_heads heads of even size"));
}

TEST(Llama2cImport, TruncatedTokenizer) {
  SKIP_WITHOUT_LLAMA2C();
  const std::vector<uint8_t> bin = read_all(fixture(kBin));
  const std::vector<uint8_t> tok = read_all(fixture(kTok));
  const Llama2cInput b{"m.bin", bin.data(), bin.size()};
  for (size_t len = 0; len < tok.size(); len += (len < 64 ? 1 : 97)) {
    GgufWriter w;
    std::vector<uint8_t> cut(tok.begin(), tok.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_TRUE(fails_with(import_llama2c(b, Llama2cInput{"tok.bin", cut.data(), cut.size()}, w), "tok.bin: ", "truncated"))
        << len;
  }
  std::vector<uint8_t> bad = tok;
  const int32_t len = 1 << 30;
  std::memcpy(bad.data() + 8, &len, 4);  // length of token 0
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_llama2c(b, Llama2cInput{"tok.bin", bad.data(), bad.size()}, w), "tok.bin: ",
                         "token 0 claims 1073741824 bytes"));
}

TEST(Llama2cImport, MissingFile) {
  GgufWriter w;
  EXPECT_TRUE(fails_with(import_llama2c("/nonexistent/m.bin", "/nonexistent/t.bin", w), "/nonexistent/m.bin: ",
                         "No such file"));
}

}  // namespace
}  // namespace leoam
