// Panels: 16 rows of a Q4_K or Q6_K matrix unpacked for prefill's multi-token 8-bit product
// (dot_q8.h, gemm_rows_q8). A K-quant row mixes 4- or 6-bit quants with a scale per sub-block
// (32 elements for Q4_K, 16 for Q6_K); unpacked, lane r of every 64-byte vector is row r, so one
// vpdpbusd multiplies 4 elements of 16 rows with 4 broadcast activation bytes, and each
// sub-block's 16 scales are one vector. The panel is built per call and reused by every token.
//
// Per super-block of 256 elements (kpanel_super_bytes, offsets 64-byte aligned):
//
//   offset  0          64           128                 640                 640 + 64 n_sub
//           +----------+------------+-------------------+-------------------+-----------------+
//           | d[16]    | dmin[16]   | mp[8][16] int16x2 | sc[n_sub][16]     | q[64][16][4]    |
//           | f32      | f32        | offset weights    | int32             | u8, chunk-major |
//           +----------+------------+-------------------+-------------------+-----------------+
//
//   row r of the super-block = d[r] * sum_s sc[s][r] * sum_{e in s} q[e][r] x[e]
//                              - dmin[r] * sum_k (mp[k][r].0 bsums[2k] + mp[k][r].1 bsums[2k+1])
//   with bsums the activation's sums of 16 (q8_activation.h, BlockQ8K), and element e's quant at
//   q[e / 4][r][e % 4] (q in [0, 15] for Q4_K, [0, 63] for Q6_K).
//   Q4_K: n_sub 8, sc = the 6-bit scales, mp[k] = (m_k, m_k) (both halves of sub-block k).
//   Q6_K: n_sub 16, sc = the int8 scales, dmin = d, mp[k] = (32 sc_2k, 32 sc_2k+1): the -32 of
//   its quants.
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
