// Hugging Face checkpoint folders: the logits of the model imported from a folder against the
// independent numpy reference of transformers' layout (tests/reference/hf_ref.py), for each
// architecture, dtype, sharding, tied head and RoPE scaling; the folder and the GGUF that
// `gguf convert` writes give the same logits; --type quantizes on load; and bad folders fail
// with errors that name the file and what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "../temp_dir.h"
#include "gguf/gguf_writer.h"
#include "hf/hf_folder.h"
#include "hf_folder_writer.h"
#include "kv/tiered_kv_cache.h"
#include "leoam/session.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace leoam {
namespace {

using testing_util::HfFolderSpec;
using testing_util::TempDir;

std::vector<int32_t> test_tokens(int n_vocab) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back((3 + i * 89) % n_vocab);
  return tokens;
}

Result<std::unique_ptr<Model>> load_folder(const std::string& dir, HfImportOptions options = {}) {
  LEOAM_ASSIGN_OR_RETURN(GgufFile gguf, open_model_source(dir, options));
  return Model::from_gguf(std::move(gguf));
}

// Every position's logits, with an F32 KV cache (nothing rounded but the arithmetic).
std::vector<float> engine_logits(const Model& model, const std::vector<int32_t>& tokens) {
  ForwardOptions opts;
  opts.n_threads = 2;
  opts.kv_dtype = KvDtype::kF32;
  auto ctx = ForwardContext::create(model, opts);
  EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
  std::vector<float> logits;
  if (ctx.is_ok()) {
    EXPECT_TRUE((*ctx)->eval(tokens, /*all_logits=*/true, logits).is_ok());
  }
  return logits;
}

// The sparse path: leoam at a budget that picks every chunk, decoding the tokens one at a time
// from a tiered store of 2-token chunks whose device holds only the pinned ones (the rest on disk,
// Gemma's sliding layers dropping what falls behind their window), with f32 KV: each step's logits.
std::vector<float> sparse_engine_logits(const Model& model, const std::vector<int32_t>& tokens,
                                        const std::string& kv_dir) {
  const ModelHparams& hp = model.hparams();
  SessionOptions o;
  o.kv.dir = kv_dir;
  o.kv.dtype = KvDtype::kF32;
  o.kv.chunk_tokens = 2;
  o.kv.n_sink = 0;
  o.kv.n_recent = 1;  // the query's own position
  TieredKvCacheOptions shape;
  shape.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, hp.n_ctx_train};
  shape.dtype = o.kv.dtype;
  shape.chunk_tokens = o.kv.chunk_tokens;
  shape.n_sink_tokens = 0;
  shape.n_recent_tokens = o.kv.n_recent;
  o.kv.device_bytes = TieredKvCache::min_device_budget_bytes(shape);
  o.kv.host_bytes = 0;
  o.attention.policy = "leoam";
  o.attention.budget = 1.0;
  o.forward.n_threads = 2;
  Result<std::unique_ptr<Session>> session = Session::create(model, o);
  EXPECT_TRUE(session.is_ok()) << session.status().message();
  std::vector<float> logits, step;
  if (!session.is_ok()) return logits;
  for (const int32_t token : tokens) {
    const Status st = (*session)->context().eval({&token, 1}, false, step);
    EXPECT_TRUE(st.is_ok()) << st.message();
    logits.insert(logits.end(), step.begin(), step.end());
  }
  EXPECT_GT((*session)->stats().tiers[static_cast<int>(Tier::kDisk)].bytes_written, 0u) << "the KV went to disk";
  return logits;
}

struct FolderCase {
  std::string name;
  HfFolderSpec spec;
};
void PrintTo(const FolderCase& c, std::ostream* os) { *os << c.name; }

