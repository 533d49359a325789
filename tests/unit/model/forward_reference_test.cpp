// The forward pass against the independent numpy reference (tests/reference/llama_ref.py) on small
// synthetic models: every weight type, MHA and GQA, llama and qwen2, RoPE scaling variants, tied
// and separate output. All positions' logits are compared; the reference runs with --kv-f16 to
// round K and V as the engine's F16 cache does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "model_test_util.h"

namespace leoam {
namespace {

using testing_util::rel_l2;

struct RefCase {
  std::string name;
  SyntheticModelSpec spec;
  double max_rel_l2;  // bound on ||engine - reference|| / ||reference|| over all positions
};
// gtest (and so ctest's test list) names a case by this, not by a dump of its bytes.
void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name; }

SyntheticModelSpec base_spec() {
  SyntheticModelSpec s;
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 128;
  s.n_ctx = 64;
  return s;
}

SyntheticModelSpec gqa_spec(GgmlType type) {
  SyntheticModelSpec s = base_spec();
  s.n_vocab = 512;
  s.n_embd = 128;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.weight_type = type;
  return s;
}

// K-quants need rows that are multiples of 256.
SyntheticModelSpec kquant_spec(GgmlType type) {
  SyntheticModelSpec s = gqa_spec(type);
  s.n_embd = 256;
  s.n_ff = 512;
  return s;
}

std::vector<RefCase> cases() {
  std::vector<RefCase> c;
  // Bounds (F16 KV runs; F32 KV runs are all held to 2e-6, see the test body): the engine computes
  // in f32 with f32 activations against a float64 reference, and the quantized types dequantize
  // the same bytes on both sides, so every type is held to 1e-4. Measured with F16 KV: 2e-7 to
  // 3e-6 for all types except Q4_K at 2e-5 (f16 ties tipping; it is 2.6e-7 with F32 KV).
  c.push_back({"f32_llama_mha", base_spec(), 1e-4});
  c.push_back({"f32_llama_gqa", gqa_spec(GgmlType::kF32), 1e-4});
  c.push_back({"f16_gqa", gqa_spec(GgmlType::kF16), 1e-4});
  c.push_back({"bf16_gqa", gqa_spec(GgmlType::kBF16), 1e-4});
  c.push_back({"q8_0_gqa", gqa_spec(GgmlType::kQ8_0), 1e-4});
  c.push_back({"q4_0_gqa", gqa_spec(GgmlType::kQ4_0), 1e-4});
  c.push_back({"q4_k_gqa", kquant_spec(GgmlType::kQ4_K), 1e-4});
  c.push_back({"q6_k_gqa", kquant_spec(GgmlType::kQ6_K), 1e-4});
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.arch = ModelArch::kQwen2;
    s.n_vocab = 400;
    s.qkv_bias = true;
    s.tied_output = true;
    s.rope_freq_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    c.push_back({"qwen2_neox_bias_tied", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kQ8_0);
    s.arch = ModelArch::kQwen2;
    s.qkv_bias = true;
    c.push_back({"qwen2_q8_0_separate_output", s, 1e-4});
  }
  {
    SyntheticModelSpec s = base_spec();
    s.tied_output = true;
    c.push_back({"llama_tied_output", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.arch = ModelArch::kQwen3;
    s.head_dim = 32;  // q 8 x 32 = 256 wide for n_embd 128, as Qwen3's heads are wider than n_embd / n_head
    s.tied_output = true;
    s.rope_freq_base = 1000000.0f;
    c.push_back({"qwen3_head_norms", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kQ8_0);
    s.arch = ModelArch::kQwen3;
    c.push_back({"qwen3_q8_0", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.arch = ModelArch::kPhi3;  // fused q/k/v and gate/up; the context (64) past the original: long factors
    s.rope_n_ctx_orig = 16;
    s.yarn_attn_factor = 1.19f;
    c.push_back({"phi3_longrope_long", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kQ8_0);
    s.arch = ModelArch::kPhi3;  // within the original context: short factors
    s.rope_n_ctx_orig = 128;
    s.yarn_attn_factor = 1.19f;
    c.push_back({"phi3_longrope_short_q8_0", s, 1e-4});
  }
  {
    SyntheticModelSpec s = base_spec();
    s.arch = ModelArch::kPhi3;  // no LongRoPE (Phi-3-mini-4k)
    c.push_back({"phi3_plain", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.rope_scaling = RopeScalingType::kLinear;
    s.rope_scaling_factor = 4.0f;
    c.push_back({"linear_scaling", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.rope_scaling = RopeScalingType::kYarn;
    s.rope_scaling_factor = 4.0f;
    s.rope_n_ctx_orig = 64;
    s.n_ctx = 256;
    c.push_back({"yarn_defaults", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.arch = ModelArch::kQwen2;
    s.rope_scaling = RopeScalingType::kYarn;
    s.rope_scaling_factor = 8.0f;
    s.rope_n_ctx_orig = 32;
    s.yarn_attn_factor = 0.9f;
    s.yarn_beta_fast = 16.0f;
    s.yarn_beta_slow = 2.0f;
    s.n_ctx = 256;
    c.push_back({"yarn_neox_explicit_params", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.freq_factors = true;
    s.rope_freq_base = 500000.0f;
    c.push_back({"llama31_freq_factors", s, 1e-4});
  }
  {
    SyntheticModelSpec s = gqa_spec(GgmlType::kF32);
    s.logn_length = 4;  // log-n temperature: the queries of positions 4..13 scaled, by up to 1.9
    c.push_back({"logn_temperature", s, 1e-4});
  }
  {
    SyntheticModelSpec s = base_spec();
    s.n_rot = 8;  // head_dim 16: half of each head is rotated
    c.push_back({"partial_rotary", s, 1e-4});
  }
  return c;
}

class ForwardVsReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(ForwardVsReference, AllPositionsMatch) {
  std::string why;
  if (!testing_util::reference_available(&why)) GTEST_SKIP() << "numpy reference unavailable: " << why;
  const RefCase& rc = GetParam();
  testing_util::TempFile file("ref_" + rc.name);
  ASSERT_TRUE(write_synthetic_model(rc.spec, file.path()).is_ok());

  // 14 tokens spread over the vocabulary (bytes, fillers, specials).
  std::vector<int32_t> tokens;
  for (int i = 0; i < 14; ++i) tokens.push_back(static_cast<int32_t>((1 + i * 97) % rc.spec.n_vocab));

  auto model = Model::load(file.path());
  ASSERT_TRUE(model.is_ok()) << model.status().message();

  // F16 KV (the default) against the reference rounding K and V to f16 the same way; then F32 KV
  // against the unrounded reference, which isolates the arithmetic: there the engine and the
  // float64 reference agree to ~2e-7 for every type (measured), so the bound is 2e-6. With F16 KV
  // an f32 rounding difference can tip a K/V element to the neighbouring f16 value, which costs up
  // to ~2e-5 (measured on Q4_K), hence the looser per-case bound there.
  // Where kAuto gives this prompt's products the 8-bit GEMM (this CPU's multi-token kernels, or a
  // prompt of a few tokens), prefill rounds the inputs of Q4_0, Q8_0, Q4_K and Q6_K matrices to 8
  // bits (kernels/cpu/gemm.h, kQ8), and the reference does the same.
  const bool q8 = kernels::gemm_auto_uses_q8(rc.spec.weight_type, static_cast<int64_t>(tokens.size()));
  for (const KvDtype kv : {KvDtype::kF16, KvDtype::kF32}) {
    ForwardOptions opts;
    opts.n_threads = 2;
    opts.kv_dtype = kv;
    auto ctx = ForwardContext::create(**model, opts);
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*ctx)->eval(tokens, /*all_logits=*/true, logits).is_ok());

    std::string error;
    const bool f16 = kv == KvDtype::kF16;
    const std::vector<float> ref = testing_util::run_reference(file.path(), tokens, /*kv_f16=*/f16, &error, q8);
    ASSERT_FALSE(ref.empty()) << error;
    ASSERT_EQ(ref.size(), logits.size());
    const double err = rel_l2(logits, ref);
    const double bound = f16 ? rc.max_rel_l2 : 2e-6;
    std::printf("[ measured ] %-28s %s KV%s: rel L2 error %.3g (bound %.0e)\n", rc.name.c_str(), kv_dtype_name(kv),
                q8 ? ", 8-bit activations" : "", err, bound);
    EXPECT_LE(err, bound) << rc.name << " with " << kv_dtype_name(kv) << " KV";
  }
}

INSTANTIATE_TEST_SUITE_P(Synthetic, ForwardVsReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The project's own trained model (models/leoam-byte-4l): a byte vocabulary, head size 64 with
// only 8 rotated dims, GQA, and the large query/key weights of its constructed retrieval heads,
// on a prompt where the induction head has a needle to find.
TEST(ForwardVsReferenceTrained, LeoamByte4l) {
  std::string why;
  if (!testing_util::reference_available(&why)) GTEST_SKIP() << "numpy reference unavailable: " << why;
  const std::string path = std::string(LEOAM_SOURCE_DIR) + "/models/leoam-byte-4l/leoam-byte-4l.gguf";
  auto model = Model::load(path);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const std::string text = "The pass key is 40271. Remember it. In the beginning God created the heaven. The pass key is 402";
  std::vector<int32_t> tokens = {256};  // BOS, then one token per byte
  for (const unsigned char c : text) tokens.push_back(c);

  ForwardOptions opts;
  opts.n_threads = 2;
  auto ctx = ForwardContext::create(**model, opts);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  std::vector<float> logits;
  ASSERT_TRUE((*ctx)->eval(tokens, /*all_logits=*/true, logits).is_ok());
  std::string error;
  const std::vector<float> ref = testing_util::run_reference(path, tokens, /*kv_f16=*/true, &error);
  ASSERT_EQ(ref.size(), logits.size()) << error;
  const double err = rel_l2(logits, ref);
  std::printf("[ measured ] leoam-byte-4l F16 KV: rel L2 error %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  // Both copy the pass key's next digit from 90 bytes back.
  const size_t n_vocab = logits.size() / tokens.size();
  const auto last = logits.end() - static_cast<std::ptrdiff_t>(n_vocab);
  EXPECT_EQ(std::max_element(last, logits.end()) - last, '7');
}

}  // namespace
}  // namespace leoam
