// The row-group layout (row_groups.h): its byte positions, the round trip back to GGUF's rows (one
// at a time and in ranges), and matrix_row on grouped, row-major and tail rows.
#include "kernels/cpu/row_groups.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"

namespace leoam::kernels {
namespace {

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(RowGroups, Types) {
  EXPECT_TRUE(has_row_groups(GgmlType::kQ4_0));
  EXPECT_TRUE(has_row_groups(GgmlType::kQ8_0));
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    EXPECT_FALSE(has_row_groups(t));
  }
}

// Block b of row r: its scale at group block offset 2 r, quant chunk j at 16 + 32 j + 4 r.
TEST(RowGroups, BytePositions) {
  std::mt19937 rng(3);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(type)));
    const int64_t n_cols = 3 * ggml_block_size(type);
    const size_t row_bytes = ggml_row_size(type, n_cols);
    const size_t block_bytes = row_bytes / 3;
    const size_t n_chunks = (block_bytes - 2) / 4;
    const std::vector<uint8_t> rows = random_bytes(row_bytes * 8, rng);
    std::vector<uint8_t> grouped(rows.size());
    group_rows(type, rows.data(), row_bytes, 8, grouped.data());
    for (int r = 0; r < 8; ++r) {
      for (size_t b = 0; b < 3; ++b) {
        const uint8_t* src = rows.data() + r * row_bytes + b * block_bytes;
        const uint8_t* g = grouped.data() + b * 8 * block_bytes;
        ASSERT_EQ(std::memcmp(g + 2 * r, src, 2), 0) << "scale of row " << r << " block " << b;
        for (size_t j = 0; j < n_chunks; ++j) {
          ASSERT_EQ(std::memcmp(g + 16 + 32 * j + 4 * r, src + 2 + 4 * j, 4), 0)
              << "row " << r << " block " << b << " chunk " << j;
        }
      }
    }
  }
}

// Every row comes back, grouped or in the tail (n_rows % 8), and matrix_row points into a
// row-major view or a tail row without copying.
TEST(RowGroups, RoundTripAndMatrixRow) {
  std::mt19937 rng(5);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ8_0}) {
    for (int64_t n_rows : {3, 8, 13, 24}) {
      SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(type)) + std::string(" rows ") + std::to_string(n_rows));
      const int64_t n_cols = 5 * ggml_block_size(type);
      const size_t row_bytes = ggml_row_size(type, n_cols);
      const std::vector<uint8_t> rows = random_bytes(row_bytes * static_cast<size_t>(n_rows), rng);
      std::vector<uint8_t> grouped(rows.size());
      group_rows(type, rows.data(), row_bytes, n_rows, grouped.data());
      const MatrixView plain{type, rows.data(), n_cols, n_rows, row_bytes};
      MatrixView view = plain;
      view.data = grouped.data();
      view.row_groups = true;
      std::vector<uint8_t> out(row_bytes), scratch(row_bytes);
      const int64_t n_grouped = n_rows / 8 * 8;
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* want = rows.data() + r * row_bytes;
        ungroup_rows(type, grouped.data(), row_bytes, n_rows, r, 1, out.data());
        ASSERT_EQ(std::memcmp(out.data(), want, row_bytes), 0) << "ungroup_rows " << r;
        const void* got = matrix_row(view, r, scratch.data());
        ASSERT_EQ(std::memcmp(got, want, row_bytes), 0) << "matrix_row " << r;
        EXPECT_EQ(got == scratch.data(), r < n_grouped) << "row " << r;
        EXPECT_EQ(matrix_row(plain, r, scratch.data()), want);
      }
      // Every range of rows at once, across group boundaries and into the tail.
      std::vector<uint8_t> range(rows.size());
      for (int64_t r0 = 0; r0 < n_rows; ++r0) {
        for (int64_t n = 0; r0 + n <= n_rows; ++n) {
          ungroup_rows(type, grouped.data(), row_bytes, n_rows, r0, n, range.data());
          ASSERT_EQ(std::memcmp(range.data(), rows.data() + r0 * row_bytes, n * row_bytes), 0)
              << "rows " << r0 << " + " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace leoam::kernels
