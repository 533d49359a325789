// Panels: 16 rows of a Q4_K or Q6_K matrix unpacked for prefill's multi-token 8-bit product
// (dot_q8.h, gemm_rows_q8): lane r of every 64-byte vector is row r, so one vpdpbusd multiplies
// 4 elements of 16 rows with 4 broadcast activation bytes, and each sub-block's 16 scales are one
// vector. The panel is built per call and reused by every token.
// Per super-block of 256 elements (kpanel_super_bytes, offsets 64-byte aligned):
//   0            64              128                 640                   640 + 64 n_sub
//   | d[16] f32  | dmin[16] f32  | mp[8][16] int16x2 | sc[n_sub][16] int32 | q[64][16][4] u8 |
//   element e's quant of row r at q[e / 4][r][e % 4]; Q4_K: n_sub 8; Q6_K: n_sub 16, dmin = d
// The row's sum, and what mp and sc hold for each type: docs/cpu.md#k-quant-panels
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace leoam::kernels {

constexpr int kPanelRows = 16;

// Byte offsets within a super-block of a panel (the diagram above).
constexpr size_t kPanelD = 0;
constexpr size_t kPanelDmin = 64;
constexpr size_t kPanelOffsetPairs = 128;
constexpr size_t kPanelScales = 640;
// The quants follow the n_sub scale vectors.
constexpr size_t kpanel_quants(int n_sub) { return kPanelScales + 64 * static_cast<size_t>(n_sub); }

// Sub-blocks per super-block: 8 (Q4_K), 16 (Q6_K).
int kpanel_n_sub(GgmlType type);

// Bytes of one super-block of a panel.
size_t kpanel_super_bytes(GgmlType type);

// Unpacks rows [0, n_rows) (n_rows <= 16; row r at rows + r * row_bytes, n elements, a multiple
// of 256) into the panel at dst (n / 256 * kpanel_super_bytes bytes, 64-byte aligned). Rows
// n_rows.. of the panel are zero.
void kpanel_pack(GgmlType type, const void* rows, size_t row_bytes, int n_rows, int64_t n, void* dst);

}  // namespace leoam::kernels
