// The default KvCache::for_each_view: the exact segments (positions and row pointers) it cuts
// from a one-segment MemoryKvCache view and from a view of several segments in separate buffers,
// that it calls fn once (or not at all when no position is asked for), and its errors.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kv/memory_kv_cache.h"

namespace leoam {
namespace {

constexpr int kCacheHeads = 2, kCacheDim = 4, kRow = kCacheHeads * kCacheDim;

// k and v rows [n][2][4] whose element 0 is the position (v: minus the position).
void fill(KvCache& kv, int64_t n) {
  std::vector<float> k, v;
  for (int64_t t = 0; t < n; ++t) {
    for (int e = 0; e < kRow; ++e) {
      k.push_back(static_cast<float>(t) + 0.25f * e);
      v.push_back(-static_cast<float>(t) - 0.25f * e);
    }
  }
  for (int layer = 0; layer < kv.shape().n_layer; ++layer) {
    ASSERT_TRUE(kv.append(layer, 0, n, k.data(), v.data()).is_ok());
  }
}

std::unique_ptr<MemoryKvCache> make_memory(int64_t n) {
  MemoryKvCacheOptions o;
  o.shape = {2, kCacheHeads, kCacheDim, 32};
  o.dtype = KvDtype::kF32;
  auto cache = MemoryKvCache::create(o);
  EXPECT_TRUE(cache.is_ok()) << cache.status().message();
  fill(**cache, n);
  return std::move(cache).value();
}

// What fn saw: one entry per call, the segments of its view.
struct Calls {
  std::vector<std::vector<KvSegment>> views;
  KvCache::ViewVisitor visitor() {
    return [this](const KvView& view) {
      EXPECT_EQ(view.n_kv_heads(), kCacheHeads);
      EXPECT_EQ(view.head_dim(), kCacheDim);
      views.emplace_back(view.segments().begin(), view.segments().end());
      // Every row holds its own position (and the view's storage is alive during the call).
      for (const KvSegment& s : view.segments()) {
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          EXPECT_EQ(static_cast<const float*>(s.k_row(t))[0], static_cast<float>(s.pos0 + t));
          EXPECT_EQ(static_cast<const float*>(s.v_row(t))[0], -static_cast<float>(s.pos0 + t));
        }
      }
      return Status::ok();
    };
  }
};

const char* at(const void* base, int64_t row, size_t stride) {
  return static_cast<const char*>(base) + row * stride;
}

TEST(KvCacheForEachView, CutsTheMemorySegmentToTheRanges) {
  auto cache = make_memory(20);
  auto whole = cache->view(1, 20);
  ASSERT_TRUE(whole.is_ok());
  const KvSegment base = whole->segments()[0];
  const size_t stride = kRow * sizeof(float);
  ASSERT_EQ(base.row_stride_bytes, stride);

  struct Want {
    int64_t pos0, n_tokens;
  };
  const struct {
    std::vector<TokenRange> ranges;
    std::vector<Want> segments;
  } cases[] = {
      {{{0, 20}}, {{0, 20}}},
      {{{0, 7}}, {{0, 7}}},
      {{{3, 4}}, {{3, 1}}},
      {{{1, 3}, {5, 6}, {10, 20}}, {{1, 2}, {5, 1}, {10, 10}}},
      {{{0, 2}, {2, 5}}, {{0, 2}, {2, 3}}},             // adjacent ranges stay apart
      {{{4, 4}, {6, 9}, {9, 9}, {30, 30}}, {{6, 3}}},  // empty ranges are skipped, wherever they are
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("first range [" + std::to_string(c.ranges[0].begin) + ", " + std::to_string(c.ranges[0].end) + ")");
    Calls calls;
    ASSERT_TRUE(cache->for_each_view(1, c.ranges, calls.visitor()).is_ok());
    ASSERT_EQ(calls.views.size(), 1u);
    const std::vector<KvSegment>& got = calls.views[0];
    ASSERT_EQ(got.size(), c.segments.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].pos0, c.segments[i].pos0) << i;
      EXPECT_EQ(got[i].n_tokens, c.segments[i].n_tokens) << i;
      EXPECT_EQ(got[i].k, at(base.k, c.segments[i].pos0, stride)) << i;
      EXPECT_EQ(got[i].v, at(base.v, c.segments[i].pos0, stride)) << i;
      EXPECT_EQ(got[i].row_stride_bytes, stride);
      EXPECT_EQ(got[i].dtype, KvDtype::kF32);
    }
  }
}