// Gemma 3 of 7 layers (layer 5 global) with a window, a RoPE base for the sliding layers, and
// linear scaling by 8 of the global layers' base of 1e6.
HfFolderSpec gemma3_spec(int window, double local_theta) {
  HfFolderSpec s;
  s.architecture = "Gemma3ForCausalLM";
  s.n_layer = 7;
  s.tied = true;
  s.sliding_window = window;
  s.rope_theta = 1000000.0;
  s.rope_local_theta = local_theta;
  s.rope_scaling = {{"rope_type", "linear"}, {"factor", 8.0}};
  return s;
}

std::vector<FolderCase> folder_cases() {
  std::vector<FolderCase> c;
  c.push_back({"llama_gqa_f32", HfFolderSpec{}});
  {
    HfFolderSpec s;
    s.architecture = "MistralForCausalLM";
    s.dtype = "BF16";
    s.shards = 3;
    c.push_back({"mistral_bf16_sharded", s});
  }
  {
    HfFolderSpec s;
    s.architecture = "Qwen2ForCausalLM";
    s.dtype = "F16";
    s.bias = true;
    s.tied = true;
    s.rope_theta = 1000000.0;
    c.push_back({"qwen2_f16_bias_tied", s});
  }
  {
    HfFolderSpec s;
    s.architecture = "Qwen3ForCausalLM";
    s.dtype = "BF16";
    s.head_dim = 32;  // q is 4 x 32 = 128 wide, twice the hidden size, as Qwen3's heads are
    s.tied = true;
    s.rope_theta = 1000000.0;
    c.push_back({"qwen3_bf16_head_norms", s});
  }
  {
    HfFolderSpec s;
    s.n_head_kv = 4;
    s.rope_theta = 500000.0;
    s.rope_scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
    c.push_back({"llama31_rope_scaling", s});
  }
  {
    HfFolderSpec s;
    s.rope_scaling = {{"type", "linear"}, {"factor", 4.0}};
    c.push_back({"linear_rope_scaling", s});
  }
  // Phi-3: LongRoPE's long factors once past the original context, which both sides reach (the
  // engine by its context of 256, transformers by the 12 tokens), and its short ones within.
  for (const int original : {8, 512}) {
    HfFolderSpec s;
    s.architecture = "Phi3ForCausalLM";
    s.dtype = "BF16";
    s.original_ctx = original;
    nlohmann::json shorts = nlohmann::json::array(), longs = nlohmann::json::array();
    for (int i = 0; i < 8; ++i) {
      shorts.push_back(1.0 + 0.1 * (i % 3));
      longs.push_back(1.0 + 0.9 * i);
    }
    s.rope_scaling = {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}};
    c.push_back({original < 12 ? "phi3_longrope_long" : "phi3_longrope_short", s});
  }
  // Phi-3 4K and Mistral v0.1: every layer sees only its last sliding_window keys (5 of 12).
  {
    HfFolderSpec s;
    s.architecture = "Phi3ForCausalLM";
    s.sliding_window = 5;
    c.push_back({"phi3_sliding_window", s});
  }
  {
    HfFolderSpec s;
    s.architecture = "MistralForCausalLM";
    s.n_head_kv = 2;
    s.sliding_window = 4;
    c.push_back({"mistral_sliding_window", s});
  }
  // OPT: learned positions from row 2, LayerNorm, ReLU, biases everywhere; MHA.
  {
    HfFolderSpec s;
    s.architecture = "OPTForCausalLM";
    s.n_head_kv = 4;
    s.tied = true;
    s.dtype = "F16";
    c.push_back({"opt_f16_tied", s});
  }
  // Gemma 2: layer 0 slides over 5 of the 12 tokens, layer 1 is global; caps low enough that
  // they bite, and a query scale that is not head_dim's.
  {
    HfFolderSpec s;
    s.architecture = "Gemma2ForCausalLM";
    s.dtype = "BF16";
    s.tied = true;
    s.query_pre_attn_scalar = 24;
    s.sliding_window = 5;
    s.attn_softcap = 2.0;
    s.final_softcap = 3.0;
    c.push_back({"gemma2_bf16_window_caps", s});
  }
  // Gemma 3: five sliding layers (window 4, RoPE base 10000) and a sixth global one (base 1e6,
  // linear scaling by 8), then a sliding one; q/k head norms, no caps.
  {
    HfFolderSpec s = gemma3_spec(4, 10000.0);
    s.head_dim = 32;
    s.query_pre_attn_scalar = 32;
    c.push_back({"gemma3_f32_pattern_head_norms", s});
  }
  return c;
}

