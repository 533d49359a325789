// Tensor element types, numbered as in GGUF/ggml (`ggml_type`), with the block geometry of each.
// A row of n elements of a block type takes n / block_size blocks of type_size bytes each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace leoam {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

// 256: ggml's QK_K, the super-block size of the K-quants.
inline constexpr int64_t kQK_K = 256;

struct GgmlTypeTraits {
  std::string_view name;   // "Q4_0"
  int64_t block_size;      // elements per block
  size_t type_size;        // bytes per block
  bool supported;          // this engine can compute with it
};

// Geometry of a ggml type id, supported or not (so that a file holding other types can still be
// read and described); nullopt for an id whose geometry is unknown here.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

// True for the types this engine computes with (see supported_types_list()).
bool ggml_type_supported(uint32_t type_id);

// The ggml name of any type id, supported or not ("Q5_K", "type 99" when unknown).
std::string ggml_type_name(uint32_t type_id);

// "F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K": for error messages.
std::string_view supported_types_list();
// The same in lowercase, as users write the names: "f32 f16 bf16 q8_0 q4_0 q4_k q6_k".
std::string supported_type_names();
// A type this engine computes with, by its name in any case ("q4_0", "BF16"); nullopt for another.
std::optional<GgmlType> supported_type_by_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t ggml_row_size(GgmlType type, int64_t n);
int64_t ggml_block_size(GgmlType type);

}  // namespace leoam
