#include "model/synthetic_model.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"

namespace leoam {
namespace {

SyntheticModelSpec small() {
  SyntheticModelSpec s;
  s.n_vocab = 400;
  s.n_embd = 64;
  s.n_layer = 1;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_ff = 96;
  s.n_ctx = 32;
  return s;
}

std::vector<uint8_t> bytes_of(const SyntheticModelSpec& s) {
  GgufWriter w;
  Status st = build_synthetic_model(s, w);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return w.to_bytes();
}

TEST(SyntheticModel, SameSeedSameFileOtherSeedOtherWeights) {
  const auto a = bytes_of(small());
  EXPECT_EQ(a, bytes_of(small()));
  SyntheticModelSpec other = small();
  other.seed = 7;
  const auto b = bytes_of(other);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
}

TEST(SyntheticModel, VocabularyLayout) {
  const auto bytes = bytes_of(small());
  auto gguf = GgufFile::parse("s.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
  const auto* tokens = gguf->find("tokenizer.ggml.tokens")->as_strings();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 400u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ((*tokens)[3 + 0x41], "<0x41>");
  EXPECT_EQ((*tokens)[258], "<0xFF>");
  EXPECT_EQ((*tokens)[259], "\xe2\x96\x81the");
  EXPECT_EQ(std::set<std::string>(tokens->begin(), tokens->end()).size(), tokens->size());  // all distinct
  const auto types = gguf->find("tokenizer.ggml.token_type")->to_i32s();
  ASSERT_TRUE(types.has_value());
  EXPECT_EQ((*types)[0], 2);
  EXPECT_EQ((*types)[1], 3);
  EXPECT_EQ((*types)[100], 6);
  EXPECT_EQ((*types)[300], 1);
  const auto scores = gguf->find("tokenizer.ggml.scores")->to_f32s();
  ASSERT_TRUE(scores.has_value());
  EXPECT_GT((*scores)[259], (*scores)[260]);
  EXPECT_EQ(*gguf->find("tokenizer.ggml.model")->as_string(), "llama");
  EXPECT_EQ(gguf->find("tokenizer.ggml.bos_token_id")->as_int(), 1);
  EXPECT_EQ(gguf->find("tokenizer.ggml.eos_token_id")->as_int(), 2);
  EXPECT_EQ(gguf->find("tokenizer.ggml.unknown_token_id")->as_int(), 0);

  // A large vocabulary still has distinct pieces.
  SyntheticModelSpec big = small();
  big.n_vocab = 5000;
  const auto big_bytes = bytes_of(big);
  auto g = GgufFile::parse("b.gguf", big_bytes.data(), big_bytes.size());
  ASSERT_TRUE(g.is_ok());
  const auto* t = g->find("tokenizer.ggml.tokens")->as_strings();
  EXPECT_EQ(std::set<std::string>(t->begin(), t->end()).size(), 5000u);
}

TEST(SyntheticModel, LoadsAsAModel) {
  const auto bytes = bytes_of(small());
  auto gguf = GgufFile::parse("s.gguf", bytes.data(), bytes.size());
  ASSERT_TRUE(gguf.is_ok());
  auto model = Model::from_gguf(std::move(gguf).value());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->hparams().n_vocab, 400);
  EXPECT_EQ((*model)->hparams().head_dim, 32);
}

TEST(SyntheticModel, Presets) {
  auto tiny = synthetic_model_preset("tiny");
  ASSERT_TRUE(tiny.is_ok());
  EXPECT_EQ(tiny->n_embd, 256);
  EXPECT_EQ(tiny->weight_type, GgmlType::kF32);

  auto l7 = synthetic_model_preset("llama-7b:q4_0");
  ASSERT_TRUE(l7.is_ok()) << l7.status().message();
  EXPECT_EQ(l7->n_embd, 4096);
  EXPECT_EQ(l7->n_layer, 32);
  EXPECT_EQ(l7->n_head, 32);
  EXPECT_EQ(l7->n_ff, 11008);
  EXPECT_EQ(l7->n_vocab, 32000);
  EXPECT_EQ(l7->weight_type, GgmlType::kQ4_0);
  auto l2 = synthetic_model_preset("llama2-7b:q4_0");
  ASSERT_TRUE(l2.is_ok()) << l2.status().message();
  EXPECT_EQ(l2->n_embd, l7->n_embd);
  EXPECT_EQ(l2->n_head_kv, 32);
  EXPECT_EQ(l2->n_ff, l7->n_ff);
  EXPECT_EQ(l2->rope_freq_base, 10000.0f);

  auto l8 = synthetic_model_preset("llama3-8b:q4_0");
  ASSERT_TRUE(l8.is_ok()) << l8.status().message();
  EXPECT_EQ(l8->n_embd, 4096);
  EXPECT_EQ(l8->n_layer, 32);
  EXPECT_EQ(l8->n_head, 32);
  EXPECT_EQ(l8->n_head_kv, 8);
  EXPECT_EQ(l8->n_ff, 14336);
  EXPECT_EQ(l8->n_vocab, 128256);
  EXPECT_EQ(l8->rope_freq_base, 500000.0f);
  EXPECT_EQ(l8->weight_type, GgmlType::kQ4_0);

  auto l1 = synthetic_model_preset("llama-1b:Q4_K");
  ASSERT_TRUE(l1.is_ok());
  EXPECT_EQ(l1->n_head_kv, 8);
  EXPECT_EQ(l1->weight_type, GgmlType::kQ4_K);

  auto q = synthetic_model_preset("qwen2-0.5b");
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->arch, ModelArch::kQwen2);
  EXPECT_TRUE(q->qkv_bias);

  auto g = synthetic_model_preset("gemma3-1b:q4_0");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->arch, ModelArch::kGemma3);
  EXPECT_EQ(g->head_dim, 256);
  EXPECT_EQ(g->sliding_window, 512);

  auto unknown = synthetic_model_preset("gpt-9");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().message(),
            "unknown synthetic model 'gpt-9'; presets: tiny llama-1b llama2-7b llama3-8b qwen2-0.5b gemma3-1b");
  EXPECT_FALSE(synthetic_model_preset("tiny:q5_k").is_ok());
}

TEST(SyntheticModel, RejectsSpecsTheLoaderWould) {
  GgufWriter w;
  SyntheticModelSpec s = small();
  s.n_vocab = 258;
  EXPECT_FALSE(build_synthetic_model(s, w).is_ok());
  s = small();
  s.n_head_kv = 3;
  EXPECT_FALSE(build_synthetic_model(s, w).is_ok());
  s = small();
  s.weight_type = GgmlType::kQ4_K;  // rows of 64 and 96: not multiples of 256
  Status st = build_synthetic_model(s, w);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("multiples of 256"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace leoam
