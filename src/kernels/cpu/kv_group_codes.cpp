#include "kernels/cpu/kv_group_codes.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "kernels/cpu/avx2_util.h"

namespace leoam::kernels {

#ifdef LEOAM_HAVE_X86
const KvCodeKernels& kv_code_kernels_avx2();  // kv_group_codes_avx2.cpp
#endif

namespace ref {

namespace {

// The decoded value of `code`: scale * code is exact in f32 (11 + 8 significant bits), so only
// the sum rounds, with or without FMA.
float decoded_value(float min, float scale, int code) { return min + scale * static_cast<float>(code); }

// Element e's code: its byte and the shift of its bits there.
struct CodeAt {
  int64_t byte;
  int shift;
};
CodeAt code_at(CodeLayout layout, int64_t e) {
  const int64_t j = layout.group_bytes == 0 ? 0 : e / layout.group;
  const int64_t i = layout.group_bytes == 0 ? e : e % layout.group;
  const int64_t base = j * static_cast<int64_t>(layout.group_bytes);
  return layout.bits == 8 ? CodeAt{base + i, 0} : CodeAt{base + i / 2, static_cast<int>(4 * (i % 2))};
}

int get_code(const uint8_t* q, CodeLayout layout, int64_t e) {
  const CodeAt at = code_at(layout, e);
  return (q[at.byte] >> at.shift) & (layout.bits == 8 ? 0xff : 0xf);
}

void group_ranges(const float* x, int64_t n, int64_t group, float* lo, float* hi) {
  for (int64_t j = 0, i0 = 0; i0 < n; ++j, i0 += group) {
    float l = x[i0], h = x[i0];
    for (int64_t i = i0 + 1; i < std::min(n, i0 + group); ++i) {
      l = std::min(l, x[i]);
      h = std::max(h, x[i]);
    }
    lo[j] = l;
    hi[j] = h;
  }
}

void column_range(const float* x, int64_t t, int64_t n, float* lo, float* hi) {
  for (int64_t e = 0; e < n; ++e) {
    float l = x[e], h = x[e];
    for (int64_t r = 1; r < t; ++r) {
      l = std::min(l, x[r * n + e]);
      h = std::max(h, x[r * n + e]);
    }
    lo[e] = l;
    hi[e] = h;
  }
}

// With keep_signs, one step is enough: x lies within half a step of the code's value, and the
// group's [min, min + levels * scale] holds x, so the neighbour on x's side is at most a step away.
void encode(const float* x, const float* min, const float* scale, CodeLayout layout, int64_t n, bool keep_signs,
            uint8_t* q) {
  const double levels = layout.bits == 8 ? 255.0 : 15.0;
  for (int64_t e = 0; e < n; ++e) {  // zero the bytes first: 4-bit codes share them
    const CodeAt at = code_at(layout, e);
    q[at.byte] = 0;
  }
  for (int64_t e = 0; e < n; ++e) {
    const float m = min[e / layout.group];
    const double s = scale[e / layout.group];
    int code = 0;
    if (s != 0.0) {
      const double v = (static_cast<double>(x[e]) - m) / s + 0.5;
      // v >= 1 false for NaN too: a cast of NaN to an integer is undefined.
      code = v >= 1.0 ? static_cast<int>(std::min(v, levels)) : 0;
      if (keep_signs) {
        if (!std::signbit(x[e]) && decoded_value(m, static_cast<float>(s), code) < 0.0f) ++code;
        if (std::signbit(x[e]) && decoded_value(m, static_cast<float>(s), code) > 0.0f) --code;
      }
    }
    const CodeAt at = code_at(layout, e);
    q[at.byte] = static_cast<uint8_t>(q[at.byte] | (code << at.shift));
  }
}

void decode_f32(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n, float* y) {
  for (int64_t e = 0; e < n; ++e) y[e] = decoded_value(min[e / layout.group], scale[e / layout.group], get_code(q, layout, e));
}

void decode_f16(const uint8_t* q, CodeLayout layout, const float* min, const float* scale, int64_t n, uint16_t* y) {
  for (int64_t e = 0; e < n; ++e) {
    y[e] = f32_to_f16(decoded_value(min[e / layout.group], scale[e / layout.group], get_code(q, layout, e)));
  }
}

}  // namespace

const KvCodeKernels& kv_code_kernels() {
  static constexpr KvCodeKernels kKernels{group_ranges, column_range, encode, decode_f32, decode_f16};
  return kKernels;
}

}  // namespace ref

const KvCodeKernels& kv_code_kernels() {
#ifdef LEOAM_HAVE_X86
  if (cpu_path() >= CpuPath::kAvx2) return kv_code_kernels_avx2();
#endif
  return ref::kv_code_kernels();
}

}  // namespace leoam::kernels
