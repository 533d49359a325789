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

inline std::string cpu_path_name(const ::testing::TestParamInfo<CpuPath>& info) {
  return info.param == CpuPath::kScalar ? "scalar" : "avx2";
}

}  // namespace leoam::testing_util
