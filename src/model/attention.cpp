#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"

namespace leoam {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Status check_params(const AttentionParams& params) {
  if (params.n_head <= 0 || params.n_head_kv <= 0 || params.n_head % params.n_head_kv != 0 || params.head_dim <= 0) {
    return invalid_argument("attention: bad head counts (n_head " + std::to_string(params.n_head) + ", n_head_kv " +
                            std::to_string(params.n_head_kv) + ", head_dim " + std::to_string(params.head_dim) + ")");
  }
  return Status::ok();
}

// Attends over one view; lse: [n_tokens][n_head] or nullptr. params are checked.
Status attend_view(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                   float* out, float* lse, ThreadPool& pool) {
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
  kernels::flash_attention(runs, p, q, out, lse, pool);
  return Status::ok();
}

// (out, lse) <- attention over the keys of both (out, lse) and (batch_out, batch_lse), row by
// row: rows [n_rows][head_dim], a row of lse -inf having seen no key.
void merge_batch(const float* batch_out, const float* batch_lse, int64_t n_rows, int head_dim, float* out, float* lse,
                 ThreadPool& pool) {
  pool.parallel_for(n_rows, 4 * head_dim, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float lb = batch_lse[r];
      if (lb == kNegInf) continue;
      const float* ob = batch_out + r * head_dim;
      float* o = out + r * head_dim;
      const float la = lse[r];
      if (la == kNegInf) {
        std::copy(ob, ob + head_dim, o);
        lse[r] = lb;
        continue;
      }
      const float m = std::max(la, lb);
      const float ea = std::exp(la - m);
      const float eb = std::exp(lb - m);
      const float ca = ea / (ea + eb);
      const float cb = eb / (ea + eb);
      for (int d = 0; d < head_dim; ++d) o[d] = o[d] * ca + ob[d] * cb;
      lse[r] = m + std::log(ea + eb);
    }
  });
}

// The state of one range-based attention call while the store hands over its batches: the first
// batch goes straight to out, each later one to scratch and is then merged into out.
class BatchedAttention {
 public:
  BatchedAttention(const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens, float* out,
                   ThreadPool& pool)
      : params_(params), q_(q), pos0_(pos0), n_tokens_(n_tokens), out_(out), pool_(pool),
        n_rows_(n_tokens * params.n_head), lse_(static_cast<size_t>(n_rows_)) {}

  Status add(const KvView& view) {
    if (n_batches_++ == 0) return attend_view(view, params_, q_, pos0_, n_tokens_, out_, lse_.data(), pool_);
    batch_out_.resize(static_cast<size_t>(n_rows_) * params_.head_dim);
    batch_lse_.resize(static_cast<size_t>(n_rows_));
    LEOAM_RETURN_IF_ERROR(
        attend_view(view, params_, q_, pos0_, n_tokens_, batch_out_.data(), batch_lse_.data(), pool_));
    merge_batch(batch_out_.data(), batch_lse_.data(), n_rows_, params_.head_dim, out_, lse_.data(), pool_);
    return Status::ok();
  }

  // After the walk: a walk that handed over no batch leaves every query with no key.
  void finish() {
    if (n_batches_ == 0) std::fill(out_, out_ + n_rows_ * params_.head_dim, 0.0f);
  }

 private:
  const AttentionParams& params_;
  const float* q_;
  int64_t pos0_;
  int64_t n_tokens_;
  float* out_;
  ThreadPool& pool_;
  int64_t n_rows_;  // n_tokens * n_head
  int n_batches_ = 0;
  std::vector<float> lse_;        // [n_tokens][n_head], of the batches merged so far
  std::vector<float> batch_out_;  // [n_tokens][n_head][head_dim], from the second batch on
  std::vector<float> batch_lse_;  // [n_tokens][n_head]
};

}  // namespace

Status attention(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                 float* out, ThreadPool& pool) {
  LEOAM_RETURN_IF_ERROR(check_params(params));
  return attend_view(kv, params, q, pos0, n_tokens, out, nullptr, pool);
}

Status attention(KvCache& kv, int layer, std::span<const TokenRange> ranges, const AttentionParams& params,
                 const float* q, int64_t pos0, int64_t n_tokens, float* out, ThreadPool& pool) {
  LEOAM_RETURN_IF_ERROR(check_params(params));
  if (n_tokens <= 0) return Status::ok();
  BatchedAttention batches(params, q, pos0, n_tokens, out, pool);
  LEOAM_RETURN_IF_ERROR(
      kv.for_each_view(layer, ranges, [&batches](const KvView& view) { return batches.add(view); }));
  batches.finish();
  return Status::ok();
}

}  // namespace leoam
