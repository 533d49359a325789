#include "kernels/cpu/row_groups.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace leoam::kernels {
namespace {

constexpr size_t kScaleBytes = 2;  // the f16 d leading each Q4_0 / Q8_0 block
constexpr size_t kChunk = 4;

}  // namespace

bool has_row_groups(GgmlType type) { return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0; }

void group_rows(GgmlType type, const void* src, size_t row_bytes, int64_t n_rows, void* dst) {
  assert(has_row_groups(type));
  const size_t block_bytes = ggml_row_size(type, ggml_block_size(type));
  const size_t n_chunks = (block_bytes - kScaleBytes) / kChunk;
  const size_t n_blocks = row_bytes / block_bytes;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t n_grouped = n_rows / kRowGroup * kRowGroup;
  for (int64_t g = 0; g < n_grouped; g += kRowGroup) {
    const uint8_t* rows = s + static_cast<size_t>(g) * row_bytes;
    uint8_t* out = d + static_cast<size_t>(g) * row_bytes;
    for (size_t b = 0; b < n_blocks; ++b) {
      uint8_t* o = out + b * kRowGroup * block_bytes;
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const uint8_t* blk = rows + static_cast<size_t>(r) * row_bytes + b * block_bytes;
        std::memcpy(o + r * kScaleBytes, blk, kScaleBytes);
        for (size_t j = 0; j < n_chunks; ++j) {
          std::memcpy(o + kRowGroup * kScaleBytes + (j * kRowGroup + r) * kChunk, blk + kScaleBytes + j * kChunk, kChunk);
        }
      }
    }
  }
  std::memcpy(d + static_cast<size_t>(n_grouped) * row_bytes, s + static_cast<size_t>(n_grouped) * row_bytes,
              static_cast<size_t>(n_rows - n_grouped) * row_bytes);
}

void ungroup_rows(GgmlType type, const void* data, size_t row_bytes, int64_t n_rows, int64_t r0, int64_t n,
                  void* out) {
  assert(has_row_groups(type) && r0 >= 0 && n >= 0 && r0 + n <= n_rows);
  const auto* base = static_cast<const uint8_t*>(data);
  auto* o = static_cast<uint8_t*>(out);
  const int64_t n_grouped = n_rows / kRowGroup * kRowGroup;
  const size_t block_bytes = ggml_row_size(type, ggml_block_size(type));
  const size_t n_chunks = (block_bytes - kScaleBytes) / kChunk;
  const size_t n_blocks = row_bytes / block_bytes;
  int64_t r = r0;
  // Group by group, block by block, so that each group is read once, in address order.
  while (r < r0 + n && r < n_grouped) {
    const int64_t g = r / kRowGroup * kRowGroup;
    const int64_t i1 = std::min(g + kRowGroup, r0 + n) - g;
    const uint8_t* group = base + static_cast<size_t>(g) * row_bytes;
    for (size_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = group + b * kRowGroup * block_bytes;
      for (int64_t i = r - g; i < i1; ++i) {
        uint8_t* ob = o + static_cast<size_t>(g + i - r0) * row_bytes + b * block_bytes;
        std::memcpy(ob, blk + i * kScaleBytes, kScaleBytes);
        for (size_t j = 0; j < n_chunks; ++j) {
          std::memcpy(ob + kScaleBytes + j * kChunk, blk + kRowGroup * kScaleBytes + (j * kRowGroup + i) * kChunk,
                      kChunk);
        }
      }
    }
    r = g + i1;
  }
  // The tail rows are stored row-major.
  std::memcpy(o + static_cast<size_t>(r - r0) * row_bytes, base + static_cast<size_t>(r) * row_bytes,
              static_cast<size_t>(r0 + n - r) * row_bytes);
}

const void* matrix_row(const MatrixView& w, int64_t r, void* scratch) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (!w.row_groups || r >= w.n_rows / kRowGroup * kRowGroup) return base + static_cast<size_t>(r) * w.row_bytes;
  ungroup_rows(w.type, w.data, w.row_bytes, w.n_rows, r, 1, scratch);
  return scratch;
}

}  // namespace leoam::kernels
