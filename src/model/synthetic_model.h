// Synthetic models: random-weight llama/qwen2 GGUF files of any shape, for tests and benchmarks
// (the CLI's `--synthetic llama2-7b:q4_0`). The same spec and seed always give the same file.
// Weights are drawn so activations stay of order 1 through the layers: a matrix with n_in inputs
// has entries of standard deviation 1/sqrt(n_in); embeddings have standard deviation 1; norm
// weights are 1 +- 0.1.
//
// Each file carries a small SentencePiece-style vocabulary (tokenizer.ggml.model = "llama"):
//   0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3..258 the byte tokens <0x00>..<0xFF> (type 6), then
//   n_vocab - 259 filler pieces ("▁the", "▁a", ..., letter pairs; type 1, scores decreasing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/ggml_type.h"
#include "core/status.h"
#include "model/hparams.h"

namespace leoam {

class GgufWriter;

struct SyntheticModelSpec {
  // qwen2, qwen3 and phi3 imply NeoX RoPE; qwen3 adds q/k head norms; phi3 stores q/k/v in one
  // matrix and gate/up in another, and with rope_n_ctx_orig > 0 LongRoPE's two factor sets;
  // gemma3 adds q/k head norms, the norms after attention and the FFN, and its sliding layers.
  ModelArch arch = ModelArch::kLlama;
  std::string name = "synthetic";      // general.name
  int64_t n_vocab = 512;               // >= 259 (specials and byte tokens)
  int64_t n_embd = 128;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 4;
  int head_dim = 0;                    // 0: n_embd / n_head; else written as attention.key_length
  int64_t n_ff = 256;
  int64_t n_ctx = 256;                 // context_length
  GgmlType weight_type = GgmlType::kF32;  // the matrices (embedding and output included); norms are F32
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  int n_rot = 0;                       // 0: the head size
  RopeScalingType rope_scaling = RopeScalingType::kNone;
  float rope_scaling_factor = 1.0f;    // linear and YaRN
  int64_t rope_n_ctx_orig = 0;         // YaRN original_context_length; 0: not written
  float yarn_ext_factor = -1.0f;       // < 0: not written (the loader's default applies)
  float yarn_attn_factor = -1.0f;      // < 0: not written
  float yarn_beta_fast = -1.0f;        // < 0: not written
  float yarn_beta_slow = -1.0f;        // < 0: not written
  bool qkv_bias = false;               // blk.N.attn_{q,k,v}.bias (default true for qwen2 presets)
  bool tied_output = false;            // no output.weight: the output reuses token_embd
  int64_t logn_length = 0;             // leoam.attention.logn_length; 0: not written
  bool freq_factors = false;           // rope_freqs.weight (Llama-3.1 style), factors in [1, 8]
  int64_t sliding_window = 0;          // attention.sliding_window (gemma3, phi3); 0: not written
  uint64_t seed = 42;
};

// Named shapes: "tiny" (n_embd 256, 2 layers, vocab 512), "llama-1b" (Llama-3.2-1B-like dims,
// 32000 vocab), "llama2-7b" (Llama-2-7B dims; also "llama-7b"), "llama3-8b" (Llama-3-8B dims, GQA
// 32/8, its 128256 vocab: the output matrix is 7% of the weights a decode step reads),
// "qwen2-0.5b" (Qwen2-0.5B-like dims, 32000 vocab), "gemma3-1b" (Gemma-3-1B dims, five sliding
// layers of 512 to a global one, 32000 vocab). An optional ":type" suffix sets the weight
// type ("llama2-7b:q4_0"; f32 f16 bf16 q8_0 q4_0 q4_k q6_k, any case). Unknown names give an
// error listing the presets.
Result<SyntheticModelSpec> synthetic_model_preset(std::string_view name_and_type);
// "tiny llama-1b llama2-7b llama3-8b qwen2-0.5b gemma3-1b".
const char* synthetic_model_preset_names();

// Adds the metadata and tensors of `spec` to `writer` (which should be empty). Fails on a spec the
// loader would reject (non-dividing heads, n_vocab < 259, rows not a multiple of the type's block).
Status build_synthetic_model(const SyntheticModelSpec& spec, GgufWriter& writer);

// build_synthetic_model() into a new writer, written to `path`.
Status write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace leoam
