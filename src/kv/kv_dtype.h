// Element type of the keys and values a KV cache stores, and the conversions to and from f32.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam {

enum class KvDtype : uint8_t { kF32, kF16 };

inline size_t kv_dtype_size(KvDtype dtype) { return dtype == KvDtype::kF32 ? 4 : 2; }
inline const char* kv_dtype_name(KvDtype dtype) { return dtype == KvDtype::kF32 ? "f32" : "f16"; }

// dst[n] (dtype) = src[n]; f16 rounds to nearest even.
void store_kv_values(KvDtype dtype, const float* src, int64_t n, void* dst);
// dst[n] = src[n] (dtype), exactly.
void load_kv_values(KvDtype dtype, const void* src, int64_t n, float* dst);

}  // namespace leoam
