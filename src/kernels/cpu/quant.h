// Per-type row kernels: dequantization, dot product with an F32 vector, and quantization.
// Block layouts are those of GGUF/ggml, bit for bit (see each block struct in quant_blocks.h).
// A "row" holds n elements, n a multiple of the type's block size (ggml_block_size()).
// The functions in namespace ref are the plain scalar references the fast paths are tested against.
#pragma once

#include <cstdint>

#include "core/ggml_type.h"

namespace leoam::kernels {

// dst[0..n) = the n values stored in src.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// sum_i row[i] * x[i] over n elements of a row of `type`.
float dot_row(GgmlType type, const void* row, const float* x, int64_t n);

// Encodes src[0..n) into blocks of `type` at dst (ggml_row_size(type, n) bytes). Used by the
// GGUF writer and the model generators; round-to-nearest, no importance weighting.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

namespace ref {
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
float dot_row(GgmlType type, const void* row, const float* x, int64_t n);
}  // namespace ref

}  // namespace leoam::kernels
