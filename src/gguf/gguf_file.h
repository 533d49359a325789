// GGUF reader: parses a GGUF file (versions 1, 2 and 3) that it memory-maps read-only.
//
//   | "GGUF" u32 | version u32 | n_tensors u64 | n_kv u64 | n_kv x (key, type, value) |
//   | n_tensors x (name, n_dims, ne[n_dims], type u32, offset u64) | pad | data |
//
// Little-endian; v1 uses u32 where v2/v3 use u64 (counts, lengths, dimensions). The data starts at
// the next multiple of `general.alignment` (default 32); tensor offsets are relative to it. Every
// count, length, offset and extent is checked against the file size before use: a truncated or
// corrupt file gives an error naming the file and the problem. Tensors of types this engine
// cannot compute with are listed (for `gguf info`); the model loader rejects them by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf_value.h"

namespace leoam {

class MappedFile;

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
// 32: GGUF's default data alignment when general.alignment is absent.
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

struct GgufTensorInfo {
  std::string name;
  uint32_t type_id = 0;              // ggml type id; see ggml_type_traits()
  std::vector<int64_t> ne;           // dimensions, ne[0] innermost (a row)
  uint64_t offset = 0;               // from the start of the data section
  size_t n_bytes = 0;                // 0 when the type's geometry is unknown
  const uint8_t* data = nullptr;     // points into the mapping

  int64_t n_elements() const;
  GgmlType type() const { return static_cast<GgmlType>(type_id); }
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static Result<GgufFile> open(const std::string& path);
  // Parses a buffer the caller keeps alive for the lifetime of the result (fuzzing, tests).
  // `name` stands for the file name in error messages.
  static Result<GgufFile> parse(std::string name, const uint8_t* data, size_t size);
  // Parses a GGUF image built in memory (an imported model), which the result keeps.
  static Result<GgufFile> adopt(std::string name, std::vector<uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed look-ups. get_* return nullopt when the key is absent and an error when it is present
  // with the wrong type; require_* also fail when it is absent ("file: missing required key 'k'").
  Result<std::optional<int64_t>> get_int(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::string>> get_string(std::string_view key) const;
  Result<int64_t> require_int(std::string_view key) const;
  Result<double> require_float(std::string_view key) const;
  Result<std::string> require_string(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Drops the whole pages of [data, data + n_bytes), tensor data of this file, from memory when
  // they come from the file's mapping (MappedFile::release; nothing for parse()): for a tensor
  // copied out at load.
  void release_pages(const void* data, size_t n_bytes) const;

 private:
  GgufFile() = default;

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null for parse() and adopt()
  std::vector<uint8_t> owned_;           // adopt()'s image; moving the vector keeps its data in place
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace leoam
