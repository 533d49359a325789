// Loading: hyperparameters from metadata, tensor validation, and the errors for bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/cpu/row_groups.h"
#include "model/model.h"
#include "model/synthetic_model.h"

namespace leoam {
namespace {

SyntheticModelSpec spec256() {
  SyntheticModelSpec s;
  s.n_vocab = 300;
  s.n_embd = 256;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_ctx = 64;
  return s;
}

// A model file in memory: build it, optionally edit the writer, then optionally patch bytes.
struct InMemoryModel {
  std::vector<uint8_t> bytes;

  Result<std::unique_ptr<Model>> load(const std::string& name = "m.gguf") const {
    LEOAM_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::parse(name, bytes.data(), bytes.size()));
    return Model::from_gguf(std::move(gguf));
  }
  // Replaces the first occurrence of `from` with `to` (same length): renames a key or tensor.
  void patch(const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
    ASSERT_NE(it, bytes.end()) << from;
    std::copy(to.begin(), to.end(), it);
  }
  // Sets the ggml type id in the tensor info of `name` (name, n_dims u32, ne u64 x n_dims, type u32).
  void set_tensor_type(const std::string& name, uint32_t type_id) {
    auto it = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
    ASSERT_NE(it, bytes.end()) << name;
    size_t pos = static_cast<size_t>(it - bytes.begin()) + name.size();
    uint32_t n_dims;
    std::memcpy(&n_dims, &bytes[pos], 4);
    pos += 4 + 8 * n_dims;
    std::memcpy(&bytes[pos], &type_id, 4);
  }
};

InMemoryModel make(const SyntheticModelSpec& spec, const std::function<void(GgufWriter&)>& edit = nullptr) {
  GgufWriter w;
  Status st = build_synthetic_model(spec, w);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (edit) edit(w);
  return InMemoryModel{w.to_bytes()};
}

TEST(ModelLoad, ReadsHyperparametersAndDefaults) {
  InMemoryModel m = make(spec256());
  auto model = m.load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.arch_name, "llama");
  EXPECT_EQ(hp.n_embd, 256);
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_EQ(hp.n_ff, 256);
  EXPECT_EQ(hp.n_vocab, 300);
  EXPECT_EQ(hp.n_ctx_train, 64);
  EXPECT_EQ(hp.n_gqa(), 2);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_EQ(hp.rope.n_rot, 64);
  EXPECT_EQ(hp.rope.pairing, RopePairing::kNormal);
  EXPECT_EQ(hp.rope.scaling, RopeScalingType::kNone);
  EXPECT_FLOAT_EQ(hp.rope.freq_scale, 1.0f);
  EXPECT_FALSE((*model)->weights().output_tied);
  EXPECT_EQ((*model)->weights().layers.size(), 2u);
  EXPECT_EQ((*model)->weights().rope_freqs, nullptr);

  // Without rope.dimension_count and rope.freq_base: the head size and 10000.
  SyntheticModelSpec s = spec256();
  s.n_rot = 32;
  s.rope_freq_base = 5000.0f;
  InMemoryModel d = make(s);
  d.patch("llama.rope.dimension_count", "llama.rope.dimension_XXXXX");
  d.patch("llama.rope.freq_base", "llama.rope.freq_XXXX");
  auto defaults = d.load();
  ASSERT_TRUE(defaults.is_ok()) << defaults.status().message();
  EXPECT_EQ((*defaults)->hparams().rope.n_rot, 64);
  EXPECT_FLOAT_EQ((*defaults)->hparams().rope.freq_base, 10000.0f);

  // Without head_count_kv: head_count (4), so the 2-head K/V tensors no longer fit.
  m.patch("llama.attention.head_count_kv", "llama.attention.head_count_XX");
  auto r = m.load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "m.gguf: tensor 'blk.0.attn_k.weight' has shape [256, 128], expected [256, 256] from the model's "
            "hyperparameters");
}

