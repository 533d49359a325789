// 8-bit activation blocks for decode: matvec quantizes the activation x once per matrix into the
// format that matches the weight type's block, then every row is an integer dot product
// (dot_q8.h), at a relative L2 error of about 0.5% on one dot product (q8_test.cpp bounds it).
//   Q4_0, Q8_0     BlockQ8A32   32 elements: f32 scale d, f32 d*sum(qs), int8 qs[32]
//   Q4_K, Q6_K     BlockQ8K     256 elements: f32 scale d, int16 sums of 16, int8 qs[256]
//   F32/F16/BF16   none         x stays f32 (dot_row)
// Within a block: x[i] ~= d * qs[i], d = max|x| / 127, qs[i] = round-to-nearest-even(x[i] / d) in
// [-127, 127] (127, not 128: the AVX2 sign trick needs |qs| <= 127). Every path writes the same
// bits as ref::quantize_activation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace leoam::kernels {

// 32 activations for a Q4_0 or Q8_0 weight block, 40 bytes.
//
//   offset 0     4      8                      40
//          +-----+------+----------------------+
//          | d   | s    | qs[32], int8         |
//          | f32 | f32  |                      |
//          +-----+------+----------------------+
//
//   x[j] ~= d * qs[j];  s = d * sum_j qs[j] (Q4_0 stores q + 8: its dot needs -8 * d_w * s)
struct BlockQ8A32 {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8A32) == 40, "BlockQ8A32 is 40 bytes");

// 256 activations for a Q4_K or Q6_K super-block, 292 bytes.
//
//   offset 0     4              36                        292
//          +-----+--------------+-------------------------+
//          | d   | bsums[16]    | qs[256], int8           |
//          | f32 | int16        |                         |
//          +-----+--------------+-------------------------+
//
//   x[j] ~= d * qs[j];  bsums[k] = sum of qs[16k .. 16k + 16) (Q4_K's mins per 32 are
//   bsums[2k] + bsums[2k + 1]; Q6_K's offset -32 is per 16)
struct BlockQ8K {
  float d;
  int16_t bsums[16];
  int8_t qs[256];
};
static_assert(sizeof(BlockQ8K) == 292, "BlockQ8K is 292 bytes");

enum class ActivationFormat : uint8_t { kF32, kQ8A32, kQ8K };

// The activation format the integer dot of `weight_type` takes (kF32: no quantized dot).
ActivationFormat activation_format(GgmlType weight_type);

// Bytes quantize_activation writes for n elements (n a multiple of the weight type's block
// size); 0 for kF32.
size_t activation_bytes(GgmlType weight_type, int64_t n);

// Encodes x[0..n) into activation_bytes(weight_type, n) bytes at dst, in the format of
// activation_format(weight_type) (which must not be kF32). Dispatched by cpu_path().
void quantize_activation(GgmlType weight_type, const float* x, int64_t n, void* dst);

namespace ref {
void quantize_activation(GgmlType weight_type, const float* x, int64_t n, void* dst);
}  // namespace ref

}  // namespace leoam::kernels
