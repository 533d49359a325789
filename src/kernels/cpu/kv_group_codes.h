// The KV codec's group-wise integer codes (kv/kv_codec.h owns the format and rounds the headers):
// the range of a group, a value's code given its group's minimum and scale, and a code's value
// min + scale * code. Codes are packed 8-bit (a byte each) or 4-bit (element 2i in the low nibble
// of byte i). The scalar reference in namespace ref and the AVX2 path are bitwise equal;
// cpu_path() picks one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam::kernels {

// Where n elements' headers and codes lie: element e's header is min[e / group], scale[e / group];
// its code is at index e of the packed codes at q (group_bytes 0), or at index e % group of its
// group's, which start at q + (e / group) * group_bytes (a group's codes between its headers).
// The AVX2 path takes group 1 with group_bytes 0, or group a multiple of 8.
struct CodeLayout {
  int bits = 8;            // 8 or 4
  int64_t group = 1;       // elements a header
  size_t group_bytes = 0;  // bytes from one group's codes to the next's; 0: end to end
};

struct KvCodeKernels {
  // lo[j], hi[j] = the min and max of group j of x[n]: [j * group, min(n, (j + 1) * group)), n >= 1
  // (for -0 and +0 either may come back).
  void (*group_ranges)(const float* x, int64_t n, int64_t group, float* lo, float* hi);
  // lo[e], hi[e] = the min and max of x[r * n + e] over rows r in [0, t), t >= 1, e in [0, n).
  void (*column_range)(const float* x, int64_t t, int64_t n, float* lo, float* hi);
  // The codes of x[n] at q: element e's code is (x - min) / scale + 1/2 in double, clamped to
  // [0, 2^bits - 1], truncated; 0 where its scale is 0. With keep_signs, a code whose value has the
  // other sign bit than x moves one step toward x's side. Zeroes the rest of the bytes it writes to.
  void (*encode)(const float* x, const float* min, const float* scale, CodeLayout layout, int64_t n, bool keep_signs,
                 uint8_t* q);
  // y[n] = min + scale * code (f32, or f16 rounded to nearest even) of the codes at q.
  void (*decode_f32)(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n, float* y);
  void (*decode_f16)(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n, uint16_t* y);
};

// The fastest kernels this CPU runs.
const KvCodeKernels& kv_code_kernels();

namespace ref {
const KvCodeKernels& kv_code_kernels();
}  // namespace ref

}  // namespace leoam::kernels