TEST(ModelLoad, Qwen2UsesNeoxPairingAndBiases) {
  SyntheticModelSpec s = spec256();
  s.arch = ModelArch::kQwen2;
  s.qkv_bias = true;
  s.tied_output = true;
  InMemoryModel m = make(s);  // parse() keeps pointers into m.bytes: keep it alive
  auto model = m.load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->hparams().arch, ModelArch::kQwen2);
  EXPECT_EQ((*model)->hparams().rope.pairing, RopePairing::kNeox);
  EXPECT_NE((*model)->weights().layers[1].attn_k_bias, nullptr);
  EXPECT_TRUE((*model)->weights().output_tied);
  EXPECT_EQ((*model)->weights().output.data, (*model)->weights().token_embd.data);
}

TEST(ModelLoad, Gemma3SlidesFiveLayersOfSix) {
  SyntheticModelSpec s = spec256();
  s.arch = ModelArch::kGemma3;
  s.n_layer = 6;
  s.sliding_window = 16;
  s.tied_output = true;
  auto model = make(s).load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.sliding_window, 16);
  EXPECT_TRUE(hp.is_sliding(0));
  EXPECT_FALSE(hp.is_sliding(5));
  EXPECT_NE((*model)->weights().layers[0].attn_post_norm, nullptr);
}

// A phi3 file's window: its key where present (slides every layer when shorter than the
// context); without it, llama.cpp's 2047 for the Phi-3 mini and medium 4K shapes (32 or 40
// layers, a context of 4096) and none for the others; a key of 0 is an error naming it.
TEST(ModelLoad, Phi3WindowsByKeyOrLlamaCppDefault) {
  struct Case {
    int n_layer;
    int64_t n_ctx, key, want;
  };
  for (const Case c : {Case{32, 4096, 0, 2047}, Case{40, 4096, 0, 2047}, Case{32, 8192, 0, 0}, Case{2, 4096, 0, 0},
                       Case{2, 4096, 100, 100}, Case{2, 64, 64, 0}}) {
    SyntheticModelSpec s = spec256();
    s.arch = ModelArch::kPhi3;
    s.n_embd = 64;  // 40 layers stay small
    s.n_ff = 64;
    s.n_layer = c.n_layer;
    s.n_ctx = c.n_ctx;
    s.sliding_window = c.key;
    auto model = make(s).load();
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const ModelHparams& hp = (*model)->hparams();
    EXPECT_EQ(hp.sliding_window, c.want) << c.n_layer << " layers, context " << c.n_ctx << ", key " << c.key;
    EXPECT_EQ(hp.window(c.n_layer - 1), c.want);
  }
  SyntheticModelSpec s = spec256();
  s.arch = ModelArch::kPhi3;
  auto zero = make(s, [](GgufWriter& w) { w.set("phi3.attention.sliding_window", GgufValue::from_u32(0)); }).load();
  ASSERT_FALSE(zero.is_ok());
  const std::string why = zero.status().message();
  EXPECT_NE(why.find("phi3.attention.sliding_window"), std::string::npos) << why;
}