class HfFolderVsReference : public ::testing::TestWithParam<FolderCase> {};

TEST_P(HfFolderVsReference, AllPositionsMatch) {
  std::string why;
  if (!testing_util::reference_available(&why)) GTEST_SKIP() << "numpy reference unavailable: " << why;
  const FolderCase& fc = GetParam();
  TempDir dir;
  testing_util::write_hf_folder(fc.spec, dir.path());
  auto model = load_folder(dir.path());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const std::vector<int32_t> tokens = test_tokens(fc.spec.n_vocab);
  const std::vector<float> logits = engine_logits(**model, tokens);
  std::string error;
  const std::vector<float> ref = testing_util::run_reference(dir.path(), tokens, false, &error, false, "hf_ref.py");
  ASSERT_EQ(ref.size(), logits.size()) << error;
  // f32 arithmetic against float64 on the same stored values: about 1e-7 (measured).
  const double err = testing_util::rel_l2(logits, ref);
  std::printf("[ measured ] %-24s rel L2 error %.3g\n", fc.name.c_str(), err);
  EXPECT_LE(err, 2e-6) << fc.name;
  const std::vector<float> sparse = sparse_engine_logits(**model, tokens, dir.file("kv"));
  ASSERT_EQ(sparse.size(), ref.size());
  const double sparse_err = testing_util::rel_l2(sparse, ref);
  std::printf("[ measured ] %-24s sparse path: rel L2 error %.3g\n", fc.name.c_str(), sparse_err);
  EXPECT_LE(sparse_err, 2e-6) << fc.name << ", sparse";

  // The GGUF the folder converts to, against the reference written from GGUF's layout: the
  // conversion's renames, 1 + w norms, dropped position rows and kept fusions, checked apart from
  // the engine.
  GgufWriter writer;
  ASSERT_TRUE(import_hf_folder(dir.path(), {}, writer).is_ok());
  const std::string gguf_path = dir.file("converted.gguf");
  ASSERT_TRUE(writer.write(gguf_path).is_ok());
  const std::vector<float> gguf_ref = testing_util::run_reference(gguf_path, tokens, false, &error);
  ASSERT_EQ(gguf_ref.size(), ref.size()) << error;
  // GGUF keeps the RoPE bases, factors, epsilons and Gemma's 1 + w in f32: up to 1.2e-7 (measured).
  EXPECT_LE(testing_util::rel_l2(gguf_ref, ref), 1e-6) << fc.name;
}

INSTANTIATE_TEST_SUITE_P(Folders, HfFolderVsReference, ::testing::ValuesIn(folder_cases()),
                         [](const auto& info) { return info.param.name; });

// A Mistral or Phi-3 window slides every layer where it is shorter than the context; one as long
// as it (Phi-3 128K's 262144 against 131072) never bites, and no layer slides.
TEST(HfFolderTest, AWindowSlidesEveryLayerOnlyWhereItBites) {
  for (const int window : {5, 256}) {
    HfFolderSpec s;
    s.architecture = "Phi3ForCausalLM";
    s.sliding_window = window;
    TempDir dir;
    testing_util::write_hf_folder(s, dir.path());
    auto model = load_folder(dir.path());
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const ModelHparams& hp = (*model)->hparams();
    EXPECT_EQ(hp.n_ctx_train, 256);
    if (window < hp.n_ctx_train) {
      for (int il = 0; il < hp.n_layer; ++il) EXPECT_EQ(hp.window(il), window) << "layer " << il;
    } else {
      EXPECT_FALSE(hp.has_sliding_layers());
    }
  }
}

