// The norm a block applies to one row of n_embd: RMSNorm with its weight, or LayerNorm with its
// weight and bias (ModelHparams::norm; opt). The forward pass's paths and the pipeline's
// speculation share it.
#pragma once

#include "kernels/cpu/ops.h"
#include "model/hparams.h"

namespace leoam {

// out = norm(x) (bias: null for RMSNorm). out may alias x.
inline void block_norm(const ModelHparams& hp, const float* x, const float* weight, const float* bias, float* out) {
  if (hp.norm == NormKind::kLayer) {
    kernels::layernorm(x, weight, bias, hp.n_embd, hp.rms_eps, out);
  } else {
    kernels::rmsnorm(x, weight, hp.n_embd, hp.rms_eps, out);
  }
}

// x += delta, then out = norm(x). out must not alias x or delta.
inline void add_block_norm(const ModelHparams& hp, float* x, const float* delta, const float* weight,
                           const float* bias, float* out) {
  if (hp.norm == NormKind::kLayer) {
    kernels::add_layernorm(x, delta, weight, bias, hp.n_embd, hp.rms_eps, out);
  } else {
    kernels::add_rmsnorm(x, delta, weight, hp.n_embd, hp.rms_eps, out);
  }
}

}  // namespace leoam
