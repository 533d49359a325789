// A Hugging Face checkpoint's config.json, read as the GGUF metadata of the same model: which
// architecture (LlamaForCausalLM and MistralForCausalLM are GGUF's `llama`, Qwen2ForCausalLM its
// `qwen2`, Qwen3ForCausalLM its `qwen3`, Phi3ForCausalLM its `phi3`, Gemma2ForCausalLM and
// Gemma3ForCausalLM its `gemma2` and `gemma3`, OPTForCausalLM leoam's `opt`), the shapes, the
// norm epsilon, RoPE with its scaling, and Gemma's attention scale, caps and sliding window. A
// missing or mistyped field, an unknown architecture or a feature the engine does not compute
// (partial rotary, dynamic scaling) is an error naming the file and the field
// (docs/model.md#hugging-face-folders).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace leoam {

class GgufWriter;

struct HfConfig {
  std::string architecture;  // config.json's "architectures"[0], e.g. "LlamaForCausalLM"
  std::string gguf_arch;     // "llama" or "qwen2"
  // HF's llama q/k rows pair each head's halves for RoPE; GGUF's llama pairs adjacent rows, so
  // the converter permutes them. Qwen2's GGUF keeps HF's order (its RoPE pairs halves).
  bool permute_qk = false;
  bool attention_bias = false;  // q/k/v biases (qwen2)
  bool head_norms = false;      // q_norm and k_norm: each head RMS-normalized before RoPE (qwen3)
  bool fused_projections = false;  // qkv_proj and gate_up_proj (phi3)
  // Gemma: norms after attention and after the FFN, stored as w where RMSNorm multiplies by
  // 1 + w (GGUF keeps 1 + w, as llama.cpp's converter writes it).
  bool gemma = false;
  double query_pre_attn_scalar = 0;  // gemma: q.k is scaled by its inverse square root
  double attn_softcap = 0;           // gemma2's attn_logit_softcapping; 0: none
  double final_softcap = 0;          // gemma2's final_logit_softcapping; 0: none
  // The keys a sliding layer's query sees, itself included: gemma's sliding layers; every layer
  // of Mistral and Phi-3 where config.json gives one (0: none).
  int64_t sliding_window = 0;
  double rope_local_theta = 0;       // gemma3: rope_local_base_freq, the sliding layers' base
  bool tie_word_embeddings = false;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int64_t n_ctx = 0;  // max_position_embeddings
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  std::string rope_scaling = "none";  // none, linear, yarn, llama3 or longrope
  double rope_factor = 1.0;
  int64_t rope_original_ctx = 0;  // yarn, llama3 and longrope: original_max_position_embeddings
  // llama3 scaling: one divisor per rotated pair, GGUF's rope_freqs.weight.
  std::vector<float> rope_freq_factors;
  // longrope (Phi-3): GGUF's rope_factors_short.weight and rope_factors_long.weight, and the
  // factor on cos and sin.
  std::vector<float> rope_short_factors;
  std::vector<float> rope_long_factors;
  double rope_attn_factor = 1.0;

  // OPT: learned positions (embed_positions, whose first 2 rows no position uses), LayerNorm with
  // biases, biases on every projection, a ReLU FFN without a gate.
  bool opt() const { return gguf_arch == "opt"; }
};

// Reads and checks `path` (a config.json).
Result<HfConfig> read_hf_config(const std::string& path);

// Adds general.architecture and the "{arch}.*" keys the model loader reads (model/hparams.h).
void add_hf_config_metadata(const HfConfig& config, const std::string& name, GgufWriter& out);

}  // namespace leoam
