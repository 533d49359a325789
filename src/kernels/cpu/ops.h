// Elementwise and row-wise kernels of the forward pass, fused where that saves a pass over
// memory: RMSNorm with its weight (and with the residual add before it), RoPE over all heads of
// a token from precomputed tables, SwiGLU, softmax, and a vectorized exp.
// Each function works on one row (one token) and is single-threaded; callers split rows or
// tokens across threads. The functions in namespace ref are the plain scalar references the fast
// paths are tested against (tests/unit/kernels/ops_test.cpp); the dispatched functions use
// AVX2+FMA when the CPU has it and the reference otherwise. Bounds against the references, as
// tested: exp relative <= 1.5e-7 in [-87.3, 88.3] (0 below, +inf above); rmsnorm, add_rmsnorm
// relative <= 4e-7 per element; rope relative L2 <= 1e-7; swiglu, softmax <= 1e-6; add exact.
#pragma once

#include <cmath>

#include <cstdint>

namespace leoam::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i in [0, n). out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// The residual add fused with the RMSNorm that follows it: x[i] += delta[i], then
// out = rmsnorm(x) * weight. Two passes over x instead of three. out must not alias x or delta.
void add_rmsnorm(float* x, const float* delta, const float* weight, int64_t n, float eps, float* out);

// x[i] += y[i].
void add(float* x, const float* y, int64_t n);

// The heads of one token as RoPE sees them (model/rope.h has the rotation's parameters).
struct RopeShape {
  int n_heads = 0;
  int head_dim = 0;
  int n_rot = 0;      // even, <= head_dim; dimensions [n_rot, head_dim) pass through
  bool neox = false;  // pairs (x[i], x[i + n_rot/2]) (qwen2, NeoX); else (x[2i], x[2i + 1]) (llama)
};

// Rotates the heads of one token in place: x: [n_heads][head_dim]; cos, sin: [n_rot/2], the
// token's tables (model/rope.h fill_tables, which folds in any scaling). Pair i becomes
// (x0 cos_i - x1 sin_i, x0 sin_i + x1 cos_i).
void rope(float* x, const RopeShape& shape, const float* cos, const float* sin);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. out may alias gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// LayerNorm: out[i] = (x[i] - mean) / sqrt(var + eps) * weight[i] + bias[i], mean and var of x[0, n)
// (opt's blocks). One scalar path, statistics in double: it runs once per row and block. out may
// alias x.
void layernorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out);
// x[i] += delta[i], then out = layernorm(x). out must not alias x or delta.
void add_layernorm(float* x, const float* delta, const float* weight, const float* bias, int64_t n, float eps,
                   float* out);

// Gemma 2's soft cap of an attention score or a logit: cap * tanh(s / cap); s itself for cap 0.
template <typename T>
inline T softcap(T s, float cap) {
  return cap > 0.0f ? cap * std::tanh(s / cap) : s;
}

// out[i] = gelu(gate[i]) * up[i], GELU in its tanh form: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
// (Gemma's GeGLU). One scalar path, in float with std::tanh: it runs once per FFN row, beside a
// matrix product of n_embd times as much work. out may alias gate or up.
void geglu(const float* gate, const float* up, int64_t n, float* out);

// In place: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max). n >= 1 and at least one x[i] finite;
// -inf entries become 0.
void softmax(float* x, int64_t n);

// out[i] = exp(x[i]) within the bound above (below FLT_MIN for x < -87.3: 0 on the AVX2 path,
// and 0 for -inf). out may alias x.
void exp(const float* x, int64_t n, float* out);

namespace ref {
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);
void add_rmsnorm(float* x, const float* delta, const float* weight, int64_t n, float eps, float* out);
void add(float* x, const float* y, int64_t n);
void rope(float* x, const RopeShape& shape, const float* cos, const float* sin);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void softmax(float* x, int64_t n);
void exp(const float* x, int64_t n, float* out);
}  // namespace ref

}  // namespace leoam::kernels
