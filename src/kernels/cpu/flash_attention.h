// Causal attention of a batch of queries over keys/values stored as runs of rows, in tiles, with
// an online softmax: no [n_tokens][n_kv] score matrix exists, and the scratch is bounded by the
// tile sizes whatever the context length. Two ways of splitting the work, picked per call:
// prefill (several query blocks) takes items (query block, kv head), each loading a K/V tile once
// for all its queries and the query heads of its GQA group; decode (one query block, long KV) is
// flash-decoding: each thread streams its range of positions once and keeps a partial (m, l, acc)
// per query row, merged at the end:  m = max_s m_s,  l = sum_s l_s e^(m_s - m),
// out = sum_s acc_s e^(m_s - m) / l. Query head h reads kv head h / (n_head / n_head_kv); a query
// at position p sees keys <= p. K/V are f32 or f16 (converted per tile, F16C on AVX2 and AVX-512).
// The splits drawn: docs/cpu.md#attention
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace leoam::kernels {

// A run of consecutive key positions [pos0, pos0 + n_tokens) stored contiguously: row t of k
// starts at (const char*)k + t * row_stride_bytes and holds [n_head_kv][head_dim] elements
// (f16 or f32); v alike.
struct KvRun {
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  bool f16 = true;
  size_t row_stride_bytes = 0;
};

struct FlashAttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;  // applied to q.k
  int64_t pos0 = 0;      // position of the first query
  int64_t n_tokens = 0;  // queries
  // > 0: the scaled scores s become softcap * tanh(s / softcap) before the softmax (Gemma 2).
  float softcap = 0.0f;
  // > 0: a query at position p sees only the keys in (p - window, p] (sliding-window layers).
  int64_t window = 0;
};

// kAuto: the widest the CPU (cpu_path()) and head_dim allow. A path the CPU or head_dim rules
// out falls back to the next narrower one: AVX-512 needs head_dim % 16 == 0, AVX2 % 8 == 0.
enum class AttentionIsa : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };

struct FlashAttentionOptions {
  AttentionIsa isa = AttentionIsa::kAuto;
  // Ranges the KV is cut into for decode; 0: one per thread when the KV is long enough. Tests
  // force other counts.
  int n_kv_splits = 0;
};

// out = softmax(cap(scale * q k^T), causal, windowed) v, cap and window as params say.
// q, out: [n_tokens][n_head][head_dim] f32. runs: in increasing, non-overlapping positions.
// lse: [n_tokens][n_head] f32 or nullptr (not wanted): ln sum_j e^(scale * q.k_j) over the keys
// the query saw (m + ln l of the online softmax), which is what lets attention over disjoint sets
// of keys be merged exactly: out = sum_b out_b e^(lse_b - lse), lse = ln sum_b e^(lse_b).
// Expects n_head a multiple of n_head_kv (callers check). A query that sees no key gets zeros,
// and lse -inf.
void flash_attention(std::span<const KvRun> runs, const FlashAttentionParams& params, const float* q, float* out,
                     float* lse, ThreadPool& pool, const FlashAttentionOptions& options = {});

inline void flash_attention(std::span<const KvRun> runs, const FlashAttentionParams& params, const float* q,
                            float* out, ThreadPool& pool, const FlashAttentionOptions& options = {}) {
  flash_attention(runs, params, q, out, nullptr, pool, options);
}

namespace ref {
// Plain per-(token, head) attention, materializing one query's scores in double: what tests and
// the scalar path are compared to. lse as for flash_attention (computed in double).
void attention(std::span<const KvRun> runs, const FlashAttentionParams& params, const float* q, float* out,
               float* lse = nullptr);
}  // namespace ref

}  // namespace leoam::kernels
