#include "gguf/gguf_value.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <type_traits>

namespace leoam {

namespace {

constexpr uint32_t kNumValueTypes = 13;

template <typename T>
T load_le(const uint8_t* p) {
  // GGUF is little-endian, and so is every host this engine builds for (x86-64), so a memcpy
  // is the whole decode.
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
std::vector<uint8_t> store_le(const T* v, size_t n) {
  std::vector<uint8_t> out(n * sizeof(T));
  if (n != 0) std::memcpy(out.data(), v, n * sizeof(T));
  return out;
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kU16:
    case GgufValueType::kI16: case GgufValueType::kU32: case GgufValueType::kI32:
    case GgufValueType::kU64: case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::kI8 || t == GgufValueType::kI16 || t == GgufValueType::kI32 ||
         t == GgufValueType::kI64;
}

// Element i of an integer array/scalar as a signed value, or as unsigned when it is a u64 above
// INT64_MAX (reported through `big`).
struct IntElem {
  int64_t s = 0;
  uint64_t u = 0;
  bool negative = false;
};

IntElem int_elem(GgufValueType t, const uint8_t* p) {
  IntElem e;
  switch (t) {
    case GgufValueType::kU8: e.u = load_le<uint8_t>(p); break;
    case GgufValueType::kU16: e.u = load_le<uint16_t>(p); break;
    case GgufValueType::kU32: e.u = load_le<uint32_t>(p); break;
    case GgufValueType::kU64: e.u = load_le<uint64_t>(p); break;
    case GgufValueType::kI8: e.s = load_le<int8_t>(p); break;
    case GgufValueType::kI16: e.s = load_le<int16_t>(p); break;
    case GgufValueType::kI32: e.s = load_le<int32_t>(p); break;
    case GgufValueType::kI64: e.s = load_le<int64_t>(p); break;
    default: break;
  }
  if (is_signed_type(t)) {
    e.negative = e.s < 0;
    e.u = static_cast<uint64_t>(e.s);
  } else {
    e.s = static_cast<int64_t>(e.u);  // only meaningful when u <= INT64_MAX
  }
  return e;
}

template <typename F>
std::string float_string(F v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest form that round-trips
  return std::string(buf, r.ptr);
}

// Quotes a string, escaping what would garble a terminal line.
std::string quoted(const std::string& s, size_t max_bytes) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (n++ == max_bytes) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// 200: long strings (chat templates) would otherwise swamp `gguf info`.
constexpr size_t kMaxDisplayStringBytes = 200;

}  // namespace

std::string gguf_value_type_name(uint32_t type_id) {
  static const char* const kNames[kNumValueTypes] = {"u8",  "i8",     "u16",   "i16", "u32",
                                                     "i32", "f32",    "bool",  "string",
                                                     "array", "u64",  "i64",   "f64"};
  if (type_id < kNumValueTypes) return kNames[type_id];
  return "type " + std::to_string(type_id);
}

size_t gguf_value_type_size(uint32_t type_id) {
  switch (static_cast<GgufValueType>(type_id)) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

GgufValue GgufValue::from_raw(GgufValueType elem_type, bool is_array, std::vector<uint8_t> bytes) {
  GgufValue v;
  v.elem_type_ = elem_type;
  v.is_array_ = is_array;
  v.raw_ = std::move(bytes);
  return v;
}

GgufValue GgufValue::from_u8(uint8_t v) { return from_raw(GgufValueType::kU8, false, store_le(&v, 1)); }
GgufValue GgufValue::from_i8(int8_t v) { return from_raw(GgufValueType::kI8, false, store_le(&v, 1)); }
GgufValue GgufValue::from_u16(uint16_t v) { return from_raw(GgufValueType::kU16, false, store_le(&v, 1)); }
GgufValue GgufValue::from_i16(int16_t v) { return from_raw(GgufValueType::kI16, false, store_le(&v, 1)); }
GgufValue GgufValue::from_u32(uint32_t v) { return from_raw(GgufValueType::kU32, false, store_le(&v, 1)); }
GgufValue GgufValue::from_i32(int32_t v) { return from_raw(GgufValueType::kI32, false, store_le(&v, 1)); }
GgufValue GgufValue::from_u64(uint64_t v) { return from_raw(GgufValueType::kU64, false, store_le(&v, 1)); }
GgufValue GgufValue::from_i64(int64_t v) { return from_raw(GgufValueType::kI64, false, store_le(&v, 1)); }
GgufValue GgufValue::from_f32(float v) { return from_raw(GgufValueType::kF32, false, store_le(&v, 1)); }
GgufValue GgufValue::from_f64(double v) { return from_raw(GgufValueType::kF64, false, store_le(&v, 1)); }
GgufValue GgufValue::from_bool(bool v) {
  const uint8_t b = v ? 1 : 0;
  return from_raw(GgufValueType::kBool, false, store_le(&b, 1));
}

GgufValue GgufValue::from_string(std::string v) {
  GgufValue out;
  out.elem_type_ = GgufValueType::kString;
  out.strings_.push_back(std::move(v));
  return out;
}

GgufValue GgufValue::from_strings(std::vector<std::string> v) {
  GgufValue out;
  out.elem_type_ = GgufValueType::kString;
  out.is_array_ = true;
  out.strings_ = std::move(v);
  return out;
}

GgufValue GgufValue::from_f32s(const std::vector<float>& v) {
  return from_raw(GgufValueType::kF32, true, store_le(v.data(), v.size()));
}
GgufValue GgufValue::from_i32s(const std::vector<int32_t>& v) {
  return from_raw(GgufValueType::kI32, true, store_le(v.data(), v.size()));
}
GgufValue GgufValue::from_u32s(const std::vector<uint32_t>& v) {
  return from_raw(GgufValueType::kU32, true, store_le(v.data(), v.size()));
}

size_t GgufValue::size() const {
  if (elem_type_ == GgufValueType::kString) return is_array_ ? strings_.size() : 1;
  if (!is_array_) return 1;
  const size_t elem = gguf_value_type_size(static_cast<uint32_t>(elem_type_));
  return elem == 0 ? 0 : raw_.size() / elem;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (is_array_ || !is_integer_type(elem_type_) || raw_.size() < gguf_value_type_size(static_cast<uint32_t>(elem_type_))) {
    return std::nullopt;
  }
  const IntElem e = int_elem(elem_type_, raw_.data());
  if (!e.negative && e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return e.s;
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (is_array_ || !is_integer_type(elem_type_) || raw_.size() < gguf_value_type_size(static_cast<uint32_t>(elem_type_))) {
    return std::nullopt;
  }
  const IntElem e = int_elem(elem_type_, raw_.data());
  if (e.negative) return std::nullopt;
  return e.u;
}

std::optional<double> GgufValue::as_float() const {
  if (is_array_) return std::nullopt;
  if (elem_type_ == GgufValueType::kF32 && raw_.size() >= 4) return load_le<float>(raw_.data());
  if (elem_type_ == GgufValueType::kF64 && raw_.size() >= 8) return load_le<double>(raw_.data());
  if (is_integer_type(elem_type_) && raw_.size() >= gguf_value_type_size(static_cast<uint32_t>(elem_type_))) {
    const IntElem e = int_elem(elem_type_, raw_.data());
    return e.negative ? static_cast<double>(e.s) : static_cast<double>(e.u);
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (is_array_ || elem_type_ != GgufValueType::kBool || raw_.empty()) return std::nullopt;
  return raw_[0] != 0;
}

const std::string* GgufValue::as_string() const {
  if (is_array_ || elem_type_ != GgufValueType::kString || strings_.empty()) return nullptr;
  return &strings_[0];
}

const std::vector<std::string>* GgufValue::as_strings() const {
  if (!is_array_ || elem_type_ != GgufValueType::kString) return nullptr;
  return &strings_;
}

std::optional<std::vector<float>> GgufValue::to_f32s() const {
  if (!is_array_) return std::nullopt;
  const size_t n = size();
  std::vector<float> out(n);
  if (elem_type_ == GgufValueType::kF32) {
    for (size_t i = 0; i < n; ++i) out[i] = load_le<float>(raw_.data() + 4 * i);
  } else if (elem_type_ == GgufValueType::kF64) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_le<double>(raw_.data() + 8 * i));
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<int32_t>> GgufValue::to_i32s() const {
  if (!is_array_ || !is_integer_type(elem_type_)) return std::nullopt;
  const size_t n = size();
  const size_t elem = gguf_value_type_size(static_cast<uint32_t>(elem_type_));
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const IntElem e = int_elem(elem_type_, raw_.data() + elem * i);
    if (e.negative ? e.s < std::numeric_limits<int32_t>::min()
                   : e.u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return std::nullopt;
    }
    out[i] = static_cast<int32_t>(e.s);
  }
  return out;
}

namespace {

// Element i of a fixed-size value, formatted.
std::string elem_string(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kF32: return float_string(load_le<float>(p));
    case GgufValueType::kF64: return float_string(load_le<double>(p));
    case GgufValueType::kBool: return p[0] != 0 ? "true" : "false";
    default: {
      const IntElem e = int_elem(t, p);
      return e.negative ? std::to_string(e.s) : std::to_string(e.u);
    }
  }
}

}  // namespace

std::string GgufValue::to_display_string(size_t max_items) const {
  const uint32_t t = static_cast<uint32_t>(elem_type_);
  const size_t elem = gguf_value_type_size(t);
  if (!is_array_) {
    if (elem_type_ == GgufValueType::kString) {
      return strings_.empty() ? "\"\"" : quoted(strings_[0], kMaxDisplayStringBytes);
    }
    if (elem == 0 || raw_.size() < elem) return "?";
    return elem_string(elem_type_, raw_.data());
  }
  const size_t n = size();
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "[" + std::string.
  std::string out = "[";
  out += std::to_string(n);
  out += " x ";
  out += gguf_value_type_name(t);
  out += "]";
  const size_t shown = n < max_items ? n : max_items;
  for (size_t i = 0; i < shown; ++i) {
    out += i == 0 ? " " : ", ";
    if (elem_type_ == GgufValueType::kString) {
      out += quoted(strings_[i], kMaxDisplayStringBytes);
    } else {
      out += elem_string(elem_type_, raw_.data() + elem * i);
    }
  }
  if (shown < n) out += ", ...";
  return out;
}

}  // namespace leoam
