// GGUF writer (version 3, or 2 on request): used by tests and tools to make models.
// Collect metadata and tensors, then write() the file in one pass. Tensor data is copied in
// when added; offsets and padding follow the alignment (general.alignment if set, else 32).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf_value.h"

namespace leoam {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3);

  // Sets (or replaces) a metadata key; keys keep their first insertion order.
  void set(std::string key, GgufValue value);

  // Adds a tensor of `type` with dimensions ne (ne[0] innermost). `data` holds exactly
  // ggml_row_size(type, ne[0]) * (product of the other dims) bytes. Fails on a duplicate name,
  // an unsupported type, a size mismatch or more than 4 dims.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  // Convenience: quantizes F32 values into `type` (via kernels::quantize_row) and adds them.
  Status add_tensor_f32(std::string name, GgmlType type, std::vector<int64_t> ne, const std::vector<float>& values);

  // Serializes the whole file into memory.
  std::vector<uint8_t> to_bytes() const&;
  // The same, freeing each tensor's data once it is copied: the peak is the image plus one tensor.
  std::vector<uint8_t> to_bytes() &&;
  // Writes to `path` (via a temporary file renamed into place, so a failure leaves no partial file).
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  // The header and the padding after it; the alignment and the data section's size.
  std::vector<uint8_t> header(uint64_t* alignment, uint64_t* data_bytes) const;
  // The image; with `release` (this writer's own tensors), each tensor's data is freed once copied.
  std::vector<uint8_t> serialize(std::vector<Tensor>* release) const;

  uint32_t version_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace leoam
