// The scalar paths of flash attention: the tile kernels (attention_tiles.h) that any CPU and any
// head_dim can run, which the driver falls back to, and ref::attention, the plain attention in
// double that tests compare every path to.
#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/attention_tiles.h"

namespace leoam::kernels {

namespace detail {
namespace {

void load_f16_scalar(const void* src, size_t stride_bytes, int64_t n, int n_heads, int hd, float* dst,
                     size_t head_stride) {
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = reinterpret_cast<const uint16_t*>(static_cast<const char*>(src) + j * stride_bytes);
    for (int h = 0; h < n_heads; ++h) {
      for (int d = 0; d < hd; ++d) dst[h * head_stride + j * hd + d] = f16_to_f32(row[h * hd + d]);
    }
  }
}

inline float to_f32(float x) { return x; }
inline float to_f32(uint16_t x) { return f16_to_f32(x); }

template <typename T>
void scores_scalar(const float* q, int nq, const T* const* k, int nk, int hd, float* s, int ld) {
  for (int i = 0; i < nq; ++i) {
    for (int j = 0; j < nk; ++j) {
      float sum = 0.0f;
      for (int d = 0; d < hd; ++d) sum += q[i * hd + d] * to_f32(k[j][d]);
      s[i * ld + j] = sum;
    }
  }
}

void fold_scores_scalar(float* s, int n, float& m, float& l, float* acc, int hd) {
  float m_new = m;
  for (int j = 0; j < n; ++j) m_new = std::max(m_new, s[j]);
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - m_new));
  if (m_new != m) {
    const float c = std::exp(m - m_new);  // 0 while m is -inf
    l *= c;
    for (int d = 0; d < hd; ++d) acc[d] *= c;
    m = m_new;
  }
  l += sum;
}

template <typename T>
void accumulate_scalar(const float* p, int ld, int nq, const T* const* v, int nk, int hd, float* acc) {
  for (int i = 0; i < nq; ++i) {
    for (int j = 0; j < nk; ++j) {
      const float w = p[i * ld + j];
      for (int d = 0; d < hd; ++d) acc[i * hd + d] += w * to_f32(v[j][d]);
    }
  }
}

constexpr TileKernels kScalarKernels{load_f16_scalar, scores_scalar<float>, scores_scalar<uint16_t>, fold_scores_scalar,
                                     accumulate_scalar<float>, accumulate_scalar<uint16_t>};

}  // namespace

const TileKernels* attention_tiles_scalar() { return &kScalarKernels; }

}  // namespace detail

namespace ref {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

void attention(std::span<const KvRun> runs, const FlashAttentionParams& p, const float* q, float* out, float* lse) {
  const int hd = p.head_dim;
  const int group = p.n_head / p.n_head_kv;
  std::vector<double> s;
  std::vector<double> acc(hd);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t q_pos = p.pos0 + t;
    const auto seen = [&](int64_t key_pos) { return p.window <= 0 || key_pos > q_pos - p.window; };
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q + (t * p.n_head + h) * hd;
      const size_t head_elems = static_cast<size_t>(h / group) * hd;
      auto element = [&](const KvRun& run, const void* base, int64_t j, int d) -> double {
        const char* row = static_cast<const char*>(base) + j * run.row_stride_bytes;
        if (run.f16) return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[head_elems + d]);
        return reinterpret_cast<const float*>(row)[head_elems + d];
      };
      s.clear();
      double mx = -HUGE_VAL;
      for (const KvRun& run : runs) {
        for (int64_t j = 0; j < run.n_tokens && run.pos0 + j <= q_pos; ++j) {
          if (!seen(run.pos0 + j)) continue;
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * element(run, run.k, j, d);
          double score = dot * p.scale;
          if (p.softcap > 0.0f) score = p.softcap * std::tanh(score / p.softcap);
          s.push_back(score);
          mx = std::max(mx, s.back());
        }
      }
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      size_t i = 0;
      for (const KvRun& run : runs) {
        for (int64_t j = 0; j < run.n_tokens && run.pos0 + j <= q_pos; ++j) {
          if (!seen(run.pos0 + j)) continue;
          for (int d = 0; d < hd; ++d) acc[d] += s[i] * element(run, run.v, j, d);
          ++i;
        }
      }
      float* o = out + (t * p.n_head + h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = s.empty() ? 0.0f : static_cast<float>(acc[d] / sum);
      if (lse != nullptr) {
        lse[t * p.n_head + h] = s.empty() ? kNegInf : static_cast<float>(mx + std::log(sum));
      }
    }
  }
}
}  // namespace ref

}  // namespace leoam::kernels
