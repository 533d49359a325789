// Attention over a KvView (segments laid out by hand) against a plain softmax in double, and
// attention over token ranges read through KvCache::for_each_view: a store that hands the KV over
// in batches of a few tokens (merged by log-sum-exp) against the single-view result and against
// a plain softmax over exactly the positions of the ranges.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "core/fp16.h"
#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"

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

// A prefill-sized batch over a store of small chunks: chains of adjacent short segments are
// packed into one run for the kernel (attention.cpp), around a long segment that is not, and
// the result is still the softmax over every position.
TEST(Attention, PrefillOverManySmallSegmentsMatchesNaiveSoftmax) {
  ThreadPool pool(2);
  const int n = 300, n_kv_heads = 2, n_head = 4, hd = 16;
  std::vector<int> cuts;
  for (int c = 8; c <= 120; c += 8) cuts.push_back(c);  // 8-row segments, then [120, 190) of 70 rows
  for (int c = 190; c < n; c += 5) cuts.push_back(c);   // then 5-row segments
  const SplitKv kv = make_split(n, n_kv_heads, hd, cuts);
  for (const int64_t n_tokens : {int64_t{32}, int64_t{3}}) {  // packed, and below the packing threshold
    const int64_t pos0 = n - n_tokens;
    std::vector<float> q(n_tokens * n_head * hd);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 2.0f * std::sin(0.29f * i + 0.5f);
    AttentionParams p{n_head, n_kv_heads, hd, 1.0f / std::sqrt(16.0f)};
    std::vector<float> out(q.size());
    ASSERT_TRUE(attention(kv.view(), p, q.data(), pos0, n_tokens, out.data(), pool).is_ok());
    const auto want = naive(kv, q, n_head, pos0, n_tokens);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << n_tokens << " queries, " << i;
  }
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


// ---- attention over token ranges ------------------------------------------------------------

// A store that reads the KV of the ranges in batches of at most batch_tokens positions, each
// copied into its own staging buffer (padded rows, one segment per piece of range) that is
// poisoned and freed once fn returns, as a tiered store reading from disk would.
class BatchedKvCache final : public KvCache {
 public:
  BatchedKvCache(MemoryKvCache& inner, int64_t batch_tokens) : inner_(inner), batch_tokens_(batch_tokens) {}

  const KvCacheShape& shape() const override { return inner_.shape(); }
  KvDtype dtype() const override { return inner_.dtype(); }
  int64_t n_tokens() const override { return inner_.n_tokens(); }
  int64_t n_tokens(int layer) const override { return inner_.n_tokens(layer); }
  Status append(int layer, int64_t pos0, int64_t n, const float* k, const float* v) override {
    return inner_.append(layer, pos0, n, k, v);
  }
  Result<KvView> view(int layer, int64_t n_visible) override { return inner_.view(layer, n_visible); }
  void clear() override { inner_.clear(); }
  Status truncate(int64_t n) override { return inner_.truncate(n); }

  // Ranges are taken as valid (the default's checks are tested in kv_cache_test).
  Status for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) override {
    asked.insert(asked.end(), ranges.begin(), ranges.end());
    LEOAM_ASSIGN_OR_RETURN(const KvView all, inner_.view(layer, inner_.n_tokens(layer)));
    std::vector<TokenRange> batch;
    int64_t n_batch = 0;
    for (const TokenRange& r : ranges) {
      for (int64_t p = r.begin; p < r.end;) {
        const int64_t take = std::min(r.end - p, batch_tokens_ - n_batch);
        batch.push_back({p, p + take});
        n_batch += take;
        p += take;
        if (n_batch == batch_tokens_) {
          LEOAM_RETURN_IF_ERROR(deliver(all.segments()[0], batch, fn));
          batch.clear();
          n_batch = 0;
        }
      }
    }
    if (n_batch > 0) return deliver(all.segments()[0], batch, fn);
    return Status::ok();
  }

  int n_batches() const { return n_batches_; }
  int fail_at_batch = -1;  // the batch whose read fails (-1: none)
  std::vector<TokenRange> asked;  // every range read, in order

 private:
  Status deliver(const KvSegment& src, const std::vector<TokenRange>& batch, const ViewVisitor& fn) {
    if (n_batches_++ == fail_at_batch) return io_error("kv.bin: short read in batch " + std::to_string(fail_at_batch));
    const size_t stride = src.row_stride_bytes + 8;
    int64_t n = 0;
    for (const TokenRange& r : batch) n += r.size();
    std::vector<char> k(n * stride), v(n * stride);
    std::vector<KvSegment> segments;
    int64_t row = 0;
    for (const TokenRange& r : batch) {
      KvSegment seg = src;
      seg.pos0 = r.begin;
      seg.n_tokens = r.size();
      seg.k = k.data() + row * stride;
      seg.v = v.data() + row * stride;
      seg.row_stride_bytes = stride;
      for (int64_t p = r.begin; p < r.end; ++p, ++row) {
        std::memcpy(k.data() + row * stride, src.k_row(p), src.row_stride_bytes);
        std::memcpy(v.data() + row * stride, src.v_row(p), src.row_stride_bytes);
      }
      segments.push_back(seg);
    }
    const Status s = fn(KvView(shape().n_kv_heads, shape().head_dim, std::move(segments)));
    std::fill(k.begin(), k.end(), '\xff');  // NaN in f16 and f32: a read after the call shows
    std::fill(v.begin(), v.end(), '\xff');
    return s;
  }

  MemoryKvCache& inner_;
  int64_t batch_tokens_;
  int n_batches_ = 0;
};

