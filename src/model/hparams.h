// Model hyperparameters, read from a GGUF file's metadata only (keys "{arch}.*", as written by
// llama.cpp's converters). Nothing is hard-coded per model: a missing required key, an unknown
// architecture or inconsistent values give an error naming the file and the key.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace leoam {

class GgufFile;

// The GGUF key of ModelHparams::logn_length: leoam's own, outside any architecture's namespace.
inline constexpr const char* kLognLengthKey = "leoam.attention.logn_length";

// qwen3: qwen2's RoPE, no biases, and each head's q and k RMS-normalized before RoPE.
// phi3: NeoX RoPE, q/k/v in one matrix and gate/up in another, LongRoPE's two factor sets.
// gemma2: NeoX RoPE, the embedding scaled by sqrt(n_embd), norms after attention and after the
// FFN too, a GELU FFN, soft-capped scores and logits, sliding-window layers every other layer.
// gemma3: gemma2 without the caps, with qwen3's head norms, five sliding layers to a global one,
// and a RoPE base of their own for the sliding layers.
// opt: learned positions instead of RoPE, LayerNorm with biases, a ReLU FFN without a gate, and
// biases on every projection.
enum class ModelArch : uint8_t { kLlama, kQwen2, kQwen3, kPhi3, kGemma2, kGemma3, kOpt };
inline bool is_gemma(ModelArch arch) { return arch == ModelArch::kGemma2 || arch == ModelArch::kGemma3; }

// The FFN: silu(gate) * up (SwiGLU), gelu(gate) * up with GELU's tanh form (GeGLU), or relu(up)
// with no gate (opt).
enum class FfnActivation : uint8_t { kSilu, kGeluTanh, kRelu };

// The blocks' norms: RMSNorm, or LayerNorm (mean removed, then a weight and a bias: opt).
enum class NormKind : uint8_t { kRms, kLayer };

// How RoPE pairs the dimensions of a head it rotates.
enum class RopePairing : uint8_t {
  kNormal,  // adjacent pairs (2i, 2i+1): llama
  kNeox,    // halves (i, i + n_rot/2): qwen2 (GPT-NeoX style)
};

enum class RopeScalingType : uint8_t { kNone, kLinear, kYarn };

struct RopeParams {
  RopePairing pairing = RopePairing::kNormal;
  int n_rot = 0;               // leading dimensions of each head that are rotated (even)
  float freq_base = 10000.0f;  // theta_i = pos * freq_base^(-2i/n_rot)
  RopeScalingType scaling = RopeScalingType::kNone;
  float freq_scale = 1.0f;     // 1 / rope.scaling.factor (linear and YaRN); 1 when none
  int64_t n_ctx_orig = 0;      // YaRN: the context the model was trained at before scaling
  float yarn_ext_factor = 0.0f;   // YaRN extrapolation mix; 1 for YaRN unless the file says otherwise, 0 otherwise
  float yarn_attn_factor = 1.0f;  // multiplies cos and sin (the attention magnitude)
  float yarn_beta_fast = 32.0f;   // YaRN correction range (in rotations); 32: ggml's default
  float yarn_beta_slow = 1.0f;    // 1: ggml's default
};

struct ModelHparams {
  ModelArch arch = ModelArch::kLlama;
  std::string arch_name;     // "llama"
  int64_t n_ctx_train = 0;   // {arch}.context_length
  int64_t n_embd = 0;        // {arch}.embedding_length
  int n_layer = 0;           // {arch}.block_count
  int64_t n_ff = 0;          // {arch}.feed_forward_length
  int n_head = 0;            // {arch}.attention.head_count
  int n_head_kv = 0;         // {arch}.attention.head_count_kv (default n_head)
  int head_dim = 0;          // {arch}.attention.key_length (default n_embd / n_head)
  int64_t n_vocab = 0;       // {arch}.vocab_size if present; the loader then sets it from the rows of
                             // token_embd.weight (and checks that they agree)
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon (opt: layer_norm_epsilon)
  NormKind norm = NormKind::kRms;
  RopeParams rope;
  // leoam.attention.logn_length (0: absent): "log-n" attention past the length L the model was
  // trained at. The query at position p (p + 1 keys visible) is multiplied by ln(p + 1) / ln(L)
  // once p + 1 > L, so that its softmax stays as sharp over more keys (Qwen's use_logn_attn).
  int64_t logn_length = 0;

  // The factor on q.k: {arch}.attention.scale, else 1 / sqrt(head_dim) (Gemma's 27B shapes:
  // 1 / sqrt(n_embd / n_head), as llama.cpp picks it by their layer count).
  float attn_scale = 0.0f;
  // > 0: scores s become attn_softcap * tanh(s / attn_softcap), and logits likewise with
  // final_softcap ({arch}.attn_logit_softcapping, {arch}.final_logit_softcapping; gemma2).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  float embd_scale = 1.0f;  // the token embedding's factor (gemma: sqrt(n_embd))
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // {arch}.attention.sliding_window: the keys a sliding layer's query sees, itself included; 0
  // when no layer slides. Which layers slide: every layer but each swa_period-th ((il + 1) %
  // swa_period == 0 is global): 2 in gemma2, 6 in gemma3; every layer with swa_period 0 (llama
  // and phi3 files that give a window shorter than their context: Mistral v0.1, Phi-3 4K).
  int64_t sliding_window = 0;
  int swa_period = 0;
  // The sliding layers' RoPE: rope but for the base ({arch}.rope.freq_base_swa, gemma3's 10000
  // by default) and without scaling; equal to rope where the file says nothing (gemma2).
  RopeParams rope_swa;

  // The factor the query at `pos` is multiplied by (after RoPE): 1 unless logn_length applies.
  float query_scale(int64_t pos) const;
  bool is_sliding(int layer) const {
    return sliding_window > 0 && (swa_period == 0 || (layer + 1) % swa_period != 0);
  }
  bool has_sliding_layers() const { return sliding_window > 0; }
  // The attention window of `layer`: sliding_window for a sliding layer, 0 (all) otherwise.
  int64_t window(int layer) const { return is_sliding(layer) ? sliding_window : 0; }

  int64_t n_embd_q() const { return static_cast<int64_t>(n_head) * head_dim; }
  int64_t n_embd_kv() const { return static_cast<int64_t>(n_head_kv) * head_dim; }
  int n_gqa() const { return n_head / n_head_kv; }  // query heads per KV head
};

// "llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "opt".
const char* model_arch_name(ModelArch arch);
// "llama qwen2 qwen3 phi3 gemma2 gemma3 opt": for error messages.
const char* supported_archs_list();

// Reads and validates the hyperparameters of `gguf`. Errors start with the file's path.
Result<ModelHparams> read_hparams(const GgufFile& gguf);

}  // namespace leoam
