#include "gguf/gguf_file.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_set>

#include "gguf/quoted_name.h"
#include "io/mapped_file.h"

namespace leoam {

namespace {

// The smallest possible encodings, used to bound a count by the bytes left before trusting it
// (so a corrupt count can never drive a huge allocation).
// key string length + type id + one byte of value
size_t min_kv_bytes(uint32_t version) { return (version == 1 ? 4 : 8) + 4 + 1; }
// name length + n_dims + type id + offset
size_t min_tensor_info_bytes(uint32_t version) { return (version == 1 ? 4 : 8) + 4 + 4 + 8; }

template <typename What>
std::string describe(const What& what) {
  if constexpr (std::is_invocable_v<What>) {
    return what();
  } else {
    return std::string(what);
  }
}

// Sequential little-endian decoder over the mapped bytes; every read is bounds-checked and a
// failure names what was being read and where.
class Cursor {
 public:
  Cursor(const std::string& name, const uint8_t* data, size_t size, uint32_t version)
      : name_(name), data_(data), size_(size), version_(version) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_version(uint32_t v) { version_ = v; }

  Status need(size_t n, const std::string& what) const {
    if (n > remaining()) {
      return corrupt(name_ + ": truncated: " + what + " at offset " + std::to_string(pos_) + " needs " +
                     std::to_string(n) + " bytes but the file ends at " + std::to_string(size_) + " bytes");
    }
    return Status::ok();
  }