TEST(KvCacheForEachView, NoPositionCallsNothing) {
  auto cache = make_memory(5);
  Calls calls;
  EXPECT_TRUE(cache->for_each_view(0, {}, calls.visitor()).is_ok());
  const std::vector<TokenRange> empty = {{2, 2}, {4, 4}};
  EXPECT_TRUE(cache->for_each_view(0, empty, calls.visitor()).is_ok());
  EXPECT_TRUE(calls.views.empty());
}

// A cache whose views come as several segments, each a copy in its own buffer with padded rows
// and owned by the view, so that cut pointers must be taken from the right segment.
class SegmentedKvCache final : public KvCache {
 public:
  // Segments end at `cuts` (and at the view's end); positions in `holes` are left out of every
  // view, as a broken store would.
  SegmentedKvCache(std::unique_ptr<MemoryKvCache> inner, std::vector<int64_t> cuts, std::vector<int64_t> holes = {})
      : inner_(std::move(inner)), cuts_(std::move(cuts)), holes_(std::move(holes)) {}

  static constexpr size_t kStride = (kRow + 3) * sizeof(float);

  const KvCacheShape& shape() const override { return inner_->shape(); }
  KvDtype dtype() const override { return inner_->dtype(); }
  int64_t n_tokens() const override { return inner_->n_tokens(); }
  int64_t n_tokens(int layer) const override { return inner_->n_tokens(layer); }
  Status append(int layer, int64_t pos0, int64_t n, const float* k, const float* v) override {
    return inner_->append(layer, pos0, n, k, v);
  }
  void clear() override { inner_->clear(); }
  Status truncate(int64_t n) override { return inner_->truncate(n); }

  Result<KvView> view(int layer, int64_t n_visible) override {
    LEOAM_ASSIGN_OR_RETURN(const KvView flat, inner_->view(layer, n_visible));
    auto buffers = std::make_unique<Buffers>();
    std::vector<KvSegment> segments;
    std::vector<int64_t> ends = cuts_;
    ends.push_back(n_visible);
    int64_t pos0 = 0;
    for (int64_t end : ends) {
      end = std::min(end, n_visible);
      // The segment [pos0, end), minus the holes.
      for (int64_t p = pos0; p < end;) {
        if (std::find(holes_.begin(), holes_.end(), p) != holes_.end()) {
          ++p;
          continue;
        }
        int64_t q = p;
        while (q < end && std::find(holes_.begin(), holes_.end(), q) == holes_.end()) ++q;
        KvSegment s;
        s.pos0 = p;
        s.n_tokens = q - p;
        s.dtype = KvDtype::kF32;
        s.row_stride_bytes = kStride;
        buffers->k.emplace_back((q - p) * kStride);
        buffers->v.emplace_back((q - p) * kStride);
        for (int64_t t = p; t < q; ++t) {
          std::memcpy(buffers->k.back().data() + (t - p) * kStride, flat.segments()[0].k_row(t), kRow * sizeof(float));
          std::memcpy(buffers->v.back().data() + (t - p) * kStride, flat.segments()[0].v_row(t), kRow * sizeof(float));
        }
        s.k = buffers->k.back().data();
        s.v = buffers->v.back().data();
        segments.push_back(s);
        p = q;
      }
      pos0 = end;
    }
    return KvView(kCacheHeads, kCacheDim, std::move(segments), std::move(buffers));
  }

 private:
  struct Buffers : KvViewResources {
    std::vector<std::vector<char>> k, v;
  };
  std::unique_ptr<MemoryKvCache> inner_;
  std::vector<int64_t> cuts_;
  std::vector<int64_t> holes_;
};

