#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/quant.h"

namespace leoam {

namespace {

// 64: keys scored per step; the accumulator is rescaled once per block, not per key.
constexpr int64_t kKeyBlock = 64;

GgmlType row_type(KvDtype dtype) { return dtype == KvDtype::kF32 ? GgmlType::kF32 : GgmlType::kF16; }

}  // namespace

Status attention(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                 float* out, ThreadPool& pool) {
  if (params.n_head <= 0 || params.n_head_kv <= 0 || params.n_head % params.n_head_kv != 0 || params.head_dim <= 0) {
    return invalid_argument("attention: bad head counts (n_head " + std::to_string(params.n_head) + ", n_head_kv " +
                            std::to_string(params.n_head_kv) + ", head_dim " + std::to_string(params.head_dim) + ")");
  }
  if (kv.n_kv_heads() != params.n_head_kv || kv.head_dim() != params.head_dim) {
    return invalid_argument("attention: the KV view has " + std::to_string(kv.n_kv_heads()) + " heads of " +
                            std::to_string(kv.head_dim()) + ", expected " + std::to_string(params.n_head_kv) +
                            " of " + std::to_string(params.head_dim));
  }
  const int hd = params.head_dim;
  const int group = params.n_head / params.n_head_kv;
  const int64_t n_items = n_tokens * params.n_head;
  const auto segments = kv.segments();

  pool.parallel_for(n_items, [&](int64_t begin, int64_t end, int /*thread*/) {
    std::vector<float> acc(hd);
    std::vector<float> v_tmp(hd);
    float scores[kKeyBlock];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / params.n_head;
      const int h = static_cast<int>(item % params.n_head);
      const int kvh = h / group;
      const int64_t q_pos = pos0 + t;
      const float* qh = q + item * hd;
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);

      for (const KvSegment& seg : segments) {
        if (seg.pos0 > q_pos) break;  // segments ascend; the rest is in the future
        const int64_t n_vis = std::min(seg.n_tokens, q_pos - seg.pos0 + 1);
        const GgmlType type = row_type(seg.dtype);
        const size_t head_offset = static_cast<size_t>(kvh) * hd * kv_dtype_size(seg.dtype);
        for (int64_t j0 = 0; j0 < n_vis; j0 += kKeyBlock) {
          const int64_t nb = std::min(kKeyBlock, n_vis - j0);
          float block_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < nb; ++j) {
            const void* k_row = static_cast<const char*>(seg.k_row(j0 + j)) + head_offset;
            scores[j] = params.scale * kernels::dot_row(type, k_row, qh, hd);
            block_max = std::max(block_max, scores[j]);
          }
          if (block_max > m) {
            const float c = std::exp(m - block_max);  // 0 on the first block (m = -inf)
            for (int d = 0; d < hd; ++d) acc[d] *= c;
            l *= c;
            m = block_max;
          }
          for (int64_t j = 0; j < nb; ++j) {
            const float w = std::exp(scores[j] - m);
            l += w;
            const void* v_row = static_cast<const char*>(seg.v_row(j0 + j)) + head_offset;
            const float* vf;
            if (type == GgmlType::kF32) {
              vf = static_cast<const float*>(v_row);
            } else {
              kernels::dequantize_row(type, v_row, v_tmp.data(), hd);
              vf = v_tmp.data();
            }
            for (int d = 0; d < hd; ++d) acc[d] += w * vf[d];
          }
        }
      }
      float* o = out + item * hd;
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv_l;
    }
  });
  return Status::ok();
}

}  // namespace leoam