TEST(ModelLoad, RopeScalingKeys) {
  SyntheticModelSpec s = spec256();
  s.rope_scaling = RopeScalingType::kYarn;
  s.rope_scaling_factor = 4.0f;
  s.rope_n_ctx_orig = 32;
  s.freq_factors = true;
  InMemoryModel m = make(s);
  auto model = m.load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const RopeParams& rope = (*model)->hparams().rope;
  EXPECT_EQ(rope.scaling, RopeScalingType::kYarn);
  EXPECT_FLOAT_EQ(rope.freq_scale, 0.25f);
  EXPECT_EQ(rope.n_ctx_orig, 32);
  EXPECT_FLOAT_EQ(rope.yarn_ext_factor, 1.0f);  // YaRN's default
  EXPECT_FLOAT_EQ(rope.yarn_attn_factor, 1.0f);
  EXPECT_FLOAT_EQ(rope.yarn_beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(rope.yarn_beta_slow, 1.0f);
  ASSERT_NE((*model)->weights().rope_freqs, nullptr);
  EXPECT_FLOAT_EQ((*model)->weights().rope_freqs[0], 1.0f);

  // The older key rope.scale_linear, with no type: linear.
  InMemoryModel m_old =
      make(spec256(), [](GgufWriter& w) { w.set("llama.rope.scale_linear", GgufValue::from_f32(2.0f)); });
  auto old = m_old.load();
  ASSERT_TRUE(old.is_ok()) << old.status().message();
  EXPECT_EQ((*old)->hparams().rope.scaling, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ((*old)->hparams().rope.freq_scale, 0.5f);
  EXPECT_FLOAT_EQ((*old)->hparams().rope.yarn_ext_factor, 0.0f);

  auto bad = make(spec256(), [](GgufWriter& w) {
               w.set("llama.rope.scaling.type", GgufValue::from_string("longrope"));
             }).load();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(bad.status().message(),
            "m.gguf: key 'llama.rope.scaling.type' is 'longrope', not supported; supported: none linear yarn");
}

TEST(ModelLoad, LognTemperatureKey) {
  auto plain = make(spec256()).load();
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ((*plain)->hparams().logn_length, 0);
  EXPECT_EQ((*plain)->hparams().query_scale(100000), 1.0f);

  SyntheticModelSpec s = spec256();
  s.logn_length = 16;
  auto model = make(s).load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_EQ(hp.logn_length, 16);
  EXPECT_EQ(hp.query_scale(0), 1.0f);
  EXPECT_EQ(hp.query_scale(15), 1.0f);       // 16 keys: the trained length
  EXPECT_GT(hp.query_scale(16), 1.0f);       // 17 keys
  EXPECT_FLOAT_EQ(hp.query_scale(255), 2.0f);  // ln 256 / ln 16

  auto bad = make(spec256(), [](GgufWriter& w) {
               w.set("leoam.attention.logn_length", GgufValue::from_u32(1));
             }).load();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "m.gguf: key 'leoam.attention.logn_length' is 1; it must be in [2, 1073741824]");
  auto wrong_type = make(spec256(), [](GgufWriter& w) {
                      w.set("leoam.attention.logn_length", GgufValue::from_string("1536"));
                    }).load();
  EXPECT_FALSE(wrong_type.is_ok());
}

TEST(ModelLoad, UnsupportedTensorTypeIsNamed) {
  InMemoryModel m = make(spec256());
  m.set_tensor_type("blk.1.attn_q.weight", 13);  // Q5_K: a smaller tensor than the F32 one, so it fits
  auto r = m.load("model.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(r.status().message(),
            "model.gguf: tensor 'blk.1.attn_q.weight' has type Q5_K, not supported; supported: F32 F16 BF16 Q8_0 "
            "Q4_0 Q4_K Q6_K");
}

TEST(ModelLoad, MissingRequiredKey) {
  InMemoryModel m = make(spec256());
  m.patch("llama.embedding_length", "llama.embedding_lengtX");
  auto r = m.load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "m.gguf: missing required key 'llama.embedding_length'");
}

