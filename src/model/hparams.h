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
enum class ModelArch : uint8_t { kLlama, kQwen2, kQwen3, kPhi3 };

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
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
  RopeParams rope;
  // leoam.attention.logn_length (0: absent): "log-n" attention past the length L the model was
  // trained at. The query at position p (p + 1 keys visible) is multiplied by ln(p + 1) / ln(L)
  // once p + 1 > L, so that its softmax stays as sharp over more keys (Qwen's use_logn_attn).
  int64_t logn_length = 0;

  // The factor the query at `pos` is multiplied by (after RoPE): 1 unless logn_length applies.
  float query_scale(int64_t pos) const;

  int64_t n_embd_q() const { return static_cast<int64_t>(n_head) * head_dim; }
  int64_t n_embd_kv() const { return static_cast<int64_t>(n_head_kv) * head_dim; }
  int n_gqa() const { return n_head / n_head_kv; }  // query heads per KV head
};

// "llama", "qwen2", "qwen3", "phi3".
const char* model_arch_name(ModelArch arch);
// "llama qwen2 qwen3 phi3": for error messages.
const char* supported_archs_list();

// Reads and validates the hyperparameters of `gguf`. Errors start with the file's path.
Result<ModelHparams> read_hparams(const GgufFile& gguf);

}  // namespace leoam
