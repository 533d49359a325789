// Helpers of the KV store tests: a scratch directory (temp_dir.h), and random KV rows.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "../temp_dir.h"

namespace leoam::testing_util {

// n rows of `row_elements` floats, uniform in [-2, 2).
inline std::vector<float> random_rows(std::mt19937& rng, int64_t n, int64_t row_elements) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n * row_elements));
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace leoam::testing_util
