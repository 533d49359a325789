// The real trained model in the fixtures: stories260K (Karpathy's TinyStories llama, GQA 8/4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/llama2c_import.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "model_test_util.h"

namespace leoam {
namespace {

const std::string kDir = std::string(LEOAM_FIXTURES_DIR) + "/models/stories260K/";
const std::string kGguf = kDir + "stories260K.gguf";
const std::string kGgufV1 = kDir + "tinyllamas-stories-260k-f32.gguf";
const std::string kLlama2cBin = kDir + "stories260K.bin";
const std::string kLlama2cTok = kDir + "tok512.bin";

bool have(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// Token text to bytes, SentencePiece style: '▁' is a space and <0xXX> one byte. Local to the test
// (the tokenizer module is separate).
std::string detokenize(const GgufFile& gguf, const std::vector<int32_t>& ids) {
  const std::vector<std::string>& vocab = *gguf.find("tokenizer.ggml.tokens")->as_strings();
  std::string out;
  for (int32_t id : ids) {
    const std::string& piece = vocab.at(id);
    if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece.back() == '>') {
      out += static_cast<char>(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16));
      continue;
    }
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += piece[i++];
      }
    }
  }
  return out;
}

std::vector<int32_t> greedy(ForwardContext& ctx, int32_t first, int n) {
  std::vector<int32_t> out;
  std::vector<float> logits;
  int32_t tok = first;
  for (int i = 0; i < n; ++i) {
    Status st = ctx.eval(std::span<const int32_t>(&tok, 1), false, logits);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok()) break;
    tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(tok);
  }
  return out;
}

std::unique_ptr<ForwardContext> context(const Model& m, KvDtype kv) {
  ForwardOptions o;
  o.n_threads = 2;
  o.kv_dtype = kv;
  auto ctx = ForwardContext::create(m, o);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  return std::move(ctx).value();
}

TEST(Stories260K, HyperparametersComeFromTheFile) {
  if (!have(kGguf)) GTEST_SKIP() << kGguf << " not found (fixtures absent)";
  auto model = Model::load(kGguf);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch, ModelArch::kLlama);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_layer, 5);
  EXPECT_EQ(hp.n_head, 8);
  EXPECT_EQ(hp.n_head_kv, 4);
  EXPECT_EQ(hp.n_ff, 172);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.rope.n_rot, 8);
  EXPECT_EQ(hp.n_ctx_train, 128);
  EXPECT_EQ(hp.rope.pairing, RopePairing::kNormal);
  EXPECT_EQ(hp.rope.scaling, RopeScalingType::kNone);
}

TEST(Stories260K, GreedyFromBosTellsTheKnownStory) {
  if (!have(kGguf)) GTEST_SKIP() << kGguf << " not found (fixtures absent)";
  auto model = Model::load(kGguf);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto ctx = context(**model, KvDtype::kF16);
  const std::vector<int32_t> ids = greedy(*ctx, /*BOS=*/1, 40);
  const std::string text = detokenize((*model)->gguf(), ids);
  const std::string want = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park";
  EXPECT_EQ(text.substr(0, want.size() + 1), " " + want) << text;
}

TEST(Stories260K, GgufV1TwinGivesIdenticalLogits) {
  if (!have(kGguf) || !have(kGgufV1)) GTEST_SKIP() << "stories260K fixtures not found";
  auto a = Model::load(kGguf);
  auto b = Model::load(kGgufV1);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378, 418, 265, 270, 2, 0, 511};
  std::vector<float> la, lb;
  ASSERT_TRUE(context(**a, KvDtype::kF32)->eval(tokens, true, la).is_ok());
  ASSERT_TRUE(context(**b, KvDtype::kF32)->eval(tokens, true, lb).is_ok());
  EXPECT_EQ(la, lb);
}

TEST(Stories260K, Llama2cCheckpointGivesTheSameLogitsAsTheGguf) {
  if (!have(kGguf) || !have(kLlama2cBin) || !have(kLlama2cTok)) GTEST_SKIP() << "stories260K fixtures not found";
  GgufWriter writer;
  ASSERT_TRUE(import_llama2c(kLlama2cBin, kLlama2cTok, writer).is_ok());
  const std::vector<uint8_t> bytes = writer.to_bytes();  // outlives the model that maps it
  auto gguf = GgufFile::parse("stories260K.bin", bytes.data(), bytes.size());
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
  auto from_bin = Model::from_gguf(std::move(gguf).value());
  auto from_gguf = Model::load(kGguf);
  ASSERT_TRUE(from_bin.is_ok()) << from_bin.status().message();
  ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().message();
  EXPECT_TRUE((*from_bin)->weights().output_tied) << "the checkpoint shares its classifier";

  std::vector<int32_t> tokens = {1};
  for (int i = 0; i < 40; ++i) tokens.push_back(static_cast<int32_t>((11 + i * 137) % 512));
  std::vector<float> a, b;
  ASSERT_TRUE(context(**from_bin, KvDtype::kF32)->eval(tokens, true, a).is_ok());
  ASSERT_TRUE(context(**from_gguf, KvDtype::kF32)->eval(tokens, true, b).is_ok());
  ASSERT_EQ(a.size(), tokens.size() * 512);
  // The same weights through the same kernels: equal to the bit.
  EXPECT_EQ(a, b);
}

TEST(Stories260K, MatchesTheNumpyReference) {
  if (!have(kGguf)) GTEST_SKIP() << kGguf << " not found (fixtures absent)";
  std::string why;
  if (!testing_util::reference_available(&why)) GTEST_SKIP() << "numpy reference unavailable: " << why;
  auto model = Model::load(kGguf);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  std::vector<int32_t> tokens = {1};
  for (int i = 0; i < 23; ++i) tokens.push_back(static_cast<int32_t>((37 + i * 101) % 512));
  std::vector<float> logits;
  ASSERT_TRUE(context(**model, KvDtype::kF16)->eval(tokens, true, logits).is_ok());
  std::string error;
  const std::vector<float> ref = testing_util::run_reference(kGguf, tokens, /*kv_f16=*/true, &error);
  ASSERT_EQ(ref.size(), logits.size()) << error;
  const double err = testing_util::rel_l2(logits, ref);
  std::printf("[ measured ] stories260K rel L2 error %.3g\n", err);
  EXPECT_LE(err, 1e-4);
}

}  // namespace
}  // namespace leoam