TEST(HfFolderTest, TheConvertedGgufGivesTheSameLogits) {
  HfFolderSpec s;
  s.dtype = "BF16";
  s.shards = 2;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  GgufWriter writer;
  ASSERT_TRUE(import_hf_folder(dir.path(), {}, writer).is_ok());
  const std::string gguf_path = dir.file("converted.gguf");
  ASSERT_TRUE(writer.write(gguf_path).is_ok());

  auto from_folder = load_folder(dir.path());
  auto from_file = Model::load(gguf_path);
  ASSERT_TRUE(from_folder.is_ok()) << from_folder.status().message();
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().message();
  EXPECT_EQ((*from_file)->hparams().arch_name, "llama");
  EXPECT_EQ((*from_file)->gguf().find_tensor("blk.1.attn_q.weight")->type(), GgmlType::kBF16);
  const std::vector<int32_t> tokens = test_tokens(s.n_vocab);
  EXPECT_EQ(engine_logits(**from_folder, tokens), engine_logits(**from_file, tokens));
}

// Gemma's keys as the loader reads them: what the folder says, llama.cpp's defaults where a GGUF
// file says nothing, and an error naming the key for a value out of range.
TEST(HfFolderTest, GemmaKeysAndTheirDefaults) {
  HfFolderSpec s = gemma3_spec(5, 20000.0);
  s.query_pre_attn_scalar = 64;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  const auto load = [&](const std::function<void(GgufWriter&)>& edit) -> Result<std::unique_ptr<Model>> {
    GgufWriter w;
    LEOAM_RETURN_IF_ERROR(import_hf_folder(dir.path(), {}, w));
    edit(w);
    LEOAM_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::adopt("m.gguf", std::move(w).to_bytes()));
    return Model::from_gguf(std::move(gguf));
  };
  auto model = load([](GgufWriter&) {});
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelHparams& hp = (*model)->hparams();
  EXPECT_FLOAT_EQ(hp.attn_scale, 0.125f);
  EXPECT_EQ(hp.sliding_window, 5);
  EXPECT_EQ(hp.attn_softcap, 0.0f);
  EXPECT_EQ(hp.final_softcap, 0.0f);
  for (int il = 0; il < 7; ++il) EXPECT_EQ(hp.is_sliding(il), il != 5) << il;
  EXPECT_FLOAT_EQ(hp.rope.freq_base, 1e6f);
  EXPECT_EQ(hp.rope.scaling, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ(hp.rope_swa.freq_base, 20000.0f);
  EXPECT_EQ(hp.rope_swa.scaling, RopeScalingType::kNone);
  EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);
  ASSERT_NE((*model)->weights().layers[0].attn_post_norm, nullptr);
  ASSERT_NE((*model)->weights().layers[0].ffn_post_norm, nullptr);

  // A gemma2 file without the keys: llama.cpp's caps 50 and 30, window 4096, 1 / sqrt(head_dim).
  auto gemma2 = load([](GgufWriter& w) {
    w.set("general.architecture", GgufValue::from_string("gemma2"));
    const std::pair<const char*, uint32_t> keys[] = {
        {"block_count", 7},          {"context_length", 256},        {"embedding_length", 64},
        {"feed_forward_length", 96}, {"attention.head_count", 4},    {"attention.head_count_kv", 2},
        {"vocab_size", 300}};
    for (const auto& [key, value] : keys) w.set(std::string("gemma2.") + key, GgufValue::from_u32(value));
    w.set("gemma2.attention.layer_norm_rms_epsilon", GgufValue::from_f32(1e-5f));
  });
  ASSERT_TRUE(gemma2.is_ok()) << gemma2.status().message();
  const ModelHparams& hp2 = (*gemma2)->hparams();
  EXPECT_EQ(hp2.attn_softcap, 50.0f);
  EXPECT_EQ(hp2.final_softcap, 30.0f);
  EXPECT_EQ(hp2.sliding_window, 4096);
  EXPECT_FLOAT_EQ(hp2.attn_scale, 0.25f);  // head_dim 16
  for (int il = 0; il < 7; ++il) EXPECT_EQ(hp2.is_sliding(il), il % 2 == 0) << il;

  auto bad = load([](GgufWriter& w) { w.set("gemma3.attn_logit_softcapping", GgufValue::from_f32(-1.0f)); });
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "m.gguf: key 'gemma3.attn_logit_softcapping' is -1.000000; it must be positive");
  auto no_window = load([](GgufWriter& w) { w.set("gemma3.attention.sliding_window", GgufValue::from_u32(0)); });
  EXPECT_FALSE(no_window.is_ok());
}

