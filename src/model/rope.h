// Rotary position embedding (RoPE) with the variants of ggml's rope_yarn: plain, linear scaling,
// YaRN, and per-dimension frequency factors (Llama-3.1's rope_freqs.weight). For pair index i in
// [0, n_rot/2) at position p, theta = p * freq_base^(-2i/n_rot) / freq_factor[i], scaled by
// freq_scale and, with YaRN (ext_factor != 0), mixed back toward the unscaled angle below ggml's
// correction dims; cos and sin are multiplied by mscale. The pair (x0, x1) becomes
// (x0 cos - x1 sin, x0 sin + x1 cos), where normal pairing (llama) is x0 = x[2i], x1 = x[2i + 1]
// and NeoX pairing (qwen2) x0 = x[i], x1 = x[i + n_rot/2]. Dimensions [n_rot, head_dim) pass
// through unchanged; n_rot 0 rotates nothing (opt: learned positions). The formulas in full:
// docs/model.md#rope
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/ops.h"
#include "model/hparams.h"

namespace leoam {

class Rope {
 public:
  // freq_factors: [n_rot/2] or null (all 1).
  static Result<Rope> create(const RopeParams& params, int head_dim, const float* freq_factors);

  int n_rot() const { return params_.n_rot; }
  int head_dim() const { return head_dim_; }

  // The tables of positions [pos0, pos0 + n_tokens): cos, sin: [n_tokens][n_rot/2].
  void fill_tables(int64_t pos0, int64_t n_tokens, float* cos, float* sin) const;

  // Rotates x: [n_tokens][n_heads][head_dim] in place with tables from fill_tables().
  void apply(float* x, int64_t n_tokens, int n_heads, const float* cos, const float* sin) const;

  // The shape kernels::rope() takes for one token of n_heads heads: rotating token t is
  // kernels::rope(x_t, shape(n_heads), cos + t * n_rot/2, sin + t * n_rot/2).
  kernels::RopeShape shape(int n_heads) const {
    return {.n_heads = n_heads,
            .head_dim = head_dim_,
            .n_rot = params_.n_rot,
            .neox = params_.pairing == RopePairing::kNeox};
  }

 private:
  Rope() = default;
  RopeParams params_;
  int head_dim_ = 0;
  std::vector<double> inv_freq_;  // [n_rot/2] freq_base^(-2i/n_rot) / freq_factor[i]
  std::vector<double> ramp_mix_;  // [n_rot/2] YaRN extrapolation share of pair i (0 without YaRN)
  double mscale_ = 1.0;
};

}  // namespace leoam
