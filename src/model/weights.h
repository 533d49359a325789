// The weight tensors of a model of the llama family (llama, qwen2/3, phi3, gemma2/3, opt), as views
// into the GGUF file's read-only mapping.
// Matrices keep their stored type (the matmul kernels read them as they are); the Q4_0 and Q8_0
// projection matrices are copied once at load into the row-group layout (kernels/cpu/
// row_groups.h, storage owned here; the mapped pages are released), whose decode dots run faster;
// LEOAM_ROW_GROUPS=0 in the environment keeps them as stored. 1-D vectors (norms, biases, RoPE
// frequency factors) are handed out as f32: F32 ones point into the mapping, others are converted
// once at load into storage owned here. GGUF tensor names and shapes: docs/model.md#weights
#pragma once

#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "core/status.h"
#include "kernels/cpu/matmul.h"
#include "model/hparams.h"

namespace leoam {

class GgufFile;

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  const float* attn_norm_b = nullptr;  // [n_embd]: the LayerNorm's bias (opt); else null
  kernels::MatrixView attn_q;        // [n_head*head_dim rows][n_embd cols]
  kernels::MatrixView attn_k;        // [n_head_kv*head_dim][n_embd]
  kernels::MatrixView attn_v;        // [n_head_kv*head_dim][n_embd]
  const float* attn_q_bias = nullptr;  // [n_head*head_dim] or null
  const float* attn_k_bias = nullptr;  // [n_head_kv*head_dim] or null
  const float* attn_q_norm = nullptr;  // [head_dim]: qwen3's, gemma3's RMSNorm of each q head before RoPE; else null
  const float* attn_k_norm = nullptr;  // [head_dim]: the same for k
  const float* attn_v_bias = nullptr;  // [n_head_kv*head_dim] or null
  kernels::MatrixView attn_output;   // [n_embd][n_head*head_dim]
  const float* attn_output_bias = nullptr;  // [n_embd] or null (opt)
  const float* attn_post_norm = nullptr;  // [n_embd]: gemma's RMSNorm of the attention's output; else null
  const float* ffn_norm = nullptr;   // [n_embd]
  const float* ffn_norm_b = nullptr;  // [n_embd]: the LayerNorm's bias (opt); else null
  kernels::MatrixView ffn_gate;      // [n_ff][n_embd]; empty (no data) in an FFN without a gate (opt)
  kernels::MatrixView ffn_up;        // [n_ff][n_embd]
  const float* ffn_up_bias = nullptr;  // [n_ff] or null (opt)
  kernels::MatrixView ffn_down;      // [n_embd][n_ff]
  const float* ffn_down_bias = nullptr;  // [n_embd] or null (opt)
  const float* ffn_post_norm = nullptr;  // [n_embd]: gemma's RMSNorm of the FFN's output; else null
};

struct ModelWeights {
  kernels::MatrixView token_embd;    // [n_vocab][n_embd]
  std::vector<LayerWeights> layers;  // [n_layer]
  const float* output_norm = nullptr;  // [n_embd]
  const float* output_norm_b = nullptr;  // [n_embd]: the LayerNorm's bias (opt); else null
  // [n_ctx_train][n_embd]: the learned position embeddings (opt; row p is position p); else empty.
  kernels::MatrixView position_embd;
  kernels::MatrixView output;        // [n_vocab][n_embd]; == token_embd when tied
  bool output_tied = false;
  const float* rope_freqs = nullptr;   // [n_rot/2] or null
  // phi3's LongRoPE: [n_rot/2] each, or null; the long set serves contexts past the original one.
  const float* rope_factors_long = nullptr;
  const float* rope_factors_short = nullptr;

  // The RoPE frequency factors a context of n_ctx positions runs with: rope_freqs, or LongRoPE's
  // long set past hparams' n_ctx_orig and its short set within (as llama.cpp picks them), or null.
  const float* rope_factors(const ModelHparams& hp, int64_t n_ctx) const;

  // f32 copies of the 1-D tensors not stored as F32; the pointers above may point into them.
  std::vector<std::unique_ptr<float[]>> converted;
  // The row-group copies of the matrices above that have one, in one block on huge pages.
  std::unique_ptr<uint8_t, HugeAwareFree> grouped;
};

// Finds, checks and maps every tensor of the model described by `hp`. Sets hp.n_vocab from
// token_embd.weight (failing when the metadata's vocab_size disagrees). Errors name the file and
// the tensor: "m.gguf: tensor 'blk.3.attn_q.weight' has type Q5_K, not supported; supported: ...".
Result<ModelWeights> map_weights(const GgufFile& gguf, ModelHparams& hp);

}  // namespace leoam
