#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/huge_pages.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

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

// The kernel's runs for a view. A run of the flash kernel never shares a key tile with another,
// so a store of small chunks (leoam's 8 tokens) would cut a prefill's key tiles to 8 keys, and
// each tile folds into the running softmax: at 8 keys that fold costs as much as the scores, and
// a prefill over chunks of 8 runs far slower than over chunks of 64 (docs/cpu.md#attention). For a
// batch of at least kPackMinQueries queries, each chain of two or more
// position-adjacent segments shorter than kPackBelowRows is copied into one run (K rows, then V
// rows, contiguous), chains in order until kMaxPackBytes are packed (a view's device chunks are
// not bounded by the store's gather batch, so neither would the copy be); the copy is a small
// part of the work it saves. Decode (one query) walks its keys in blocks of 8 anyway and takes
// the segments as they are.
constexpr int64_t kPackMinQueries = 16;
constexpr int64_t kPackBelowRows = 64;
constexpr size_t kMaxPackBytes = size_t{64} << 20;

std::vector<kernels::KvRun> kv_runs(const KvView& kv, int64_t n_queries) {
  const std::span<const KvSegment> segs = kv.segments();
  const size_t row_elems = static_cast<size_t>(kv.n_kv_heads()) * kv.head_dim();
  // Segment i continues the chain of segment i - 1.
  const auto continues = [&](size_t i) {
    return i > 0 && segs[i - 1].pos0 + segs[i - 1].n_tokens == segs[i].pos0 && segs[i - 1].dtype == segs[i].dtype &&
           segs[i - 1].n_tokens < kPackBelowRows && segs[i].n_tokens < kPackBelowRows;
  };
  // The chains to pack, [begin, end) of segments, and their bytes, so that the buffer is sized
  // once and the runs' pointers stay valid.
  std::vector<std::pair<size_t, size_t>> chains;
  size_t n_pack = 0;
  for (size_t i = 0; n_queries >= kPackMinQueries && i < segs.size();) {
    size_t end = i + 1;
    while (end < segs.size() && continues(end)) ++end;
    size_t bytes = 0;
    for (size_t j = i; j < end; ++j) {
      bytes += 2 * static_cast<size_t>(segs[j].n_tokens) * row_elems * kv_dtype_size(segs[j].dtype);
    }
    if (end - i >= 2 && n_pack + bytes <= kMaxPackBytes) {
      chains.emplace_back(i, end);
      n_pack += bytes;
    }
    i = end;
  }
  // Reused across calls (a prefill's batches): sized once to the largest, no fresh pages after.
  thread_local std::vector<uint8_t, HugePageAllocator<uint8_t>> packed;
  if (packed.size() < n_pack) packed.resize(n_pack);
  std::vector<kernels::KvRun> runs;
  runs.reserve(segs.size());
  uint8_t* at = packed.data();
  auto chain = chains.begin();
  for (size_t i = 0; i < segs.size();) {
    const KvSegment& first = segs[i];
    if (chain == chains.end() || chain->first != i) {
      runs.push_back({first.pos0, first.n_tokens, first.k, first.v, first.dtype == KvDtype::kF16,
                      first.row_stride_bytes});
      ++i;
      continue;
    }
    const size_t end = chain->second;
    ++chain;
    const size_t row_bytes = row_elems * kv_dtype_size(first.dtype);
    int64_t n = 0;
    for (size_t j = i; j < end; ++j) n += segs[j].n_tokens;
    uint8_t* k = at;
    uint8_t* v = at + static_cast<size_t>(n) * row_bytes;
    for (size_t j = i; j < end; ++j) {
      for (int64_t t = 0; t < segs[j].n_tokens; ++t) {
        std::memcpy(k, segs[j].k_row(t), row_bytes);
        std::memcpy(v, segs[j].v_row(t), row_bytes);
        k += row_bytes;
        v += row_bytes;
      }
    }
    runs.push_back({first.pos0, n, at, at + static_cast<size_t>(n) * row_bytes, first.dtype == KvDtype::kF16,
                    row_bytes});
    at += 2 * static_cast<size_t>(n) * row_bytes;
    i = end;
  }
  return runs;
}

