#include "kernels/cpu/row_groups.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace leoam::kernels {
namespace {

constexpr size_t kScaleBytes = 2;  // the f16 d leading each Q4_0 / Q8_0 block
constexpr size_t kChunk = 4;

// The blocks of a row and the layout of a group's block (row_groups.h).
struct GroupLayout {
  size_t block_bytes;  // of one row's block
  size_t n_chunks;     // 4-byte quant chunks per row's block
  size_t n_blocks;     // per row

  GroupLayout(GgmlType type, size_t row_bytes)
      : block_bytes(ggml_row_size(type, ggml_block_size(type))),
        n_chunks((block_bytes - kScaleBytes) / kChunk),
        n_blocks(row_bytes / block_bytes) {}

  // Offsets in a group's block of row i's scale and of its quant chunk j.
  static size_t scale(int64_t i) { return static_cast<size_t>(i) * kScaleBytes; }
  static size_t chunk(size_t j, int64_t i) {
    return kRowGroup * kScaleBytes + (j * kRowGroup + static_cast<size_t>(i)) * kChunk;
  }
};

}  // namespace

bool has_row_groups(GgmlType type) { return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0; }

void group_rows(GgmlType type, const void* src, size_t row_bytes, int64_t n_rows, void* dst) {
  assert(has_row_groups(type));
  const GroupLayout l(type, row_bytes);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t n_grouped = n_rows / kRowGroup * kRowGroup;
  for (int64_t g = 0; g < n_grouped; g += kRowGroup) {
    const uint8_t* rows = s + static_cast<size_t>(g) * row_bytes;
    uint8_t* out = d + static_cast<size_t>(g) * row_bytes;
    for (size_t b = 0; b < l.n_blocks; ++b) {
      uint8_t* o = out + b * kRowGroup * l.block_bytes;
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const uint8_t* blk = rows + static_cast<size_t>(r) * row_bytes + b * l.block_bytes;
        std::memcpy(o + GroupLayout::scale(r), blk, kScaleBytes);
        for (size_t j = 0; j < l.n_chunks; ++j) {
          std::memcpy(o + GroupLayout::chunk(j, r), blk + kScaleBytes + j * kChunk, kChunk);
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
  const GroupLayout l(type, row_bytes);
  int64_t r = r0;
  // Group by group, block by block, so that each group is read once, in address order.
  while (r < r0 + n && r < n_grouped) {
    const int64_t g = r / kRowGroup * kRowGroup;
    const int64_t i1 = std::min(g + kRowGroup, r0 + n) - g;
    const uint8_t* group = base + static_cast<size_t>(g) * row_bytes;
    for (size_t b = 0; b < l.n_blocks; ++b) {
      const uint8_t* blk = group + b * kRowGroup * l.block_bytes;
      for (int64_t i = r - g; i < i1; ++i) {
        uint8_t* ob = o + static_cast<size_t>(g + i - r0) * row_bytes + b * l.block_bytes;
        std::memcpy(ob, blk + GroupLayout::scale(i), kScaleBytes);
        for (size_t j = 0; j < l.n_chunks; ++j) {
          std::memcpy(ob + kScaleBytes + j * kChunk, blk + GroupLayout::chunk(j, i), kChunk);
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
