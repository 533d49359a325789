// Element type of the keys and values a KV cache stores.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam {

enum class KvDtype : uint8_t { kF32, kF16 };

inline size_t kv_dtype_size(KvDtype dtype) { return dtype == KvDtype::kF32 ? 4 : 2; }
inline const char* kv_dtype_name(KvDtype dtype) { return dtype == KvDtype::kF32 ? "f32" : "f16"; }

}  // namespace leoam
