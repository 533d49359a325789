// The OpenBLAS core check (kernels/cpu/blas_core.h): on a CPU with AVX2, prefill's sgemm runs
// AVX2 kernels or better, whatever OpenBLAS made of the CPU's model; and an sgemm after the check
// still computes the product.
#include "kernels/cpu/blas_core.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/gemm.h"

namespace leoam::kernels {
namespace {

TEST(BlasCoreTest, KnowsWhichCoresRunAvx2Kernels) {
  EXPECT_TRUE(has_avx2_kernels("Haswell"));
  EXPECT_TRUE(has_avx2_kernels("SkylakeX"));
  EXPECT_TRUE(has_avx2_kernels("zen"));
  EXPECT_FALSE(has_avx2_kernels("Prescott"));
  EXPECT_FALSE(has_avx2_kernels("Sandybridge"));
  EXPECT_FALSE(has_avx2_kernels(""));
}

TEST(BlasCoreTest, CpuWithAvx2GetsAvx2KernelsOrBetter) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) GTEST_SKIP() << "OPENBLAS_CORETYPE chooses the core";
  if (!cpu_features().avx2) GTEST_SKIP() << "this CPU has no AVX2";
  const std::string core(blas_core());
  if (core.empty()) GTEST_SKIP() << "this OpenBLAS does not name its core";
  EXPECT_TRUE(has_avx2_kernels(core)) << "OpenBLAS core " << core;
}

TEST(BlasCoreTest, SgemmAfterTheCheckComputesTheProduct) {
  blas_core();
  // c[i][j] = sum_k a[i][k] b[j][k] with small integers, exact in f32.
  constexpr int64_t m = 37, n = 53, k = 71;
  std::vector<float> a(m * k), b(n * k), c(m * n);
  for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (int64_t i = 0; i < n * k; ++i) b[i] = static_cast<float>(i % 5) - 2.0f;
  blas_sgemm_nt(a.data(), b.data(), c.data(), m, n, k, 2);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float want = 0.0f;
      for (int64_t x = 0; x < k; ++x) want += a[i * k + x] * b[j * k + x];
      ASSERT_EQ(c[i * n + j], want) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace leoam::kernels
