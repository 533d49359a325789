// Internal to kernels/cpu: the per-path tables of the 8-bit activation kernels (q8_activation.h,
// dot_q8.h), each defined in the file of its instruction set and chosen by cpu_path().
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam::kernels::detail {

// out[r] = dot of row r (at rows + r * row_bytes) with the activation xq, for r in [0, n_rows),
// n_rows in [1, 4]; n elements, a multiple of the block size.
using DotRowsQ8Fn = void (*)(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n,
                             float* out);
// out[8 g + i] = dot of row i of group g (row_groups.h; group g at groups + g * 8 * row_bytes)
// with xq, for g in [0, n_groups).
using DotGroupsQ8Fn = void (*)(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq, int64_t n,
                               float* out);
// y[t * ldy + 8 g + i] = the dot of row i of group g with token t's activation (at
// xq + t * xq_stride), for g in [0, n_groups) and t in [0, n_tokens): prefill's product.
using GemmGroupsQ8Fn = void (*)(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy);
// y[t * ldy + r] = the dot of row r (at rows + r * row_bytes) with token t's activation, for r in
// [0, n_rows) and t in [0, n_tokens): prefill's product of row-major K-quant rows.
using GemmRowsQ8Fn = void (*)(const void* rows, size_t row_bytes, int64_t n_rows, const void* xq, size_t xq_stride,
                              int64_t n_tokens, int64_t n, float* y, int64_t ldy);
// Encodes x[0..n) into activation blocks at dst.
using QuantizeActivationFn = void (*)(const float* x, int64_t n, void* dst);

struct Q8Kernels {
  QuantizeActivationFn quantize_q8a32;  // -> BlockQ8A32
  QuantizeActivationFn quantize_q8k;    // -> BlockQ8K
  DotRowsQ8Fn dot_q4_0;
  DotRowsQ8Fn dot_q8_0;
  DotRowsQ8Fn dot_q4_k;
  DotRowsQ8Fn dot_q6_k;
  DotGroupsQ8Fn dot_groups_q4_0;
  DotGroupsQ8Fn dot_groups_q8_0;
  // nullptr where the path has no multi-token kernel (gemm_groups_q8 and gemm_rows_q8 then run
  // the one-token dots per token).
  GemmGroupsQ8Fn gemm_groups_q4_0;
  GemmGroupsQ8Fn gemm_groups_q8_0;
  GemmRowsQ8Fn gemm_rows_q4_k;
  GemmRowsQ8Fn gemm_rows_q6_k;
};

// The tables of each instruction set; nullptr where the build has no such path (not x86).
// Calling into a table the CPU lacks is undefined: dispatch through cpu_path() only.
const Q8Kernels* q8_kernels_avx2();
const Q8Kernels* q8_kernels_avx512();

// The table for cpu_path() now (never nullptr: the scalar references for kScalar).
const Q8Kernels& q8_kernels();

}  // namespace leoam::kernels::detail

namespace leoam::kernels::ref {
// The scalar activation quantizers and row dots that make up the kScalar table.
void quantize_q8a32(const float* x, int64_t n, void* dst);
void quantize_q8k(const float* x, int64_t n, void* dst);
}  // namespace leoam::kernels::ref
