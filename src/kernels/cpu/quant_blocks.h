// The block structs of the quantized ggml types, bit for bit as GGUF files store them
// (little-endian, no padding). Each struct's diagram shows byte offsets and how element i of the
// block is decoded. "f16" is an IEEE half stored as uint16_t (see core/fp16.h).
#pragma once

#include <cstdint>

#include "core/ggml_type.h"

namespace leoam::kernels {

// 32: ggml's QK4_0 and QK8_0.
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
// 12: ggml's K_SCALE_SIZE, the packed 6-bit scales and mins of Q4_K.
inline constexpr int kKScaleSize = 12;

// Q4_0: 32 elements, 18 bytes.
//
//   offset 0      2                                   18
//          +------+-----------------------------------+
//          | d    | qs[16]                            |
//          | f16  | byte j: low nibble  -> element j  |
//          |      |         high nibble -> element j+16
//          +------+-----------------------------------+
//
//   x[j]      = ((qs[j] & 0xF) - 8) * d        j in [0, 16)
//   x[j + 16] = ((qs[j] >>  4) - 8) * d
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes as in ggml");

// Q8_0: 32 elements, 34 bytes.
//
//   offset 0      2                       34
//          +------+-----------------------+
//          | d    | qs[32], int8          |
//          | f16  |                       |
//          +------+-----------------------+
//
//   x[j] = qs[j] * d
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes as in ggml");

// Q4_K: a super-block of 256 elements = 8 sub-blocks of 32, 144 bytes.
//
//   offset 0     2      4             16                              144
//          +-----+------+-------------+-------------------------------+
//          | d   | dmin | scales[12]  | qs[128]                       |
//          | f16 | f16  | 8 x 6-bit sc, 8 x 6-bit m                   |
//          +-----+------+-------------+-------------------------------+
//
//   scales[12], sub-block j in [0, 8) has a 6-bit scale sc[j] and a 6-bit min m[j]:
//
//     byte:   0..3               4..7               8..11
//           +------------------+------------------+---------------------------+
//           | sc[0..3] (bits   | m[0..3]  (bits   | low  nibble: sc[4..7] & 0xF|
//           |   0-5)           |   0-5)           | high nibble: m[4..7]  & 0xF|
//           | sc[4..7] >> 4    | m[4..7] >> 4     |                           |
//           |   (bits 6-7)     |   (bits 6-7)     |                           |
//           +------------------+------------------+---------------------------+
//
//     j < 4:  sc[j] = scales[j] & 63
//             m[j]  = scales[j + 4] & 63
//     j >= 4: sc[j] = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4)
//             m[j]  = (scales[j + 4] >>  4) | ((scales[j]     >> 6) << 4)
//
//   qs[128]: four 32-byte groups; group g in [0, 4) holds elements [64g, 64g + 64):
//     low  nibble of qs[32g + l] -> element 64g + l       (sub-block 2g)
//     high nibble of qs[32g + l] -> element 64g + 32 + l  (sub-block 2g + 1)
//
//   x = (d * sc[j]) * q - (dmin * m[j])     q in [0, 15], j the element's sub-block
//   (computed as one fused multiply-add: fma(d * sc[j], q, -(dmin * m[j])))
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes as in ggml");

// Q6_K: a super-block of 256 elements = 16 sub-blocks of 16, 210 bytes.
//
//   offset 0              128             192           208   210
//          +--------------+---------------+-------------+-----+
//          | ql[128]      | qh[64]        | scales[16]  | d   |
//          | low 4 bits   | high 2 bits   | int8        | f16 |
//          +--------------+---------------+-------------+-----+
//
//   Two halves h in {0, 1} of 128 elements; half h uses ql[64h..64h+64), qh[32h..32h+32),
//   scales[8h..8h+8). Within a half, for l in [0, 32):
//
//     element   low 4 bits            high 2 bits          scale
//     l         ql[l]      & 0xF      (qh[l] >> 0) & 3     scales[l/16 + 0]
//     l + 32    ql[l + 32] & 0xF      (qh[l] >> 2) & 3     scales[l/16 + 2]
//     l + 64    ql[l]      >> 4       (qh[l] >> 4) & 3     scales[l/16 + 4]
//     l + 96    ql[l + 32] >> 4       (qh[l] >> 6) & 3     scales[l/16 + 6]
//
//   q = (low | high << 4) - 32 in [-32, 31];   x = (d * scale) * q
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes as in ggml");

// Sub-block j's 6-bit scale and min from the packed Q4_K scales (ggml's get_scale_min_k4).
inline void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// The inverse: packs 8 scales and 8 mins (each < 64) into the 12 bytes.
inline void q4_k_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[kKScaleSize]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

}  // namespace leoam::kernels
