#include "gguf/tensor_bundle.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "io/mapped_file.h"

namespace leoam {

namespace {

using json = nlohmann::json;

// 63: ggml's GGML_MAX_NAME (64) less the NUL; llama.cpp cannot load a longer tensor name.
constexpr size_t kMaxTensorNameBytes = 63;
// 65504: the largest finite f16; anything that rounds above it becomes inf.
constexpr float kF16Max = 65504.0f;
// 48: enough of a JSON value to recognise it in an error message.
constexpr size_t kMaxShownJsonBytes = 48;

struct ScalarType {
  std::string_view name;  // as spelt in the manifest
  GgufValueType type;
};

constexpr ScalarType kScalarTypes[] = {
    {"u8", GgufValueType::kU8},   {"i8", GgufValueType::kI8},   {"u16", GgufValueType::kU16},
    {"i16", GgufValueType::kI16}, {"u32", GgufValueType::kU32}, {"i32", GgufValueType::kI32},
    {"u64", GgufValueType::kU64}, {"i64", GgufValueType::kI64}, {"f32", GgufValueType::kF32},
    {"f64", GgufValueType::kF64}, {"bool", GgufValueType::kBool}, {"str", GgufValueType::kString},
};

constexpr std::string_view kArrayPrefix = "arr_";

std::string scalar_type_list() {
  std::string s;
  for (const ScalarType& t : kScalarTypes) s += (s.empty() ? "" : " ") + std::string(t.name);
  return s;
}

std::string single_quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// A JSON value as it would appear in the manifest, cut short when long.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxShownJsonBytes) s = s.substr(0, kMaxShownJsonBytes) + "...";
  return s;
}

std::string number_string(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// "a JSON string", "a JSON array"... for "must be X, got Y" messages.
std::string json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a non-integer number";
    default: return "an invalid value";
  }
}

template <typename T>
void append_le(std::vector<uint8_t>& raw, T v) {
  const size_t at = raw.size();
  raw.resize(at + sizeof(T));
  std::memcpy(raw.data() + at, &v, sizeof(T));  // little-endian host, as everywhere in leoam
}

