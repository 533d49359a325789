#include "model/attention.h"

#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"

namespace leoam {

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
  std::vector<kernels::KvRun> runs;
  runs.reserve(kv.segments().size());
  for (const KvSegment& seg : kv.segments()) {
    runs.push_back({seg.pos0, seg.n_tokens, seg.k, seg.v, seg.dtype == KvDtype::kF16, seg.row_stride_bytes});
  }
  const kernels::FlashAttentionParams p{params.n_head, params.n_head_kv, params.head_dim, params.scale, pos0,
                                        n_tokens};
  kernels::flash_attention(runs, p, q, out, pool);
  return Status::ok();
}

}  // namespace leoam