// OPT's learned positions bound its context: a longer one is an error naming both lengths.
TEST(HfFolderTest, OptContextIsBoundByItsPositions) {
  HfFolderSpec s;
  s.architecture = "OPTForCausalLM";
  s.n_head_kv = s.n_head;
  s.tied = true;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  auto model = load_folder(dir.path());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ((*model)->hparams().rope.n_rot, 0);
  EXPECT_EQ((*model)->weights().position_embd.n_rows, s.n_ctx);
  ForwardOptions opts;
  opts.n_ctx = s.n_ctx;
  EXPECT_TRUE(ForwardContext::create(**model, opts).is_ok());
  opts.n_ctx = s.n_ctx + 1;
  auto too_long = ForwardContext::create(**model, opts);
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_EQ(too_long.status().message(),
            "a context of 257 tokens is longer than the 256 positions this model learned embeddings for");
}

TEST(HfFolderTest, TypeQuantizesTheMatricesOnLoad) {
  HfFolderSpec s;
  s.n_embd = 128;  // rows of whole Q4_0 and Q8_0 blocks
  s.n_ff = 128;
  s.n_head = 4;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  auto exact = load_folder(dir.path());
  ASSERT_TRUE(exact.is_ok()) << exact.status().message();
  const std::vector<int32_t> tokens = test_tokens(s.n_vocab);
  const std::vector<float> reference = engine_logits(**exact, tokens);
  for (const auto& [type, bound] : {std::pair{GgmlType::kQ8_0, 0.02}, std::pair{GgmlType::kQ4_0, 0.2},
                                    std::pair{GgmlType::kF16, 0.002}}) {
    auto model = load_folder(dir.path(), {.type = type, .progress = {}});
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    const GgufFile& g = (*model)->gguf();
    EXPECT_EQ(g.find_tensor("blk.0.ffn_down.weight")->type(), type);
    EXPECT_EQ(g.find_tensor("token_embd.weight")->type(), type);
    EXPECT_EQ(g.find_tensor("blk.0.attn_norm.weight")->type(), GgmlType::kF32);
    const double err = testing_util::rel_l2(engine_logits(**model, tokens), reference);
    std::printf("[ measured ] --type %s: rel L2 error %.3g against f32\n", ggml_type_name(static_cast<uint32_t>(type)).c_str(),
                err);
    EXPECT_GT(err, 0.0);
    EXPECT_LE(err, bound);
  }
  // Q4_K's blocks are 256 wide: these 128-wide rows cannot hold them, so the matrices stay F16.
  auto k_quant = load_folder(dir.path(), {.type = GgmlType::kQ4_K, .progress = {}});
  ASSERT_TRUE(k_quant.is_ok()) << k_quant.status().message();
  EXPECT_EQ((*k_quant)->gguf().find_tensor("blk.0.ffn_down.weight")->type(), GgmlType::kF16);
}