// A JSON integer literal as T, when it is one and fits.
template <typename T>
Status append_int(const json& v, std::string_view type_name, std::vector<uint8_t>& raw) {
  const auto* u = v.get_ptr<const json::number_unsigned_t*>();
  const auto* s = v.get_ptr<const json::number_integer_t*>();
  if (u == nullptr && s == nullptr) {
    return corrupt(show(v) + " is not an integer (" + std::string(type_name) + " takes a JSON integer, got " +
                   json_kind(v) + ")");
  }
  const bool fits = u != nullptr ? std::in_range<T>(*u) : std::in_range<T>(*s);
  if (!fits) {
    return corrupt(show(v) + " is out of range for " + std::string(type_name) + " (" +
                   std::to_string(std::numeric_limits<T>::min()) + " to " +
                   std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  append_le(raw, u != nullptr ? static_cast<T>(*u) : static_cast<T>(*s));
  return Status::ok();
}

// Appends `v` as one element of the fixed-size type `t` to `raw`; the error says why it does not
// fit (the caller prefixes where).
Status append_element(const json& v, const ScalarType& t, std::vector<uint8_t>& raw) {
  switch (t.type) {
    case GgufValueType::kU8: return append_int<uint8_t>(v, t.name, raw);
    case GgufValueType::kI8: return append_int<int8_t>(v, t.name, raw);
    case GgufValueType::kU16: return append_int<uint16_t>(v, t.name, raw);
    case GgufValueType::kI16: return append_int<int16_t>(v, t.name, raw);
    case GgufValueType::kU32: return append_int<uint32_t>(v, t.name, raw);
    case GgufValueType::kI32: return append_int<int32_t>(v, t.name, raw);
    case GgufValueType::kU64: return append_int<uint64_t>(v, t.name, raw);
    case GgufValueType::kI64: return append_int<int64_t>(v, t.name, raw);
    case GgufValueType::kF32:
    case GgufValueType::kF64: {
      if (!v.is_number()) {
        return corrupt(show(v) + " is not a number (" + std::string(t.name) + " takes a JSON number, got " +
                       json_kind(v) + ")");
      }
      const double d = v.get<double>();
      if (t.type == GgufValueType::kF64) {
        append_le(raw, d);
      } else if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
        return corrupt(show(v) + " is out of range for f32 (largest magnitude " +
                       number_string(std::numeric_limits<float>::max()) + "); use f64");
      } else {
        append_le(raw, static_cast<float>(d));
      }
      return Status::ok();
    }
    case GgufValueType::kBool:
      if (!v.is_boolean()) return corrupt(show(v) + " is not a boolean (bool takes true or false)");
      append_le(raw, static_cast<uint8_t>(v.get<bool>() ? 1 : 0));
      return Status::ok();
    default:
      return internal_error("append_element: not a fixed-size type: " + std::string(t.name));
  }
}

const ScalarType* find_scalar_type(std::string_view name) {
  for (const ScalarType& t : kScalarTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// The GGUF value of one metadata entry's "value", given its "type". Errors say why, without
// saying where (the caller adds that).
Result<GgufValue> parse_value(const json& v, std::string_view type_name) {
  const bool is_array = type_name.starts_with(kArrayPrefix);
  const ScalarType* t = find_scalar_type(is_array ? type_name.substr(kArrayPrefix.size()) : type_name);
  if (t == nullptr) {
    return corrupt("unknown type " + single_quoted(type_name) + "; types: " + scalar_type_list() +
                   ", or arr_ and one of those for an array (arr_u32 arr_i32 arr_f32 arr_str ...)");
  }
  if (!is_array) {
    if (t->type == GgufValueType::kString) {
      if (!v.is_string()) return corrupt(show(v) + " is not a string (str takes a JSON string, got " + json_kind(v) + ")");
      return GgufValue::from_string(v.get<std::string>());
    }
    std::vector<uint8_t> raw;
    LEOAM_RETURN_IF_ERROR(append_element(v, *t, raw));
    return GgufValue::from_raw(t->type, false, std::move(raw));
  }
  if (!v.is_array()) {
    return corrupt("value must be a JSON array for " + std::string(type_name) + ", got " + json_kind(v) + " " + show(v));
  }
  if (t->type == GgufValueType::kString) {
    std::vector<std::string> strings;
    strings.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        return corrupt("element " + std::to_string(i) + ": " + show(v[i]) + " is not a string (got " +
                       json_kind(v[i]) + ")");
      }
      strings.push_back(v[i].get<std::string>());
    }
    return GgufValue::from_strings(std::move(strings));
  }
  std::vector<uint8_t> raw;
  raw.reserve(v.size() * gguf_value_type_size(static_cast<uint32_t>(t->type)));
  for (size_t i = 0; i < v.size(); ++i) {
    const Status st = append_element(v[i], *t, raw);
    if (!st.is_ok()) return st.with_context("element " + std::to_string(i));
  }
  return GgufValue::from_raw(t->type, true, std::move(raw));
}

// Fails when `obj` has a field outside `allowed` (a misspelt field would otherwise be ignored).
Status check_fields(const json& obj, std::initializer_list<std::string_view> allowed) {
  for (const auto& item : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known |= item.key() == a;
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : " ") + std::string(a);
      return corrupt("unknown field " + single_quoted(item.key()) + "; fields: " + list);
    }
  }
  return Status::ok();
}

// A field that must be present; the error names it.
Result<const json*> require_field(const json& obj, const char* field) {
  const auto it = obj.find(field);
  if (it == obj.end()) return corrupt("missing required field " + single_quoted(field));
  return &*it;
}

// A non-negative JSON integer literal.
Result<uint64_t> require_uint(const json& v, const char* field) {
  if (const auto* u = v.get_ptr<const json::number_unsigned_t*>()) return *u;
  if (const auto* s = v.get_ptr<const json::number_integer_t*>()) {
    return corrupt(single_quoted(field) + " must be a non-negative integer, got " + std::to_string(*s));
  }
  return corrupt(single_quoted(field) + " must be a non-negative integer, got " + json_kind(v) + " " + show(v));
}

