#include "gguf/safetensors_file.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "gguf/quoted_name.h"
#include "io/mapped_file.h"

namespace leoam {
namespace {

using json = nlohmann::json;

// The format's own limit on the header (safetensors refuses larger ones): it bounds what a
// corrupt size can make the parser read as JSON.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// The dtypes the format defines that this reader does not load: named as such in the error, so
// that "I8" reads as unsupported, not as garbage.
constexpr std::string_view kOtherDtypes[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32",
                                             "U16", "U8",  "BOOL", "F8_E5M2", "F8_E4M3"};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Result<SafetensorsDtype> parse_dtype(const std::string& where, const json& v) {
  if (!v.is_string()) return corrupt(where + ": \"dtype\" is not a string");
  const std::string name = v.get<std::string>();
  if (name == "F32") return SafetensorsDtype::kF32;
  if (name == "F16") return SafetensorsDtype::kF16;
  if (name == "BF16") return SafetensorsDtype::kBF16;
  for (std::string_view other : kOtherDtypes) {
    if (name == other) return unsupported(where + ": dtype " + name + " is not supported (F32, F16 and BF16 are)");
  }
  return corrupt(where + ": unknown dtype " + quoted_name(name));
}

// The tensor's element count, or an error when a dimension is negative, not an integer, or the
// product overflows.
Result<int64_t> parse_shape(const std::string& where, const json& v, std::vector<int64_t>& shape) {
  if (!v.is_array()) return corrupt(where + ": \"shape\" is not an array");
  int64_t n = 1;
  for (const json& d : v) {
    // Not d.dump(): a deeply nested value would recurse as deep.
    if (!d.is_number_unsigned()) {
      return corrupt(where + ": \"shape\" holds " + (d.is_number() ? "a negative or fractional number" : d.type_name()) +
                     ", not a size");
    }
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && static_cast<uint64_t>(n) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)) {
      return corrupt(where + ": \"shape\" has too many elements");
    }
    n *= static_cast<int64_t>(dim);
    shape.push_back(static_cast<int64_t>(dim));
  }
  return n;
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32: return "F32";
    case SafetensorsDtype::kF16: return "F16";
    case SafetensorsDtype::kBF16: return "BF16";
  }
  return "?";
}

size_t safetensors_dtype_bytes(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::kF32 ? 4 : 2; }

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::open(path));
  LEOAM_ASSIGN_OR_RETURN(SafetensorsFile file, parse(path, mapping->data(), mapping->size()));
  // Tensor data pointers point into the mapping, which the unique_ptr keeps at a fixed address.
  file.mapping_ = std::move(mapping);
  return file;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::string name, const uint8_t* data, size_t size) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  const std::string& n = f.path_;
  if (size < 8) {
    return corrupt(n + ": not a safetensors file: " + std::to_string(size) +
                   " bytes is too short to hold the header's size");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | data[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes) {
    return corrupt(n + ": the header's size " + std::to_string(header_bytes) + " is over the format's limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  }
  if (header_bytes > size - 8) {
    return corrupt(n + ": truncated: the header needs " + std::to_string(header_bytes) + " bytes, the file has " +
                   std::to_string(size - 8) + " after its size");
  }
  const std::string_view text(reinterpret_cast<const char*>(data + 8), header_bytes);
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return corrupt(n + ": the header is not a JSON object");
  const uint8_t* body = data + 8 + header_bytes;
  const uint64_t body_bytes = size - 8 - header_bytes;

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return corrupt(n + ": \"__metadata__\" is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return corrupt(n + ": \"__metadata__\" entry " + quoted_name(mk) + " is not text");
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = n + ": tensor " + quoted_name(key);
    if (!value.is_object()) return corrupt(where + " is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) return corrupt(where + " has no \"" + field + "\"");
    }
    if (value.size() != 3) return corrupt(where + " has fields other than dtype, shape and data_offsets");
    SafetensorsTensor t;
    t.name = key;
    LEOAM_ASSIGN_OR_RETURN(t.dtype, parse_dtype(where, value["dtype"]));
    LEOAM_ASSIGN_OR_RETURN(const int64_t n_elements, parse_shape(where, value["shape"], t.shape));
    const json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return corrupt(where + ": \"data_offsets\" is not a pair of offsets");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > body_bytes) {
      return corrupt(where + ": its data [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") lies outside the file's " + std::to_string(body_bytes) + " bytes of data (truncated?)");
    }
    const uint64_t width = safetensors_dtype_bytes(t.dtype);
    if (static_cast<uint64_t>(n_elements) > std::numeric_limits<uint64_t>::max() / width ||
        static_cast<uint64_t>(n_elements) * width != end - begin) {
      return corrupt(where + ": " + std::to_string(end - begin) + " bytes of data for shape " + shape_text(t.shape) +
                     " in " + std::string(safetensors_dtype_name(t.dtype)) + ", which needs " +
                     std::to_string(static_cast<uint64_t>(n_elements) * width));
    }
    t.data = body + begin;
    t.n_bytes = end - begin;
    f.tensors_.push_back(std::move(t));
  }

  // The format's data is the tensors' bytes end to end: no overlap, no hole.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.data != b.data ? a.data < b.data : a.n_bytes < b.n_bytes;
  });
  uint64_t at = 0;
  for (const SafetensorsTensor& t : f.tensors_) {
    const auto begin = static_cast<uint64_t>(t.data - body);
    if (begin != at) {
      return corrupt(n + ": tensor " + quoted_name(t.name) + " starts at byte " + std::to_string(begin) +
                     " of the data, where " + std::to_string(at) +
                     (begin < at ? " is still another tensor's" : " leaves a hole"));
    }
    at = begin + t.n_bytes;
  }
  if (at != body_bytes) {
    return corrupt(n + ": " + std::to_string(body_bytes - at) + " bytes after the last tensor's data");
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.by_name_.emplace(f.tensors_[i].name, i);
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace leoam