  template <typename T>
  Result<T> read(const std::string& what) {
    LEOAM_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A count, length or dimension: u32 in GGUF v1, u64 in v2 and v3.
  Result<uint64_t> read_size(const std::string& what) {
    if (version_ == 1) {
      LEOAM_ASSIGN_OR_RETURN(const uint32_t v, read<uint32_t>(what));
      return static_cast<uint64_t>(v);
    }
    return read<uint64_t>(what);
  }

  // `what` is a string or a callable making one: messages are built only on failure, which keeps
  // reading a 150k-token vocabulary cheap.
  template <typename What>
  Result<std::string> read_string(const What& what) {
    if (remaining() < (version_ == 1 ? 4u : 8u)) return need(8, describe(what) + " length");
    LEOAM_ASSIGN_OR_RETURN(const uint64_t len, read_size(std::string()));
    if (len > remaining()) {
      return corrupt(name_ + ": truncated or corrupt: " + describe(what) + " at offset " + std::to_string(pos_) +
                     " claims " + std::to_string(len) + " bytes but only " + std::to_string(remaining()) +
                     " remain in the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  std::vector<uint8_t> take_bytes(size_t n) {  // caller has checked n <= remaining()
    std::vector<uint8_t> out(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return out;
  }

 private:
  const std::string& name_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint32_t version_;
};

Result<GgufValue> read_value(Cursor& in, const std::string& name, const std::string& key, uint32_t type_id,
                             uint32_t version) {
  const std::string where = "value of key " + quoted_name(key);
  if (type_id > static_cast<uint32_t>(GgufValueType::kF64)) {
    return corrupt(name + ": key " + quoted_name(key) + " has unknown value type id " + std::to_string(type_id) +
                   " (valid: 0-12)");
  }
  const auto type = static_cast<GgufValueType>(type_id);
  if (type == GgufValueType::kString) {
    LEOAM_ASSIGN_OR_RETURN(std::string s, in.read_string(where));
    return GgufValue::from_string(std::move(s));
  }
  if (type != GgufValueType::kArray) {
    const size_t n = gguf_value_type_size(type_id);
    LEOAM_RETURN_IF_ERROR(in.need(n, where));
    return GgufValue::from_raw(type, false, in.take_bytes(n));
  }
  LEOAM_ASSIGN_OR_RETURN(const uint32_t elem_id, in.read<uint32_t>("array element type of key " + quoted_name(key)));
  LEOAM_ASSIGN_OR_RETURN(const uint64_t count, in.read_size("array length of key " + quoted_name(key)));
  if (elem_id == static_cast<uint32_t>(GgufValueType::kArray)) {
    return unsupported(name + ": key " + quoted_name(key) + " is an array of arrays, which is not supported");
  }
  if (elem_id > static_cast<uint32_t>(GgufValueType::kF64)) {
    return corrupt(name + ": array key " + quoted_name(key) + " has unknown element type id " + std::to_string(elem_id) +
                   " (valid: 0-12)");
  }
  const auto elem_type = static_cast<GgufValueType>(elem_id);
  const size_t min_elem = elem_type == GgufValueType::kString ? (version == 1 ? 4 : 8) : gguf_value_type_size(elem_id);
  if (count > in.remaining() / min_elem) {
    return corrupt(name + ": truncated or corrupt: array key " + quoted_name(key) + " claims " + std::to_string(count) +
                   " elements of " + gguf_value_type_name(elem_id) + " but only " + std::to_string(in.remaining()) +
                   " bytes remain in the file");
  }
  if (elem_type != GgufValueType::kString) {
    return GgufValue::from_raw(elem_type, true, in.take_bytes(static_cast<size_t>(count) * min_elem));
  }
  std::vector<std::string> items;
  items.reserve(static_cast<size_t>(count));  // bounded by the check above
  for (uint64_t i = 0; i < count; ++i) {
    LEOAM_ASSIGN_OR_RETURN(std::string s, in.read_string([&] { return "string " + std::to_string(i) + " of array key " + quoted_name(key); }));
    items.push_back(std::move(s));
  }
  return GgufValue::from_strings(std::move(items));
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kU16: case GgufValueType::kI16:
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kU64: case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // the reader has checked this cannot overflow
  return n;
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

Result<GgufFile> GgufFile::open(const std::string& path) {
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::open(path));
  LEOAM_ASSIGN_OR_RETURN(GgufFile file, parse(path, mapping->data(), mapping->size()));
  // Tensor data pointers point into the mapping, which the unique_ptr keeps at a fixed address.
  file.mapping_ = std::move(mapping);
  return file;
}

Result<GgufFile> GgufFile::adopt(std::string name, std::vector<uint8_t> bytes) {
  LEOAM_ASSIGN_OR_RETURN(GgufFile file, parse(std::move(name), bytes.data(), bytes.size()));
  file.owned_ = std::move(bytes);
  return file;
}

Result<GgufFile> GgufFile::parse(std::string name, const uint8_t* data, size_t size) {
  GgufFile f;
  f.path_ = std::move(name);
  f.size_ = size;
  const std::string& n = f.path_;
  Cursor in(n, data, size, 3);

  // Header.
  if (size < 4) {
    return corrupt(n + ": not a GGUF file: " + std::to_string(size) + " bytes is too short to hold the magic 'GGUF'");
  }
  LEOAM_ASSIGN_OR_RETURN(const uint32_t magic, in.read<uint32_t>("magic"));
  if (magic != kGgufMagic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", data[0], data[1], data[2], data[3]);
    return corrupt(n + ": not a GGUF file: bad magic (bytes " + hex + ", expected 'GGUF' = 47 47 55 46)");
  }
  LEOAM_ASSIGN_OR_RETURN(const uint32_t version, in.read<uint32_t>("version"));
  if (version < 1 || version > 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3) {
      return unsupported(n + ": big-endian GGUF (version " + std::to_string(swapped) +
                         ") is not supported; convert it to little-endian");
    }
    return unsupported(n + ": unsupported GGUF version " + std::to_string(version) + " (supported: 1, 2, 3)");
  }
  f.version_ = version;
  in.set_version(version);
  LEOAM_ASSIGN_OR_RETURN(const uint64_t n_tensors, in.read_size("tensor count"));
  LEOAM_ASSIGN_OR_RETURN(const uint64_t n_kv, in.read_size("metadata key/value count"));
  if (n_tensors > in.remaining() / min_tensor_info_bytes(version)) {
    return corrupt(n + ": truncated or corrupt header: tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                   std::to_string(in.remaining()) + " bytes after the header");
  }
  if (n_kv > in.remaining() / min_kv_bytes(version)) {
    return corrupt(n + ": truncated or corrupt header: metadata key/value count " + std::to_string(n_kv) + " cannot fit in the " +
                   std::to_string(in.remaining()) + " bytes after the header");
  }

  // Metadata.
  f.kv_.reserve(static_cast<size_t>(n_kv));
  std::unordered_set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    LEOAM_ASSIGN_OR_RETURN(std::string key, in.read_string("key of metadata entry " + std::to_string(i)));
    LEOAM_ASSIGN_OR_RETURN(const uint32_t type_id, in.read<uint32_t>("value type of key " + quoted_name(key)));
    LEOAM_ASSIGN_OR_RETURN(GgufValue value, read_value(in, n, key, type_id, version));
    if (!keys.insert(key).second) return corrupt(n + ": duplicate metadata key " + quoted_name(key));
    f.kv_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->is_array() || a->elem_type() != GgufValueType::kU32) {
      return corrupt(n + ": general.alignment has type " + gguf_value_type_name(static_cast<uint32_t>(a->type())) +
                     ", expected u32");
    }
    const uint64_t align = *a->as_uint();
    if (align == 0 || (align & (align - 1)) != 0) {
      return corrupt(n + ": general.alignment is " + std::to_string(align) + ", which is not a nonzero power of two");
    }
    f.alignment_ = static_cast<uint32_t>(align);
  }

  // Tensor infos.
  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string idx = "tensor info " + std::to_string(i);
    GgufTensorInfo t;
    LEOAM_ASSIGN_OR_RETURN(t.name, in.read_string("name of " + idx));
    const std::string what = idx + " (" + quoted_name(t.name) + ")";
    LEOAM_ASSIGN_OR_RETURN(const uint32_t n_dims, in.read<uint32_t>("dimension count of " + what));
    if (n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
      return corrupt(n + ": " + what + " has " + std::to_string(n_dims) + " dimensions; at most " +
                     std::to_string(kGgufMaxDims) + " are allowed");
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      LEOAM_ASSIGN_OR_RETURN(const uint64_t dim, in.read_size("dimension " + std::to_string(d) + " of " + what));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return corrupt(n + ": " + what + " has negative or huge dimension ne[" + std::to_string(d) + "] = " +
                       std::to_string(static_cast<int64_t>(dim)));
      }
      t.ne.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        return corrupt(n + ": " + what + " has an element count that overflows 64 bits");
      }
    }
    LEOAM_ASSIGN_OR_RETURN(t.type_id, in.read<uint32_t>("type of " + what));
    LEOAM_ASSIGN_OR_RETURN(t.offset, in.read<uint64_t>("data offset of " + what));
    if (const auto traits = ggml_type_traits(t.type_id)) {
      const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
      if (ne0 % traits->block_size != 0) {
        return corrupt(n + ": " + what + " of type " + std::string(traits->name) + " has ne[0] = " +
                       std::to_string(ne0) + ", not a multiple of its block size " +
                       std::to_string(traits->block_size));
      }
      // ne[0] is a multiple of the block size, so the element count is too.
      uint64_t n_bytes = 0;
      const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(n_elements / traits->block_size),
                                                   static_cast<uint64_t>(traits->type_size), &n_bytes);
      if (overflow || n_bytes > size) {
        return corrupt(n + ": truncated or corrupt: " + what + " of type " + std::string(traits->name) + " needs " +
                       (overflow ? std::string("over 2^64") : std::to_string(n_bytes)) +
                       " bytes, more than the whole file (" + std::to_string(size) + " bytes)");
      }
      t.n_bytes = static_cast<size_t>(n_bytes);
    }
    if (t.offset % f.alignment_ != 0) {
      return corrupt(n + ": " + what + " has data offset " + std::to_string(t.offset) +
                     ", not a multiple of the alignment " + std::to_string(f.alignment_));
    }
    if (!names.insert(t.name).second) return corrupt(n + ": duplicate tensor name " + quoted_name(t.name));
    f.tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = in.pos();
  const uint64_t data_offset = (end_of_infos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  if (data_offset > size) {
    if (!f.tensors_.empty()) {
      return corrupt(n + ": truncated: the data section would start at offset " + std::to_string(data_offset) +
                     " but the file ends at " + std::to_string(size) + " bytes");
    }
    f.data_offset_ = size;  // a file without tensors needs no data section (nor its padding)
    return f;
  }
  f.data_offset_ = data_offset;
  const uint64_t data_bytes = size - data_offset;
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    GgufTensorInfo& t = f.tensors_[i];
    if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
      return corrupt(n + ": truncated: tensor info " + std::to_string(i) + " (" + quoted_name(t.name) + ") data [" +
                     std::to_string(data_offset + t.offset) + ", " + std::to_string(data_offset + t.offset + t.n_bytes) +
                     ") extends past end of file (" + std::to_string(data_offset + t.offset + t.n_bytes) + " > " +
                     std::to_string(size) + " bytes)");
    }
    t.data = data + data_offset + t.offset;
  }
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kv_) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void GgufFile::release_pages(const void* data, size_t n_bytes) const {
  if (mapping_ != nullptr) mapping_->release(static_cast<const uint8_t*>(data), n_bytes);
}

