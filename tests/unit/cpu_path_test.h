// A test fixture for the dispatched kernels: each test runs once per CPU path (scalar, AVX2),
// with the dispatch capped at that path, and is skipped where the CPU lacks it. Shared by the
// kernel and sparse tests:
//
//   class Ops : public testing_util::CpuPathTest {};
//   INSTANTIATE_TEST_SUITE_P(Paths, Ops, testing_util::kCpuPaths, testing_util::cpu_path_name);
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/cpu_features.h"

namespace leoam::testing_util {

class CpuPathTest : public ::testing::TestWithParam<CpuPath> {
 protected:
  void SetUp() override {
    if (set_cpu_path_cap(GetParam()) != GetParam()) GTEST_SKIP() << "this CPU lacks the path";
  }
  void TearDown() override { set_cpu_path_cap(CpuPath::kAvx512); }
};

inline const auto kCpuPaths = ::testing::Values(CpuPath::kScalar, CpuPath::kAvx2);
// For the kernels that have an AVX-512 path of their own.
inline const auto kCpuPathsWithAvx512 = ::testing::Values(CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvx512);

inline std::string cpu_path_name(const ::testing::TestParamInfo<CpuPath>& info) {
  switch (info.param) {
    case CpuPath::kScalar: return "scalar";
    case CpuPath::kAvx2: return "avx2";
    case CpuPath::kAvx512: return "avx512";
  }
  return "unknown";
}

}  // namespace leoam::testing_util
