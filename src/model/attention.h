// Causal multi-head attention of a batch of queries over the KV of one layer, read through a
// KvView segment by segment, by kernels::flash_attention (tiles of keys, an online softmax: no
// [n_tokens][n_kv] score matrix, any number of segments). The KV may also be read by position
// ranges through KvCache::for_each_view_unordered, in as many batches as the store hands over, in
// the order it picks: each batch is attended with its log-sum-exp per query row, and the batches
// merge exactly, out = sum_b out_b e^(lse_b - lse) with lse = ln sum_b e^(lse_b), so a store can
// stream a long or sparse context through bounded memory. Query head h reads KV head
// h / (n_head / n_head_kv) (grouped-query attention); a query at position p sees keys <= p.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace leoam {

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;  // applied to q.k; usually 1 / sqrt(head_dim)
  float softcap = 0.0f;  // > 0: scores s become softcap * tanh(s / softcap) (Gemma 2)
  int64_t window = 0;    // > 0: the query at p sees only keys in (p - window, p] (sliding layers)
};

// q:   [n_tokens][n_head][head_dim] f32, the queries of positions [pos0, pos0 + n_tokens)
// out: [n_tokens][n_head][head_dim] f32
// Fails when the view's geometry differs from params'.
Status attention(const KvView& kv, const AttentionParams& params, const float* q, int64_t pos0, int64_t n_tokens,
                 float* out, ThreadPool& pool);

// The same over the positions of `ranges` of `layer` (sorted, disjoint, inside
// [0, kv.n_tokens(layer)); see KvCache::for_each_view), read batch by batch and merged as above.
// A query sees the positions of `ranges` that are <= its own; one that sees none gets zeros.
// With a single batch (an in-memory store) out is that of attention(view, ...) bit for bit: the
// batch is written straight to out. Scratch: [n_tokens][n_head] floats, and from a second batch
// on [n_tokens][n_head][head_dim] + [n_tokens][n_head] more, whatever the context length.
// key_mass (a single query only, n_tokens == 1): when not empty, it has one entry per position
// of `ranges` (in order) and receives that position's softmax probability summed over the query
// heads (what H2O accumulates). It costs one more q.k per attended key and head.
// Fails on a bad range, a failed read, or a view whose geometry differs from params'.
Status attention(KvCache& kv, int layer, std::span<const TokenRange> ranges, const AttentionParams& params,
                 const float* q, int64_t pos0, int64_t n_tokens, float* out, ThreadPool& pool,
                 std::span<float> key_mass = {});

// The same over positions [0, stored_end) of `layer` read from `kv` (none when stored_end is 0;
// with a window, from the first position the first query sees),
// then the segments of `tail`, positions [stored_end, stored_end + tail.n_tokens()), which the
// caller holds in memory: the layered prefill's copy of a layer's prompt KV, so that attention
// reads the prompt from there and not back from the store. Merged as above; with stored_end 0,
// out is that of attention(tail, ...) bit for bit.
Status attention(KvCache& kv, int layer, int64_t stored_end, const KvView& tail, const AttentionParams& params,
                 const float* q, int64_t pos0, int64_t n_tokens, float* out, ThreadPool& pool);

}  // namespace leoam
