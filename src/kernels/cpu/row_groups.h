// Q4_0 and Q8_0 weight matrices stored in row groups: rows [0, 8 floor(n_rows / 8)) in groups of
// 8 whose blocks are interleaved, the last n_rows % 8 rows as GGUF stores them. A group takes the
// bytes of its 8 rows, so rows r0 = 8k onward start at r0 * row_bytes as before. Block b:
//   [8 f16 scales d, row 0..7] then the rows' quant bytes in 4-byte chunks, chunk-major:
//   chunk j of rows 0..7 (32 bytes), chunk j + 1 of rows 0..7, ... (4 chunks for Q4_0, 8 for Q8_0)
// So one 256-bit load holds the same 4 quant bytes of all 8 rows and one vcvtph2ps their 8
// scales: the decode dot (dot_q8.h, dot_groups_q8) keeps one accumulator lane per row and needs no
// horizontal folds, where a row-major dot spends about half its instructions folding and
// gathering scales (q8_avx2.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"
#include "kernels/cpu/matmul.h"

namespace leoam::kernels {

constexpr int64_t kRowGroup = 8;

// True for the types that have a row-group layout (Q4_0, Q8_0).
bool has_row_groups(GgmlType type);

// The n_rows rows at src (row-major, row_bytes each) in the row-group layout at dst (the same
// size; src and dst do not overlap).
void group_rows(GgmlType type, const void* src, size_t row_bytes, int64_t n_rows, void* dst);

// Rows [r0, r0 + n) of a matrix in the row-group layout, written row-major (n * row_bytes) to out.
void ungroup_rows(GgmlType type, const void* data, size_t row_bytes, int64_t n_rows, int64_t r0, int64_t n,
                  void* out);

// Row r of w in GGUF's layout: a pointer into w when it is row-major (or r is a tail row),
// else `scratch` (w.row_bytes long) filled by ungroup_rows.
const void* matrix_row(const MatrixView& w, int64_t r, void* scratch);

}  // namespace leoam::kernels