namespace {

Status wrong_type(const std::string& file, std::string_view key, const GgufValue& v, const char* expected) {
  return invalid_argument(file + ": key '" + std::string(key) + "' has type " +
                          (v.is_array() ? "array[" + gguf_value_type_name(static_cast<uint32_t>(v.elem_type())) + "]"
                                        : gguf_value_type_name(static_cast<uint32_t>(v.elem_type()))) +
                          ", expected " + expected);
}

Status missing(const std::string& file, std::string_view key) {
  return not_found(file + ": missing required key '" + std::string(key) + "'");
}

}  // namespace

Result<std::optional<int64_t>> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_array() || !is_integer(v->elem_type())) return wrong_type(path_, key, *v, "an integer");
  const auto i = v->as_int();
  if (!i) return invalid_argument(path_ + ": key '" + std::string(key) + "' = " + v->to_display_string() + " does not fit in int64");
  return std::optional<int64_t>(*i);
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<double>();
  const auto d = v->as_float();
  if (!d) return wrong_type(path_, key, *v, "a number");
  return std::optional<double>(*d);
}

Result<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  const auto b = v->as_bool();
  if (!b) return wrong_type(path_, key, *v, "bool");
  return std::optional<bool>(*b);
}

Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  const std::string* s = v->as_string();
  if (s == nullptr) return wrong_type(path_, key, *v, "string");
  return std::optional<std::string>(*s);
}

Result<int64_t> GgufFile::require_int(std::string_view key) const {
  LEOAM_ASSIGN_OR_RETURN(const std::optional<int64_t> v, get_int(key));
  if (!v) return missing(path_, key);
  return *v;
}

Result<double> GgufFile::require_float(std::string_view key) const {
  LEOAM_ASSIGN_OR_RETURN(const std::optional<double> v, get_float(key));
  if (!v) return missing(path_, key);
  return *v;
}

Result<std::string> GgufFile::require_string(std::string_view key) const {
  LEOAM_ASSIGN_OR_RETURN(std::optional<std::string> v, get_string(key));
  if (!v) return missing(path_, key);
  return std::move(*v);
}

}  // namespace leoam
