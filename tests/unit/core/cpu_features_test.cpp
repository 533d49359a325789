// CPU feature detection and the kernel path cap (cpu_features.h).
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace leoam {
namespace {

CpuPath best_path() {
  const CpuFeatures& f = cpu_features();
  return f.avx512 ? CpuPath::kAvx512 : f.avx2 ? CpuPath::kAvx2 : CpuPath::kScalar;
}

TEST(CpuFeatures, Consistent) {
  const CpuFeatures& f = cpu_features();
#ifdef __AVX2__
  // This binary was compiled for AVX2 (-march=native or -mavx2 -mfma -mf16c) and is running.
  EXPECT_TRUE(f.avx2);
#endif
  EXPECT_TRUE(!f.avx512 || f.avx2);
  EXPECT_TRUE(!(f.avx512_vnni || f.avx512_bf16) || f.avx512);
  EXPECT_TRUE(!f.avx_vnni || f.avx2);
  EXPECT_EQ(&f, &cpu_features());  // cached
}

TEST(CpuPath, CapIsClampedToTheCpuAndRestored) {
  EXPECT_EQ(set_cpu_path_cap(CpuPath::kScalar), CpuPath::kScalar);
  EXPECT_EQ(cpu_path(), CpuPath::kScalar);
  EXPECT_EQ(cpu_path_name(), "scalar");
  const CpuPath avx2 = set_cpu_path_cap(CpuPath::kAvx2);
  EXPECT_EQ(avx2, cpu_features().avx2 ? CpuPath::kAvx2 : CpuPath::kScalar);
  EXPECT_EQ(cpu_path(), avx2);
  EXPECT_EQ(set_cpu_path_cap(CpuPath::kAvx512), best_path());
  EXPECT_EQ(cpu_path(), best_path());
  if (best_path() == CpuPath::kAvx512) {
    EXPECT_EQ(cpu_path_name().substr(0, 6), "avx512");
  } else if (best_path() == CpuPath::kAvx2) {
    EXPECT_EQ(cpu_path_name(), "avx2");
  }
}

// LEOAM_CPU_PATH is read when the path is first used, so each case runs in a fresh process
// ("threadsafe" death tests re-execute the binary).
int path_with_env(const char* value) {
  setenv("LEOAM_CPU_PATH", value, 1);
  return static_cast<int>(cpu_path());
}

TEST(CpuPathDeathTest, EnvironmentCapsThePath) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(path_with_env("scalar")), ::testing::ExitedWithCode(0), "");
  const int avx2 = static_cast<int>(cpu_features().avx2 ? CpuPath::kAvx2 : CpuPath::kScalar);
  EXPECT_EXIT(std::exit(path_with_env("avx2")), ::testing::ExitedWithCode(avx2), "");
  // Never above the CPU; an unknown value caps nothing.
  EXPECT_EXIT(std::exit(path_with_env("avx512")), ::testing::ExitedWithCode(static_cast<int>(best_path())), "");
  EXPECT_EXIT(std::exit(path_with_env("bogus")), ::testing::ExitedWithCode(static_cast<int>(best_path())), "");
}

}  // namespace
}  // namespace leoam