TEST(HfFolderTest, AValueBeyondF16IsAnErrorWhenLoadedAsF16) {
  HfFolderSpec s;
  std::vector<testing_util::Entry> tensors = testing_util::hf_tensors(s);
  for (testing_util::Entry& e : tensors) {
    if (e.name == "model.layers.0.mlp.up_proj.weight") {
      const float big = 1e6f;
      std::memcpy(e.bytes.data() + 40, &big, 4);
    }
  }
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path(), tensors);
  EXPECT_TRUE(open_model_source(dir.path()).is_ok());  // as stored (f32)
  const Result<GgufFile> f16 = open_model_source(dir.path(), {.type = GgmlType::kF16, .progress = {}});
  ASSERT_FALSE(f16.is_ok());
  EXPECT_NE(f16.status().message().find("'model.layers.0.mlp.up_proj.weight' holds 1000000"), std::string::npos)
      << f16.status().message();
  EXPECT_NE(f16.status().message().find("--type f32 or bf16"), std::string::npos) << f16.status().message();
  EXPECT_TRUE(open_model_source(dir.path(), {.type = GgmlType::kBF16, .progress = {}}).is_ok());
}

// Qwen-style: the embedding has more rows than the tokenizer has tokens; the ids past the last
// token become unused tokens. A tokenizer larger than vocab_size is an error.
TEST(HfFolderTest, AVocabularyPaddedPastTheTokenizer) {
  HfFolderSpec s;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  testing_util::write_file(dir.file("tokenizer.json"), testing_util::byte_level_tokenizer(s.n_vocab - 20).dump());
  auto gguf = open_model_source(dir.path());
  ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
  auto tok = Tokenizer::from_gguf(*gguf);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->n_vocab(), s.n_vocab);
  EXPECT_EQ((*tok)->token_text(s.n_vocab - 1), "[PAD" + std::to_string(s.n_vocab - 1) + "]");
  EXPECT_EQ((*tok)->token_to_piece(s.n_vocab - 1), "");
  EXPECT_TRUE(Model::from_gguf(std::move(*gguf)).is_ok());

  testing_util::write_file(dir.file("tokenizer.json"), testing_util::byte_level_tokenizer(s.n_vocab + 2).dump());
  const Result<GgufFile> larger = open_model_source(dir.path());
  ASSERT_FALSE(larger.is_ok());
  EXPECT_NE(larger.status().message().find("the tokenizer has 302 tokens, more than config.json's vocab_size 300"),
            std::string::npos)
      << larger.status().message();
}

TEST(HfFolderTest, ProgressCountsEveryTensor) {
  HfFolderSpec s;
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path());
  std::vector<std::pair<int64_t, int64_t>> calls;
  HfImportOptions options;
  options.progress = [&calls](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  ASSERT_TRUE(open_model_source(dir.path(), options).is_ok());
  // 2 layers of 9 tensors, the embeddings, the final norm and the output.
  ASSERT_EQ(calls.size(), 21u);
  EXPECT_EQ(calls.front(), std::make_pair(int64_t{1}, int64_t{21}));
  EXPECT_EQ(calls.back(), std::make_pair(int64_t{21}, int64_t{21}));
}

TEST(HfFolderTest, AGgufFileKeepsItsTypes) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  GgufWriter w;
  ASSERT_TRUE(w.write(path).is_ok());
  const Result<GgufFile> typed = open_model_source(path, {.type = GgmlType::kQ8_0, .progress = {}});
  ASSERT_FALSE(typed.is_ok());
  EXPECT_NE(typed.status().message().find("--type"), std::string::npos) << typed.status().message();
}

TEST(HfFolderTest, ModelSourceNames) {
  TempDir dir;
  EXPECT_EQ(model_source_name(dir.path() + "/"), std::filesystem::path(dir.path()).filename().string());
  EXPECT_EQ(model_source_name("models/m.gguf"), "m");
}

