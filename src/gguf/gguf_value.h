// A GGUF metadata value: a scalar, a string, or an array of one element type.
// Numeric values (scalar or array) are kept as their little-endian bytes, exactly as in the file,
// and converted on access, so that reading then writing a file keeps every value bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leoam {

enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// "u32", "string", "array[f32]"...; "type N" for an unknown id.
std::string gguf_value_type_name(uint32_t type_id);
// Bytes of one element of a fixed-size type; 0 for kString, kArray and unknown ids.
size_t gguf_value_type_size(uint32_t type_id);

class GgufValue {
 public:
  GgufValue() = default;

  // Scalars.
  static GgufValue from_u8(uint8_t v);
  static GgufValue from_i8(int8_t v);
  static GgufValue from_u16(uint16_t v);
  static GgufValue from_i16(int16_t v);
  static GgufValue from_u32(uint32_t v);
  static GgufValue from_i32(int32_t v);
  static GgufValue from_u64(uint64_t v);
  static GgufValue from_i64(int64_t v);
  static GgufValue from_f32(float v);
  static GgufValue from_f64(double v);
  static GgufValue from_bool(bool v);
  static GgufValue from_string(std::string v);
  // Arrays.
  static GgufValue from_strings(std::vector<std::string> v);
  static GgufValue from_f32s(const std::vector<float>& v);
  static GgufValue from_i32s(const std::vector<int32_t>& v);
  static GgufValue from_u32s(const std::vector<uint32_t>& v);
  // An array (or, with is_array false, a scalar) of a fixed-size type from its raw LE bytes.
  static GgufValue from_raw(GgufValueType elem_type, bool is_array, std::vector<uint8_t> bytes);

  // kArray for arrays; otherwise the scalar's type.
  GgufValueType type() const { return is_array_ ? GgufValueType::kArray : elem_type_; }
  // The scalar's type, or the array's element type.
  GgufValueType elem_type() const { return elem_type_; }
  bool is_array() const { return is_array_; }
  // Number of elements: 1 for a scalar.
  size_t size() const;

  // Scalar accessors; nullopt when the value is of another kind.
  std::optional<int64_t> as_int() const;    // any integer scalar that fits in int64
  std::optional<uint64_t> as_uint() const;  // any non-negative integer scalar
  std::optional<double> as_float() const;   // f32, f64, or any integer scalar
  std::optional<bool> as_bool() const;      // bool scalar
  const std::string* as_string() const;     // string scalar

  // Array accessors; nullopt/nullptr when the value is not such an array.
  const std::vector<std::string>* as_strings() const;
  std::optional<std::vector<float>> to_f32s() const;    // array of f32 or f64
  std::optional<std::vector<int32_t>> to_i32s() const;  // array of any integer type, values fitting int32

  // Raw little-endian bytes of a fixed-size scalar or array (empty for strings).
  const std::vector<uint8_t>& raw() const { return raw_; }

  // Short human-readable form for `gguf info`: scalars in full, arrays as
  // "[3 x f32] 0.5, 1, 2" with at most max_items items shown.
  std::string to_display_string(size_t max_items = 8) const;

 private:
  GgufValueType elem_type_ = GgufValueType::kU8;
  bool is_array_ = false;
  std::vector<uint8_t> raw_;           // fixed-size types
  std::vector<std::string> strings_;   // string scalar (one item) or array of strings
};

}  // namespace leoam
