#include "chat/template_access.h"

#include <algorithm>
#include <string>

#include "chat/python_text.h"
#include "chat/template_methods.h"

namespace leoam::chat {

namespace {

// Jinja2's object_type_repr: "'dict object'", "'None'".
std::string object_description(const Value& obj) {
  return obj.is_none() ? "'None'" : "'" + type_name(obj) + " object'";
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(object_description(obj) + " has no attribute '" + std::string(name) + "'");
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(object_description(obj) + " has no element " + python_repr(key));
}

// Python's index normalization for seq[i]: nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

Result<Value> get_attribute(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.as_dict().find(name);
    return v ? *v : missing_attribute(obj, name);
  }
  if (std::optional<Value> method = find_method(obj, name)) return *method;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    if (v) return *v;
  }
  return missing_attribute(obj, name);
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (obj.is_namespace() && key.is_string()) return get_attribute(obj, key.as_string());
  if (obj.is_dict() && key.is_string()) {
    const Value* v = obj.as_dict().find(key.as_string());
    if (v) return *v;
  } else if (key.is_integral() && (obj.is_list() || obj.is_string())) {
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      if (auto i = normalize_index(key.as_int(), items.size())) return items[*i];
    } else {
      const std::string& s = obj.as_string();
      const std::vector<size_t> offsets = py::code_point_offsets(s);
      if (auto i = normalize_index(key.as_int(), offsets.size() - 1)) {
        return Value::string(s.substr(offsets[*i], offsets[*i + 1] - offsets[*i]));
      }
    }
  }
  if (key.is_string()) {
    if (std::optional<Value> method = find_method(obj, key.as_string())) return *method;
    return missing_attribute(obj, key.as_string());
  }
  return missing_element(obj, key);
}

Result<Value> get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) return undefined_error(obj);
  auto bound_ok = [](const Value* v) { return !v || v->is_none() || v->is_integral(); };
  if (!(obj.is_list() || obj.is_string()) || !bound_ok(start) || !bound_ok(stop) || !bound_ok(step)) {
    return Value::undefined(object_description(obj) + " cannot be sliced with these bounds");
  }
  auto given = [](const Value* v) { return v && !v->is_none(); };
  const int64_t stride = given(step) ? step->as_int() : 1;
  if (stride == 0) return invalid_argument("ValueError: slice step cannot be zero");

  std::vector<size_t> offsets;  // code point starts, for strings
  size_t size = 0;
  if (obj.is_string()) {
    offsets = py::code_point_offsets(obj.as_string());
    size = offsets.size() - 1;
  } else {
    size = obj.as_list().items.size();
  }
  // PySlice_AdjustIndices.
  const auto n = static_cast<int64_t>(size);
  const int64_t lower = stride > 0 ? 0 : -1;
  const int64_t upper = stride > 0 ? n : n - 1;
  auto adjust = [&](const Value* v, int64_t absent) {
    if (!given(v)) return absent;
    int64_t i = v->as_int();
    if (i < 0) i += n;
    return std::clamp(i, lower, upper);
  };
  const int64_t first = adjust(start, stride > 0 ? lower : upper);
  const int64_t last = adjust(stop, stride > 0 ? upper : lower);

  std::vector<size_t> picked;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) picked.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    for (size_t i : picked) out += s.substr(offsets[i], offsets[i + 1] - offsets[i]);
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(picked.size());
  for (size_t i : picked) items.push_back(obj.as_list().items[i]);
  return Value::list(std::move(items), obj.as_list().is_tuple);
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return std::vector<Value>{};
    case ValueKind::kList:
      return v.as_list().items;
    case ValueKind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& entry : v.as_dict().entries) keys.push_back(Value::string(entry.first));
      return keys;
    }
    case ValueKind::kString: {
      const std::string& s = v.as_string();
      std::vector<Value> chars;
      for (size_t i = 0, n = 0; i < s.size(); i += n) {
        py::decode_code_point(s, i, &n);
        chars.push_back(Value::string(s.substr(i, n)));
      }
      return chars;
    }
    default:
      break;
  }
  return type_error("'" + type_name(v) + "' object is not iterable");
}

Result<int64_t> length_of(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return int64_t{0};
    case ValueKind::kString:
      return static_cast<int64_t>(py::count_code_points(v.as_string()));
    case ValueKind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case ValueKind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.as_dict().entries.size());
      break;
    default:
      break;
  }
  return type_error("object of type '" + type_name(v) + "' has no len()");
}

}  // namespace leoam::chat