// Attends over one view; lse: [n_tokens][n_head] or nullptr. params are checked.
Status attend_view(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                   float* out, float* lse, ThreadPool& pool) {
  if (kv.n_kv_heads() != params.n_head_kv || kv.head_dim() != params.head_dim) {
    return invalid_argument("attention: the KV view has " + std::to_string(kv.n_kv_heads()) + " heads of " +
                            std::to_string(kv.head_dim()) + ", expected " + std::to_string(params.n_head_kv) +
                            " of " + std::to_string(params.head_dim));
  }
  const std::vector<kernels::KvRun> runs = kv_runs(kv, n_tokens);
  kernels::FlashAttentionParams p{params.n_head, params.n_head_kv, params.head_dim, params.scale, pos0, n_tokens};
  p.softcap = params.softcap;
  p.window = params.window;
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

// logits[h * n_keys + key_index[s] + t] = scale * q_h . k_t (softcapped) for the keys t of every segment s of
// `kv`, one query (q: [n_head][head_dim]); key_index[s] is the index among all the keys of the
// ranges of segment s's first key. The keys are split across the pool; each dot is the row
// kernel's (kernels::dot_row: f16 keys widened in registers).
void key_logits(const KvView& kv, const AttentionParams& params, const float* q, int64_t n_keys,
                std::span<const int64_t> key_index, float* logits, ThreadPool& pool) {
  const int group = params.n_head / params.n_head_kv;
  const std::span<const KvSegment> segments = kv.segments();
  std::vector<int64_t> starts;  // the view's key index of each segment's first key
  int64_t n_view = 0;
  for (const KvSegment& seg : segments) {
    starts.push_back(n_view);
    n_view += seg.n_tokens;
  }
  const int64_t cost_per_key = static_cast<int64_t>(params.n_head) * params.head_dim;
  pool.parallel_for(n_view, cost_per_key, [&](int64_t begin, int64_t end, int) {
    auto s = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1);
    for (int64_t i = begin; i < end; ++i) {
      while (i >= starts[s] + segments[s].n_tokens) ++s;
      const KvSegment& seg = segments[s];
      const GgmlType type = seg.dtype == KvDtype::kF16 ? GgmlType::kF16 : GgmlType::kF32;
      const auto* row = static_cast<const uint8_t*>(seg.k_row(i - starts[s]));
      const size_t head_bytes = static_cast<size_t>(params.head_dim) * kv_dtype_size(seg.dtype);
      const int64_t key = key_index[s] + (i - starts[s]);
      for (int g = 0; g < params.n_head_kv; ++g) {
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const float* qh = q + static_cast<size_t>(h) * params.head_dim;
          const float logit = kernels::dot_row(type, row + g * head_bytes, qh, params.head_dim) * params.scale;
          logits[h * n_keys + key] = kernels::softcap(logit, params.softcap);
        }
      }
    }
  });
}

// The state of one range-based attention call while the store hands over its batches, in any
// order: the first batch goes straight to out, each later one to scratch and is then merged into
// out.
class BatchedAttention {
 public:
  // key_mass: empty, or (one query) one entry per position of `ranges`, in order.
  BatchedAttention(const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens, float* out,
                   ThreadPool& pool, std::span<const TokenRange> ranges, std::span<float> key_mass)
      : params_(params), q_(q), pos0_(pos0), n_tokens_(n_tokens), out_(out), pool_(pool),
        n_rows_(n_tokens * params.n_head), lse_(static_cast<size_t>(n_rows_)), ranges_(ranges), key_mass_(key_mass),
        logits_(key_mass.size() * static_cast<size_t>(params.n_head)) {
    int64_t n = 0;
    for (const TokenRange& r : ranges) {
      range_keys_.push_back(n);
      n += r.size();
    }
  }

  Status add(const KvView& view) {
    if (n_batches_++ == 0) {
      LEOAM_RETURN_IF_ERROR(attend_view(view, params_, q_, pos0_, n_tokens_, out_, lse_.data(), pool_));
    } else {
      batch_out_.resize(static_cast<size_t>(n_rows_) * params_.head_dim);
      batch_lse_.resize(static_cast<size_t>(n_rows_));
      LEOAM_RETURN_IF_ERROR(
          attend_view(view, params_, q_, pos0_, n_tokens_, batch_out_.data(), batch_lse_.data(), pool_));
      merge_batch(batch_out_.data(), batch_lse_.data(), n_rows_, params_.head_dim, out_, lse_.data(), pool_);
    }
    // The key logits only after attend_view has checked the view's geometry: key_logits reads
    // n_head_kv * head_dim elements of every row.
    if (!key_mass_.empty()) {
      const int64_t n = view.n_tokens();
      if (n_keys_ + n > static_cast<int64_t>(key_mass_.size())) {
        return internal_error("attention: the store handed over more keys than the ranges hold");
      }
      std::vector<int64_t> key_index;
      key_index.reserve(view.segments().size());
      for (const KvSegment& seg : view.segments()) {
        LEOAM_ASSIGN_OR_RETURN(const int64_t at, key_of(seg));
        key_index.push_back(at);
      }
      key_logits(view, params_, q_, static_cast<int64_t>(key_mass_.size()), key_index, logits_.data(), pool_);
      n_keys_ += n;
    }
    return Status::ok();
  }