TEST(KvCacheForEachView, CutsSeveralSegmentsInPlace) {
  // Segments [0, 4), [4, 10), [10, 16); ranges inside one, across two, and several in one.
  SegmentedKvCache cache(make_memory(16), {4, 10});
  Calls calls;
  const std::vector<TokenRange> ranges = {{1, 3}, {3, 12}, {13, 14}, {15, 16}};
  ASSERT_TRUE(cache.for_each_view(0, ranges, calls.visitor()).is_ok());
  ASSERT_EQ(calls.views.size(), 1u);
  const std::vector<KvSegment>& got = calls.views[0];
  const struct {
    int64_t pos0, n_tokens;
  } want[] = {{1, 2}, {3, 1}, {4, 6}, {10, 2}, {13, 1}, {15, 1}};
  ASSERT_EQ(got.size(), std::size(want));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].pos0, want[i].pos0) << i;
    EXPECT_EQ(got[i].n_tokens, want[i].n_tokens) << i;
    EXPECT_EQ(got[i].row_stride_bytes, SegmentedKvCache::kStride) << i;
  }
  // Pieces of one segment share its buffer, rows apart: 3 is row 3 of [0, 4), 1 its row 1.
  EXPECT_EQ(got[1].k, at(got[0].k, 2, SegmentedKvCache::kStride));
  EXPECT_EQ(got[1].v, at(got[0].v, 2, SegmentedKvCache::kStride));
  EXPECT_EQ(got[5].k, at(got[4].k, 2, SegmentedKvCache::kStride));
  EXPECT_EQ(got[5].v, at(got[4].v, 2, SegmentedKvCache::kStride));
  // (Calls::visitor checked that every row holds its own position, so each piece points into the
  // segment that holds it.)
}

TEST(KvCacheForEachView, AViewMissingPositionsIsAnInternalError) {
  SegmentedKvCache cache(make_memory(10), {5}, {6});
  Calls calls;
  const std::vector<TokenRange> around = {{0, 6}, {7, 10}};  // the hole is not asked for: fine
  EXPECT_TRUE(cache.for_each_view(0, around, calls.visitor()).is_ok());
  const std::vector<TokenRange> over = {{2, 8}};
  const Status s = cache.for_each_view(0, over, calls.visitor());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.message();
  EXPECT_EQ(calls.views.size(), 1u);
}

TEST(KvCacheForEachView, RejectsBadRanges) {
  auto cache = make_memory(10);
  Calls calls;
  const struct {
    int layer;
    std::vector<TokenRange> ranges;
    const char* says;
  } cases[] = {
      {0, {{3, 5}, {1, 2}}, "range 1 [1, 2) starts before the end of range 0 [3, 5)"},
      {0, {{0, 3}, {2, 4}}, "range 1 [2, 4) starts before the end of range 0 [0, 3)"},
      {0, {{0, 3}, {5, 5}, {2, 4}}, "range 2 [2, 4) starts before the end of range 0 [0, 3)"},
      {0, {{-1, 2}}, "range 0 [-1, 2) is outside [0, 10)"},
      {1, {{8, 11}}, "range 0 [8, 11) is outside [0, 10)"},
      {0, {{4, 3}}, "range 0 [4, 3) ends before it begins"},
      {2, {}, "layer 2 out of range [0, 2)"},
      {-1, {{0, 1}}, "layer -1 out of range [0, 2)"},
  };
  for (const auto& c : cases) {
    const Status s = cache->for_each_view(c.layer, c.ranges, calls.visitor());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
  EXPECT_TRUE(calls.views.empty());
}

TEST(KvCacheForEachView, AnErrorFromFnIsReturned) {
  auto cache = make_memory(4);
  const std::vector<TokenRange> ranges = {{0, 4}};
  const Status s = cache->for_each_view(0, ranges, [](const KvView&) { return io_error("disk.kv: short read"); });
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "disk.kv: short read");
}

}  // namespace
}  // namespace leoam