TEST(ModelLoad, UnknownArchitecture) {
  auto r = make(spec256(), [](GgufWriter& w) {
             w.set("general.architecture", GgufValue::from_string("gpt2"));
           }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(r.status().message(),
            "m.gguf: architecture 'gpt2' is not supported; supported: llama qwen2 qwen3 phi3 gemma2 gemma3 opt");
}

TEST(ModelLoad, InconsistentHeadCounts) {
  auto r = make(spec256(), [](GgufWriter& w) {
             w.set("llama.attention.head_count_kv", GgufValue::from_u32(3));
           }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "m.gguf: attention.head_count 4 is not a multiple of attention.head_count_kv 3");

  r = make(spec256(), [](GgufWriter& w) { w.set("llama.attention.head_count", GgufValue::from_u32(3)); }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("embedding_length 256 is not a multiple of head_count 3"), std::string::npos)
      << r.status().message();

  r = make(spec256(), [](GgufWriter& w) { w.set("llama.block_count", GgufValue::from_u32(0)); }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "m.gguf: key 'llama.block_count' is 0; it must be in [1, 65536]");

  r = make(spec256(), [](GgufWriter& w) { w.set("llama.rope.dimension_count", GgufValue::from_u32(65)); }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("rope.dimension_count' is 65"), std::string::npos) << r.status().message();

  // A key of the wrong type: the GGUF reader's message.
  r = make(spec256(), [](GgufWriter& w) {
        w.set("llama.embedding_length", GgufValue::from_string("256"));
      }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("llama.embedding_length"), std::string::npos) << r.status().message();
}

TEST(ModelLoad, MissingAndMisshapedTensors) {
  InMemoryModel m = make(spec256());
  m.patch("blk.1.ffn_up.weight", "blk.1.ffn_uX.weight");
  auto r = m.load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "m.gguf: missing tensor 'blk.1.ffn_up.weight'");

  r = make(spec256(), [](GgufWriter& w) { w.set("llama.feed_forward_length", GgufValue::from_u32(512)); }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "m.gguf: tensor 'blk.0.ffn_gate.weight' has shape [256, 256], expected [256, 512] from the model's "
            "hyperparameters");

  r = make(spec256(), [](GgufWriter& w) { w.set("llama.vocab_size", GgufValue::from_u32(301)); }).load();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "m.gguf: key 'llama.vocab_size' is 301 but tensor 'token_embd.weight' has 300 rows");
}

TEST(ModelLoad, NormsStoredAsF16AreConverted) {
  auto m = make(spec256(), [](GgufWriter& w) {
    // A second file would be needed to replace a tensor; add an F16 bias instead (optional tensor).
    std::vector<float> bias(256, 0.5f);
    ASSERT_TRUE(w.add_tensor_f32("blk.0.attn_q.bias", GgmlType::kF16, {256}, bias).is_ok());
  });
  auto model = m.load();
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const float* bias = (*model)->weights().layers[0].attn_q_bias;
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias[0], 0.5f);
  EXPECT_EQ(bias[255], 0.5f);
}

// Q4_0 and Q8_0 projection matrices are copied into the row-group layout at load (the rows read
// back through matrix_row are the file's); the embedding stays in the mapping, and
// LEOAM_ROW_GROUPS=0 keeps every matrix there.
TEST(ModelLoad, QuantizedMatricesGoToRowGroups) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(type)));
    SyntheticModelSpec spec = spec256();
    spec.weight_type = type;
    const InMemoryModel m = make(spec);
    for (const bool enabled : {true, false}) {
      if (!enabled) setenv("LEOAM_ROW_GROUPS", "0", 1);
      auto model = m.load();
      unsetenv("LEOAM_ROW_GROUPS");
      ASSERT_TRUE(model.is_ok()) << model.status().message();
      const ModelWeights& w = (*model)->weights();
      const bool grouped = enabled && kernels::has_row_groups(type);
      EXPECT_FALSE(w.token_embd.row_groups);
      const GgufTensorInfo* t = (*model)->gguf().find_tensor("blk.1.ffn_down.weight");
      ASSERT_NE(t, nullptr);
      const kernels::MatrixView& down = w.layers[1].ffn_down;
      EXPECT_EQ(down.row_groups, grouped);
      EXPECT_EQ(down.data == t->data, !grouped);
      std::vector<uint8_t> scratch(down.row_bytes);
      for (int64_t r = 0; r < down.n_rows; ++r) {
        const auto* want = static_cast<const uint8_t*>(t->data) + r * down.row_bytes;
        ASSERT_EQ(std::memcmp(kernels::matrix_row(down, r, scratch.data()), want, down.row_bytes), 0) << "row " << r;
      }
    }
  }
}

TEST(ModelLoad, MissingFileNamesIt) {
  auto r = Model::load("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace leoam