  // After the walk: a walk that handed over no batch leaves every query with no key. The key
  // mass needs the final log-sum-exp: p = e^(logit - lse), summed over the heads.
  Status finish() {
    if (n_batches_ == 0) std::fill(out_, out_ + n_rows_ * params_.head_dim, 0.0f);
    if (key_mass_.empty()) return Status::ok();
    const auto n_keys = static_cast<int64_t>(key_mass_.size());
    if (n_keys_ != n_keys) return internal_error("attention: the store handed over fewer keys than the ranges hold");
    pool_.parallel_for(n_keys, 16 * params_.n_head, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        float mass = 0.0f;
        for (int h = 0; h < params_.n_head; ++h) mass += std::exp(logits_[h * n_keys + t] - lse_[h]);
        key_mass_[t] = mass;
      }
    });
    return Status::ok();
  }

 private:
  // The index among the keys of the ranges of the segment's first key; the segment must lie in
  // one range (a store's views never cross one).
  Result<int64_t> key_of(const KvSegment& seg) const {
    const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), seg.pos0,
                                     [](int64_t pos, const TokenRange& r) { return pos < r.begin; });
    if (it == ranges_.begin() || seg.pos0 + seg.n_tokens > (it - 1)->end) {
      return internal_error("attention: the store handed over positions [" + std::to_string(seg.pos0) + ", " +
                            std::to_string(seg.pos0 + seg.n_tokens) + ") outside the ranges asked");
    }
    const auto r = static_cast<size_t>(it - 1 - ranges_.begin());
    return range_keys_[r] + (seg.pos0 - ranges_[r].begin);
  }

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
  std::span<const TokenRange> ranges_;
  std::vector<int64_t> range_keys_;  // [range]: the keys of the ranges before it
  std::span<float> key_mass_;
  std::vector<float> logits_;     // [n_head][key_mass.size()] when key_mass is wanted
  int64_t n_keys_ = 0;            // keys handed over so far
};

}  // namespace

Status attention(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                 float* out, ThreadPool& pool) {
  LEOAM_RETURN_IF_ERROR(check_params(params));
  return attend_view(kv, params, q, pos0, n_tokens, out, nullptr, pool);
}

Status attention(KvCache& kv, int layer, std::span<const TokenRange> ranges, const AttentionParams& params,
                 const float* q, int64_t pos0, int64_t n_tokens, float* out, ThreadPool& pool,
                 std::span<float> key_mass) {
  LEOAM_RETURN_IF_ERROR(check_params(params));
  if (n_tokens <= 0) return Status::ok();
  if (!key_mass.empty()) {
    int64_t n_keys = 0;
    for (const TokenRange& r : ranges) n_keys += r.size();
    if (n_tokens != 1 || n_keys != static_cast<int64_t>(key_mass.size()) || ranges.empty() ||
        ranges.back().end > pos0 + 1) {
      return invalid_argument("attention: key mass needs one query that sees every position of its ranges, and "
                              "one entry per position");
    }
  }
  BatchedAttention batches(params, q, pos0, n_tokens, out, pool, ranges, key_mass);
  LEOAM_RETURN_IF_ERROR(
      kv.for_each_view_unordered(layer, ranges, [&batches](const KvView& view) { return batches.add(view); }));
  return batches.finish();
}

Status attention(KvCache& kv, int layer, int64_t stored_end, const KvView& tail, const AttentionParams& params,
                 const float* q, int64_t pos0, int64_t n_tokens, float* out, ThreadPool& pool) {
  LEOAM_RETURN_IF_ERROR(check_params(params));
  if (n_tokens <= 0) return Status::ok();
  // A window reads only the stored positions its first query can see.
  const int64_t first = params.window > 0 ? std::clamp<int64_t>(pos0 - params.window + 1, 0, stored_end) : 0;
  const TokenRange stored{first, stored_end};
  BatchedAttention batches(params, q, pos0, n_tokens, out, pool, {&stored, 1}, {});
  if (stored.size() > 0) {
    LEOAM_RETURN_IF_ERROR(
        kv.for_each_view_unordered(layer, {&stored, 1}, [&batches](const KvView& view) { return batches.add(view); }));
  }
  if (tail.n_tokens() > 0) LEOAM_RETURN_IF_ERROR(batches.add(tail));
  return batches.finish();
}

}  // namespace leoam
