#include "model/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/fp16.h"

namespace leoam {
namespace {

// A KV store laid out by hand as several segments, with padding between rows and between
// segments, to check that attention follows the view and nothing else.
struct SplitKv {
  int n_kv_heads, head_dim;
  std::vector<float> k, v;  // [n][n_kv_heads][head_dim], the plain truth
  std::vector<std::vector<uint16_t>> k_store, v_store;  // one buffer per segment, f16, padded rows
  std::vector<KvSegment> segments;

  KvView view() const { return KvView(n_kv_heads, head_dim, segments); }
};

SplitKv make_split(int n, int n_kv_heads, int head_dim, const std::vector<int>& cuts) {
  SplitKv s{n_kv_heads, head_dim, {}, {}, {}, {}, {}};
  const int row = n_kv_heads * head_dim;
  for (int i = 0; i < n * row; ++i) {
    s.k.push_back(f16_to_f32(f32_to_f16(std::sin(0.37f * i) * 1.5f)));
    s.v.push_back(f16_to_f32(f32_to_f16(std::cos(0.11f * i + 1.0f))));
  }
  const int pad = 3;  // elements of padding after each row
  int pos0 = 0;
  std::vector<int> ends = cuts;
  ends.push_back(n);
  s.k_store.reserve(ends.size());
  s.v_store.reserve(ends.size());
  for (int end : ends) {
    const int m = end - pos0;
    std::vector<uint16_t> kb(m * (row + pad), 0xffff), vb(m * (row + pad), 0xffff);  // NaN padding
    for (int t = 0; t < m; ++t) {
      for (int e = 0; e < row; ++e) {
        kb[t * (row + pad) + e] = f32_to_f16(s.k[(pos0 + t) * row + e]);
        vb[t * (row + pad) + e] = f32_to_f16(s.v[(pos0 + t) * row + e]);
      }
    }
    s.k_store.push_back(std::move(kb));
    s.v_store.push_back(std::move(vb));
    KvSegment seg;
    seg.pos0 = pos0;
    seg.n_tokens = m;
    seg.k = s.k_store.back().data();
    seg.v = s.v_store.back().data();
    seg.dtype = KvDtype::kF16;
    seg.row_stride_bytes = (row + pad) * sizeof(uint16_t);
    s.segments.push_back(seg);
    pos0 = end;
  }
  return s;
}

// Plain softmax attention in double.
std::vector<float> naive(const SplitKv& kv, const std::vector<float>& q, int n_head, int64_t pos0, int64_t n_tokens) {
  const int hd = kv.head_dim, group = n_head / kv.n_kv_heads, row = kv.n_kv_heads * hd;
  std::vector<float> out(n_tokens * n_head * hd);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_head; ++h) {
      const int kvh = h / group;
      const int64_t n_vis = pos0 + t + 1;
      std::vector<double> s(n_vis);
      double mx = -1e300;
      for (int64_t j = 0; j < n_vis; ++j) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += q[(t * n_head + h) * hd + e] * kv.k[j * row + kvh * hd + e];
        s[j] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int e = 0; e < hd; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < n_vis; ++j) acc += s[j] * kv.v[j * row + kvh * hd + e];
        out[(t * n_head + h) * hd + e] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

TEST(Attention, SegmentedGqaMatchesNaiveSoftmax) {
  ThreadPool pool(2);
  const int n = 150, n_kv_heads = 2, n_head = 6, hd = 16;
  // Cuts inside and across the 64-key blocks.
  const SplitKv kv = make_split(n, n_kv_heads, hd, {1, 40, 64, 130});
  const int64_t pos0 = 140, n_tokens = 10;  // the last 10 positions query everything before them
  std::vector<float> q(n_tokens * n_head * hd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 2.0f * std::sin(0.23f * i);

  AttentionParams p{n_head, n_kv_heads, hd, 1.0f / std::sqrt(16.0f)};
  std::vector<float> out(q.size());
  ASSERT_TRUE(attention(kv.view(), p, q.data(), pos0, n_tokens, out.data(), pool).is_ok());
  const auto want = naive(kv, q, n_head, pos0, n_tokens);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 2e-5) << i;
}

TEST(Attention, CausalMaskWithinTheBatch) {
  ThreadPool pool(2);
  const int n = 9, hd = 8;
  const SplitKv kv = make_split(n, 1, hd, {4});
  std::vector<float> q(n * 2 * hd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.5f * i);
  AttentionParams p{2, 1, hd, 1.0f / std::sqrt(8.0f)};
  std::vector<float> out(q.size());
  ASSERT_TRUE(attention(kv.view(), p, q.data(), 0, n, out.data(), pool).is_ok());
  const auto want = naive(kv, q, 2, 0, n);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 2e-5) << i;
  // Position 0 sees only key 0: its output is v[0].
  for (int e = 0; e < hd; ++e) EXPECT_NEAR(out[e], kv.v[e], 1e-6);
}

TEST(Attention, LargeScoresDoNotOverflow) {
  ThreadPool pool(1);
  const int n = 70, hd = 4;
  const SplitKv kv = make_split(n, 1, hd, {});
  std::vector<float> q(hd, 800.0f);  // scores of order 1e3: exp would overflow without max-subtraction
  AttentionParams p{1, 1, hd, 0.5f};  // 1/sqrt(head_dim), as naive() uses
  std::vector<float> out(hd);
  ASSERT_TRUE(attention(kv.view(), p, q.data(), n - 1, 1, out.data(), pool).is_ok());
  const auto want = naive(kv, q, 1, n - 1, 1);
  for (int e = 0; e < hd; ++e) {
    EXPECT_TRUE(std::isfinite(out[e]));
    EXPECT_NEAR(out[e], want[e], 1e-4);
  }
}

TEST(Attention, LongKvDecodeSplitAcrossThreads) {
  // 1100 keys >= 512 per thread: one query is split over KV ranges (flash-decoding) and merged.
  const int n = 1100, n_kv_heads = 2, n_head = 8, hd = 32;
  const SplitKv kv = make_split(n, n_kv_heads, hd, {300, 301, 777});
  std::vector<float> q(n_head * hd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 1.5f * std::sin(0.71f * i);
  AttentionParams p{n_head, n_kv_heads, hd, 1.0f / std::sqrt(32.0f)};
  const auto want = naive(kv, q, n_head, n - 1, 1);
  for (int n_threads : {1, 2, 3}) {
    ThreadPool pool(n_threads);
    std::vector<float> out(q.size());
    ASSERT_TRUE(attention(kv.view(), p, q.data(), n - 1, 1, out.data(), pool).is_ok());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 2e-5) << i << " threads " << n_threads;
  }
}

TEST(Attention, RejectsMismatchedGeometry) {
  ThreadPool pool(1);
  const SplitKv kv = make_split(4, 2, 8, {});
  std::vector<float> q(8 * 4), out(q.size());
  AttentionParams p{4, 1, 8, 1.0f};  // the view has 2 KV heads
  EXPECT_FALSE(attention(kv.view(), p, q.data(), 0, 1, out.data(), pool).is_ok());
  p = AttentionParams{3, 2, 8, 1.0f};  // 3 not a multiple of 2
  EXPECT_FALSE(attention(kv.view(), p, q.data(), 0, 1, out.data(), pool).is_ok());
}

}  // namespace
}  // namespace leoam