// The error of loading the folder that `mutate` spoils; it must name `want`.
void expect_error(const std::string& want, const std::function<void(HfFolderSpec&, std::vector<testing_util::Entry>&,
                                                                    const std::string&)>& mutate) {
  HfFolderSpec s;
  std::vector<testing_util::Entry> tensors = testing_util::hf_tensors(s);
  TempDir dir;
  testing_util::write_hf_folder(s, dir.path(), tensors);
  mutate(s, tensors, dir.path());
  const Result<GgufFile> g = open_model_source(dir.path());
  ASSERT_FALSE(g.is_ok()) << "expected an error naming " << want;
  EXPECT_NE(g.status().message().find(want), std::string::npos) << g.status().message();
}

TEST(HfFolderTest, BadFoldersFailNamingTheProblem) {
  using testing_util::Entry;
  // Shards and config that disagree: a tensor of another shape.
  expect_error("'model.layers.1.mlp.up_proj.weight' has shape [64, 64], but config.json implies [96, 64]",
               [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
                 for (Entry& e : t) {
                   if (e.name == "model.layers.1.mlp.up_proj.weight") {
                     e.shape = {64, 64};
                     e.bytes.resize(64 * 64 * 4);
                   }
                 }
                 testing_util::write_hf_folder(s, dir, t);
               });
  // A layer the config does not have.
  expect_error("'model.layers.1.self_attn.q_proj.weight', which LlamaForCausalLM needs",
               [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
                 std::erase_if(t, [](const Entry& e) { return e.name == "model.layers.1.self_attn.q_proj.weight"; });
                 testing_util::write_hf_folder(s, dir, t);
               });
  expect_error("'model.layers.2.input_layernorm.weight' is not one that LlamaForCausalLM",
               [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
                 t.push_back({"model.layers.2.input_layernorm.weight", "F32", {64}, std::string(256, '\0')});
                 testing_util::write_hf_folder(s, dir, t);
               });
  // A truncated shard.
  expect_error("model.safetensors", [](HfFolderSpec&, std::vector<Entry>&, const std::string& dir) {
    std::filesystem::resize_file(dir + "/model.safetensors", std::filesystem::file_size(dir + "/model.safetensors") - 4);
  });
  // Missing files.
  expect_error("config.json", [](HfFolderSpec&, std::vector<Entry>&, const std::string& dir) {
    std::filesystem::remove(dir + "/config.json");
  });
  expect_error("model.safetensors", [](HfFolderSpec&, std::vector<Entry>&, const std::string& dir) {
    std::filesystem::remove(dir + "/model.safetensors");
  });
  // An index that names a tensor no shard holds.
  expect_error("'lm_head.weight'", [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
    s.shards = 2;
    testing_util::write_hf_folder(s, dir, t);
    std::erase_if(t, [](const Entry& e) { return e.name == "lm_head.weight"; });
    testing_util::write_file(dir + "/model-00002-of-00002.safetensors",
                             testing_util::safetensors(std::vector<Entry>(t.begin() + (t.size() + 2) / 2, t.end())));
  });
  // config.json fields.
  expect_error("architecture 'GPTNeoXForCausalLM' is not supported; supported: LlamaForCausalLM",
               [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
                 s.architecture = "GPTNeoXForCausalLM";
                 testing_util::write_hf_folder(s, dir, t);
               });
  expect_error("'dynamic', not supported", [](HfFolderSpec& s, std::vector<Entry>& t, const std::string& dir) {
    s.rope_scaling = {{"type", "dynamic"}, {"factor", 2.0}};
    testing_util::write_hf_folder(s, dir, t);
  });
  expect_error("\"hidden_size\" is \"64\", not an integer", [](HfFolderSpec& s, std::vector<Entry>&, const std::string& dir) {
    nlohmann::ordered_json c = testing_util::hf_config(s);
    c["hidden_size"] = "64";
    testing_util::write_file(dir + "/config.json", c.dump());
  });
  expect_error("config.json: not valid JSON", [](HfFolderSpec&, std::vector<Entry>&, const std::string& dir) {
    testing_util::write_file(dir + "/config.json", "{\"architectures\": [");
  });
}

}  // namespace
}  // namespace leoam
