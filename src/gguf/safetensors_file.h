// A safetensors file (Hugging Face's checkpoint format), memory-mapped and checked like a GGUF:
// an 8-byte little-endian header size, a JSON header naming each tensor's dtype, shape and byte
// range in the data after it, then the data. Tensors of f32, f16 and bf16; another dtype, a range
// outside the data, a size that does not match its shape, overlapping tensors or a hole in the
// data is an error that names the file and the tensor (docs/model.md#safetensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace leoam {

class MappedFile;

enum class SafetensorsDtype { kF32, kF16, kBF16 };

std::string_view safetensors_dtype_name(SafetensorsDtype dtype);
size_t safetensors_dtype_bytes(SafetensorsDtype dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // row-major, the last dimension innermost (numpy's order)
  const uint8_t* data = nullptr;  // into the mapping
  size_t n_bytes = 0;

  int64_t n_elements() const;
};

class SafetensorsFile {
 public:
  // Maps and parses `path`.
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses a buffer the caller keeps alive for the lifetime of the result (fuzzing, tests).
  // `name` stands for the file name in error messages.
  static Result<SafetensorsFile> parse(std::string name, const uint8_t* data, size_t size);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // In the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // The header's "__metadata__" (text to text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace leoam