struct TensorPlan {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::string type_name;
  std::vector<int64_t> shape;  // numpy order, outermost first
  std::vector<int64_t> ne;     // GGUF order: shape reversed, ne[0] innermost
  uint64_t offset_bytes = 0;   // into the data file
  uint64_t n_elements = 0;
};

struct BundlePlan {
  std::string data_path;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<TensorPlan> tensors;
};

std::string shape_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// "tensors[3] ('blk.0.attn_q.weight')", or "tensors[3]" before the name is known.
std::string tensor_where(size_t i, const std::string& name) {
  std::string s = "tensors[" + std::to_string(i) + "]";
  return name.empty() ? s : s + " (" + single_quoted(name) + ")";
}

Result<TensorPlan> parse_tensor(const json& entry) {
  TensorPlan t;
  if (!entry.is_object()) return corrupt("must be a JSON object, got " + json_kind(entry) + " " + show(entry));
  if (const auto it = entry.find("name"); it != entry.end() && it->is_string()) t.name = it->get<std::string>();
  LEOAM_RETURN_IF_ERROR(check_fields(entry, {"name", "shape", "offset", "type"}));

  LEOAM_ASSIGN_OR_RETURN(const json* name, require_field(entry, "name"));
  if (!name->is_string()) return corrupt("'name' must be a string, got " + json_kind(*name) + " " + show(*name));
  if (t.name.empty()) return corrupt("'name' is empty");
  if (t.name.size() > kMaxTensorNameBytes) {
    return corrupt("'name' is " + std::to_string(t.name.size()) + " bytes long; GGUF readers (llama.cpp) allow at most " +
                   std::to_string(kMaxTensorNameBytes));
  }

  LEOAM_ASSIGN_OR_RETURN(const json* shape, require_field(entry, "shape"));
  if (!shape->is_array()) return corrupt("'shape' must be an array, got " + json_kind(*shape) + " " + show(*shape));
  if (shape->empty() || shape->size() > static_cast<size_t>(kGgufMaxDims)) {
    return corrupt("'shape' " + show(*shape) + " has " + std::to_string(shape->size()) +
                   " dimensions; a GGUF tensor has 1 to 4");
  }
  t.n_elements = 1;
  for (const json& d : *shape) {
    const auto* u = d.get_ptr<const json::number_unsigned_t*>();
    if (u == nullptr || *u == 0 || !std::in_range<int64_t>(*u)) {
      return corrupt("'shape' " + show(*shape) + " has dimension " + show(d) + "; every dimension must be a positive integer");
    }
    if (__builtin_mul_overflow(t.n_elements, *u, &t.n_elements)) {
      return corrupt("'shape' " + show(*shape) + " holds more elements than 2^64");
    }
    t.shape.push_back(static_cast<int64_t>(*u));
  }
  t.ne.assign(t.shape.rbegin(), t.shape.rend());

  LEOAM_ASSIGN_OR_RETURN(const json* offset, require_field(entry, "offset"));
  LEOAM_ASSIGN_OR_RETURN(t.offset_bytes, require_uint(*offset, "offset"));
  if (t.offset_bytes % sizeof(float) != 0) {
    return corrupt("offset " + std::to_string(t.offset_bytes) + " is not a multiple of 4 (float32 values are " +
                   "4-byte aligned in the data file)");
  }

  t.type_name = "f32";
  if (const auto it = entry.find("type"); it != entry.end()) {
    if (!it->is_string()) return corrupt("'type' must be a string, got " + json_kind(*it) + " " + show(*it));
    t.type_name = it->get<std::string>();
  }
  const std::optional<GgmlType> type = supported_type_by_name(t.type_name);
  if (!type) {
    return unsupported("unknown tensor type " + single_quoted(t.type_name) + "; types: " + supported_type_names());
  }
  t.type = *type;
  const int64_t block = ggml_block_size(t.type);
  if (t.ne[0] % block != 0) {
    return corrupt("type " + t.type_name + " stores blocks of " + std::to_string(block) +
                   " values along the last dimension, but shape " + shape_string(t.shape) + " ends in " +
                   std::to_string(t.ne[0]) + "; use f32, f16 or bf16 for this tensor");
  }
  return t;
}