// n random positions of one layer in a MemoryKvCache (F16), with the values it holds.
struct RangeKv {
  int n_kv_heads, head_dim;
  std::vector<float> k, v;  // [n][n_kv_heads][head_dim], as stored (rounded to f16)
  std::unique_ptr<MemoryKvCache> cache;
};

RangeKv make_range_kv(int64_t n, int n_kv_heads, int head_dim, uint32_t seed) {
  RangeKv kv{n_kv_heads, head_dim, {}, {}, nullptr};
  MemoryKvCacheOptions o;
  o.shape = {1, n_kv_heads, head_dim, n};
  o.dtype = KvDtype::kF16;
  auto cache = MemoryKvCache::create(o);
  EXPECT_TRUE(cache.is_ok()) << cache.status().message();
  kv.cache = std::move(cache).value();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < n * n_kv_heads * head_dim; ++i) {
    kv.k.push_back(f16_to_f32(f32_to_f16(dist(rng))));
    kv.v.push_back(f16_to_f32(f32_to_f16(dist(rng))));
  }
  EXPECT_TRUE(kv.cache->append(0, 0, n, kv.k.data(), kv.v.data()).is_ok());
  return kv;
}

// The softmax probabilities, in double, of query row qh (head_dim floats, against kv head kvh)
// over the keys at positions `keys` (non-empty).
std::vector<double> naive_softmax(const RangeKv& kv, const std::vector<int64_t>& keys, const float* qh, int kvh,
                                  const AttentionParams& p) {
  const int hd = p.head_dim, row = kv.n_kv_heads * hd;
  std::vector<double> s;
  double mx = -HUGE_VAL;
  for (int64_t j : keys) {
    double d = 0;
    for (int e = 0; e < hd; ++e) d += static_cast<double>(qh[e]) * kv.k[j * row + kvh * hd + e];
    s.push_back(d * p.scale);
    mx = std::max(mx, s.back());
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  for (double& x : s) x /= sum;
  return s;
}

// Plain softmax attention in double over the positions of `ranges` up to each query's own;
// zeros for a query that sees none.
std::vector<float> naive_ranges(const RangeKv& kv, const std::vector<TokenRange>& ranges, const std::vector<float>& q,
                                const AttentionParams& p, int64_t pos0, int64_t n_tokens) {
  const int hd = p.head_dim, group = p.n_head / p.n_head_kv, row = kv.n_kv_heads * hd;
  std::vector<float> out(n_tokens * p.n_head * hd, 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q.data() + (t * p.n_head + h) * hd;
      const int kvh = h / group;
      std::vector<int64_t> keys;
      for (const TokenRange& r : ranges) {
        for (int64_t j = r.begin; j < r.end && j <= pos0 + t; ++j) keys.push_back(j);
      }
      if (keys.empty()) continue;
      const std::vector<double> prob = naive_softmax(kv, keys, qh, kvh, p);
      for (int e = 0; e < hd; ++e) {
        double acc = 0;
        for (size_t i = 0; i < keys.size(); ++i) acc += prob[i] * kv.v[keys[i] * row + kvh * hd + e];
        out[(t * p.n_head + h) * hd + e] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

std::vector<float> random_q(int64_t n_tokens, const AttentionParams& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> q(n_tokens * p.n_head * p.head_dim);
  for (float& x : q) x = dist(rng);
  return q;
}

// Within 1e-5 relative (absolute below 1) of want, element by element.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i]))) << what << ", element " << i;
  }
}

struct RangeCase {
  int64_t n_kv;  // positions stored
  AttentionParams params;
  int64_t pos0, n_tokens;
  std::vector<TokenRange> ranges;
  int64_t batch_tokens;
};

// Runs c through one view (MemoryKvCache's default for_each_view) and through batches, on 1-3
// threads; checks both against the plain softmax and against each other.
void check_batched(const RangeCase& c) {
  const RangeKv kv = make_range_kv(c.n_kv, c.params.n_head_kv, c.params.head_dim, static_cast<uint32_t>(c.n_kv));
  const std::vector<float> q = random_q(c.n_tokens, c.params, static_cast<uint32_t>(c.pos0 + 1));
  const std::vector<float> want = naive_ranges(kv, c.ranges, q, c.params, c.pos0, c.n_tokens);
  int64_t n_positions = 0;
  for (const TokenRange& r : c.ranges) n_positions += r.size();
  for (int n_threads = 1; n_threads <= 3; ++n_threads) {
    SCOPED_TRACE("queries [" + std::to_string(c.pos0) + ", " + std::to_string(c.pos0 + c.n_tokens) + ") heads " +
                 std::to_string(c.params.n_head) + "/" + std::to_string(c.params.n_head_kv) + " batches of " +
                 std::to_string(c.batch_tokens) + ", threads " + std::to_string(n_threads));
    ThreadPool pool(n_threads);
    std::vector<float> single(q.size(), std::nanf("")), batched(q.size(), std::nanf(""));
    ASSERT_TRUE(attention(*kv.cache, 0, c.ranges, c.params, q.data(), c.pos0, c.n_tokens, single.data(), pool).is_ok());
    BatchedKvCache store(*kv.cache, c.batch_tokens);
    ASSERT_TRUE(attention(store, 0, c.ranges, c.params, q.data(), c.pos0, c.n_tokens, batched.data(), pool).is_ok());
    EXPECT_EQ(store.n_batches(), (n_positions + c.batch_tokens - 1) / c.batch_tokens);
    expect_close(single, want, "single view vs naive");
    expect_close(batched, want, "batches vs naive");
    expect_close(batched, single, "batches vs single view");
  }
}

TEST(RangeAttention, PrefillBatchesMergeToTheSingleView) {
  // GQA 8/2; 90 queries over 120 positions, read 7 at a time: batches cut inside the causal
  // diagonal, so early queries see nothing in later batches.
  check_batched({120, {8, 2, 16, 0.25f}, 30, 90, {{0, 120}}, 7});
  // From the start, batches of one token.
  check_batched({20, {4, 1, 8, 1.0f / std::sqrt(8.0f)}, 0, 20, {{0, 20}}, 1});
}

TEST(RangeAttention, DecodeBatchesMergeToTheSingleView) {
  // 1200 positions: the single view splits the KV over threads (flash-decoding), the batches do
  // not; batches of 100 and 13 (a ragged last one).
  check_batched({1200, {8, 2, 32, 1.0f / std::sqrt(32.0f)}, 1199, 1, {{0, 1200}}, 100});
  check_batched({1200, {8, 2, 32, 1.0f / std::sqrt(32.0f)}, 1199, 1, {{0, 1200}}, 13});
  check_batched({300, {6, 6, 16, 0.25f}, 299, 1, {{0, 300}}, 64});  // no GQA
}

TEST(RangeAttention, SparseRangesAttendOnlyToTheirPositions) {
  // Decode over a selection of positions, in batches that straddle ranges.
  check_batched({200, {8, 2, 16, 0.25f}, 199, 1, {{0, 4}, {17, 30}, {64, 65}, {120, 200}}, 6});
  // Prefill whose first queries (0..4) precede every selected position: their rows stay zero.
  check_batched({40, {4, 2, 16, 0.25f}, 0, 40, {{5, 9}, {12, 13}, {20, 40}}, 3});
  // Ranges that end before the queries.
  check_batched({100, {4, 1, 16, 0.25f}, 96, 4, {{10, 20}, {50, 60}}, 4});
}

TEST(RangeAttention, SingleViewIsBitIdenticalToViewAttention) {
  // The in-memory store hands one view: the result must be that of attention(view, ...) exactly.
  const RangeKv kv = make_range_kv(700, 2, 32, 3);
  const AttentionParams p{8, 2, 32, 1.0f / std::sqrt(32.0f)};
  for (const auto& [pos0, n_tokens] : {std::pair<int64_t, int64_t>{0, 700}, {600, 100}, {699, 1}}) {
    const std::vector<float> q = random_q(n_tokens, p, static_cast<uint32_t>(pos0));
    ThreadPool pool(2);
    std::vector<float> by_view(q.size(), std::nanf("")), by_range(q.size(), std::nanf(""));
    auto view = kv.cache->view(0, pos0 + n_tokens);
    ASSERT_TRUE(view.is_ok());
    ASSERT_TRUE(attention(*view, p, q.data(), pos0, n_tokens, by_view.data(), pool).is_ok());
    const TokenRange visible{0, pos0 + n_tokens};
    ASSERT_TRUE(attention(*kv.cache, 0, {&visible, 1}, p, q.data(), pos0, n_tokens, by_range.data(), pool).is_ok());
    EXPECT_EQ(std::memcmp(by_view.data(), by_range.data(), q.size() * sizeof(float)), 0) << "pos0 " << pos0;
  }
}

// The layered prefill's form (stored positions, then a tail held in memory) with a sliding window:
// the store is asked only for what the first query's window reaches, and the result is that of
// the same window over every position read from the store.
TEST(RangeAttention, AWindowReadsOnlyTheStoredPositionsItSees) {
  const RangeKv kv = make_range_kv(200, 2, 32, 6);
  AttentionParams p{8, 2, 32, 1.0f / std::sqrt(32.0f)};
  p.window = 30;
  const int64_t pos0 = 150, n_tokens = 50;
  const std::vector<float> q = random_q(n_tokens, p, 9);
  ThreadPool pool(2);
  BatchedKvCache store(*kv.cache, 16);
  auto all = kv.cache->view(0, 200);
  ASSERT_TRUE(all.is_ok());
  KvSegment tail_segment = all->segments()[0];
  tail_segment.k = tail_segment.k_row(pos0);
  tail_segment.v = tail_segment.v_row(pos0);
  tail_segment.pos0 = pos0;
  tail_segment.n_tokens = n_tokens;
  const KvView tail(2, 32, {tail_segment});
  std::vector<float> got(q.size(), std::nanf("")), want(q.size(), std::nanf(""));
  ASSERT_TRUE(attention(store, 0, pos0, tail, p, q.data(), pos0, n_tokens, got.data(), pool).is_ok());
  ASSERT_EQ(store.asked.size(), 1u);
  EXPECT_EQ(store.asked[0], (TokenRange{pos0 - 30 + 1, pos0}));
  const TokenRange visible{0, pos0 + n_tokens};
  ASSERT_TRUE(attention(*kv.cache, 0, {&visible, 1}, p, q.data(), pos0, n_tokens, want.data(), pool).is_ok());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(RangeAttention, NoPositionsGivesZeros) {
  const RangeKv kv = make_range_kv(10, 1, 8, 4);
  const AttentionParams p{2, 1, 8, 1.0f};
  ThreadPool pool(1);
  const std::vector<float> q = random_q(2, p, 1);
  std::vector<float> out(q.size(), std::nanf(""));
  const std::vector<TokenRange> none = {{3, 3}};
  ASSERT_TRUE(attention(*kv.cache, 0, none, p, q.data(), 8, 2, out.data(), pool).is_ok());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST(RangeAttention, ErrorsAreReturned) {
  const RangeKv kv = make_range_kv(10, 2, 8, 5);
  ThreadPool pool(1);
  const AttentionParams p{4, 2, 8, 1.0f};
  const std::vector<float> q = random_q(1, p, 2);
  std::vector<float> out(q.size());
  const std::vector<TokenRange> all = {{0, 10}};
  const std::vector<TokenRange> overlapping = {{0, 5}, {4, 10}};
  EXPECT_EQ(attention(*kv.cache, 0, overlapping, p, q.data(), 9, 1, out.data(), pool).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(attention(*kv.cache, 1, all, p, q.data(), 9, 1, out.data(), pool).code(), StatusCode::kInvalidArgument);
  const AttentionParams one_kv_head{4, 1, 8, 1.0f};  // the cache has 2
  EXPECT_EQ(attention(*kv.cache, 0, all, one_kv_head, q.data(), 9, 1, out.data(), pool).code(),
            StatusCode::kInvalidArgument);
  // A read failing in the second batch stops the walk with its error.
  BatchedKvCache store(*kv.cache, 3);
  store.fail_at_batch = 1;
  const Status s = attention(store, 0, all, p, q.data(), 9, 1, out.data(), pool);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(store.n_batches(), 2);
}

// ---- key mass (what H2O accumulates) --------------------------------------------------------

// The softmax probability of each position of `ranges` (in order) for the single query q at a
// position that sees them all, summed over the query heads, in double.
std::vector<double> naive_key_mass(const RangeKv& kv, const std::vector<TokenRange>& ranges,
                                   const std::vector<float>& q, const AttentionParams& p) {
  const int group = p.n_head / p.n_head_kv;
  std::vector<int64_t> keys;
  for (const TokenRange& r : ranges) {
    for (int64_t j = r.begin; j < r.end; ++j) keys.push_back(j);
  }
  std::vector<double> mass(keys.size(), 0.0);
  for (int h = 0; h < p.n_head; ++h) {
    const std::vector<double> prob = naive_softmax(kv, keys, q.data() + h * p.head_dim, h / group, p);
    for (size_t i = 0; i < keys.size(); ++i) mass[i] += prob[i];
  }
  return mass;
}

// Within 1e-5 relative of want, entry by entry, and summing to n_head.
void expect_mass_close(const std::vector<float>& got, const std::vector<double>& want, int n_head,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * want[i] + 1e-9) << what << ", position index " << i;
    sum += got[i];
  }
  EXPECT_NEAR(sum, n_head, 1e-5 * n_head) << what;
}

struct MassCase {
  int64_t n_kv;
  int64_t pos0;  // the query; it sees every position of the ranges
  std::vector<TokenRange> ranges;
};

// GQA 4/2 over the in-memory store (one view) and over batches of 1, 6 and 13 positions; the
// output is the same with and without the key mass.
TEST(KeyMass, MatchesTheSoftmaxSummedOverHeadsInMemoryAndInBatches) {
  const AttentionParams p{4, 2, 16, 0.25f};
  for (const MassCase& c : {MassCase{200, 199, {{0, 4}, {17, 30}, {64, 65}, {120, 200}}},
                            MassCase{100, 99, {{10, 20}, {50, 60}}},  // ranges that end before the query
                            MassCase{50, 49, {{0, 50}}}}) {
    const RangeKv kv = make_range_kv(c.n_kv, p.n_head_kv, p.head_dim, static_cast<uint32_t>(c.n_kv + 11));
    const std::vector<float> q = random_q(1, p, static_cast<uint32_t>(c.pos0));
    const std::vector<double> want = naive_key_mass(kv, c.ranges, q, p);
    ThreadPool pool(2);
    std::vector<float> plain(q.size(), std::nanf(""));
    ASSERT_TRUE(attention(*kv.cache, 0, c.ranges, p, q.data(), c.pos0, 1, plain.data(), pool).is_ok());

    std::vector<float> out(q.size(), std::nanf("")), mass(want.size(), std::nanf(""));
    ASSERT_TRUE(attention(*kv.cache, 0, c.ranges, p, q.data(), c.pos0, 1, out.data(), pool, mass).is_ok());
    expect_mass_close(mass, want, p.n_head, "one view, query " + std::to_string(c.pos0));
    EXPECT_EQ(std::memcmp(out.data(), plain.data(), out.size() * sizeof(float)), 0);

    for (int64_t batch_tokens : {1, 6, 13}) {
      BatchedKvCache store(*kv.cache, batch_tokens);
      std::fill(mass.begin(), mass.end(), std::nanf(""));
      ASSERT_TRUE(attention(store, 0, c.ranges, p, q.data(), c.pos0, 1, out.data(), pool, mass).is_ok());
      EXPECT_GT(store.n_batches(), 1);
      expect_mass_close(mass, want, p.n_head,
                        "batches of " + std::to_string(batch_tokens) + ", query " + std::to_string(c.pos0));
      expect_close(out, plain, "batches with key mass vs one view");
    }
  }
}

// The tiered store: most chunks on disk, read back in gather batches of a few chunks.
TEST(KeyMass, MatchesTheSoftmaxOverTheTieredStore) {
  const AttentionParams p{4, 2, 16, 0.25f};
  const int64_t n = 250;
  const RangeKv kv = make_range_kv(n, p.n_head_kv, p.head_dim, 21);
  testing_util::TempDir dir;
  TieredKvCacheOptions t;
  t.shape = {1, p.n_head_kv, p.head_dim, 256};
  t.chunk_tokens = 16;
  t.n_recent_tokens = 16;
  t.dir = dir.path();
  t.device_budget_bytes = TieredKvCache::min_device_budget_bytes(t);
  t.host_budget_bytes = 2 * 2 * 16 * t.shape.row_elements() * 2;  // two chunks
  t.gather_batch_bytes = 3 * 4096;
  auto tiered = TieredKvCache::create(t);
  ASSERT_TRUE(tiered.is_ok()) << tiered.status().message();
  TieredKvCache& store = **tiered;
  ASSERT_TRUE(store.append(0, 0, n, kv.k.data(), kv.v.data()).is_ok());

  ThreadPool pool(2);
  for (const std::vector<TokenRange>& ranges : {std::vector<TokenRange>{{0, 250}},
                                                std::vector<TokenRange>{{0, 4}, {20, 37}, {90, 91}, {150, 250}}}) {
    int n_views = 0;
    ASSERT_TRUE(store.for_each_view(0, ranges, [&n_views](const KvView&) { ++n_views; return Status::ok(); }).is_ok());
    EXPECT_GT(n_views, 1);  // several gather batches
    const std::vector<float> q = random_q(1, p, static_cast<uint32_t>(ranges.size()));
    const std::vector<double> want = naive_key_mass(kv, ranges, q, p);
    std::vector<float> out(q.size(), std::nanf("")), mass(want.size(), std::nanf(""));
    ASSERT_TRUE(attention(store, 0, ranges, p, q.data(), n - 1, 1, out.data(), pool, mass).is_ok());
    expect_mass_close(mass, want, p.n_head, std::to_string(ranges.size()) + " ranges over the tiered store");
    expect_close(out, naive_ranges(kv, ranges, q, p, n - 1, 1), "tiered output vs naive");
  }
}

TEST(KeyMass, InvalidUseFails) {
  const RangeKv kv = make_range_kv(10, 2, 8, 6);
  ThreadPool pool(1);
  const AttentionParams p{4, 2, 8, 1.0f};
  const std::vector<float> q = random_q(2, p, 3);
  std::vector<float> out(q.size());
  const std::vector<TokenRange> all = {{0, 10}};
  std::vector<float> mass(10);
  // Two queries.
  EXPECT_EQ(attention(*kv.cache, 0, all, p, q.data(), 8, 2, out.data(), pool, mass).code(),
            StatusCode::kInvalidArgument);
  // One entry too few or too many.
  std::vector<float> short_mass(9), long_mass(11);
  EXPECT_EQ(attention(*kv.cache, 0, all, p, q.data(), 9, 1, out.data(), pool, short_mass).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(attention(*kv.cache, 0, all, p, q.data(), 9, 1, out.data(), pool, long_mass).code(),
            StatusCode::kInvalidArgument);
  // A query that does not see every position of the ranges (position 9 is after it).
  EXPECT_EQ(attention(*kv.cache, 0, all, p, q.data(), 8, 1, out.data(), pool, mass).code(),
            StatusCode::kInvalidArgument);
  // A view of fewer kv heads than params (the key logits must not read past its rows).
  const RangeKv one_head = make_range_kv(10, 1, 8, 7);
  EXPECT_EQ(attention(*one_head.cache, 0, all, p, q.data(), 9, 1, out.data(), pool, mass).code(),
            StatusCode::kInvalidArgument);
  // And the valid call.
  EXPECT_TRUE(attention(*kv.cache, 0, all, p, q.data(), 9, 1, out.data(), pool, mass).is_ok());
}

}  // namespace
}  // namespace leoam
