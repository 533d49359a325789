#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace leoam {

Result<Rope> Rope::create(const RopeParams& params, int head_dim, const float* freq_factors) {
  if (params.n_rot < 0 || params.n_rot % 2 != 0 || params.n_rot > head_dim) {
    return invalid_argument("RoPE: n_rot " + std::to_string(params.n_rot) + " must be even and in [0, head_dim " +
                            std::to_string(head_dim) + "]");
  }
  if (!(params.freq_scale > 0.0f)) return invalid_argument("RoPE: freq_scale must be positive");
  Rope rope;
  rope.params_ = params;
  rope.head_dim_ = head_dim;
  const int n_pairs = params.n_rot / 2;
  rope.inv_freq_.resize(n_pairs);
  rope.ramp_mix_.assign(n_pairs, 0.0);
  for (int i = 0; i < n_pairs; ++i) {
    double f = std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.n_rot);
    if (freq_factors != nullptr) {
      if (!(freq_factors[i] > 0.0f)) {
        return invalid_argument("RoPE: frequency factor " + std::to_string(i) + " is " +
                                std::to_string(freq_factors[i]) + "; factors must be positive");
      }
      f /= freq_factors[i];
    }
    rope.inv_freq_[i] = f;
  }
  rope.mscale_ = params.yarn_attn_factor;
  if (params.yarn_ext_factor != 0.0f) {
    const double base = params.freq_base;
    const auto corr_dim = [&](double beta) {
      return params.n_rot * std::log(static_cast<double>(params.n_ctx_orig) / (beta * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(base));
    };
    const double low = std::max(0.0, std::floor(corr_dim(params.yarn_beta_fast)));
    const double high = std::min(params.n_rot - 1.0, std::ceil(corr_dim(params.yarn_beta_slow)));
    for (int i = 0; i < n_pairs; ++i) {
      const double y = (i - low) / std::max(0.001, high - low);
      rope.ramp_mix_[i] = (1.0 - std::clamp(y, 0.0, 1.0)) * params.yarn_ext_factor;
    }
    rope.mscale_ *= 1.0 + 0.1 * std::log(1.0 / params.freq_scale);
  }
  return rope;
}

void Rope::fill_tables(int64_t pos0, int64_t n_tokens, float* cos, float* sin) const {
  const int n_pairs = params_.n_rot / 2;
  const double freq_scale = params_.freq_scale;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double p = static_cast<double>(pos0 + t);
    for (int i = 0; i < n_pairs; ++i) {
      const double theta_extrap = p * inv_freq_[i];
      const double theta_interp = freq_scale * theta_extrap;
      const double mix = ramp_mix_[i];
      const double theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
      cos[t * n_pairs + i] = static_cast<float>(std::cos(theta) * mscale_);
      sin[t * n_pairs + i] = static_cast<float>(std::sin(theta) * mscale_);
    }
  }
}

void Rope::apply(float* x, int64_t n_tokens, int n_heads, const float* cos, const float* sin) const {
  const int n_pairs = params_.n_rot / 2;
  const kernels::RopeShape token_shape = shape(n_heads);
  for (int64_t t = 0; t < n_tokens; ++t) {
    kernels::rope(x + t * n_heads * static_cast<int64_t>(head_dim_), token_shape, cos + t * n_pairs, sin + t * n_pairs);
  }
}

}  // namespace leoam