Result<BundlePlan> parse_manifest(const std::string& manifest_path, const json& root) {
  const std::string& m = manifest_path;
  BundlePlan plan;
  if (!root.is_object()) {
    return corrupt(m + ": not a tensor bundle manifest: the top level must be a JSON object, got " + json_kind(root));
  }
  const auto format = root.find("format");
  if (format == root.end()) return corrupt(m + ": not a tensor bundle manifest: missing required field 'format'");
  if (!format->is_string() || format->get<std::string>() != kTensorBundleFormat) {
    return corrupt(m + ": not a tensor bundle manifest: 'format' is " + show(*format) + ", expected \"" +
                   kTensorBundleFormat + "\"");
  }
  const auto version = root.find("version");
  if (version == root.end()) return corrupt(m + ": missing required field 'version'");
  const auto* v = version->get_ptr<const json::number_unsigned_t*>();
  if (v == nullptr || *v != static_cast<uint64_t>(kTensorBundleVersion)) {
    return unsupported(m + ": tensor bundle version " + show(*version) + " is not supported; this build reads version " +
                       std::to_string(kTensorBundleVersion));
  }
  Status st = check_fields(root, {"format", "version", "data", "metadata", "tensors"});
  if (!st.is_ok()) return st.with_context(m);

  for (const char* field : {"data", "metadata", "tensors"}) {
    if (!root.contains(field)) return corrupt(m + ": missing required field " + single_quoted(field));
  }
  const json& data = root.at("data");
  if (!data.is_string() || data.get<std::string>().empty()) {
    return corrupt(m + ": 'data' must be a non-empty string (the float32 file's path, relative to the manifest), got " +
                   show(data));
  }
  // Relative to the manifest's directory; an absolute path replaces it.
  plan.data_path = (std::filesystem::path(m).parent_path() / data.get<std::string>()).string();

  const json& metadata = root.at("metadata");
  if (!metadata.is_array()) return corrupt(m + ": 'metadata' must be an array, got " + json_kind(metadata));
  std::unordered_set<std::string> keys;
  for (size_t i = 0; i < metadata.size(); ++i) {
    const json& e = metadata[i];
    std::string where = m + ": metadata[" + std::to_string(i) + "]";
    if (!e.is_object()) return corrupt(where + " must be a JSON object, got " + json_kind(e) + " " + show(e));
    if (const auto k = e.find("key"); k != e.end() && k->is_string()) where += " (" + single_quoted(k->get<std::string>()) + ")";
    st = check_fields(e, {"key", "type", "value"});
    if (!st.is_ok()) return st.with_context(where);
    for (const char* field : {"key", "type", "value"}) {
      if (!e.contains(field)) return corrupt(where + ": missing required field " + single_quoted(field));
    }
    const json& key = e.at("key");
    const json& type = e.at("type");
    if (!key.is_string() || key.get<std::string>().empty()) {
      return corrupt(where + ": 'key' must be a non-empty string, got " + show(key));
    }
    if (!type.is_string()) return corrupt(where + ": 'type' must be a string, got " + show(type));
    const std::string& k = key.get_ref<const std::string&>();
    if (!keys.insert(k).second) return corrupt(where + ": duplicate metadata key " + single_quoted(k));
    Result<GgufValue> value = parse_value(e.at("value"), type.get_ref<const std::string&>());
    if (!value.is_ok()) return value.status().with_context(where + " of type " + type.get<std::string>());
    plan.metadata.emplace_back(k, std::move(value).value());
  }

  const json& tensors = root.at("tensors");
  if (!tensors.is_array()) return corrupt(m + ": 'tensors' must be an array, got " + json_kind(tensors));
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string name;
    if (tensors[i].is_object()) {
      if (const auto it = tensors[i].find("name"); it != tensors[i].end() && it->is_string()) name = it->get<std::string>();
    }
    Result<TensorPlan> t = parse_tensor(tensors[i]);
    if (!t.is_ok()) return t.status().with_context(m + ": " + tensor_where(i, name));
    if (!names.insert(t->name).second) {
      return corrupt(m + ": " + tensor_where(i, name) + ": duplicate tensor name " + single_quoted(t->name));
    }
    plan.tensors.push_back(std::move(t).value());
  }
  return plan;
}

