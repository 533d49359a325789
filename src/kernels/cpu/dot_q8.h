// Integer dot products of quantized weight rows with an 8-bit activation (q8_activation.h):
// Q4_0 and Q8_0 with BlockQ8A32, Q4_K and Q6_K with BlockQ8K. Per block the integer sum is
// exact; the paths differ only in the order of the f32 accumulation of the scaled block sums.
//
// Paths (cpu_path()): scalar = ref::dot_row_q8; AVX2 = vpmaddubsw/vpmaddwd (unsigned weight
// nibbles x signed activations, or |w| x sign(x, w) for Q8_0); AVX-512 = 512-bit vpdpbusd with
// VNNI, vpmaddubsw without. dot_rows_q8 runs up to 4 rows per pass so that each activation block
// is loaded once for all of them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace leoam::kernels {

// True for the weight types with an integer dot (Q4_0, Q8_0, Q4_K, Q6_K).
bool has_dot_q8(GgmlType type);

// sum_i w[i] * xq[i] over n elements of one row of `type`, xq from quantize_activation(type).
float dot_row_q8(GgmlType type, const void* row, const void* xq, int64_t n);

// out[r] = dot_row_q8(type, rows + r * row_bytes, xq, n) for r in [0, n_rows).
void dot_rows_q8(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const void* xq, int64_t n,
                 float* out);

// out[8 g + i] = the dot of row i of row group g with xq, for the n_groups groups at `groups`
// (row_groups.h: Q4_0 or Q8_0, group g at groups + g * 8 * row_bytes). One accumulator lane per
// row: the paths differ from dot_rows_q8 only in the f32 accumulation order.
void dot_groups_q8(GgmlType type, const void* groups, size_t row_bytes, int64_t n_groups, const void* xq, int64_t n,
                   float* out);

// y[t * ldy + 8 g + i] = dot_groups_q8's out[8 g + i] for token t, whose activation is at
// xq + t * xq_stride, for t in [0, n_tokens): the product prefill needs. Where the path has a
// multi-token kernel (gemm_q8_is_fast) each block of weights is unpacked once for several
// tokens; elsewhere this is dot_groups_q8 token by token. The f32 accumulation order is the same
// whatever n_tokens, so a prompt evaluated whole or in pieces gives the same bits.
void gemm_groups_q8(GgmlType type, const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                    size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy);

// The same for n_rows row-major rows of any type with an integer dot: y[t * ldy + r] for row r
// (at rows + r * row_bytes). Q4_K and Q6_K unpack 16 rows at a time into panels
// (kquant_panel.h); Q4_0 and Q8_0 put 16 rows at a time into row groups for gemm_groups_q8;
// without a multi-token kernel, dot_rows_q8 token by token. Invariant in n_tokens as above.
void gemm_rows_q8(GgmlType type, const void* rows, size_t row_bytes, int64_t n_rows, const void* xq,
                  size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy);

// True where `type` has a multi-token kernel on cpu_path() now (AVX-512 VNNI): gemm_groups_q8
// for Q4_0 and Q8_0, gemm_rows_q8 for every type with an integer dot.
bool gemm_q8_is_fast(GgmlType type);

namespace ref {
// Exact integer sum per block, then sum_b d_w[b] * d_x[b] * isum[b] in double.
float dot_row_q8(GgmlType type, const void* row, const void* xq, int64_t n);
}  // namespace ref

}  // namespace leoam::kernels
