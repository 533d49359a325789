// The KV codec's dispatched code kernels against their scalar references on each CPU path, bit
// for bit, over lengths that run the 8-element body and the scalar tail, and over the layouts the
// codec uses (a header an element; a header a group of 32, codes end to end or between headers)
// and one the vector path leaves to the reference.
#include "kernels/cpu/kv_group_codes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../cpu_path_test.h"

namespace leoam::kernels {
namespace {

class KvGroupCodes : public testing_util::CpuPathTest {};

// Bytes the codes of n elements of `layout` span.
size_t span_bytes(CodeLayout layout, int64_t n) {
  const int64_t groups = (n + layout.group - 1) / layout.group;
  if (layout.group_bytes == 0) return static_cast<size_t>(layout.bits == 8 ? n : (n + 1) / 2);
  return static_cast<size_t>(groups) * layout.group_bytes;
}

TEST_P(KvGroupCodes, RangesMatchTheReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const KvCodeKernels& got = kv_code_kernels();
  const KvCodeKernels& want = ref::kv_code_kernels();
  for (const int64_t n : {1, 5, 8, 13, 32, 33, 40, 64, 70, 100, 128}) {
    std::vector<float> x(static_cast<size_t>(n * 7));
    for (auto& v : x) v = dist(rng) * (rng() % 9 == 0 ? 40.0f : 1.0f);
    for (const int64_t group : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{32}}) {
      const size_t n_groups = static_cast<size_t>((n + group - 1) / group);
      std::vector<float> lo(n_groups), hi(n_groups), lo_ref(n_groups), hi_ref(n_groups);
      got.group_ranges(x.data(), n, group, lo.data(), hi.data());
      want.group_ranges(x.data(), n, group, lo_ref.data(), hi_ref.data());
      EXPECT_EQ(lo, lo_ref) << "n = " << n << ", group = " << group;
      EXPECT_EQ(hi, hi_ref) << "n = " << n << ", group = " << group;
    }
    for (const int64_t t : {1, 2, 7}) {
      std::vector<float> lo(static_cast<size_t>(n)), hi(lo.size()), lo_ref(lo.size()), hi_ref(lo.size());
      got.column_range(x.data(), t, n, lo.data(), hi.data());
      want.column_range(x.data(), t, n, lo_ref.data(), hi_ref.data());
      EXPECT_EQ(lo, lo_ref) << "n = " << n << ", t = " << t;
      EXPECT_EQ(hi, hi_ref) << "n = " << n << ", t = " << t;
    }
  }
}

TEST_P(KvGroupCodes, CodesAndValuesMatchTheReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const KvCodeKernels& got = kv_code_kernels();
  const KvCodeKernels& want = ref::kv_code_kernels();
  for (const int bits : {8, 4}) {
    const int64_t levels = bits == 8 ? 255 : 15;
    const size_t group_code_bytes = bits == 8 ? 32 : 16;
    const CodeLayout layouts[] = {{bits, 1, 0}, {bits, 32, 0}, {bits, 32, group_code_bytes + 4}, {bits, 8, 0}, {bits, 6, 0}};
    for (const CodeLayout& layout : layouts) {
      for (const int64_t n : {1, 6, 8, 13, 31, 32, 33, 40, 64, 70, 100, 128}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = dist(rng) * (rng() % 9 == 0 ? 40.0f : 1.0f);
        if (n > 3) x[2] = 0.0f, x[3] = -0.0f;
        // Each group's header covers its values; every third group is constant (scale 0).
        const int64_t n_headers = layout.group == 1 ? n : (n + layout.group - 1) / layout.group;
        std::vector<float> min(static_cast<size_t>(n_headers)), scale(min.size());
        for (int64_t h = 0; h < n_headers; ++h) {
          const int64_t e0 = h * layout.group, e1 = std::min(n, e0 + layout.group);
          const float lo = *std::min_element(x.begin() + e0, x.begin() + e1);
          const float hi = *std::max_element(x.begin() + e0, x.begin() + e1);
          min[h] = std::nextafter(lo, -1e9f);
          scale[h] = h % 3 == 2 ? 0.0f : std::nextafter((hi - min[h]) / static_cast<float>(levels), 1e9f);
        }
        for (const bool keep_signs : {false, true}) {
          std::vector<uint8_t> q(span_bytes(layout, n) + 8, 0xab), q_ref(q);
          got.encode(x.data(), min.data(), scale.data(), layout, n, keep_signs, q.data());
          want.encode(x.data(), min.data(), scale.data(), layout, n, keep_signs, q_ref.data());
          ASSERT_EQ(q, q_ref) << "bits " << bits << ", group " << layout.group << "/" << layout.group_bytes << ", n " << n;
          std::vector<float> y(static_cast<size_t>(n)), y_ref(y.size());
          got.decode_f32(q.data(), layout, min.data(), scale.data(), n, y.data());
          want.decode_f32(q.data(), layout, min.data(), scale.data(), n, y_ref.data());
          ASSERT_EQ(0, std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float))) << "bits " << bits << ", n " << n;
          std::vector<uint16_t> h(static_cast<size_t>(n)), h_ref(h.size());
          got.decode_f16(q.data(), layout, min.data(), scale.data(), n, h.data());
          want.decode_f16(q.data(), layout, min.data(), scale.data(), n, h_ref.data());
          ASSERT_EQ(h, h_ref) << "bits " << bits << ", n " << n;
          // The contract: within half a step (one where a sign is kept), and signs kept.
          for (int64_t e = 0; e < n; ++e) {
            const float s = scale[e / layout.group];
            if (s == 0.0f) {
              EXPECT_EQ(y[e], min[e / layout.group]);
              continue;
            }
            const float rounding = 1e-6f * (std::abs(x[e]) + std::abs(min[e / layout.group]));  // y's own, in float
            EXPECT_LE(std::abs(y[e] - x[e]), (keep_signs ? 1.0f : 0.5f) * s * 1.0001f + rounding) << "e = " << e;
            if (keep_signs) {
              EXPECT_TRUE(std::signbit(x[e]) ? y[e] <= 0.0f : y[e] >= 0.0f) << "e = " << e;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KvGroupCodes, testing_util::kCpuPaths, testing_util::cpu_path_name);

}  // namespace
}  // namespace leoam::kernels