// "[1, 3]": the numpy index of flat element i of `shape`.
std::string numpy_index(uint64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t n = static_cast<uint64_t>(shape[d]);
    idx[d] = static_cast<int64_t>(i % n);
    i /= n;
  }
  return shape_string(idx);
}

// Checks that every tensor's values lie inside the data file and can be stored in its type.
Status check_data(const std::string& manifest_path, const BundlePlan& plan, const MappedFile& data) {
  const uint64_t size = data.size();
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    const std::string where = tensor_where(i, t.name);
    uint64_t n_bytes = 0;
    uint64_t end = 0;
    const bool overflow = __builtin_mul_overflow(t.n_elements, uint64_t{sizeof(float)}, &n_bytes) ||
                          __builtin_add_overflow(t.offset_bytes, n_bytes, &end);
    if (overflow || end > size) {
      return corrupt(manifest_path + ": " + where + ": shape " + shape_string(t.shape) + " at offset " +
                     std::to_string(t.offset_bytes) + " needs bytes [" + std::to_string(t.offset_bytes) + ", " +
                     (overflow ? std::string("2^64 and beyond") : std::to_string(end)) + ") of " + plan.data_path +
                     ", which has " + std::to_string(size) + " bytes");
    }
    const uint8_t* p = data.data() + t.offset_bytes;
    for (uint64_t e = 0; e < t.n_elements; ++e) {
      float v;
      std::memcpy(&v, p + e * sizeof(float), sizeof(float));
      if (!std::isfinite(v)) {
        return corrupt(plan.data_path + ": " + where + " holds a non-finite value (" + number_string(v) +
                       ") at index " + numpy_index(e, t.shape) + " (byte " +
                       std::to_string(t.offset_bytes + e * sizeof(float)) + ")");
      }
      // Values just above 65504 still round down to it; f32_to_f16 decides exactly.
      if (t.type == GgmlType::kF16 && std::fabs(v) > kF16Max && std::isinf(f16_to_f32(f32_to_f16(v)))) {
        return corrupt(plan.data_path + ": " + where + " has type f16 but holds " + number_string(v) + " at index " +
                       numpy_index(e, t.shape) + ", beyond f16's range (largest 65504); store it as f32 or bf16");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status import_tensor_bundle(const std::string& manifest_path, GgufWriter& out) {
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> manifest, MappedFile::open(manifest_path));
  json root;
  try {
    const std::string_view text =
        manifest->size() == 0 ? std::string_view()
                              : std::string_view(reinterpret_cast<const char*>(manifest->data()), manifest->size());
    root = json::parse(text);
  } catch (const json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 7: ..."
    std::string what = e.what();
    if (const size_t close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    if (what.find("invalid literal") != std::string::npos) {
      what += " (JSON has no NaN or Infinity; Python's json.dump writes them unless allow_nan=False)";
    }
    return corrupt(manifest_path + ": invalid JSON: " + what);
  }
  LEOAM_ASSIGN_OR_RETURN(BundlePlan plan, parse_manifest(manifest_path, root));
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> data, MappedFile::open(plan.data_path));
  LEOAM_RETURN_IF_ERROR(check_data(manifest_path, plan, *data));

  for (auto& [key, value] : plan.metadata) out.set(std::move(key), std::move(value));
  std::vector<float> values;
  for (TensorPlan& t : plan.tensors) {
    values.resize(t.n_elements);
    std::memcpy(values.data(), data->data() + t.offset_bytes, t.n_elements * sizeof(float));
    const Status st = out.add_tensor_f32(t.name, t.type, std::move(t.ne), values);
    if (!st.is_ok()) return st.with_context(manifest_path);
  }
  return Status::ok();
}

Result<GgufValue> parse_metadata_value(std::string_view type_name, std::string_view json_text) {
  const json v = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return corrupt(single_quoted(json_text) + " is not a JSON value");
  return parse_value(v, type_name);
}

}  // namespace leoam
